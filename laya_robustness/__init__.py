"""A pytest-native robustness gate for vision-language models: families, scorers, metrics and the plugin."""

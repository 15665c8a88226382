"""Repo-level pytest configuration: only what cannot live in the plugin (which the package registers)."""

# Outputs and the embedded default are data, never test modules.
collect_ignore = ["reports", "laya_fixtures"]

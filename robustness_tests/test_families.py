"""Every declared family's gate test, made from the registry (``laya_robustness.pytest_plugin.gate_tests``):
``test_<family>[<dataset>-<device>]`` checks the family's limits on one dataset, for the built-in families and
those an installed package declares through a ``laya_robustness.families`` entry point."""

from laya_robustness.pytest_plugin.gate_tests import family_tests

globals().update(family_tests())

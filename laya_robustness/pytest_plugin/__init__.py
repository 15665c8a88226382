"""The pytest plugin of the robustness gate: its options, the ``robustness`` fixture, and its plugin object
(``gate.GatePlugin``), whose methods are the hooks."""

from __future__ import annotations

import pytest

from laya_robustness.pytest_plugin import pytest_options
from laya_robustness.pytest_plugin.gate import GatePlugin
from laya_robustness.pytest_plugin.session import RobustnessSession


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    # Registered as pytest registers this module, the plugin object's hooks run where this module's would among
    # other plugins' (pytest calls the hooks of plugins registered later first).
    pluginmanager.register(GatePlugin(), GatePlugin.name)


def pytest_addoption(parser: pytest.Parser) -> None:
    pytest_options.add_options(parser)


@pytest.fixture(scope="session")
def robustness(request: pytest.FixtureRequest) -> RobustnessSession:
    """The gate's session: rows, scorers, thresholds; scores each (family, dataset, device) once."""
    return request.config.pluginmanager.get_plugin(GatePlugin.name).state

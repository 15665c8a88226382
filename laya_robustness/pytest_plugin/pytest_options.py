"""The plugin's command-line options: one ``laya-robustness`` group, each also settable in the ini file.

The options are declared and parsed in ``laya_robustness.run.inputs.options`` (``run_gate`` takes the same ones as
arguments); here they are registered with pytest and read from its configuration once, at start-up
(``read_settings``): a bad value is a usage error (exit 4) that names the option, before any model is loaded or
any row is read.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from laya_robustness.run.errors import UsageError
from laya_robustness.run.inputs.options import (  # noqa: F401  (the names the plugin's modules and tests use)
    AUTO_MODEL,
    OPTIONS,
    Option,
    Settings,
    bad_value,
    default_of,
    option,
    parse_settings,
    resolved,
)

#: What a usage error adds after naming the option and what to type.
SEE_ALSO = "  (`pytest --help` lists every option; the fixes: docs/errors.md)"


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("laya-robustness", "robustness gate for vision-language models")
    for opt in OPTIONS:
        extra = {"action": "store_const", "const": "yes"} if opt.switch else {}
        group.addoption(opt.flag, dest=opt.dest, default=None,
                        help=f"{opt.help} (default: {opt.default}; ini: {opt.dest})", **extra)
        parser.addini(opt.dest, help=opt.help, default=None)


def as_pytest(exc: UsageError) -> pytest.UsageError:
    """A run's usage error as pytest reports it (exit 4): the message, then what to type instead."""
    if exc.instead:
        return pytest.UsageError(f"{exc.message}\n  type instead, e.g.: pytest robustness_tests {exc.instead}{SEE_ALSO}")
    return pytest.UsageError(f"{exc.message}\n  {exc.hint}" if exc.hint else exc.message)


def usage_error(flag: str, problem: object, instead: str | None = None) -> pytest.UsageError:
    """A usage error (exit 4) that names the option and says what to type instead (``instead``, else the
    option with its example or default)."""
    return as_pytest(bad_value(flag, problem, instead))


def get(config: pytest.Config, flag: str) -> str:
    """An option's raw value: the command line, else the ini file, else its default."""
    opt = option(flag)
    value = config.getoption(opt.dest)
    if value is None:
        value = config.getini(opt.dest)
    return str(value) if value not in (None, "") else opt.default


def given(config: pytest.Config, flag: str) -> bool:
    """Whether an option was set on the command line or in the ini file (not left at its default)."""
    opt = option(flag)
    return config.getoption(opt.dest) not in (None, "") or config.getini(opt.dest) not in (None, "")


def resolve(config: pytest.Config, text: str) -> Path:
    """A path resolved against the rootdir when relative."""
    return resolved(config.rootpath, text)


def read_settings(config: pytest.Config) -> Settings:
    """Parse every option; a bad value raises pytest.UsageError naming the option (exit 4)."""
    on_command_line = [o.flag for o in OPTIONS if config.getoption(o.dest) is not None]
    try:
        return parse_settings({o.flag: get(config, o.flag) for o in OPTIONS}, root=config.rootpath,
                              cwd=config.invocation_params.dir, model_given=given(config, "--model"),
                              given=on_command_line, xdist_workers=config.getoption("numprocesses", default=None))
    except UsageError as exc:
        raise as_pytest(exc) from None

"""pytest-benchmark's table in a gate run: printed before the gate's summary, narrow enough for a terminal unless
--benchmark-columns asks for more."""

from laya_robustness.pytest_plugin.terminal import BENCHMARK_COLUMNS

from helpers.gate_project import make_gate
from helpers.limits import PASSING_LIMITS

pytest_plugins = ["pytester"]

ARGS = ("robustness_tests", "--import-mode=importlib", "--thresholds", "limits.toml", "--benchmark-enable",
        "-k", "(test_option_order and colour_choice and not gpu) or (test_variant_build_time and option_order)")


def _table(lines: list[str]) -> list[str]:
    start = next(i for i, line in enumerate(lines) if "benchmark: 1 tests" in line)
    end = next(i for i, line in enumerate(lines) if i > start + 2 and set(line) == {"-"})
    return lines[start:end + 1]


def test_the_benchmark_table_comes_before_the_gates_summary_and_fits_the_terminal(pytester, monkeypatch):
    gate = make_gate(pytester, monkeypatch, PASSING_LIMITS)
    monkeypatch.setenv("COLUMNS", "120")
    lines = gate.runpytest_subprocess(*ARGS).stdout.lines
    table = _table(lines)
    header = table[1].split()
    assert header[0] == "Name", table
    assert [h.lower() for h in header if h.lower() in {"min", "max", "mean", "stddev", "median", "iqr", "outliers",
                                                     "ops", "rounds", "iterations"}] == list(BENCHMARK_COLUMNS)
    assert max(map(len, table)) <= 120, table
    covered = next(i for i, line in enumerate(lines) if line.startswith("laya-robustness covered (cpu)"))
    verdict = next(i for i, line in enumerate(lines) if "robustness gate (cpu): verdict" in line)
    assert lines.index(table[-1]) < covered < verdict


def test_benchmark_columns_given_are_kept(pytester, monkeypatch):
    gate = make_gate(pytester, monkeypatch, PASSING_LIMITS)
    lines = gate.runpytest_subprocess(*ARGS, "--benchmark-columns", "min,max,ops").stdout.lines
    header = [h.lower() for h in _table(lines)[1].split()]
    assert [h for h in header if h in {"min", "max", "median", "iqr", "ops", "rounds"}] == ["min", "max", "ops"]

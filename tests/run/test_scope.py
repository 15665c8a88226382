"""Reports that never claim more than the run did: the scope a report states (cells asked, scored, judged, what
narrowed them), narrowed runs written beside the last complete report, and the pytest clients people use
(pytest-randomly, --junitxml, --lf, -k, --deselect, --sw, -x) as real processes."""

import json
import re
import xml.etree.ElementTree as ET

import pytest

from laya_robustness.report.wrapping import unwrap
from laya_robustness.run.scope import decide_scope

from helpers.gate_project import FAMILIES
from helpers.limits import PASSING_LIMITS

pytest_plugins = ["pytester"]

FAILING_LIMITS = PASSING_LIMITS.replace("max_flip = 0.9", "max_flip = 0.01")  # option_order fails on both sets
DATASETS = ["colour_choice", "exists_yesno"]
REPORTS = ("summary.json", "predictions.jsonl.gz", "checks.json", "report.html", "summary.md")
NOT_GATE = "not (snapshot or benchmark or invariance or gpu)"


def test_a_scope_is_complete_only_when_every_asked_cell_was_scored_and_judged():
    asked = [("orig", "a"), ("text", "a"), ("text", "b")]
    full = decide_scope(asked, scored=asked + [("orig", "captions")], judged=asked)
    assert full.complete and full.shortfall is None and full.meta()["not_judged"] == {}
    judged_not_scored = decide_scope(asked, scored=[("orig", "a")], judged=asked)
    assert not judged_not_scored.complete
    assert judged_not_scored.meta()["not_judged"] == {"text": ["a", "b"]}
    lf = decide_scope(asked, scored=asked, judged=[("text", "b")], narrowed_by=["--lf"])
    meta = lf.meta()
    assert meta["complete"] is False and meta["cells_asked"] == 3 and meta["narrowed_by"] == ["--lf"]
    assert meta["judged"] == {"text": ["b"]} and meta["not_judged"] == {"orig": ["a"], "text": ["a"]}
    assert meta["covered"] == ("incomplete: 1 of 3 cells judged: text (b); not judged: orig (a), text (a); "
                               "narrowed by --lf")


def _cached(gate, limits=PASSING_LIMITS):
    """The gate with pytest's cache (``--lf``, ``--sw`` need it) and ``limits``."""
    gate.makeini("[pytest]\naddopts = --strict-markers -p no:randomly\n"
                 "laya_scorer = helpers.fakes:oracle\nlaya_data = rows\nlaya_model = fake-model\n")
    (gate.path / "limits.toml").write_text(limits)
    return gate


def _gate(gate, *args):
    return gate.runpytest_subprocess("robustness_tests", "--import-mode=importlib", "--thresholds", "limits.toml",
                                     *args)


def _meta(path):
    return json.loads(path.read_text())["meta"]


def _files(folder):
    return {name: (folder / name).read_bytes() for name in REPORTS}


def _first_line_of_body(page: str) -> str:
    return page.split("<body>", 1)[1].split("\n", 1)[0]


def test_the_planned_cells_are_those_of_the_family_tests_the_run_scores_not_of_tests_named_like_them():
    from types import SimpleNamespace

    from laya_robustness.pytest_plugin.gate_tests import family_tests
    from laya_robustness.pytest_plugin.selection import planned_cells

    def item(function, dataset, skipped=False):
        return SimpleNamespace(function=function, callspec=SimpleNamespace(params={"dataset": dataset, "device": "cpu"}),
                               get_closest_marker=lambda name: object() if skipped and name == "skip" else None)

    def test_rotation(robustness, dataset, device):  # a test of the user's own, named like rotation's
        pass

    tests = family_tests()
    run = SimpleNamespace(run_cells=lambda: [("rotation", "a"), ("rotation", "b"), ("orig", "a")])
    items = [item(tests["test_orig"], "a"), item(test_rotation, "a"), item(tests["test_rotation"], "b"),
             item(tests["test_rotation"], "a", skipped=True), item(tests["test_text"], "a")]
    assert planned_cells(items, run) == [("orig", "a", "cpu"), ("rotation", "b", "cpu")]


def test_narrowed_runs_keep_the_complete_report_and_their_reports_say_what_they_covered(gate):
    """The issue's case: a failing run of two families, then the same command with --lf; then -k, --deselect,
    --sw and -x, each leaving cells unjudged. One full run serves them all (and the junit failure text)."""
    _cached(gate, FAILING_LIMITS)
    full = _gate(gate, *FAMILIES, "-k", NOT_GATE, "--junitxml", "junit.xml")
    assert full.ret == 1, full.stdout.str()
    reports = gate.path / "reports"
    scope = _meta(reports / "summary.json")["scope"]
    assert scope["complete"] is True and scope["cells_asked"] == 6 and scope["not_judged"] == {}
    assert scope["judged"] == {f: DATASETS for f in ("image_shuffle", "option_order", "orig")}
    _assert_junit_failures_explained(gate.path / "junit.xml")
    good = _files(reports)

    lf = _gate(gate, *FAMILIES, "-k", NOT_GATE, "--lf")
    assert lf.ret == 1, lf.stdout.str()
    assert _files(reports) == good  # the complete report is untouched
    meta = _meta(reports / "summary.incomplete.json")
    assert meta["complete"] is False and meta["families"] == ["option_order", "image_shuffle"]
    assert meta["scope"]["judged"] == {"option_order": DATASETS}
    assert meta["scope"]["not_judged"] == {"image_shuffle": DATASETS, "orig": DATASETS}
    assert meta["scope"]["narrowed_by"] == ["--families option_order,image_shuffle", f"-k {NOT_GATE}", "--lf"]
    covered = "incomplete: 2 of 6 cells judged: option_order (colour_choice, exists_yesno)"
    assert meta["scope"]["covered"].startswith(covered)
    assert (reports / "summary.incomplete.md").read_text().splitlines()[0].startswith(f"**Covered:** {covered}")
    first = _first_line_of_body((reports / "report.incomplete.html").read_text())
    assert first.startswith('<p class="scope partial"><b>Covered:</b> ' + covered)
    out = "\n".join(unwrap(lf.stdout.lines))  # the covered line is wrapped to the terminal's width
    assert out.index(f"laya-robustness covered (cpu): {covered}") < out.index("robustness gate (cpu)")
    pytest.LineMatcher(unwrap(lf.stdout.lines)).fnmatch_lines([
        "*INCOMPLETE RUN: on cpu its tests judged 2 of 6 cells*previous run was kept*rerun without*--lf*"])

    orig_test = "robustness_tests/test_families.py::test_orig"
    for how, narrowing in [("-k", ("-k", "test_option_order and not gpu")),
                           ("--deselect", ("-k", NOT_GATE, "--deselect", orig_test)),
                           ("--sw", ("-k", NOT_GATE, "--sw")), ("-x", ("-k", NOT_GATE, "-x"))]:
        result = _gate(gate, *FAMILIES, *narrowing)
        # a crossed limit; pytest's stepwise stops the run at its first failure as an interruption (exit 2)
        assert result.ret == (pytest.ExitCode.INTERRUPTED if how == "--sw" else 1), (how, result.stdout.str())
        assert _files(reports) == good, how
        _assert_scope_leaves_cells_out(reports, how)


def _assert_junit_failures_explained(junit):
    """Each failure of the junit file names family, dataset, metric, limit and interval."""
    cases = {c.get("name"): c for c in ET.parse(junit).getroot().iter("testcase")}
    failed = {name: case.find("failure") for name, case in cases.items() if case.find("failure") is not None}
    assert sorted(failed) == [f"test_option_order[{d}-cpu]" for d in DATASETS]
    for name, failure in failed.items():
        dataset = re.search(r"\[(\w+)-cpu\]", name).group(1)
        text = failure.get("message", "") + (failure.text or "")
        for words in (f"option_order/{dataset}: max_flip FAILED", "family: option_order", f"dataset: {dataset}",
                      "metric: flip rate = ", "limit: max_flip = 0.01"):
            assert words in " ".join(text.split()), (words, text)
        assert re.search(r"interval: 95% \[[-\d.e]+, [-\d.e]+\]", text), text


def _assert_scope_leaves_cells_out(reports, how):
    """The incomplete twin names what narrowed the run (``how``) and the cells it did not judge; no check of a cell
    the run did not judge."""
    meta = _meta(reports / "summary.incomplete.json")
    scope = meta["scope"]
    assert meta["complete"] is False and not scope["complete"] and scope["not_judged"], how
    assert any(n.startswith(how) for n in scope["narrowed_by"]), scope["narrowed_by"]
    judged = {(f, d) for f, sets in scope["judged"].items() for d in sets}
    assert judged and all((f, d) not in judged for f, sets in scope["not_judged"].items() for d in sets), how
    checks = json.loads((reports / "checks.incomplete.json").read_text())["results"]
    assert {(r["family"], r["dataset"]) for r in checks} <= judged, how
    if how == "--deselect":
        assert "orig" not in scope["judged"] and scope["not_judged"]["orig"] == DATASETS


def test_k_negation_alone_gives_a_report_of_negation_saying_so(gate):
    result = _gate(gate, "-k", "test_negation and not gpu")
    # the limits set none for negation: its cells are scored and reported, and nothing was judged (exit 4)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    pytest.LineMatcher(unwrap(result.stdout.lines)).fnmatch_lines([
        "NOTHING JUDGED (exit 4, *): nothing was judged: all 2 checks asked for were skipped (1: negation builds no "
        "variant of any colour_choice row*; 1: scored; the limits set none for negation on exists_yesno)"])
    reports = gate.path / "reports"
    meta = _meta(reports / "summary.json")  # no complete report to keep: its own names, marked incomplete
    assert meta["complete"] is False and meta["scope"]["judged"] == {"negation": DATASETS}
    first = (reports / "summary.md").read_text().splitlines()[0]
    # negation built no variant of colour_choice: counted apart, named last with its reason
    assert first.startswith("**Covered:** incomplete: 1 of ")
    assert "judged: negation (exists_yesno); not judged: " in first
    assert first.endswith("; narrowed by -k test_negation and not gpu; 1 built no variant: negation (colour_choice): "
                          "none of its rules applies")
    pytest.LineMatcher(unwrap(result.stdout.lines)).fnmatch_lines([
        "laya-robustness covered (cpu): incomplete: 1 of * judged: negation (exists_yesno); not judged: *; "
        "narrowed by -k test_negation and not gpu; 1 built no variant: negation (colour_choice): none of its rules "
        "applies"])


def test_a_narrowing_or_a_retry_never_turns_a_failing_gate_into_a_pass(gate):
    """The issue's case: after a failing run (option_order crosses its limit on both sets), a narrowed run that leaves
    the failing checks out used to exit 0. It folds in the earlier run's verdicts of the checks it did not judge (the
    same configuration, read from the report folder), so a failure not judged again keeps the exit at 1, naming it;
    a run of another configuration folds nothing in and says why."""
    _cached(gate, FAILING_LIMITS)
    assert _gate(gate, *FAMILIES, "-k", NOT_GATE).ret == 1
    colour = "robustness_tests/test_families.py::test_option_order[colour_choice-cpu]"
    (gate.path / "limits.toml").write_text(PASSING_LIMITS)  # the retry's rerun passes; the deselected one is not rerun
    retry = ("-k", NOT_GATE, "--lf", "--deselect", colour)
    for narrowing, failed in ((("-k", "test_orig and not gpu"), 2), (retry, 1)):
        result = _gate(gate, *FAMILIES, *narrowing)
        assert result.ret == 1, (narrowing, result.stdout.str())
        pytest.LineMatcher(unwrap(result.stdout.lines)).fnmatch_lines([
            "FAIL option_order/colour_choice max_flip: * (the earlier run's verdict: not judged again)",
            f"folded in: the * checks this run did not judge keep the verdicts of the run in {gate.path / 'reports'} "
            f"(the same configuration): {failed} failed there"])
    other = _gate(gate, *FAMILIES, "--seed", "1", "-k", "test_orig and not gpu")
    assert other.ret == 0, other.stdout.str()
    pytest.LineMatcher(unwrap(other.stdout.lines)).fnmatch_lines([
        f"the earlier run's verdicts are not folded in: the run in {gate.path / 'reports'} is of another configuration "
        "(seed differs (0 in OLD, 1 in NEW)*"])


@pytest.mark.parametrize("selection", ["invariance and not gpu", "variant_build_time"])
def test_a_selection_that_judges_no_cell_does_not_pass(gate, selection):
    """``-k invariance`` (invariance conditions alone) and ``-k variant_build_time`` (a benchmark alone) used to exit 0
    having judged none of the configuration's cells: they end NOTHING JUDGED, exit 4, saying why."""
    _cached(gate, PASSING_LIMITS + "[invariance.batched]\nmax_abs_dp = 1e-5\nmax_abs_dlogit = 1e-4\nmax_flips = 0\n")
    result = _gate(gate, "-k", selection)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    judged = "the 1 check it judged holds" if "invariance" in selection else "it judged no check; its tests were " \
        "benchmarks, throughput with no verdict: --benchmark-only runs them alone"
    pytest.LineMatcher(unwrap(result.stdout.lines)).fnmatch_lines([
        f"NOTHING JUDGED (exit 4, the gate did not pass): no cell was judged: -k {selection} left out every family "
        f"test and the summary snapshot, and a gate passes on its cells ({judged})"])


def test_a_shuffled_run_gives_the_same_reports_as_an_ordered_one(gate):
    """pytest-randomly shuffles the gate's tests: the reports are byte-identical to the ordered run's."""
    pytest.importorskip("pytest_randomly")
    args = (*FAMILIES, "-k", NOT_GATE, "-v")
    ordered = _gate(gate, *args, "--report-dir", "ordered")
    shuffled = _gate(gate, *args, "--report-dir", "shuffled", "-p", "randomly", "-p", "no:cacheprovider",
                     "--randomly-seed", "3")
    assert ordered.ret == shuffled.ret == 0, shuffled.stdout.str()
    shuffled.stdout.fnmatch_lines(["*--randomly-seed=3*"])

    def order(result):
        return re.findall(r"::(test_\w+\[[\w-]+\]) PASSED", result.stdout.str())

    assert sorted(order(ordered)) == sorted(order(shuffled)) and order(ordered) != order(shuffled)
    for name in ("summary.json", "predictions.jsonl.gz", "checks.json"):
        assert (gate.path / "ordered" / name).read_bytes() == (gate.path / "shuffled" / name).read_bytes(), name

"""A cell whose family builds no variant of any of its dataset's rows has nothing to judge: what a report covers
counts it apart from the cells scored and judged and names it with the family's reason (the terminal, summary.json,
summary.md, report.html), the dataset's name escaped where it is shown; the report stays complete."""

import gzip
import json
import shutil
from pathlib import Path

import pytest

import laya_robustness
from laya_robustness.records import Record
from laya_robustness.run.held import Held
from laya_robustness.run.scope import decide_scope

ROOT = Path(__file__).resolve().parents[2]
ROWS = ROOT / "laya_fixtures" / "rows"
#: A dataset named with markdown and HTML markup (a file's name): negation builds no variant of its rows.
ODD = "c<b>*x*|y"
REASON = "none of its rules applies"  # negation's own when_empty
BUILT = f"1 built no variant: negation ({ODD}): {REASON}"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """The embedded model's gate of negation on 2 rows of two datasets: colour_choice's rows renamed ``ODD``
    (negation has no rule for them) and exists_yesno's (it negates their questions)."""
    base = tmp_path_factory.mktemp("built-nothing")
    data = base / "data"
    for source, name in (("colour_choice", ODD), ("exists_yesno", "exists_yesno")):
        rows = [json.loads(line) for line in (ROWS / f"{source}.jsonl").read_text().splitlines()[:3]]
        for row in rows:
            for image in row["images"]:
                (data / image).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(ROWS / image, data / image)
            row["dataset"] = name
        (data / f"{name}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    result = laya_robustness.run_gate(data=str(data), families=["negation"], rows_per_set=2, invariance=False,
                                      report_dir=base / "reports", root=ROOT)
    return result, base / "reports"


def test_a_family_that_built_no_variant_is_named_with_its_reason_and_not_counted_as_judged(run):
    result, reports = run
    covered = f"complete: all 3 cells of 2 families on 2 datasets scored and judged; {BUILT}"
    assert result.scope.complete and result.scope.covered == covered
    assert f"negation builds no variant of any {ODD} row: {REASON}" in result.skipped.values()  # the same reason
    scope = json.loads((reports / "summary.json").read_text())["meta"]["scope"]
    assert scope["complete"] is True and scope["covered"] == covered and scope["cells_asked"] == 4
    assert scope["built_nothing"] == {"negation": {ODD: REASON}} and scope["not_judged"] == {}
    assert scope["judged"] == {"negation": [ODD, "exists_yesno"], "orig": [ODD, "exists_yesno"]}


def test_the_summary_and_the_page_show_the_cell_that_built_nothing_its_name_escaped(run):
    _, reports = run
    first = (reports / "summary.md").read_text().splitlines()[0]
    assert first == ("**Covered:** complete: all 3 cells of 2 families on 2 datasets scored and judged; 1 built no "
                     f"variant: negation (c&lt;b&gt;\\*x\\*\\|y): {REASON}")
    page = (reports / "report.html").read_text()
    assert ('<p class="scope complete"><b>Covered:</b> complete: all 3 cells of 2 families on 2 datasets scored and '
            f"judged; 1 built no variant: negation (c&lt;b&gt;*x*|y): {REASON}</p>") in page
    assert ODD not in page.split("<h1>")[0]


def test_the_cells_that_built_nothing_are_the_same_however_the_run_was_scored(run):
    """A process that scored the cells itself (a local run, each rank of a world, a Ray pool's driver) and a
    controller that merged an xdist worker's part find the same cells: a family cell scored with no record."""
    result, reports = run
    with gzip.open(reports / "predictions.jsonl.gz", "rt") as f:
        records = [Record.parse(json.loads(line), "record") for line in f]
    asked = [(f, d) for f in ("orig", "negation") for d in (ODD, "exists_yesno")]

    here = Held()
    for family, dataset in asked:
        here.scored_cell("cpu", family, dataset, [r for r in records if (r.family, r.dataset) == (family, dataset)])
        here.judged.add((family, dataset, "cpu"))
    worker = Held()
    worker.merge(json.loads(json.dumps(here.payload())))
    for held in (here, worker):
        scope = held.scopes(asked)["cpu"]
        assert scope.built_nothing == {("negation", ODD): REASON} and scope.complete
        assert scope.covered == result.scope.covered


def test_a_cell_that_built_nothing_is_counted_apart_in_an_incomplete_line_and_only_once_judged():
    asked = [(f, d) for f in ("orig", "negation", "text") for d in ("a", "b")]
    empty = {("negation", "a"): "no rule applies", ("text", "a"): "no rule applies", ("text", "b"): "no text"}
    judged = [("negation", "a"), ("negation", "b"), ("text", "a")]
    scope = decide_scope(asked, asked, judged, ["-k negation or text"], built_nothing=empty)
    assert not scope.complete and scope.meta()["not_judged"] == {"orig": ["a", "b"], "text": ["b"]}
    assert scope.built_nothing == {("negation", "a"): "no rule applies", ("text", "a"): "no rule applies"}
    assert scope.covered == ("incomplete: 1 of 4 cells judged: negation (b); not judged: orig (a, b), text (b); "
                             "narrowed by -k negation or text; 2 built no variant: negation (a), text (a): "
                             "no rule applies")
    full = decide_scope(asked, asked, asked, built_nothing=empty)
    assert full.complete and full.meta()["built_nothing"] == {"negation": {"a": "no rule applies"},
                                                              "text": {"a": "no rule applies", "b": "no text"}}
    assert full.covered == ("complete: all 3 cells of 2 families on 2 datasets scored and judged; 3 built no "
                            "variant: negation (a), text (a): no rule applies; text (b): no text")

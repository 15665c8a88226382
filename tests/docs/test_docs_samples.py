"""The documentation's samples of the embedded default run are today's: each page's sample and the screenshot
record the hash of the committed summary snapshot they were made against (``scripts/docs_samples.py``), and what
a sample says agrees with that snapshot and the limits files; the script's parts work (the sample cut from a
captured output, the markers rewritten, the hash kept in the PNG). No gate run, no browser.

What no test here can tell without a run: the token counts, the reports line, the interval-judged count and the
screenshot's pixels; they are as today's run printed them when the recorded hash was written.
"""

import importlib.util
import io
import json
import re
from pathlib import Path

import pytest

from laya_robustness.embedded import EMBEDDED_LIMITATIONS
from laya_robustness.families import get_family
from laya_robustness.gate.catalogue import CATALOGUE
from laya_robustness.gate.judgement import Judgement, evaluate_cell
from laya_robustness.gate.run_limits import run_limits
from laya_robustness.gate.limits_file import measured_on
from laya_robustness.pytest_plugin.terminal import problem_lines
from laya_robustness.report.cell_rows import cell_verdicts
from laya_robustness.report.wrapping import unwrap
from laya_robustness.run.scope import built_nothing_text
from laya_robustness.run.pipeline.invariance import INVARIANCE_CONDITIONS

ROOT = Path(__file__).resolve().parents[2]
STALE = "stale: run python scripts/docs_samples.py"
COVERED = re.compile(r"^laya-robustness covered \(cpu\): complete: all (\d+) cells of (\d+) families on (\d+) "
                     r"datasets scored and judged(?:; (\d+ built no variant: .+))?$")
#: One family's datasets in the covered line (``negation (colour_choice, count_choice)``).
FAMILY_CELLS = re.compile(r"(\w+) \((\w+(?:, \w+)*)\)")
VERDICTS = re.compile(r"^verdicts: (\d+) FAIL, (\d+) XPASS, (\d+) xfail, (\d+) ok \(cells with limits\)"
                      r"(; invariance: \d+ \w+(, \d+ \w+)*)?$")


def _script():
    spec = importlib.util.spec_from_file_location("docs_samples", ROOT / "scripts" / "docs_samples.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


docs_samples = _script()
SHOWN = [(page.relative_to(ROOT).as_posix(), sha, lines) for page in docs_samples.PAGES
         for name, sha, lines in docs_samples.samples(page.read_text(encoding="utf-8"))
         if name == docs_samples.DEFAULT_RUN]


def _snapshot() -> dict:
    return json.loads(docs_samples.SNAPSHOT.read_text(encoding="utf-8"))


def test_getting_started_shows_the_default_run():
    assert "docs/getting-started.md" in [page for page, _, _ in SHOWN]


@pytest.mark.parametrize("page, sha, lines", SHOWN, ids=[page for page, _, _ in SHOWN])
def test_each_sample_was_made_against_the_committed_snapshot(page, sha, lines):
    assert sha == docs_samples.snapshot_hash(), f"{page}: {STALE} (made against {sha})"


def test_the_screenshot_was_made_against_the_committed_snapshot():
    sha = docs_samples.png_hash(docs_samples.SCREENSHOT)
    assert sha == docs_samples.snapshot_hash(), f"docs/report-screenshot.png: {STALE} (made against {sha})"


@pytest.mark.parametrize("page, sha, lines", SHOWN, ids=[page for page, _, _ in SHOWN])
def test_each_sample_agrees_with_the_snapshot_and_the_limits(page, sha, lines):
    """The covered line's families and datasets are the snapshot's, its cells the snapshot's; the cells it says
    built no variant are none of the snapshot's, each with its family's reason, as the gate words them (at most
    every family on every dataset in all); the verdict counts add up to the snapshot's cells with limits, and with
    no failure the xfail and XPASS cells are those of the embedded default's known limitations."""
    lines = unwrap(lines)  # the lines as written, before the terminal wrapped them
    snapshot = _snapshot()
    cells = {tuple(key.split("/")) for key in snapshot["headlines"]}
    families, datasets = {f for f, _ in cells}, {d for _, d in cells}
    covered = [m for line in lines if (m := COVERED.match(line))]
    assert len(covered) == 1 and lines[0] == covered[0].group(0), f"{page}: no complete covered line first: {lines}"
    n, n_families, n_datasets = map(int, covered[0].groups()[:3])
    assert (n_families, n_datasets) == (len(families), len(datasets)), f"{page}: {STALE}"
    assert n == len(cells), f"{page}: {STALE}"
    built = covered[0].group(4) or ""
    empty = {(f, d): get_family(f).when_empty for f, sets in FAMILY_CELLS.findall(built) for d in sets.split(", ")}
    assert built == built_nothing_text(empty), f"{page}: {STALE} (built no variant: {built!r})"
    assert not set(empty) & cells and {f for f, _ in empty} <= families and {d for _, d in empty} <= datasets, page
    assert n + len(empty) <= len(families) * len(datasets), f"{page}: {STALE}"

    verdicts = [m for line in lines if (m := VERDICTS.match(line))]
    assert len(verdicts) == 1, f"{page}: no verdicts line in {lines}"
    failed, xpass, xfail, ok = map(int, verdicts[0].groups()[:4])
    limits = run_limits(ROOT / "thresholds.toml", datasets=datasets, conditions=INVARIANCE_CONDITIONS,
                        limitations=ROOT / EMBEDDED_LIMITATIONS)
    assert failed + xpass + xfail + ok == sum(bool(limits.limits_for(*c)) for c in cells), f"{page}: {STALE}"
    applies = measured_on(ROOT / EMBEDDED_LIMITATIONS) == snapshot["identity"]["weights_sha256"]
    known = {(k.family, k.dataset) for k in limits.known_limitations} & cells if applies else set()
    assert xfail + xpass <= len(known) <= xfail + xpass + failed, f"{page}: {STALE} ({len(known)} known limitations)"
    assert any(line.startswith("reports in reports/: ") for line in lines), f"{page}: {lines}"


CAPTURED = """\
============================= test session starts ==============================
collected 3 items

robustness_tests/test_families.py .x.                                    [100%]

--------------------------- snapshot report summary ----------------------------
1 snapshot passed.
laya-robustness covered (cpu): complete: all 2 cells of 1 family on 2 datasets scored and judged
reports in /tmp/run 1/reports/: summary.json, report.html (the tables per
    family and dataset: summary.md)
======================== robustness gate (cpu): verdict ========================
verdicts: 0 FAIL, 0 XPASS, 1 xfail, 1 ok (cells with limits)
=================== 2 passed, 1 xfailed in 12.31s (0:00:12) ====================
"""


def test_the_sample_is_the_end_of_the_output_its_last_line_and_report_folder_made_the_defaults():
    assert docs_samples.sample_lines(CAPTURED) == [
        "laya-robustness covered (cpu): complete: all 2 cells of 1 family on 2 datasets scored and judged",
        "reports in reports/: summary.json, report.html (the tables per family and",
        "    dataset: summary.md)",
        "======================== robustness gate (cpu): verdict ========================",
        "verdicts: 0 FAIL, 0 XPASS, 1 xfail, 1 ok (cells with limits)",
    ]


@pytest.mark.parametrize("old, new, why", [
    ("1 snapshot passed.", "summary snapshot (cpu) DIFFERS from x", "differs from the committed snapshot"),
    ("1 snapshot passed.", "", "did not compare the summary snapshot"),
    ("complete: all 2 cells", "incomplete: 1 of 2 cells", "did not cover every cell"),
    ("2 passed, 1 xfailed", "1 failed, 1 passed, 1 xfailed", "did not pass"),
    ("=================== 2 passed, 1 xfailed in 12.31s (0:00:12) ====================\n", "", "cut-off"),
])
def test_a_run_that_is_not_the_default_runs_output_is_refused(old, new, why):
    with pytest.raises(docs_samples.Refused, match=why):
        docs_samples.sample_lines(CAPTURED.replace(old, new))


PAGE = """# A page

Before, with a `code` span.

<!-- sample: default-run snapshot-sha256=0000000000000000 -->
```text
old line
```
<!-- end sample: default-run -->

Between.

<!-- sample: other-run snapshot-sha256=1111111111111111 -->
```text
kept
```
<!-- end sample: other-run -->
After, without a final newline"""


def test_rewriting_replaces_only_the_named_sample_and_is_idempotent():
    new = docs_samples.rewrite(PAGE, "default-run", ["a", "b"], "abcdef0123456789")
    assert docs_samples.samples(new) == [("default-run", "abcdef0123456789", ["a", "b"]),
                                         ("other-run", "1111111111111111", ["kept"])]
    assert new.replace("abcdef0123456789 -->\n```text\na\nb\n", "0000000000000000 -->\n```text\nold line\n") == PAGE
    assert docs_samples.rewrite(new, "default-run", ["a", "b"], "abcdef0123456789") == new


def test_every_committed_page_reads_back_as_written():
    for page in docs_samples.PAGES:
        text = page.read_text(encoding="utf-8")
        for name, sha, lines in docs_samples.samples(text):
            assert docs_samples.rewrite(text, name, lines, sha) == text, page


def test_the_png_keeps_the_hash_and_its_pixels(tmp_path):
    from PIL import Image

    image = Image.new("RGB", (4, 3), "#336699")
    raw = io.BytesIO()
    image.save(raw, format="PNG")
    marked = docs_samples.png_with_hash(raw.getvalue(), "abcdef0123456789")
    path = tmp_path / "x.png"
    path.write_bytes(marked)
    assert docs_samples.png_hash(path) == "abcdef0123456789"
    assert Image.open(path).tobytes() == image.tobytes()


def test_the_failed_gate_example_is_what_the_code_prints_for_its_numbers():
    """docs/errors.md's FAIL line is an illustration: its numbers are made up, its words are the code's."""
    page = (ROOT / "docs" / "errors.md").read_text(encoding="utf-8")
    line = next(line for line in page.splitlines() if line.startswith("FAIL "))
    m = re.match(r"FAIL (\w+)/(\w+) (\w+): (\w+) ([\d.]+) against \3 ([\d.]+), SE ([\d.]+): .*"
                 r"\(one-sided alpha ([\d.e-]+)\)", line)
    assert m, line
    family, dataset, check, statistic, value, limit, se, alpha = m.groups()
    assert CATALOGUE[check].statistic.split(" ")[0] == statistic
    cell = {statistic: float(value), CATALOGUE[check].se_key: float(se)}
    results = evaluate_cell(family, dataset, cell, {check: float(limit)}, Judgement(lambda _: "interval", float(alpha)))
    assert problem_lines(cell_verdicts(results, lambda *_: None)) == [line]
    counts = next(VERDICTS.match(line) for line in page.splitlines() if line.startswith("verdicts: "))
    assert counts and int(counts.group(1)) >= 1, "the example's counts show its failure"

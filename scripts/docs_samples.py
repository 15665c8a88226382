"""The documentation's samples of the embedded default run, made from one run: the end of its terminal output in
the pages, and ``docs/report-screenshot.png`` (its report.html in headless Chromium).

A page holds the sample, as committed, between two markers::

    <!-- sample: default-run snapshot-sha256=0123456789abcdef -->
    ```text
    (the lines from `laya-robustness covered` to the verdict counts)
    ```
    <!-- end sample: default-run -->

Each artifact records what it was made against: the first 16 hex digits of the sha256 of the committed summary
snapshot of the embedded default (``SNAPSHOT``), in the page's marker and in a tEXt chunk of the PNG
(``PNG_KEY``). ``tests/docs/test_docs_samples.py`` fails when the snapshot has moved since, or when a sample disagrees
with the snapshot and the limits files. A run that did not pass, differs from the snapshot or left a cell out is
refused: the samples show the run CI pins.

    python scripts/docs_samples.py                                   # runs the gate once (minutes)
    python scripts/docs_samples.py --from-run OUTPUT.txt REPORTS_DIR # a run's terminal output and its reports

Without ``--from-run`` the run is kept in a temporary folder, and the command that reuses it is printed. Without
Chromium the pages are written, the screenshot is not, and the exit status is 1.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import io
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from laya_robustness.report.wrapping import INDENT, unwrap, wrap

ROOT = Path(__file__).resolve().parents[1]
#: The committed summary snapshot of the embedded default: what the samples are made against.
SNAPSHOT = (ROOT / "robustness_tests" / "__snapshots__" / "test_summary_snapshot"
            / "test_summary_snapshot[cpu][laya_fixtures_tiny-smolvlm.cpu.laya_fixtures_rows.s0.n0.all].json")
SCREENSHOT = ROOT / "docs" / "report-screenshot.png"
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
#: The PNG tEXt key holding the snapshot's hash.
PNG_KEY = "laya-snapshot-sha256"
#: The one sample name the pages use: the end of the default run `pytest robustness_tests`.
DEFAULT_RUN = "default-run"
#: The gate on the embedded default, as the pages show it run (`pytest robustness_tests`), its reports elsewhere.
GATE = (sys.executable, "-m", "pytest", "robustness_tests", "-p", "no:randomly")
#: A sample between its markers (see the module doc).
SAMPLE = re.compile(r"^<!-- sample: (?P<name>[\w-]+) snapshot-sha256=(?P<sha>[0-9a-f]{16}) -->\n```text\n"
                    r"(?P<body>.*?)```\n<!-- end sample: (?P=name) -->$", re.MULTILINE | re.DOTALL)
#: pytest's last line (``==== 81 passed, 47 xfailed in 399.04s (0:06:39) ====``): its seconds differ per run.
FINAL = re.compile(r"^=* ?\d+ \w+.* in \d+(\.\d+)?s( \(\d+:\d\d:\d\d\))? ?=*$")
FIRST = "laya-robustness covered ("
#: The terminal width the sample is made at (a CI log's).
COLUMNS = 80
REPORTS = re.compile(r"^reports in (.+?)/: ")


class Refused(Exception):
    """The run cannot be shown as the default run's output; the message says why."""


def snapshot_hash(path: Path = SNAPSHOT) -> str:
    """The first 16 hex digits of the sha256 of the snapshot file's bytes."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def refusal(output: str) -> str | None:
    """Why a run's terminal output is no sample of the default run, or None: it must match the snapshot (syrupy's
    ``1 snapshot passed.``, or the controller's ``matches`` line under xdist) and cover every cell."""
    if "DIFFERS from" in output or re.search(r"^\d+ snapshots? failed", output, re.MULTILINE):
        return "the run differs from the committed snapshot: accept or fix that first"
    if not re.search(r"^(\d+ snapshots? passed\.|summary snapshot \(\w+\): matches )", output, re.MULTILINE):
        return "the run did not compare the summary snapshot (was test_summary_snapshot deselected?)"
    covered = [line for line in output.splitlines() if line.startswith(FIRST)]
    if not covered or any("): complete: " not in line for line in covered):
        return f"the run did not cover every cell: {covered or 'no line starting ' + repr(FIRST)}"
    return None


def sample_lines(output: str) -> list[str]:
    """The end of a run's terminal output as the pages show it: from the first ``laya-robustness covered`` line
    up to pytest's last line (left out: its seconds differ per run); the reports folder shown as the default's
    ``reports/``. Raises Refused when the output is no passing, complete run against the snapshot."""
    why = refusal(output)
    if why:
        raise Refused(why)
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(FIRST))
    end = next((i for i in range(len(lines) - 1, start, -1) if FINAL.match(lines[i])), None)
    if end is None:
        raise Refused("no pytest summary line (`== N passed ... in Ns ==`) after the covered line: a cut-off output?")
    if re.search(r"\b\d+ (failed|errors?)\b", lines[end]):
        raise Refused(f"the run did not pass: {lines[end].strip('= ')}")
    shown = _default_reports_folder(lines[start:end])
    while shown and not shown[-1].strip():
        shown.pop()
    return shown


def _default_reports_folder(lines: list[str]) -> list[str]:
    """The lines with the reports line naming the default's ``reports/``, wrapped again as the terminal wraps a
    line of that length (its continuations start with ``INDENT``)."""
    out: list[str] = []
    for line in lines:
        if out and line.startswith(INDENT) and REPORTS.match(out[-1].split("\n")[0]):
            out[-1] += "\n" + line
            continue
        out.append(line)
    return [part for line in out
            for part in (wrap(REPORTS.sub("reports in reports/: ", unwrap(line.split("\n"))[0]), COLUMNS - 1)
                         if REPORTS.match(line) else [line])]


def sample_block(name: str, lines: list[str], sha: str) -> str:
    """One sample with its two markers."""
    body = "".join(f"{line}\n" for line in lines)
    return f"<!-- sample: {name} snapshot-sha256={sha} -->\n```text\n{body}```\n<!-- end sample: {name} -->"


def rewrite(markdown: str, name: str, lines: list[str], sha: str) -> str:
    """``markdown`` with every sample ``name`` replaced by ``lines`` made against ``sha``; the rest byte for byte."""
    return SAMPLE.sub(lambda m: sample_block(name, lines, sha) if m.group("name") == name else m.group(0), markdown)


def samples(markdown: str) -> list[tuple[str, str, list[str]]]:
    """(name, recorded snapshot hash, lines) of every sample of a page."""
    return [(m.group("name"), m.group("sha"), m.group("body").splitlines()) for m in SAMPLE.finditer(markdown)]


def write_pages(lines: list[str], sha: str, pages=PAGES) -> list[Path]:
    """Rewrite the default-run sample of every page holding one; the pages that changed."""
    changed = []
    for page in pages:
        text = page.read_text(encoding="utf-8")
        new = rewrite(text, DEFAULT_RUN, lines, sha)
        if new != text:
            page.write_text(new, encoding="utf-8")
            changed.append(page)
    return changed


def png_with_hash(png: bytes, sha: str) -> bytes:
    """The image of ``png`` with the snapshot hash in its ``PNG_KEY`` tEXt chunk (pixels unchanged)."""
    from PIL import Image
    from PIL.PngImagePlugin import PngInfo

    info = PngInfo()
    info.add_text(PNG_KEY, sha)
    out = io.BytesIO()
    Image.open(io.BytesIO(png)).save(out, format="PNG", pnginfo=info, optimize=True)
    return out.getvalue()


def png_hash(path: Path) -> str | None:
    """The snapshot hash a PNG records, or None."""
    from PIL import Image

    with Image.open(path) as image:
        return image.text.get(PNG_KEY)


def _browser_driver():
    """tests/report/test_report_browser.py, which drives headless Chromium over the DevTools pipe."""
    spec = importlib.util.spec_from_file_location("report_browser",
                                                  ROOT / "tests" / "report" / "test_report_browser.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_screenshot(report: Path, sha: str, out: Path = SCREENSHOT) -> None:
    """report.html in headless Chromium (the tables above the first flipped examples) with the hash, to ``out``."""
    driver = _browser_driver()
    binary = driver.find_chromium()
    if binary is None:
        raise Refused(f"no Chromium found (looked for {', '.join(driver.BROWSERS)}): apt-get install chromium")
    with tempfile.TemporaryDirectory(prefix="laya-screenshot-") as folder:
        shot = Path(folder) / "shot.png"
        driver.save_screenshot(binary, report, shot)
        out.write_bytes(png_with_hash(shot.read_bytes(), sha))


def run_gate(folder: Path) -> tuple[Path, Path]:
    """Run the gate on the embedded default once, its reports in ``folder``/reports; (its output file, reports)."""
    reports, output = folder / "reports", folder / "output.txt"
    env = {**os.environ, "COLUMNS": str(COLUMNS)}
    print(f"running the gate on the embedded default (minutes): python {' '.join(GATE[1:])} --report-dir {reports}")
    with output.open("w", encoding="utf-8") as out:
        done = subprocess.run([*GATE, "--report-dir", str(reports)], cwd=ROOT, env=env, stdout=out,
                              stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        tail = output.read_text(encoding="utf-8").splitlines()[-15:]
        raise Refused(f"the gate ended with exit status {done.returncode} (all of it: {output}):\n" + "\n".join(tail))
    return output, reports


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--from-run", nargs=2, metavar=("OUTPUT", "REPORTS_DIR"), type=Path,
                        help="a run's captured terminal output and its --report-dir, instead of running the gate")
    args = parser.parse_args(argv)
    sha = snapshot_hash()
    try:
        if args.from_run:
            output, reports = args.from_run
        else:
            output, reports = run_gate(Path(tempfile.mkdtemp(prefix="laya-docs-samples-")))
            print(f"the run is kept: rerun with --from-run {output} {reports}")
        if snapshot_hash() != sha:
            raise Refused(f"{SNAPSHOT.name} changed while the gate ran: run again")
        lines = sample_lines(output.read_text(encoding="utf-8"))
        if not any(name == DEFAULT_RUN for page in PAGES for name, _, _ in samples(page.read_text(encoding="utf-8"))):
            raise Refused(f"no page holds a sample `<!-- sample: {DEFAULT_RUN} ... -->`: nothing to write")
        changed = write_pages(lines, sha)
        for page in changed:
            print(f"rewrote {page.relative_to(ROOT)}")
        if not changed:
            print("the pages' samples are current")
        write_screenshot(reports / "report.html", sha)
        print(f"rewrote {SCREENSHOT.relative_to(ROOT)} (snapshot sha256 {sha})")
    except Refused as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

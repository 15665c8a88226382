"""The parts of the documentation made from the code, so they cannot drift: the family table (from the family
registry), the option reference and ``run_gate``'s arguments (from the option declarations).

A page holds each part, as committed, between two markers::

    <!-- generated: families -->
    (the table)
    <!-- end generated: families -->

(``families``, ``options`` or ``arguments``), so the page reads as it is in the repository. After a change to the
registry or the options, ``python docs/hooks.py --write`` rewrites every part in place (without ``--write`` it
names the stale pages and exits 1; ``tests/docs/test_docs.py`` fails on a stale one too). When the site is built,
``on_page_markdown`` puts in the parts as the code makes them now.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

#: The start marker of a generated part, on a line of its own.
START = re.compile(r"^<!-- generated: (\w+) -->$", re.MULTILINE)
#: A generated part: its start marker, what is between, and its end marker.
PART = re.compile(r"^<!-- generated: (\w+) -->\n.*?^<!-- end generated: \1 -->$", re.MULTILINE | re.DOTALL)
#: The command that rewrites the committed parts.
WRITE_COMMAND = "python docs/hooks.py --write"


def families_table() -> str:
    """Every declared family: its kind, the summary block it is reported in, its modality, its variants and checks."""
    from laya_robustness.families import KINDS, declared

    lines = ["| family | kind | reported in | modality | variants per source row | checks |",
             "| --- | --- | --- | --- | --- | --- |"]
    for f in declared():
        opt_in = "" if f.default or f.name == "orig" else " (opt-in: `--families " + f.name + "`)"
        checks = ", ".join(f"`{c}`" for c in f.checks) or "-"
        lines.append(f"| `{f.name}` | {KINDS[f.kind]} | `{f.block}` | {f.modality or '-'} | {f.summary}{opt_in} | {checks} |")
    return "\n".join(lines)


def options_table() -> str:
    """Every option of the plugin with its default and help, as ``pytest --help`` shows them."""
    from laya_robustness.run.inputs.options import OPTIONS

    lines = ["| option | default | ini key | meaning |", "| --- | --- | --- | --- |"]
    for opt in OPTIONS:
        default = "every default family" if opt.flag == "--families" else f"`{opt.default}`"
        flag = f"`{opt.flag}`" + (" (a switch)" if opt.switch else "")
        lines.append(f"| {flag} | {default} | `{opt.dest}` | {opt.help.replace('|', '&#124;')} |")
    return "\n".join(lines)


def arguments_table() -> str:
    """Every option as ``run_gate``'s argument: its name, default and meaning."""
    from laya_robustness.run.inputs.options import OPTIONS

    lines = ["| argument | option | default | meaning |", "| --- | --- | --- | --- |"]
    for opt in OPTIONS:
        default = "every default family" if opt.flag == "--families" else f"`{opt.default}`"
        lines.append(f"| `{opt.field}` | `{opt.flag}` | {default} | {opt.help.replace('|', '&#124;')} |")
    return "\n".join(lines)


GENERATORS = {"families": families_table, "options": options_table, "arguments": arguments_table}


def generated_part(name: str) -> str:
    """The part ``name`` as the code makes it now, with its two markers."""
    if name not in GENERATORS:
        raise KeyError(f"unknown generated part {name!r} (known: {', '.join(GENERATORS)})")
    return f"<!-- generated: {name} -->\n\n{GENERATORS[name]()}\n\n<!-- end generated: {name} -->"


def regenerate(markdown: str) -> str:
    """``markdown`` with every generated part as the code makes it now; a start marker without its end marker, or
    an unknown part, is an error."""
    starts = [m.group(1) for m in START.finditer(markdown)]
    parts = [m.group(1) for m in PART.finditer(markdown)]
    for name in starts:
        if name not in GENERATORS:
            generated_part(name)  # raises, naming the known parts
    if starts != parts:
        unclosed = [name for name in starts if starts.count(name) != parts.count(name)]
        raise ValueError(f"generated part {unclosed[0]!r} has no line `<!-- end generated: {unclosed[0]} -->` after it")
    return PART.sub(lambda m: generated_part(m.group(1)), markdown)


def stale_parts(markdown: str) -> list[str]:
    """The names of the generated parts of ``markdown`` that differ from what the code makes now."""
    return [m.group(1) for m in PART.finditer(markdown) if m.group(0) != generated_part(m.group(1))]


def write_generated(docs_dir: Path) -> list[Path]:
    """Rewrite every generated part of the pages in ``docs_dir`` in place; the pages that changed."""
    changed = []
    for page in sorted(Path(docs_dir).glob("*.md")):
        text = page.read_text(encoding="utf-8")
        new = regenerate(text)
        if new != text:
            page.write_text(new, encoding="utf-8")
            changed.append(page)
    return changed


def on_page_markdown(markdown: str, **_) -> str:
    """The mkdocs hook: the page with its generated parts as the code makes them now."""
    return regenerate(markdown)


def main(argv: list[str]) -> int:
    """``--write``: rewrite the stale parts; without it, name the pages holding a stale part and return 1 if any."""
    docs_dir = Path(__file__).resolve().parent
    if argv == ["--write"]:
        for page in write_generated(docs_dir):
            print(f"rewrote {page.relative_to(docs_dir.parent)}")
        return 0
    if argv:
        print("usage: python docs/hooks.py [--write]", file=sys.stderr)
        return 2
    stale = {page: stale_parts(page.read_text(encoding="utf-8")) for page in sorted(docs_dir.glob("*.md"))}
    for page, names in stale.items():
        if names:
            name = page.relative_to(docs_dir.parent)
            print(f"{name}: stale generated part(s) {', '.join(names)}; run `{WRITE_COMMAND}`")
    return 1 if any(stale.values()) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Build-time parts of the documentation site, made from the code so they cannot drift: the family table (from
the family registry), the option reference and ``run_gate``'s arguments (from the option declarations). A page
asks for one with a line ``<!-- generated: families -->``, ``<!-- generated: options -->`` or
``<!-- generated: arguments -->``."""

from __future__ import annotations

import re

MARKER = re.compile(r"^<!-- generated: (\w+) -->$", re.MULTILINE)


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


def on_page_markdown(markdown: str, **_) -> str:
    def generate(match: re.Match) -> str:
        name = match.group(1)
        if name not in GENERATORS:
            raise KeyError(f"unknown generated part {name!r} (known: {', '.join(GENERATORS)})")
        return GENERATORS[name]()

    return MARKER.sub(generate, markdown)

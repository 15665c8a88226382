"""Long lines a person reads, wrapped to the terminal's width, and joined back for a program that reads them.

A wrapped line breaks at spaces only (a path or a word longer than the width stays whole); each continuation
line starts with ``INDENT``, so ``unwrap`` gives back the line as it was (its runs of spaces at the breaks aside).

>>> wrap("FAIL text/colour_choice max_flip: flip 0.25 [0.2, 0.3] > max_flip 0.1", 40)
['FAIL text/colour_choice max_flip: flip', '    0.25 [0.2, 0.3] > max_flip 0.1']
>>> unwrap(_) == ["FAIL text/colour_choice max_flip: flip 0.25 [0.2, 0.3] > max_flip 0.1"]
True
"""

from __future__ import annotations

import textwrap
from typing import Iterable

#: What starts each continuation line of a wrapped line.
INDENT = "    "


def wrap(line: str, width: int) -> list[str]:
    """``line`` as lines of at most ``width`` characters where its words allow, the continuations indented under
    their line's own indentation; a line break in ``line`` is kept.

    >>> wrap("ERROR: 2 problems:\\n  a.jsonl:1: field 'x': missing", 24)
    ['ERROR: 2 problems:', "  a.jsonl:1: field 'x':", '      missing']
    """
    out: list[str] = []
    for part in line.split("\n"):
        if len(part) <= width:
            out.append(part)
            continue
        lead = part[:len(part) - len(part.lstrip(" "))]
        out += textwrap.wrap(part, width, subsequent_indent=lead + INDENT, break_long_words=False,
                             break_on_hyphens=False) or [part]
    return out


def unwrap(lines: Iterable[str]) -> list[str]:
    """The lines with each continuation (a line starting with ``INDENT``) joined to the line before it."""
    out: list[str] = []
    for line in lines:
        if out and line.startswith(INDENT) and line.strip():
            out[-1] += " " + line[len(INDENT):]
        else:
            out.append(line)
    return out

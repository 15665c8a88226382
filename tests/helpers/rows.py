"""Rows built for the tests: a unit row of dataset ``ds``, its content compared field by field, and the rewrites of
fixture rows under which every variant of every question family fires."""

import dataclasses

from laya_robustness.rows import Row

#: Option words of other images, so that rows of other images offer distractors (``varied``).
WORDS = ("crimson", "lime", "navy", "gold", "teal", "plum", "rust", "sand")


def unit_row(row_id: str, **fields) -> Row:
    """A row of dataset ``ds``, its own group, on image cluster ``img-<row_id>``; ``fields`` give (or change) the
    others."""
    return Row(**{"row_id": row_id, "dataset": "ds", "group_id": row_id, "cluster": f"img-{row_id}", **fields})


def row_content(row):
    """Every field of a Row (which compares by identity), its images as mode, size and pixel bytes."""
    return tuple((f.name, tuple((im.mode, im.size, im.tobytes()) for im in row.images) if f.name == "images"
                  else getattr(row, f.name)) for f in dataclasses.fields(row))


def varied(rows):
    """Every other choice row gets options from a word list, so rows of other images offer distractors."""
    out = []
    for i, r in enumerate(rows):
        if i % 2:
            options = tuple(WORDS[(i + j) % len(WORDS)] for j in range(len(r.options)))
            r = dataclasses.replace(r, options=options)
        out.append(r)
    return out


def with_user_variants(rows):
    """Every third row carries a user rephrasing and a user translation, so the user variants fire too."""
    return [dataclasses.replace(r, meta={**r.meta, "rephrasings": [f"Please answer this: {r.question}"],
                                         "translations": {"nl": f"{r.question} (in het Nederlands)"}})
            if i % 3 == 0 else r for i, r in enumerate(rows)]


def what_is(rows):
    """Every other row asks "What is the colour of the <shape>?" (the form of the tell_me rephrasing)."""
    return [dataclasses.replace(r, question=r.question.replace("Which colour does", "What is the colour of")
                                .replace(" have?", "?")) if i % 2 else r for i, r in enumerate(rows)]

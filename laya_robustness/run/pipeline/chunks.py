"""How rows become prediction records: the scorer's logits (the batch path in one call, the predict path one
call per image cluster), its generated answers, or a served model's answers in text, scored in chunks that are
journaled as they finish.

A record holds raw logits to 4 d.p., calibrated probabilities to 5 d.p. and the argmax of the rounded
logits, so a summary re-made from the predictions file equals the online one. A row answered in text
(``scoring.base.AnsweringScorer``) keeps the generated text and the extraction rule beside them; without
probabilities its record holds the chosen option alone (``records.GENERATED_FIELDS``).
"""

from __future__ import annotations

import collections.abc
from dataclasses import dataclass, field
from typing import Callable, Iterator, Mapping, Sequence

import numpy as np

from laya_robustness.answers import normalize_answer
from laya_robustness.metrics.calibration import DEFAULT_TEMPERATURES, calibrated_probs
from laya_robustness.records import OPEN, UNPARSED_ANSWER, Record
from laya_robustness.rows import Row
from laya_robustness.run.pipeline.image_store import rows_with_pixels
from laya_robustness.run.pipeline.journal import Journal, row_key
from laya_robustness.run.pipeline.prefetch import made_ahead
from laya_robustness.scoring.base import Answer, capabilities

#: Batches of the batch path per scoring chunk (the unit that is journaled, and that the progress bar counts).
CHUNK_BATCHES = 16


def prediction_record(row, logits, temperatures: Mapping[str, float]) -> Record:
    """One predictions.jsonl line: ids, family/variant, label, raw logits (4 d.p.), probs (5 d.p.), argmax, meta.

    The argmax is taken on the rounded logits, so the record is self-consistent
    and a summary re-made from the file equals the online one.
    """
    rounded = [round(float(x), 4) for x in logits]
    probs = calibrated_probs(rounded, row.primitive, temperatures)
    record = {
        "row_id": row.row_id, "group_id": row.group_id, "cluster": row.cluster, "dataset": row.dataset,
        "family": row.family, "variant": row.variant, "primitive": row.primitive, "label": row.label,
        "n_images": len(row.images), "logits": rounded, "probs": [round(float(p), 5) for p in probs],
        "argmax": int(np.argmax(rounded)), "meta": dict(row.meta), "category": row.category,
    }
    return Record.parse(record, f"row {row.row_id}")


def open_record(row, generated: str) -> Record:
    """The record of an open-answer row: the generated text, its normalised form, the normalised accepted
    answers and whether the answer is one of them (``laya_robustness.answers``)."""
    accepted = [normalize_answer(a) for a in getattr(row, "answers", ())]
    answer = normalize_answer(generated)
    record = {
        "row_id": row.row_id, "group_id": row.group_id, "cluster": row.cluster, "dataset": row.dataset,
        "family": row.family, "variant": row.variant, "primitive": OPEN, "label": -1, "argmax": -1,
        "n_images": len(row.images), "logits": [], "probs": [], "meta": dict(row.meta), "category": row.category,
        "raw_answer": generated, "answer": answer, "answers": accepted, "correct": answer in accepted,
    }
    return Record.parse(record, f"row {row.row_id}")


def answer_record(row, answer: Answer, temperatures: Mapping[str, float]) -> Record:
    """The record of a choice / yes-no row answered in text: with option logits, a ``prediction_record`` (its
    argmax the most probable option) plus the text and extraction rule; without, the chosen option as argmax
    (``UNPARSED_ANSWER`` when the text names none), the number of options and no logits or probabilities."""
    generated = {"raw_answer": answer.text, "extraction": answer.extraction}
    if answer.logits is not None:
        return Record.parse({**prediction_record(row, answer.logits, temperatures), **generated}, f"row {row.row_id}")
    record = {
        "row_id": row.row_id, "group_id": row.group_id, "cluster": row.cluster, "dataset": row.dataset,
        "family": row.family, "variant": row.variant, "primitive": row.primitive, "label": row.label,
        "n_images": len(row.images), "logits": [], "probs": [], "n_options": len(row.options),
        "argmax": UNPARSED_ANSWER if answer.choice is None else int(answer.choice), "meta": dict(row.meta),
        "category": row.category, **generated,
    }
    return Record.parse(record, f"row {row.row_id}")


@dataclass
class Scoring:
    """How rows are scored: the scorer, its path and the per-primitive temperatures."""

    scorer: object
    path: str = "batch"  # or "predict"
    temperatures: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_TEMPERATURES))
    max_new_tokens: int = 16

    def logits(self, rows: Sequence[Row]):
        """Logits of every row: one batch-path call, or one predict call per image cluster."""
        if self.path == "batch":
            return self.scorer.score_batch(rows)
        out = [None] * len(rows)
        for idx in cluster_indices(rows):
            for i, logits in zip(idx, self.scorer.score_predict([rows[i] for i in idx])):
                out[i] = logits
        return out

    def answers(self, rows: Sequence[Row]) -> list[str]:
        """The generated answers of open-answer rows (the scorer's greedy ``generate``)."""
        if not capabilities(self.scorer).generates:
            raise TypeError(f"{type(self.scorer).__name__} cannot generate: open-answer rows need a scorer "
                            "with generate(rows, max_new_tokens)")
        return list(self.scorer.generate(rows, max_new_tokens=self.max_new_tokens))

    def records(self, rows: Sequence[Row]) -> list[dict]:
        """One prediction record per row, in order: logits (4 d.p.), calibrated probs (5 d.p.) and argmax of
        a choice / yes-no row; the generated, normalised and judged answer of an open-answer row."""
        out: list = [None] * len(rows)
        closed = [i for i, r in enumerate(rows) if r.primitive != OPEN]
        opened = [i for i, r in enumerate(rows) if r.primitive == OPEN]
        if closed and capabilities(self.scorer).answers_in_text:
            for i, answer in zip(closed, self.scorer.answers([rows[i] for i in closed]), strict=True):
                out[i] = answer_record(rows[i], answer, self.temperatures)
        elif closed:
            logits = self.logits([rows[i] for i in closed])
            for i, lg in zip(closed, logits, strict=True):
                out[i] = prediction_record(rows[i], lg, self.temperatures)
        if opened:
            for i, text in zip(opened, self.answers([rows[i] for i in opened]), strict=True):
                out[i] = open_record(rows[i], text)
        return out


def cluster_indices(rows: Sequence[Row]) -> list[list[int]]:
    """Indices of the rows grouped by image cluster, clusters in order of first appearance."""
    groups: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        groups.setdefault(r.cluster, []).append(i)
    return list(groups.values())


def consecutive_chunk_rows(scoring_path: str, batch_size: int) -> int | None:
    """The rows of a scoring chunk where a family's chunks are consecutive slices of its rows (the batch path:
    ``CHUNK_BATCHES`` batches, so the batches are the same as in one call); None where they are whole image
    clusters (the predict path) and so known only once all its rows are.

    >>> consecutive_chunk_rows("batch", 16), consecutive_chunk_rows("predict", 16)
    (256, None)
    """
    return CHUNK_BATCHES * batch_size if scoring_path == "batch" else None


def scoring_chunks(rows: Sequence[Row], scoring_path: str, batch_size: int, per_row: bool = False) -> list[list[int]]:
    """Row indices in the chunks a family is scored and journaled in: ``CHUNK_BATCHES`` batches of the
    batch path (so the batches are the same as in one call), whole image clusters of the predict path, or (a
    served model, ``per_row``) every row alone, so each answered row is journaled as it arrives."""
    if per_row:
        return [[i] for i in range(len(rows))]
    size = consecutive_chunk_rows(scoring_path, batch_size)
    if size is not None:
        return consecutive_chunks(0, len(rows), size)
    chunks: list[list[int]] = [[]]
    for cluster in cluster_indices(rows):
        if len(chunks[-1]) >= CHUNK_BATCHES * batch_size:
            chunks.append([])
        chunks[-1].extend(cluster)
    return [c for c in chunks if c]


def consecutive_chunks(start: int, total: int, size: int, last: bool = True) -> list[list[int]]:
    """The batch path's chunks of rows ``start`` .. ``total - 1``: consecutive slices of ``size`` rows, the last one
    shorter; with ``last`` False (more rows are to come) only the full ones.

    >>> consecutive_chunks(0, 5, 2), consecutive_chunks(2, 5, 2, last=False)
    ([[0, 1], [2, 3], [4]], [[2, 3]])
    """
    stop = total if last else start + (total - start) // size * size
    return [list(range(i, min(i + size, stop))) for i in range(start, stop, size)]


class ChunksWithPixels(collections.abc.Sequence):
    """The chunks of rows an executor scores, each given its pixels (``run.pipeline.image_store.rows_with_pixels``) only when
    it is asked for: a run's rows carry waiting images, and only the chunks in hand hold decoded ones."""

    def __init__(self, rows: Sequence[Row], chunks: Sequence[Sequence[int]]):
        self.rows, self.chunks = rows, chunks

    def __len__(self) -> int:
        return len(self.chunks)

    def __getitem__(self, index: int) -> list[Row]:
        return rows_with_pixels(self.waiting(index))

    def waiting(self, index: int) -> list[Row]:
        """The rows of chunk ``index`` with their images still waiting (an executor that makes pixels itself)."""
        return [self.rows[i] for i in self.chunks[index]]

    def __iter__(self) -> Iterator[list[Row]]:
        for index in range(len(self.chunks)):
            yield self[index]

    def ahead(self) -> Iterator[list[Row]]:
        """Each chunk with its pixels, in order, the next ones made while the caller scores this one
        (``run.pipeline.prefetch.made_ahead``)."""
        return made_ahead(self[index] for index in range(len(self)))


class JournaledCell:
    """One cell's rows on their way to records: a row the journal knows (``--resume``) is taken from it at once,
    the others wait in ``pending`` chunks (``positions``, the size of the chunk they belong to) until ``finish(i,
    records)`` gives the records of pending chunk ``i``, which are appended to the journal. ``on_chunk(n)`` is told
    the size of every chunk done (the progress bar) and ``on_done(rows)`` its rows, those found in the journal as
    they are found and those scored as they are scored (the run lets the variant images go that no row still waits
    for). A cell whose rows arrive as they are built starts ``complete=False`` and is given them with ``extend``
    (the chunks' positions count from the cell's first row) until ``complete`` is set."""

    def __init__(self, journal: Journal, rows: Sequence[Row], chunks: Sequence[Sequence[int]],
                 on_chunk: Callable[[int], None] = lambda n: None,
                 on_done: Callable[[list[Row]], None] = lambda rows: None, complete: bool = True):
        self.journal, self.on_chunk, self.on_done = journal, on_chunk, on_done
        self.rows: list[Row] = []
        self.out: list[Record | None] = []
        self.keys: list[str] = []
        self.pending: list[tuple[list[int], int]] = []
        self.left = 0  # pending chunks not finished yet
        self.extend(rows, chunks)
        self.complete = complete

    def extend(self, rows: Sequence[Row], chunks: Sequence[Sequence[int]]) -> None:
        """More rows of the cell and the chunks they make (positions in the whole cell)."""
        journal = self.journal
        self.rows += rows
        self.out += [None] * len(rows)
        self.keys += [row_key(journal.config, row) for row in rows]
        for chunk in chunks:
            missing, found = [], []
            for i in chunk:
                (found if self.keys[i] in journal.known else missing).append(i)
            for i in found:
                self.out[i] = Record.parse(journal.known[self.keys[i]], f"journal record {self.keys[i]}")
            if found:
                self.on_done([self.rows[i] for i in found])
            if missing:
                self.pending.append((missing, len(chunk)))
                self.left += 1
            else:
                self.on_chunk(len(chunk))

    def chunks(self, start: int = 0) -> ChunksWithPixels:
        """The pending chunks from ``start`` on, each given its pixels when it is asked for (what an executor's
        ``records`` takes; its indices count from ``start``)."""
        return ChunksWithPixels(self.rows, [positions for positions, _ in self.pending[start:]])

    def finish(self, index: int, records: Sequence[Record]) -> None:
        """Pending chunk ``index`` was scored: keep and journal its records."""
        positions, size = self.pending[index]
        for i, record in zip(positions, records, strict=True):
            self.out[i] = record
        self.journal.append((self.keys[i], self.out[i]) for i in positions)
        self.left -= 1
        self.on_chunk(size)
        self.on_done([self.rows[i] for i in positions])

    def score(self, executor) -> list[Record]:
        """Score the pending chunks now on ``executor`` (its ``records(chunks)`` yields ``(index, records)`` as
        chunks finish) and journal each as it arrives; the records of every row, in row order."""
        for index, records in executor.records(self.chunks()):
            self.finish(index, records)
        return self.records()

    @property
    def done(self) -> bool:
        return self.complete and self.left == 0

    def records(self) -> list[Record]:
        """The records of every row, in row order (once ``done``)."""
        return list(self.out)


def score_journaled(executor, journal: Journal, rows: Sequence[Row], chunks: Sequence[Sequence[int]],
                    on_chunk: Callable[[int], None] = lambda n: None,
                    on_done: Callable[[list[Row]], None] = lambda rows: None) -> list[Record]:
    """The records of ``rows`` in row order, chunk by chunk (``JournaledCell``): the chunks the journal does not
    know are handed to ``executor`` with their pixels (its ``records(chunks)`` takes a ``ChunksWithPixels``, whose
    chunks are decoded as it asks for them, and yields ``(index, records)`` as chunks finish; it should hold only
    the chunks it is scoring) and journaled as each arrives. An exception of the executor propagates unchanged:
    what was journaled before it stays."""
    return JournaledCell(journal, rows, chunks, on_chunk, on_done).score(executor)

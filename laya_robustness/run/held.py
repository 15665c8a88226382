"""What one process of a gate run holds as it goes (``Held``): each device's records and the records of each cell,
the cells scored and judged, the check results, the invariance stats, the harness errors and what claiming the
report folder did; an xdist worker's added on the controller (``payload`` there, ``merge`` here). ``GateRun`` keeps
one and nothing else reads it."""

from __future__ import annotations

from typing import Iterable, Sequence

from laya_robustness.families import get_family
from laya_robustness.records import ORIG, Record
from laya_robustness.run.scope import Scope, decide_scope

Cell = tuple[str, str, str]  # (family, dataset, device)


class Held:
    """What a run holds (see the module doc)."""

    def __init__(self):
        self.records: dict[str, dict[str, Record]] = {}  # device -> row_id -> record
        self._cells: dict[tuple, list[Record]] = {}  # (device, family, dataset) -> its records, once known
        self.scored: set[Cell] = set()  # scored in this process, or by a worker whose records were merged
        self.judged: set[Cell] = set()  # whose check reached a verdict
        self.results: list[dict] = []  # check results, each with its device
        self.invariance: dict[str, dict[str, dict]] = {}  # device -> condition -> stats
        self.harness_errors: list[str] = []
        self.lock_notes: list[str] = []  # what claiming the report folder's lock did (a stale lock taken over)

    def devices(self) -> set[str]:
        """The devices that report: those with records or invariance stats."""
        return set(self.records) | set(self.invariance)

    def scored_cell(self, device: str, family: str, dataset: str, cell: Sequence[Record]) -> None:
        """The records of a cell scored in this process."""
        store = self.records.setdefault(device, {})
        for record in cell:
            store[record.row_id] = record
        self._cells[(device, family, dataset)] = list(cell)
        self.scored.add((family, dataset, device))

    def records_of(self, device: str, family: str, dataset: str) -> list[Record]:
        """The records of one cell: as scoring stored them, else (records merged from xdist workers) found."""
        key = (device, family, dataset)
        if key not in self._cells:
            self._cells[key] = [r for r in self.records.get(device, {}).values()
                                if r.family == family and r.dataset == dataset]
        return self._cells[key]

    def add_records(self, device: str, records: Iterable[Record]) -> None:
        """Records scored elsewhere (an xdist worker's), each cell they touch found again when asked."""
        store = self.records.setdefault(device, {})
        for record in records:
            store[record.row_id] = record
            self._cells.pop((device, record.family, record.dataset), None)

    def note_harness_error(self, message: str) -> None:
        if message not in self.harness_errors:
            self.harness_errors.append(message)

    def payload(self) -> dict:
        """This process's part, JSON-ready (what an xdist worker hands the controller)."""
        return {"records": self.records, "results": self.results, "harness": self.harness_errors,
                "invariance": self.invariance, "scored": sorted(self.scored), "judged": sorted(self.judged),
                "lock_notes": self.lock_notes}

    def merge(self, data: dict) -> None:
        """Add a worker's part (``payload``, parsed from JSON)."""
        for device, recs in data["records"].items():
            self.add_records(device, [Record.parse(rec, f"worker record {row_id}") for row_id, rec in recs.items()])
        self.results += data["results"]
        for error in data["harness"]:
            self.note_harness_error(error)
        for device, conditions in data["invariance"].items():
            self.invariance.setdefault(device, {}).update(conditions)
        self.scored.update(tuple(key) for key in data["scored"])
        self.judged.update(tuple(key) for key in data["judged"])
        self.lock_notes += [n for n in data["lock_notes"] if n not in self.lock_notes]

    def scopes(self, asked: Sequence[tuple[str, str]], narrowed_by: Sequence[str] = ()) -> dict[str, Scope]:
        """The scope of each device that reports (``run.scope``): the cells the run asks for (``asked``), those
        scored (its records, and a cell whose family builds no variant there) and those its checks judged, the
        xdist workers' included; ``narrowed_by``: the options that narrowed the selection. A family cell scored
        with no record built no variant there (``Scope.built_nothing``, with the family's ``when_empty``): every
        executor's records reach this process, so the same cells are found however the run was scored."""
        out = {}
        for device in sorted(self.devices() | {d for _, _, d in self.judged}):
            with_records = {(r.family, r.dataset) for r in self.records.get(device, {}).values()}
            scored = with_records | {(f, d) for f, d, dev in self.scored if dev == device}
            judged = {(f, d) for f, d, dev in self.judged if dev == device}
            built_nothing = {(f, d): get_family(f).when_empty for f, d in scored - with_records if f != ORIG}
            out[device] = decide_scope(asked, scored, judged, narrowed_by, built_nothing)
        return out

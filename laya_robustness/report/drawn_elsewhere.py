"""report.html's plots drawn by the ranks that do not write a run's reports, for the one that does, when the ranks of
a ``torch.distributed`` world share a run (``--executor distributed``, the training callback under DDP or FSDP).
Drawing the plots is most of writing the reports (1.2 of 1.8 s for 13,301 records on 2 CPU cores), and the other
ranks would only wait while rank 0 writes.

Each plot of each device's page (``report.html.PLOTS``) is given to one rank other than 0, in turn (``drawer``),
which draws it from its own outcome (every rank holds every record: ``run.executors.distributed``) and hands it
over (``draw_for_writer``); rank 0 meanwhile writes the rest and gathers the plots when its page first needs one
(``DrawnElsewhere``; one ``gather_drawings`` on every rank). A plot no rank drew (its run ended before, or drawing
raised there) is drawn by rank 0. The page is the one a single process writes: the SVG is byte-stable.
"""

from __future__ import annotations

from laya_robustness.report.html import PLOTS, plot_sections
from laya_robustness.run.executors.distributed import gather_drawings
from laya_robustness.run.outcome import RunOutcome


def drawer(k: int, size: int) -> int:
    """The rank that draws the ``k``-th plot of a run (``plots``) in a world of ``size`` > 1 ranks.

    >>> [drawer(k, 2) for k in range(4)], [drawer(k, 3) for k in range(4)]
    ([1, 1, 1, 1], [1, 2, 1, 2])
    """
    return 1 + k % (size - 1)


def plots(outcome: RunOutcome) -> list[tuple[str, str]]:
    """(device, plot name) of every plot of ``outcome``'s pages, in order."""
    return [(device, name) for device, report in sorted(outcome.reports.items()) if report.summary is not None
            for name in PLOTS]


def draw_for_writer(outcome: RunOutcome, rank: int, size: int) -> None:
    """On rank ``rank`` > 0: draw this rank's plots of ``outcome`` and hand them to the writing rank."""
    drawn: dict[tuple[str, str], str] = {}
    for k, (device, name) in enumerate(plots(outcome)):
        if drawer(k, size) == rank:
            report = outcome.reports[device]
            try:
                drawn[(device, name)] = plot_sections(report.summary, list(report.records), [name])[name]
            except Exception:  # noqa: BLE001  (rank 0 draws it, and reports what goes wrong there)
                continue
    gather_drawings(drawn)


class DrawnElsewhere:
    """On the writing rank: ``drawn(device, name)``, the section another rank drew (None: draw it here), gathered
    from every rank at the first call."""

    def __init__(self):
        self.drawn: dict | None = None

    def __call__(self, device: str, name: str) -> str | None:
        if self.drawn is None:
            self.drawn = gather_drawings({})
        return self.drawn.get((device, name))

"""The summary snapshot: its name (the configuration the user chose) and its content (the numbers, with the
fingerprints of the weights and the rows they were made from), and what moved when it differs.

One snapshot per configuration: ``<model>.<cpu|gpu|mps>.<data>.s<seed>.n<rows per set>.<families>``, ``--model``
and ``--data`` as given, then ``.<scoring>`` where the scoring differs from the device's default: another scorer
(a served model: ``openai``), the predict path, a batch-path precision other than the device's (``fp32`` on
CUDA, ``bf16`` elsewhere), another batch size (``b8``), another attention implementation (``sdpa``), joined by
``-``. Each of these moves logits in their last digits (the predict path's fp32 logits differ from the batch
path's by up to 1e-4 on the embedded default), so each keeps its own numbers. The weights and the rows are not in
the name but in the snapshot (``fingerprints``): a new checkpoint at the same ``--model``, or new rows at the same
``--data``, is compared with the committed snapshot and fails with what moved (``snapshot_changes``: the
fingerprints, then each headline number with whether its move lies beyond its interval), and
``--snapshot-update`` rewrites the same file, so the pull request shows a diff of numbers. A configuration
without a snapshot (another model or data path, another scoring) has nothing to be compared with: its test says
so and how to record one.

Under xdist no worker has every record, so a worker's snapshot test only names the snapshot
(``defer_snapshot``) and skips; the controller compares it once the workers' records are merged
(``compare_deferred``: the same serialisation syrupy compares), prints the outcome in the terminal
summary and fails the run's exit status when it differs.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from pathlib import Path

from laya_robustness.metrics import rounded
from laya_robustness.pytest_plugin.options import default_of
from laya_robustness.run.files import file_safe
from laya_robustness.run.inputs.fingerprints import data_fingerprint, families_label, model_fingerprint
from laya_robustness.run.scoring.models import identity_key
from laya_robustness.scoring.base import batch_precision
from laya_robustness.summary import headlines

SNAPSHOT_DIGITS = 4
DIFF_LINES = 60
#: Why a worker's snapshot test skips under xdist.
COMPARED_ON_CONTROLLER = ("under xdist the summary snapshot is compared once, on the controller, over every worker's "
                          "records merged: see 'summary snapshot' in the terminal summary (a difference fails the run)")


@dataclass(frozen=True)
class SnapshotOutcome:
    """One comparison: which snapshot, whether it matched, and when it did not a unified diff and what moved."""

    device: str
    name: str
    matches: bool
    diff: str = ""
    changes: tuple[str, ...] = ()  # what moved (``snapshot_changes``)
    where: str = "compared on the controller"
    nodeid: str | None = None  # the worker's snapshot test, when compared on the controller


def device_kind(device: str) -> str:
    """``gpu`` for a CUDA device, ``mps`` for Apple's, else ``cpu``: devices whose kernels round alike."""
    return "gpu" if device.startswith("cuda") else "mps" if device.startswith("mps") else "cpu"


def scoring_label(settings, device: str) -> str:
    """What the run's scoring settings change from the device's default scoring, as a name suffix (see the
    module doc): "" for the default, e.g. ``.predict`` or ``.fp32-b8``."""
    parts = []
    scorer = getattr(settings, "scorer", default_of("--scorer"))
    if scorer != default_of("--scorer"):
        parts.append(scorer)
    if settings.scoring_path != default_of("--scoring-path"):
        parts.append(settings.scoring_path)  # fp32 whatever --precision says
    elif batch_precision(settings.precision, device) != batch_precision(default_of("--precision"), device):
        parts.append(batch_precision(settings.precision, device))
    if settings.batch_size != default_of("--batch-size"):
        parts.append(f"b{settings.batch_size}")
    if settings.attn_implementation != default_of("--attn-implementation"):
        parts.append(settings.attn_implementation)
    return "." + file_safe("-".join(parts)) if parts else ""


def as_given(path: Path, root: Path) -> str:
    """``path`` as the user gave it: relative to the project root when it lies under it (the embedded default's
    ``laya_fixtures/rows``), else as it is."""
    try:
        return Path(path).relative_to(root).as_posix()
    except ValueError:
        return str(path)


def snapshot_name(session, device: str) -> str:
    """The name of the run configuration's snapshot (see the module doc)."""
    run, s = session.run, session.settings
    model = file_safe(run.model_name.strip("/"))
    data = file_safe(as_given(s.data, run.root).strip("/"))
    return (f"{model}.{device_kind(device)}.{data}.s{s.seed}.n{s.rows_per_set}.{families_label(s.families)}"
            f"{scoring_label(s, device)}")


def fingerprints(session, device: str) -> dict[str, str]:
    """Short fingerprints of the weights (the question model's and the dual encoder's) and of the rows."""
    run = session.run
    identity = {}
    if not run.models.model_is_dual:
        identity = run.models.identity(device)  # the identity (weight hashes) comes from the loaded scorer
    if run.caption_rows:
        identity["dual"] = run.models.identity(device, "captions")
    return {"weights": model_fingerprint(identity, run.model_name, session.settings.scorer),
            "rows": data_fingerprint({**run.rows, **run.caption_rows})}


def snapshot_view(session, device: str) -> dict:
    """What the snapshot holds: the run's identity, the fingerprints of its weights and rows, and every metric
    rounded to 4 d.p. (no timings/versions)."""
    run = session.run
    summary = session.full_summary(device)
    identity = dict(run.identities.get(device, {}))
    identity.pop("model", None)
    # how prompt prefixes are shared moves logits within float rounding only (shared_prefix_vs_alone holds it)
    identity.pop("prefix_sharing", None)
    dual = dict(run.identities.get(identity_key(device, "captions"), {}))
    if dual:
        identity["dual"] = {k: v for k, v in dual.items() if k != "model"}
    metrics = {k: v for k, v in summary.items() if k not in ("meta", "bootstrap")}
    s = session.settings
    return {"model": run.model_name, "identity": identity, "fingerprints": fingerprints(session, device),
            "seed": s.seed, "rows_per_set": s.rows_per_set, "temperatures": s.temperatures,
            **rounded(metrics, SNAPSHOT_DIGITS)}


def snapshot_changes(stored: dict, actual: dict) -> list[str]:
    """What moved from the ``stored`` snapshot to this run's (both as ``snapshot_view`` makes them): the changed
    fingerprints, then each headline number that moved, old -> new, with whether the new value lies outside the
    stored value's 95% interval (beyond noise) or inside it."""
    lines = []
    before, after = stored.get("fingerprints") or {}, actual.get("fingerprints") or {}
    for key, what in (("weights", "the weights"), ("rows", "the rows")):
        if before.get(key) != after.get(key):
            lines.append(f"{what}: fingerprint {before.get(key)} -> {after.get(key)}")
    old, new = headlines(stored), headlines(actual)
    for cell in sorted(set(old) | set(new), key=lambda k: (k not in old, k)):
        if cell not in old or cell not in new:
            lines.append(f"{'/'.join(cell[:2])} {cell[2]}: {'new' if cell in new else 'gone'}")
            continue
        (was, interval), (now, _) = old[cell], new[cell]
        if was == now:
            continue
        where = "no interval" if not interval else \
            ("BEYOND" if not interval[0] <= now <= interval[1] else "within") + \
            f" its 95% interval [{interval[0]:.4f}, {interval[1]:.4f}]"
        lines.append(f"{cell[0]}/{cell[1]} {cell[2]}: {was:.4f} -> {now:.4f} ({where})")
    return lines


def serialized(view: dict) -> str:
    """A snapshot view serialised exactly as the snapshot file holds it (syrupy's JSON extension)."""
    from syrupy.extensions.json import JSONSnapshotExtension

    return JSONSnapshotExtension().serialize(view)


def serialized_view(session, device: str) -> str:
    """``snapshot_view`` serialised exactly as the snapshot file holds it."""
    return serialized(snapshot_view(session, device))


def compare_deferred(session) -> list[SnapshotOutcome]:
    """Compare each snapshot the workers deferred with the summary of the merged records (scoring only
    cells no worker scored)."""
    out = []
    for item in session.deferred_snapshots:
        stored = Path(item["path"]).read_text(encoding="utf-8")
        actual = serialized_view(session, item["device"])
        diff = "" if actual == stored else "".join(list(difflib.unified_diff(
            stored.splitlines(keepends=True), actual.splitlines(keepends=True), "snapshot", "this run", n=1))[:DIFF_LINES])
        changes = () if actual == stored else tuple(snapshot_changes(json.loads(stored), json.loads(actual)))
        out.append(SnapshotOutcome(item["device"], item["name"], actual == stored, diff, changes,
                                   nodeid=item.get("nodeid")))
    return out

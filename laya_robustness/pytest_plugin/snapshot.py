"""The summary snapshot: its name (the run's configuration, with model and data fingerprints) and its content.

One snapshot per configuration: ``<model>.<cpu|gpu|mps>.m<model fingerprint>.d<data fingerprint>.s<seed>.n<rows
per set>.<families>``, then ``.<scoring>`` where the scoring differs from the device's default: the
predict path, a batch-path precision other than the device's (``fp32`` on CUDA, ``bf16`` elsewhere),
another batch size (``b8``), another attention implementation (``sdpa``), joined by ``-``. Each of
these moves logits in their last digits (the predict path's fp32 logits differ from the batch path's
by up to 1e-4 on the embedded default), so each keeps its own numbers. A configuration without a
snapshot (new data, a new model, another scoring) has nothing to be compared with: its test says so
and how to record one, instead of diffing against another configuration's numbers.

Under xdist no worker has every record, so a worker's snapshot test only names the snapshot
(``defer_snapshot``) and skips; the controller compares it once the workers' records are merged
(``compare_deferred``: the same serialisation syrupy compares), prints the outcome in the terminal
summary and fails the run's exit status when it differs.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path

from laya_robustness.metrics import rounded
from laya_robustness.pytest_plugin.options import default_of
from laya_robustness.run.files import file_safe
from laya_robustness.run.fingerprints import data_fingerprint, families_label, model_fingerprint
from laya_robustness.run.models import identity_key
from laya_robustness.scoring.base import batch_precision

SNAPSHOT_DIGITS = 4
DIFF_LINES = 60
#: Why a worker's snapshot test skips under xdist.
COMPARED_ON_CONTROLLER = ("under xdist the summary snapshot is compared once, on the controller, over every worker's "
                          "records merged: see 'summary snapshot' in the terminal summary (a difference fails the run)")


@dataclass(frozen=True)
class SnapshotOutcome:
    """One deferred comparison: which snapshot, whether it matched, and a unified diff when it did not."""

    device: str
    name: str
    matches: bool
    diff: str = ""


def device_kind(device: str) -> str:
    """``gpu`` for a CUDA device, ``mps`` for Apple's, else ``cpu``: devices whose kernels round alike."""
    return "gpu" if device.startswith("cuda") else "mps" if device.startswith("mps") else "cpu"


def scoring_label(settings, device: str) -> str:
    """What the run's scoring settings change from the device's default scoring, as a name suffix (see the
    module doc): "" for the default, e.g. ``.predict`` or ``.fp32-b8``."""
    parts = []
    if settings.scoring_path != default_of("--scoring-path"):
        parts.append(settings.scoring_path)  # fp32 whatever --precision says
    elif batch_precision(settings.precision, device) != batch_precision(default_of("--precision"), device):
        parts.append(batch_precision(settings.precision, device))
    if settings.batch_size != default_of("--batch-size"):
        parts.append(f"b{settings.batch_size}")
    if settings.attn_implementation != default_of("--attn-implementation"):
        parts.append(settings.attn_implementation)
    return "." + file_safe("-".join(parts)) if parts else ""


def snapshot_name(session, device: str) -> str:
    """The name of the run configuration's snapshot (see the module doc)."""
    run, s = session.run, session.settings
    identity = {}
    if not run.models.model_is_dual:
        identity = run.models.identity(device)  # the identity (weight hashes) comes from the loaded scorer
    model = file_safe(run.model_name.strip("/"))
    if run.caption_rows:
        identity["dual"] = run.models.identity(device, "captions")
    m = model_fingerprint(identity, run.model_name, s.scorer)
    d = data_fingerprint({**run.rows, **run.caption_rows})
    return (f"{model}.{device_kind(device)}.m{m}.d{d}.s{s.seed}.n{s.rows_per_set}.{families_label(s.families)}"
            f"{scoring_label(s, device)}")


def snapshot_view(session, device: str) -> dict:
    """What the snapshot holds: the run's identity and every metric rounded to 4 d.p. (no timings/versions)."""
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
    return {"model": run.model_name, "identity": identity, "seed": s.seed, "rows_per_set": s.rows_per_set,
            "temperatures": s.temperatures, **rounded(metrics, SNAPSHOT_DIGITS)}


def serialized_view(session, device: str) -> str:
    """``snapshot_view`` serialised exactly as the snapshot file holds it (syrupy's JSON extension)."""
    from syrupy.extensions.json import JSONSnapshotExtension

    return JSONSnapshotExtension().serialize(snapshot_view(session, device))


def compare_deferred(session) -> list[SnapshotOutcome]:
    """Compare each snapshot the workers deferred with the summary of the merged records (scoring only
    cells no worker scored)."""
    out = []
    for item in session.deferred_snapshots:
        stored = Path(item["path"]).read_text(encoding="utf-8")
        actual = serialized_view(session, item["device"])
        diff = "" if actual == stored else "".join(list(difflib.unified_diff(
            stored.splitlines(keepends=True), actual.splitlines(keepends=True), "snapshot", "this run", n=1))[:DIFF_LINES])
        out.append(SnapshotOutcome(item["device"], item["name"], actual == stored, diff))
    return out

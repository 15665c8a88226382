"""How often ``RobustnessCallback(stop_on_fail=...)`` would stop a training run whose model does not change.

    python scripts/false_stops.py [--seeds 10] [--evaluations 3] [--rows-per-set 40]

For each seed 0..N-1 a real ``transformers.Trainer`` trains the embedded tiny SmolVLM with learning rate 0 (the
weights never move) and the callback gates it at every evaluation (all families, the checkpoint's known
limitations declared, ``stop_on_fail=False`` so every evaluation runs); each policy's decision is then taken from
what failed at each evaluation, with the callback's own ``stopping.decide``. Printed per seed: the failed checks of
each evaluation and whether the evaluations' predictions are byte-identical; then, per policy, the seeds it would
have stopped. A seed changes every seeded variant and the bootstrap, as ``calibrate-gate`` does for the gate.
"""

from __future__ import annotations

import argparse
import gzip
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
POLICIES = (True, "confirmed")


def one_seed(seed: int, evaluations: int, rows_per_set: int, folder: Path) -> tuple[list[set[str]], bool]:
    """(the failed checks of each evaluation, whether every evaluation's predictions are the first's)."""
    from transformers import AutoModelForImageTextToText, AutoProcessor, Trainer, TrainingArguments

    from laya_robustness.recipes.trainer_data import AnswerDataset
    from laya_robustness.stopping import failed_key
    from laya_robustness.training import RobustnessCallback

    model_dir = ROOT / "laya_fixtures" / "tiny-smolvlm"
    model = AutoModelForImageTextToText.from_pretrained(model_dir, attn_implementation="eager")
    processor = AutoProcessor.from_pretrained(model_dir)
    callback = RobustnessCallback(data=ROOT / "laya_fixtures" / "rows", root=ROOT, report_dir=folder / "robustness",
                                  seed=seed, rows_per_set=rows_per_set,
                                  limitations=ROOT / "laya_fixtures" / "limitations.toml")
    train = AnswerDataset(processor, rows_per_set=8, seed=seed)
    args = TrainingArguments(str(folder / "run"), max_steps=2 * evaluations, eval_strategy="steps", eval_steps=2,
                             per_device_train_batch_size=4, learning_rate=0.0, weight_decay=0.0, report_to=[],
                             save_strategy="no", use_cpu=True, seed=seed, disable_tqdm=True,
                             dataloader_num_workers=0)
    Trainer(model=model, args=args, train_dataset=train, eval_dataset=AnswerDataset(processor, rows_per_set=1),
            data_collator=train.collate, processing_class=processor, callbacks=[callback]).train()
    steps = sorted(callback.results)
    failed = [{failed_key(f.family, f.dataset, f.check) for f in callback.results[s].failures}
              | ({"nothing judged"} if callback.results[s].nothing_judged else set()) for s in steps]
    predictions = [gzip.decompress((folder / "robustness" / f"checkpoint-{s}" / "predictions.jsonl.gz").read_bytes())
                   for s in steps]
    return failed, all(p == predictions[0] for p in predictions)


def stopped(policy, failed: list[set[str]]) -> int | None:
    """The evaluation (1-based) at which ``policy`` stops the run, or None."""
    from laya_robustness.stopping import decide

    before: set[str] = set()
    for n, now in enumerate(failed, 1):
        if decide(policy, now, before):
            return n
        before = now
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--evaluations", type=int, default=3)
    parser.add_argument("--rows-per-set", type=int, default=40)
    args = parser.parse_args()
    runs = []
    for seed in range(args.seeds):
        with tempfile.TemporaryDirectory(prefix="laya-false-stops-") as folder:
            failed, same = one_seed(seed, args.evaluations, args.rows_per_set, Path(folder))
        runs.append(failed)
        print(f"seed {seed}: failed per evaluation {[sorted(f) for f in failed]}; predictions identical: {same}",
              flush=True)
    for policy in POLICIES:
        stops = [seed for seed, failed in enumerate(runs) if stopped(policy, failed) is not None]
        print(f"stop_on_fail={policy!r}: {len(stops)} of {args.seeds} runs stopped ({len(stops) / args.seeds:.0%})"
              f"{'; seeds ' + ', '.join(map(str, stops)) if stops else ''}")


if __name__ == "__main__":
    main()

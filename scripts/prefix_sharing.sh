#!/usr/bin/env bash
# Prefix sharing side by side on the SmolVLM-256M-shaped model with its image splitting (a 1024 px photo is cut
# into 17 tiles of 512 px: 1,088 image tokens), photo rows through orig, option_order, text and rephrase:
#
#   OUT=/tmp/prefix bash scripts/prefix_sharing.sh                 # CPU, PHOTOS=2 (about 1.6 s a tile to encode)
#   OUT=/results DEVICE=cuda bash scripts/prefix_sharing.sh        # CUDA: the bf16 batch path, the gpu gate
#   OUT=/tmp/dry TILE=64 PHOTOS=1 bash scripts/prefix_sharing.sh   # the same steps with 64 px tiles (checks it)
#
# Writes under $OUT: bench-{shared,unshared}.json (the workload scored once on the batch path with and without
# prefix sharing: rows/s, language-model tokens computed, tokens_alone), gate-{shared,unshared}.log (the gate
# over the same rows, its time split by scripts/forward_time.py) and prefix-sharing.json: the fall of the
# language-model tokens (unshared / shared) and the shared gate's time beyond model loading and vision encoding
# over the unshared gate's language-model time (its model forwards but the vision encoder). MODEL reuses a
# checkpoint built by `python -m laya_robustness.recipes.bench build DIR --split --image-size $TILE`.
set -uo pipefail
cd "$(dirname "$0")/.."
: "${OUT:?set OUT to the folder the results go to}"
PY=${PYTHON:-python}
DEVICE=${DEVICE:-cpu}
PHOTOS=${PHOTOS:-2}
TILE=${TILE:-512}
PHOTO=$((2 * TILE))
FAMILIES=option_order,text,rephrase
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
mkdir -p "$OUT"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
if [ -z "${MODEL:-}" ]; then
  MODEL="$WORK/smolvlm-256m-shaped-split"
  "$PY" -m laya_robustness.recipes.bench build "$MODEL" --split --image-size "$TILE" > /dev/null || exit 3
fi
"$PY" -m laya_robustness.recipes.bench rows "$WORK/photos" --rows "$PHOTOS" --image-size "$PHOTO" > /dev/null || exit 3
if [ "$DEVICE" = cpu ]; then MARK="not gpu"; else MARK=gpu; fi
STATUS=0
for mode in shared unshared; do
  mb=1024; [ $mode = unshared ] && mb=0
  "$PY" -m laya_robustness.recipes.bench run "$MODEL" --device "$DEVICE" --path batch --rows "$PHOTOS" \
    --image-size "$PHOTO" --families "$FAMILIES" --prefix-cache-mb $mb --out "$OUT/bench-$mode.json" > /dev/null \
    || STATUS=3
  # random weights fail the family limits (exit 1); 3 or more is a broken harness
  PYTHONPATH=scripts "$PY" -m pytest robustness_tests -p forward_time -p no:cacheprovider -q -m "$MARK" \
    -k "not (invariance or benchmark or snapshot or baseline)" --model "$MODEL" --data "$WORK/photos" \
    --families "$FAMILIES" --device "$DEVICE" --prefix-cache-mb $mb --report-dir "$WORK/reports-$mode" \
    > "$OUT/gate-$mode.log" 2>&1
  rc=$?
  [ $rc -le 1 ] || STATUS=3
done
"$PY" - "$OUT" <<'PY' || STATUS=3
import json
import re
import sys
from pathlib import Path

out = Path(sys.argv[1])


def seconds(log: str, name: str) -> float:
    return float(re.search(rf"{name} ([0-9.]+) s", log).group(1))


logs = {mode: (out / f"gate-{mode}.log").read_text() for mode in ("shared", "unshared")}
bench = {mode: json.loads((out / f"bench-{mode}.json").read_text()) for mode in ("shared", "unshared")}
shared = logs["shared"]
beyond = seconds(shared, "session") - seconds(shared, "model loading") - seconds(shared, "vision encoder")
bound = seconds(logs["unshared"], "model forwards") - seconds(logs["unshared"], "vision encoder")
tokens = {mode: bench[mode]["stats"]["tokens"] for mode in bench}
result = {
    "rows": bench["shared"]["rows"], "image_tokens_per_row": bench["shared"]["image_tokens"],
    "lm_tokens": tokens, "lm_tokens_fall": round(tokens["unshared"] / tokens["shared"], 2),
    "tokens_alone": bench["shared"]["stats"]["tokens_alone"],
    "rows_per_s": {mode: bench[mode]["rows_per_s"] for mode in bench},
    "gate_beyond_load_and_vision_s": round(beyond, 1), "unshared_gate_language_model_s": round(bound, 1),
    "beyond_over_bound": round(beyond / bound, 3),
    # the same without what any run pays once whatever its rows (the interpreter, imports, writing reports)
    "beyond_over_bound_less_paid_once": round((beyond - sum(seconds(shared, k) for k in ("start-up", "imports",
                                                                                        "reports"))) / bound, 3),
    "forward_time": {mode: [line for line in logs[mode].splitlines() if line.startswith(("forward time:", "harness:"))]
                     for mode in logs},
}
(out / "prefix-sharing.json").write_text(json.dumps(result, indent=2) + "\n")
print(json.dumps(result, indent=2))
PY
exit $STATUS

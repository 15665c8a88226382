#!/usr/bin/env bash
# The scorer's device check, one command on a CUDA machine, from any directory:
#
#   OUT=/results bash scripts/gpu_check.sh          # CUDA: SmolVLM-256M-shaped model, 512 px, the gpu gate
#   OUT=/tmp/dry bash scripts/gpu_check.sh --cpu    # the same steps on the CPU, small (checks the script)
#
# Writes under $OUT: env.txt, bench-256m-<path>.json (rows/s, peak memory, encodes; bf16 batch path,
# fp32 predict, the per-option baseline), bench-256m-tiled-<path>[-unshared].json (the same model with
# SmolVLM-256M's tiling: 17 tiles per photo, the photos with their option_order, text and rephrase
# variants, with and without prefix sharing: rows/s, language-model tokens computed and tokens_alone),
# prefix-sharing/ (scripts/prefix_sharing.sh: the same comparison through the gate, its time split),
# profile-256m.{txt,trace.json,json}, prefetch-256m.json (scripts/prefetch_overlap.py: the gate on PREFETCH_ROWS
# photo rows, default 120, through the pixel families with chunks made when asked for and made ahead: wall against
# max(device time, build time), the device's idle time per chunk), gate-256m/ (the gpu invariance gate on the
# 256M-shaped model, shared_prefix_vs_alone included: reports, junit), gate-embedded/ (the gpu gate on the embedded
# checkpoint) and benchmarks-embedded.json (pytest-benchmark). Sizes: ROWS_PER_SET (gate rows per
# dataset on the 256M-shaped model, default 4), INVARIANCE_ROWS (default 2).
set -uo pipefail
cd "$(dirname "$0")/.."
: "${OUT:?set OUT to the folder the results go to}"
PY=${PYTHON:-python}
MODE=gpu
[ "${1:-}" = "--cpu" ] && MODE=cpu
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
mkdir -p "$OUT"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
STATUS=0
step() {  # step NAME MAX_OK_RC COMMAND...: run, log to $OUT/NAME.log, note an rc above MAX_OK_RC, go on
  local name=$1 ok=$2; shift 2
  echo "== $name: $*" | tee -a "$OUT/steps.txt"
  local started=$SECONDS
  "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "   rc=$rc ($((SECONDS - started)) s)" | tee -a "$OUT/steps.txt"
  [ $rc -le "$ok" ] || STATUS=1
  return 0
}

if [ "$MODE" = gpu ]; then
  DEVICE=cuda; SIZE=512; MARK=gpu; ROWS=6; EMBEDDED=(); PREFETCH_ROWS=${PREFETCH_ROWS:-120}; PREFETCH_SIZE=800x600
else  # small enough for a CPU: 64 px images, two photo rows, a slice of the embedded gate
  DEVICE=cpu; SIZE=64; MARK="not gpu"; ROWS=2; EMBEDDED=(--rows-per-set 4 --families option_order)
  PREFETCH_ROWS=${PREFETCH_ROWS:-2}; PREFETCH_SIZE=160x120
fi
ROWS_PER_SET=${ROWS_PER_SET:-4}
INVARIANCE_ROWS=${INVARIANCE_ROWS:-2}
MODEL="$WORK/smolvlm-256m-shaped"

{ nvidia-smi 2>&1 || echo "no nvidia-smi"; "$PY" -c "import torch, transformers; print('torch', torch.__version__,
'transformers', transformers.__version__, 'cuda', torch.cuda.is_available(),
torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')"; } > "$OUT/env.txt" 2>&1

# The thresholds with the one-pass condition's limits (fp32: float rounding; bf16 runs get [invariance.bf16]).
cp thresholds.toml "$WORK/thresholds.toml"
grep -q "invariance.one_pass_vs_per_option" thresholds.toml || cat >> "$WORK/thresholds.toml" <<'TOML'

[invariance.one_pass_vs_per_option]
max_abs_dp = 1e-5
max_abs_dlogit = 1e-4
max_flips = 0
TOML

step build-256m 0 "$PY" -m laya_robustness.recipes.bench build "$MODEL" --image-size "$SIZE"
for path in batch per_option predict_cached predict_uncached; do
  step "bench-256m-$path" 0 "$PY" -m laya_robustness.recipes.bench run "$MODEL" --device "$DEVICE" --path "$path" \
    --rows "$ROWS" --image-size "$SIZE" --out "$OUT/bench-256m-$path.json"
done
step profile-256m 0 "$PY" scripts/profile_scorer.py "$MODEL" --device "$DEVICE" --rows "$ROWS" --image-size "$SIZE" \
  --out "$OUT/profile-256m"
# Photos as SmolVLM-256M cuts them: images scaled to 4 x SIZE, 17 tiles each; preprocessing is the host's main cost.
# Each photo with its text-side variants shares its 1,088-token image prefix: scored with and without sharing.
step build-256m-tiled 0 "$PY" -m laya_robustness.recipes.bench build "$MODEL-tiled" --image-size "$SIZE" --split
for path in batch predict_cached; do
  for mb in 1024 0; do
    name="bench-256m-tiled-$path$([ $mb = 0 ] && echo -unshared)"
    step "$name" 0 "$PY" -m laya_robustness.recipes.bench run "$MODEL-tiled" --device "$DEVICE" --path "$path" \
      --rows "$ROWS" --image-size $((2 * SIZE)) --families option_order,text,rephrase --prefix-cache-mb $mb \
      --out "$OUT/$name.json"
  done
done
step prefix-sharing 0 env OUT="$OUT/prefix-sharing" MODEL="$MODEL-tiled" DEVICE="$DEVICE" TILE="$SIZE" \
  PHOTOS="$ROWS" PYTHON="$PY" bash scripts/prefix_sharing.sh
# The device kept busy while the next chunks' variants are made (run.pipeline.prefetch): the gate on 800 x 600 photo
# rows through rotation, scale_pad and overlay on the 256M-shaped model, chunks made when asked for against made
# ahead, in turns: wall against max(device time, build time) and the device's idle time per chunk.
step prefetch-256m 0 "$PY" scripts/prefetch_overlap.py --sections local --model "$MODEL" --device "$DEVICE" \
  --rows "$PREFETCH_ROWS" --size "$PREFETCH_SIZE" --repeat 2 --out "$OUT/prefetch-256m.json"
# The gate on the 256M-shaped model: random weights, so family limits fail (exit 1); 3 would be a broken harness.
step gate-256m 1 "$PY" -m pytest robustness_tests/test_invariance.py -m "$MARK and invariance" -p no:cacheprovider --model "$MODEL" \
  --thresholds "$WORK/thresholds.toml" --invariance-rows "$INVARIANCE_ROWS" --report-dir "$OUT/gate-256m" \
  --junitxml "$OUT/gate-256m/junit.xml" -q
step gate-256m-families 1 "$PY" -m pytest robustness_tests -m "$MARK and not invariance" -p no:cacheprovider \
  --model "$MODEL" --thresholds "$WORK/thresholds.toml" --rows-per-set "$ROWS_PER_SET" \
  --families option_order,image --deselect robustness_tests/test_summary_snapshot.py \
  --report-dir "$OUT/gate-256m-families" --junitxml "$OUT/gate-256m-families/junit.xml" -q -k "not benchmark"
# The embedded checkpoint: its whole gate on the device, then the benchmarks.
# (its snapshot is the CPU run's: on the device the batch path runs in bf16, so the snapshot test is left out)
step gate-embedded 1 "$PY" -m pytest robustness_tests -m "$MARK" -p no:cacheprovider --thresholds "$WORK/thresholds.toml" \
  "${EMBEDDED[@]}" --deselect robustness_tests/test_summary_snapshot.py --report-dir "$OUT/gate-embedded" --junitxml "$OUT/gate-embedded/junit.xml" -q -k "not benchmark"
step benchmarks-embedded 0 "$PY" -m pytest robustness_tests --benchmark-only -m "$MARK" -p no:cacheprovider \
  --benchmark-json "$OUT/benchmarks-embedded.json" -q
echo "done: status $STATUS (a gate step may end 1, a crossed limit; 3 or more is a broken harness)" | tee -a "$OUT/steps.txt"
exit $STATUS

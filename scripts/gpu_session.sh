#!/usr/bin/env bash
# The device items of issue 41 on one CUDA GPU, in one command, into one folder:
#   1. tests/test_cuda.py, with the aligned-block test of the blockwise route;
#   2. `tisa-hf env` (the routes PyTorch picks on this GPU), the step profile (operator calls, kernels and the
#      times of bias build, attention forward and backward, bias backward) in float32, bf16 and fp16, with BERT's
#      attention dropout 0.1 and without, and `tisa-hf bench` at 8 x 128 and 2 x 512 (sdpa and eager, the three
#      precisions, with memory) and replace mode at 1,024-4,096 tokens with memory;
#   3. flex attention against stored-bias SDPA and blockwise SDPA at 2,048, 8,192 and 32,768 tokens, training and
#      inference, time and memory (scripts/bench_flex.py, one process a length, so a length that runs out of
#      memory leaves the others).
# Usage: scripts/gpu_session.sh [OUT]   (default results/gpu-session-DATE); DRY_RUN=1 prints the commands only.
# Every step logs to OUT/NAME.txt and goes on after a failure; OUT/steps.txt lists each step's exit status.
# Untested on a GPU: on CPU it was checked with `bash -n` and DRY_RUN=1 only.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-results/gpu-session-$(date +%Y%m%d-%H%M)}
DRY_RUN=${DRY_RUN:-0}
mkdir -p "$OUT"

step() {  # step NAME COMMAND...: runs COMMAND into OUT/NAME.txt and records its exit status
    local name=$1
    shift
    echo "+ $*" | tee -a "$OUT/commands.txt"
    [ "$DRY_RUN" = 1 ] && return 0
    "$@" >"$OUT/$name.txt" 2>&1
    echo "$name $?" >>"$OUT/steps.txt"
}

if [ "$DRY_RUN" != 1 ] && ! python -c "import torch, sys; sys.exit(not torch.cuda.is_available())"; then
    echo "no CUDA GPU here: nothing to measure" >&2
    exit 1
fi

step test-cuda python -m pytest -q -m cuda tests/test_cuda.py
step env tisa-hf env --device cuda --lengths 128 512 2048 8192 32768
for dropout in 0.1 0.0; do
    step "profile-dropout-$dropout" tisa-hf bench --device cuda --profile --implementations sdpa eager \
        --dtypes float32 bfloat16 float16 --attention-dropout "$dropout" --output "$OUT/profile-dropout-$dropout.json"
done
step bench tisa-hf bench --device cuda --sections bias train infer --dtypes float32 bfloat16 float16 \
    --warmup 5 --repeats 20 --output "$OUT/bench-cuda.json"
step bench-dropout-0 tisa-hf bench --device cuda --sections train --dtypes float32 bfloat16 float16 \
    --attention-dropout 0.0 --warmup 5 --repeats 20 --output "$OUT/bench-cuda-dropout-0.json"
step bench-replace tisa-hf bench --device cuda --sections replace --warmup 2 --repeats 5 \
    --output "$OUT/bench-cuda-replace.json"
for length in 2048 8192 32768; do
    step "flex-$length" env PYTHONPATH=. python scripts/bench_flex.py --device cuda --lengths "$length" \
        --train-lengths "$length" --repeats 5 --json "$OUT/flex-$length.json"
done
echo "results in $OUT" >&2

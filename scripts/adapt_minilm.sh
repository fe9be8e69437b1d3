#!/usr/bin/env bash
# The adapt experiment of docs/results-adapt.md on the packaged all-MiniLM-L6-v2, offline, on CPU or one GPU:
#   1. an MLM head fitted on the frozen original model (MiniLM ships without one), for lm-eval's masked-token loss;
#   2. distillation of TISA replace S=5 into the original model on WikiText-2 validation text, 128 -> 256 -> 512
#      tokens: the kernels only, and the kernels and all weights; the bag-of-words model (replace S=0) adapted the
#      same way with all weights, the control that says whether TISA or the adaptation did the work;
#   3. the unadapted replace S=5 model (kernels fitted, no training), saved for comparison;
#   4. lm-eval of every model, the original and its position-interpolated peer on held-out WikiText-2 test text,
#      128 to 4,096 tokens;
#   5. fine-tuning of the adapted models on STS-B and MRPC with the settings of the converged GLUE runs, 3 seeds
#      (configs/sweeps/minilm-adapted-glue.yaml, into the folder of configs/sweeps/minilm-glue-converged.yaml).
#   6. embedding adaptation (--objective embed: the original model's mean-pooled embedding, its chunk-average beyond
#      512 tokens) of replace S=5 and of its S=0 control, all weights, 128 -> 256 -> 512 -> 1024 tokens; each output
#      is a sentence-transformers model reading 4,096 tokens. About 1.9 h each on 2 free cores (4 h or more on a
#      busy machine); 2,048-token blocks would take over twice as long again, and 8 of them needed more than 22 GB.
#   7. s5-span: the embedding objective plus token-state distillation and span retrieval (section 7 below).
#   8. Long-range variants of s5-all, to be paired with it at 4k-32k tokens (docs/results-longdoc.md, section 3):
#      s5-all-lscale, s5-all read with the length-aware logit scale (TisaConfig.length_scale_from = 512; no training),
#      s5-far, s5-all's recipe with the far-field term (TisaConfig.far_field = "log": a learned -r·log(1 + |k|)
#      per head and layer beside the kernels), and s5-long, s5-all's recipe with the curriculum taken on to 1,024
#      and 2,048 tokens, where the teacher's targets are its states read in overlapping 512-token windows (180 steps
#      a length). A GPU's run: on 2 CPU cores a 1,024-token step of 8 blocks takes about 60 s and 10 GB, and the
#      2,048-token stage would need about four times both.
# The recipe for long-document embeddings is s5-all (step 2): s5-embed did worse on passkey retrieval and STS-B,
# s5-span came back level with s5-all and no better, s5-long level on every retrieval task and 0.5 points higher on
# STS-B (a GPU's run); s5-all-lscale, s5-all read with the length-aware logit scale, finds more passkeys past
# 2,048 tokens and slightly fewer needles (docs/results-longdoc.md, section 3).
# Rerun after an interruption: finished steps are skipped and interrupted adaptations resume from their checkpoint.
#
#   bash scripts/adapt_minilm.sh                  # everything, into runs/adapt-minilm
#   bash scripts/adapt_minilm.sh s5-all s0-all    # only these steps (folder names, or lm-eval, glue, s5-unadapted)
#   STEPS=1500 bash scripts/adapt_minilm.sh       # a longer adaptation (default 900 steps: about an hour on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-runs/adapt-minilm}
STEPS=${STEPS:-900}
TEXT=${TEXT:-../shared/text/wikitext-2}
export HF_HUB_OFFLINE=1

ONLY=("$@")
wanted() {  # wanted STEP: true when no steps were named, or STEP was
    [[ ${#ONLY[@]} -eq 0 ]] || [[ " ${ONLY[*]} " == *" $1 "* ]]
}

adapt() {  # adapt OUTPUT_DIR ARGS...: skipped when finished or not wanted, resumed when interrupted
    local out=$1
    shift
    wanted "$(basename "$out")" || return 0
    if [[ -f $out/metrics.json ]]; then
        echo "done: $out"
        return
    fi
    local resume=()
    [[ -d $out/checkpoints ]] && resume=(--resume)
    tisa-hf adapt --model minilm --train-text "$TEXT/valid.txt" --output-dir "$out" "$@" "${resume[@]}"
}

# --embedding-max-length: the sentence-transformers folder each writes reads 4,096 tokens (default: 512, the longest
# length trained on); the model itself is the same.
distill=(--objective distill --tisa.mode replace --lengths 128 256 512 --max-steps "$STEPS" --train-batch-size 8
    --embedding-max-length 4096)
adapt "$RUNS/mlm-head" --objective mlm --train head --lengths 128 --max-steps 1000 --train-batch-size 8 --learning-rate 1e-3
adapt "$RUNS/s5-kernels" "${distill[@]}" --tisa.num_kernels 5 --train kernels
adapt "$RUNS/s5-all" "${distill[@]}" --tisa.num_kernels 5 --train all
adapt "$RUNS/s0-all" "${distill[@]}" --tisa.num_kernels 0 --train all

if wanted s5-unadapted && [[ ! -f $RUNS/s5-unadapted/config.json ]]; then
    python - "$RUNS/s5-unadapted" <<'PY'
import sys

from transformers import AutoModel, AutoTokenizer

import tisa_hf

path = tisa_hf.minilm_path()
model = AutoModel.from_pretrained(path, tisa=tisa_hf.TisaConfig(num_kernels=5, mode="replace"))
model.save_pretrained(sys.argv[1])
AutoTokenizer.from_pretrained(path).save_pretrained(sys.argv[1])
PY
fi

if wanted lm-eval && [[ ! -f $RUNS/lm-eval/lm_eval.json ]]; then
    tisa-hf lm-eval minilm interp:minilm "$RUNS/s5-unadapted" "$RUNS/s5-kernels" "$RUNS/s5-all" "$RUNS/s0-all" \
        --teacher minilm --mlm-head "$RUNS/mlm-head" --text "$TEXT/test.txt" --lengths 128 512 1024 2048 4096 \
        --paired interp:minilm "$RUNS/s0-all" --out "$RUNS/lm-eval"
fi

if wanted glue; then
    tisa-hf sweep --config configs/sweeps/minilm-adapted-glue.yaml
fi

embed=(--objective embed --tisa.mode replace --train all --lengths 128 256 512 1024 --max-steps "$STEPS"
    --train-batch-size 8 --gradient-accumulation-steps 2 --embedding-max-length 4096)
adapt "$RUNS/s5-embed" "${embed[@]}" --tisa.num_kernels 5
adapt "$RUNS/s0-embed" "${embed[@]}" --tisa.num_kernels 0
# 7. the embedding objective with the token-state distillation kept on the blocks the teacher reads whole and span
#    retrieval added (a 32-token span of each block must find its block among the micro-batch's 4): s5-embed alone
#    drifted from the original on short texts (zero-shot STS-B -2.1, against -0.9 distilled), and chunk-average
#    targets teach nothing about finding a passage inside a long block.
adapt "$RUNS/s5-span" "${embed[@]}" --tisa.num_kernels 5 --embed-token-weight 1 --embed-span-weight 0.1

# 8. Long-range variants of s5-all.
adapt "$RUNS/s5-far" "${distill[@]}" --tisa.num_kernels 5 --tisa.far_field log --train all
adapt "$RUNS/s5-long" "${distill[@]}" --tisa.num_kernels 5 --train all --lengths 128 256 512 1024 2048
if wanted s5-all-lscale && [[ -f $RUNS/s5-all/metrics.json && ! -f $RUNS/s5-all-lscale/modules.json ]]; then
    python - "$RUNS/s5-all" "$RUNS/s5-all-lscale" <<'PY'
import sys

from transformers import AutoModel, AutoTokenizer

import tisa_hf
from tisa_hf.embeddings import write_sentence_transformer

source, target = sys.argv[1:]
saved = AutoModel.from_pretrained(source).config.tisa.to_dict()
model = AutoModel.from_pretrained(source, tisa={**saved, "length_scale_from": 512})
write_sentence_transformer(model, AutoTokenizer.from_pretrained(source), target, base=source, max_seq_length=32768)
PY
fi

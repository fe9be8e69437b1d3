#!/usr/bin/env bash
# Training that makes whole-document context pay (docs/results-longdoc.md, "Making context pay"), offline, on CPU or
# one GPU, from the adapted replace-mode MiniLM (BASE, default runs/adapt-minilm/s5-all):
#   train   the variants of `tisa-hf context-train` on WikiText-2's valid.txt (the adaptation's text; test.txt is
#           held out for the development task): titled (queries of the title, heading and window words, in-sequence
#           and in-batch negatives), plain (the window's words alone: InSeNT without the title), titled-anchor
#           (titled, with the windows read apart kept at BASE's embeddings, for STS-B), titled-sequence (titled,
#           in-sequence negatives only) and titled-long (titled, on documents of 2,048 tokens, 2 a step: a window
#           among about 16 of its document rather than 3, nearer a meeting's length);
#   dev     `tisa-hf context-passages` on test.txt at every W of DEV_WINDOWS (default 256, the W the choice reads; add
#           128 with DEV_WINDOWS="256 128"): BM25, minilm read apart and whole, BASE and every variant, each with its
#           late: read-out, paired to chunk:minilm, BASE and titled (the recipe the others vary), each with both
#           read-outs;
#   sts     `tisa-hf sts` of minilm, BASE and every variant (zero-shot STS-B dev, Spearman), paired to minilm;
#   choose  the variant with the best nDCG@10 across articles at W = 256 among those within 1 point of minilm's
#           STS-B Spearman (the best on the development task alone if none is), written to MEASURED/chosen.json; QMSum
#           plays no part;
#   qmsum   the chosen variant's QMSum passage cells at every W of WINDOWS, as scripts/qmsum_passages.sh's context
#           stage measures every whole read (its windows pooled from each meeting's whole read, its late: read-out
#           and their hybrids with BM25, paired to BM25 and the windows read apart), into that script's records,
#           and every system there paired to BASE with both read-outs.
# Every stage resumes: a finished training (its context_train.json) is skipped and an interrupted one resumes from its
# checkpoint; the evaluations measure only the systems their records lack, and keep each model's whole reads
# (--token-states) so that its late: read-out and the other W read nothing again.
#
#   bash scripts/context_train.sh                       # every stage
#   bash scripts/context_train.sh train dev             # only these stages
#   SMOKE=1 RUNS=/tmp/context-smoke bash scripts/context_train.sh   # a few steps on a few articles, every stage
set -euo pipefail
cd "$(dirname "$0")/.."

BASE=${BASE:-runs/adapt-minilm/s5-all}
RUNS=${RUNS:-runs/context-minilm}
TEXT=${TEXT:-../shared/text/wikitext-2}
STS_DATA=${STS_DATA:-../shared/glue/STS-B/dev.tsv}
RECORDS=${RECORDS:-docs/results/longdoc/qmsum-passages-minilm}
MEASURED=${MEASURED:-docs/results/longdoc/context-minilm}  # the dev, STS-B and choice records (committed)
WORK=${WORK:-runs/longdoc/context-minilm}  # the dev task's window embeddings and scores (what a rerun rebuilds)
PASSAGES_WORK=${PASSAGES_WORK:-runs/longdoc/qmsum-passages-minilm}  # QMSum's, as in qmsum_passages.sh
TOKEN_STATES=${TOKEN_STATES:-runs/qmsum-token-states}  # the meetings' whole reads, shared with qmsum_passages.sh
STEPS=${STEPS:-300}
read -ra windows <<<"${WINDOWS:-128 256 512}"
read -ra dev_windows <<<"${DEV_WINDOWS:-256}"
VARIANTS=(titled titled-long plain titled-anchor titled-sequence)
export HF_HUB_OFFLINE=1

train_limits=() dev_limits=() meetings=
if [[ -n ${SMOKE:-} ]]; then  # every stage on a sliver: 2 training articles, 3 steps, 4 test articles, 2 meetings
    STEPS=3 train_limits=(--articles 2 --checkpoint-steps 2) dev_limits=(--articles 4) meetings=2
    RECORDS=$RUNS/qmsum-passages MEASURED=$RUNS/measured TOKEN_STATES=$RUNS/qmsum-token-states windows=(256)
    WORK=$RUNS/work/measured PASSAGES_WORK=$RUNS/work/qmsum-passages
    mkdir -p "$RUNS" && head -n 41 "$STS_DATA" >"$RUNS/sts-smoke.tsv" && STS_DATA=$RUNS/sts-smoke.tsv
fi

variant_options() {  # variant_options NAME: its tisa-hf context-train options
    case $1 in
        titled) echo "--queries titled" ;;
        plain) echo "--queries plain" ;;
        titled-anchor) echo "--queries titled --anchor" ;;
        titled-sequence) echo "--queries titled --negatives in-sequence" ;;
        titled-long) echo "--queries titled --document-tokens 2048 --train-batch-size 2" ;;
    esac
}

stage_train() {
    local name options
    for name in "${VARIANTS[@]}"; do
        if [[ -f $RUNS/$name/context_train.json ]]; then
            echo "done: $RUNS/$name"
            continue
        fi
        read -ra options <<<"$(variant_options "$name")"
        tisa-hf context-train --model "$BASE" --output-dir "$RUNS/$name" --train-text "$TEXT/valid.txt" \
            --max-steps "$STEPS" "${options[@]}" "${train_limits[@]}"
    done
}

trained() {  # the trained variants' folders, one a line
    local name
    for name in "${VARIANTS[@]}"; do [[ -f $RUNS/$name/context_train.json ]] && echo "$RUNS/$name"; done
    return 0
}

stage_dev() {
    local window models systems=(bm25 chunk:minilm late:chunk:minilm interp:minilm late:interp:minilm) model
    local references=(chunk:minilm late:chunk:minilm "$BASE" "late:$BASE") recipe=$RUNS/${VARIANTS[0]}
    mapfile -t models < <(trained)
    for model in "$BASE" "${models[@]}"; do systems+=("$model" "late:$model"); done
    [[ -f $recipe/context_train.json ]] && references+=("$recipe" "late:$recipe")
    for window in "${dev_windows[@]}"; do
        tisa-hf context-passages "${systems[@]}" --paired "${references[@]}" \
            --data "$TEXT/test.txt" --window-tokens "$window" --out "$MEASURED/dev/w$window" "${dev_limits[@]}" \
            --work "$WORK/dev/w$window" --token-states "$RUNS/token-states"
    done
}

stage_sts() {
    local models
    mapfile -t models < <(trained)
    tisa-hf sts minilm "$BASE" "${models[@]}" --paired minilm --data "$STS_DATA" --out "$MEASURED/sts"
}

stage_choose() {
    python - "$MEASURED" "$RUNS" <<'PY'
import json
import sys
from pathlib import Path

measured, runs = Path(sys.argv[1]), sys.argv[2]
dev = json.loads((measured / "dev/w256/context-passages.json").read_text())["results"]
sts = json.loads((measured / "sts/sts.json").read_text())["results"]
variants = [name for name in dev if name.startswith(runs) and name in sts]
if not variants:
    sys.exit("context_train.sh choose: no trained variant is measured on both the dev task and STS-B; run dev and sts.")
kept = [name for name in variants if sts[name]["spearman"] >= sts["minilm"]["spearman"] - 1.0]  # x100
chosen = max(kept or variants, key=lambda name: dev[name]["across"]["ndcg_at_10"])
choice = {
    "chosen": chosen,
    "within_one_sts_b_point": chosen in kept,
    "dev_ndcg_at_10_across_w256": {name: dev[name]["across"]["ndcg_at_10"] for name in variants},
    "sts_b_spearman": {name: sts[name]["spearman"] for name in ["minilm", *variants]},
}
(measured / "chosen.json").write_text(json.dumps(choice, indent=2) + "\n")
print(f"chosen: {chosen}" + ("" if chosen in kept else " (no variant is within 1 point of minilm on STS-B)"))
PY
}

stage_qmsum() {  # the chosen variant as one more whole read of scripts/qmsum_passages.sh's context stage
    local chosen
    chosen=$(python -c "import json, sys; print(json.load(open(sys.argv[1]))['chosen'])" "$MEASURED/chosen.json")
    READS=$chosen WINDOWS="${windows[*]}" RECORDS=$RECORDS WORK=$PASSAGES_WORK TOKEN_STATES=$TOKEN_STATES \
        MEETINGS=$meetings bash scripts/qmsum_passages.sh context
    for window in "${windows[@]}"; do  # and every system paired to BASE too: what the training changed on QMSum
        tisa-hf qmsum-passages "$BASE" "late:$BASE" "$chosen" "late:$chosen" --paired "$BASE" "late:$BASE" \
            --data "${QMSUM:-../shared/longdoc/qmsum}" --window-tokens "$window" --out "$RECORDS/w$window" --work "$PASSAGES_WORK/w$window" \
            ${meetings:+--meetings "$meetings"} --token-states "$TOKEN_STATES"
    done
}

stages=("$@")
[[ ${#stages[@]} -gt 0 ]] || stages=(train dev sts choose qmsum)
for stage in "${stages[@]}"; do
    case $stage in
        train | dev | sts | choose | qmsum) "stage_$stage" ;;
        *)
            echo "context_train.sh: unknown stage $stage; give train, dev, sts, choose or qmsum." >&2
            exit 2
            ;;
    esac
done

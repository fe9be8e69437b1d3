#!/usr/bin/env bash
# The long-document experiments of docs/results-longdoc.md on the packaged all-MiniLM-L6-v2, offline, on CPU or one
# GPU, after the adapted models of scripts/adapt_minilm.sh exist (run that first: its steps 2 and 6 make them):
#   1. retrieval past 512 tokens (`tisa-hf longembed`, LongEmbed's passkey and needle tasks), every system on the
#      same documents: the original model truncated at its table, chunk-and-average, position interpolation,
#      unadapted replace S=5, the adapted replace S=5 models and their S=0 controls; paired intervals to the three
#      baselines;
#   2. long-document classification on Hyperpartisan (`tisa-hf classify`, 5 folds): the learning-rate grid on
#      fold 0, then the comparison, fold by fold, so that a partial grid is balanced.
# Every step resumes: finished cells and runs are skipped, interrupted ones continue.
#
#   bash scripts/longdoc_minilm.sh                 # everything, into runs/
#   LENGTHS="256 512 1024" bash scripts/longdoc_minilm.sh   # a shorter retrieval sweep
set -euo pipefail
cd "$(dirname "$0")/.."

ADAPTED=${ADAPTED:-runs/adapt-minilm}
LENGTHS=${LENGTHS:-256 512 1024 2048 4096 8192}
export HF_HUB_OFFLINE=1

# shellcheck disable=SC2086  # LENGTHS is a list
tisa-hf longembed trunc:minilm chunk:minilm interp:minilm tisa:replace:5:minilm \
    "$ADAPTED/s5-all" "$ADAPTED/s0-all" "$ADAPTED/s5-embed" "$ADAPTED/s0-embed" \
    --lengths $LENGTHS --paired trunc:minilm chunk:minilm interp:minilm --out runs/longembed-minilm

tisa-hf sweep --config configs/sweeps/hyperpartisan-minilm-lr.yaml
tisa-hf sweep --config configs/sweeps/hyperpartisan-minilm.yaml

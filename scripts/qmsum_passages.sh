#!/usr/bin/env bash
# QMSum's query-based passages (docs/results-longdoc.md, section 2d; `tisa-hf qmsum-passages`) on the packaged
# all-MiniLM-L6-v2, offline, on CPU or one GPU: each specific query finds its windows of W tokens within its own
# meeting and across all 197, one record folder a W under docs/results/longdoc/qmsum-passages-minilm/wW.
# Stages, cheapest first, each over every W of WINDOWS (default "128 256 512"):
#   bm25      BM25 over the windows' text (under a minute a W);
#   chunk     chunk:minilm, each window read apart, and its hybrid with BM25 (tens of minutes a W on 2 CPU cores);
#   late      late:chunk:minilm, MaxSim against each window's token vectors read apart, and its hybrid;
#   context   late chunking: the whole-read models of READS (default: the adapted s5-all and s5-long that exist in
#             ADAPTED, and interp:minilm), each meeting read whole and each window pooled from its token states,
#             their late: read-outs (each window's part of the whole read) and their hybrids, paired to BM25 and
#             to chunking's. Each model reads each meeting once for every read-out and W: its whole reads are kept
#             in TOKEN_STATES (about 3.8 GB a model), so the first W costs about 35 minutes a model on 2 CPU cores
#             and the others minutes (a GPU's work);
#   apart     the adapted models' windows read apart (chunk:, and its late:), paired to their whole reads: the same
#             weights with and without the meeting around a window (about an hour a model and W on 2 CPU cores).
# A stage's call repeats the systems it pairs to, which a finished record skips (a rerun of a finished stage
# computes nothing), and a record keeps every reference it was paired to. MEETINGS=N reads the first N meetings only
# (a smoke run). The window embeddings and scores (about 220 MB a system and setting at W = 128) go to WORK/wW
# (`--work`; WORK defaults to runs/longdoc/qmsum-passages-minilm): an interrupted model system resumes at its next
# meeting on the machine that ran it; elsewhere it is measured again.
#
#   bash scripts/qmsum_passages.sh                      # every stage
#   WINDOWS="128" bash scripts/qmsum_passages.sh bm25 chunk
#   READS="runs/context-minilm/titled" bash scripts/qmsum_passages.sh context   # one more whole-read model
set -euo pipefail
cd "$(dirname "$0")/.."

ADAPTED=${ADAPTED:-runs/adapt-minilm}
RECORDS=${RECORDS:-docs/results/longdoc/qmsum-passages-minilm}
WORK=${WORK:-runs/longdoc/qmsum-passages-minilm}
TOKEN_STATES=${TOKEN_STATES:-runs/qmsum-token-states}
read -ra windows <<<"${WINDOWS:-128 256 512}"
export HF_HUB_OFFLINE=1

passages() {  # passages SYSTEM... [--paired REF...]: every W of WINDOWS, into $RECORDS/wW (kept rows in $WORK/wW)
    local window
    for window in "${windows[@]}"; do
        tisa-hf qmsum-passages "$@" --data "${QMSUM:-../shared/longdoc/qmsum}" --window-tokens "$window" --out "$RECORDS/w$window" --work "$WORK/w$window" \
            ${MEETINGS:+--meetings "$MEETINGS"}
    done
}

whole_reads() {  # READS, or the whole-read systems that exist, one a line; the missing adapted ones on stderr
    local name
    if [[ -n ${READS:-} ]]; then
        tr ' ' '\n' <<<"$READS"
        return
    fi
    for name in s5-all s5-long; do
        if [[ -f $ADAPTED/$name/metrics.json || -f $ADAPTED/$name/modules.json ]]; then
            echo "$ADAPTED/$name"
        else
            echo "not adapted yet (scripts/adapt_minilm.sh $name): $ADAPTED/$name" >&2
        fi
    done
    echo interp:minilm
}

stage_bm25() { passages bm25; }
stage_chunk() { passages bm25 chunk:minilm hybrid:bm25+chunk:minilm --paired bm25 chunk:minilm; }
stage_late() {
    passages bm25 chunk:minilm late:chunk:minilm hybrid:bm25+late:chunk:minilm \
        --paired bm25 chunk:minilm late:chunk:minilm
}
# What every whole read is paired to: BM25 and the windows read apart, each read-out alone and fused with BM25.
references=(bm25 chunk:minilm late:chunk:minilm hybrid:bm25+chunk:minilm hybrid:bm25+late:chunk:minilm)
stage_context() {  # a model at a time, every W: its first W reads the meetings, the others reuse the reads
    local reads read
    mapfile -t reads < <(whole_reads)
    for read in "${reads[@]}"; do
        passages "${references[@]}" "$read" "late:$read" "hybrid:bm25+$read" "hybrid:bm25+late:$read" \
            --paired "${references[@]}" --token-states "$TOKEN_STATES"
    done
}
stage_apart() {  # the adapted models' own windows read apart: the same weights without the meeting around them
    local reads read
    mapfile -t reads < <(whole_reads)
    for read in "${reads[@]}"; do
        [[ $read == interp:* ]] && continue
        passages "${references[@]}" "chunk:$read" "late:chunk:$read" "$read" "late:$read" \
            --paired "${references[@]}" "chunk:$read" "late:chunk:$read" --token-states "$TOKEN_STATES"
    done
}

stages=("$@")
[[ ${#stages[@]} -gt 0 ]] || stages=(bm25 chunk late context apart)
for stage in "${stages[@]}"; do
    case $stage in
        bm25 | chunk | late | context | apart) "stage_$stage" ;;
        *)
            echo "qmsum_passages.sh: unknown stage $stage; give bm25, chunk, late, context or apart." >&2
            exit 2
            ;;
    esac
done

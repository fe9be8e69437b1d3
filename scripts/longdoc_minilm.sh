#!/usr/bin/env bash
# The long-document experiments of docs/results-longdoc.md on the packaged all-MiniLM-L6-v2, offline, on CPU or one
# GPU. The adapted models come from scripts/adapt_minilm.sh (`adapt`, the first stage here, makes those it needs);
# the other stages use the adapted models that exist and say which are still missing, so each can start early and
# be rerun to add them:
#   adapt     the replace S=5 model and its bag-of-words S=0 control, distilled on token states, and the replace
#             S=5 model adapted on the pooled embedding, alone and with span retrieval
#             (`adapt_minilm.sh s5-all s0-all s5-embed s5-span`);
#   embed     zero-shot STS-B of the original and every adapted model (`tisa-hf sts`, a minute or two each; a
#             rerun scores only the models its sts.json lacks), paired to the original and to the distilled S=5
#             model (the recipe each variant is weighed against), then
#             retrieval past 512 tokens (`tisa-hf longembed`, LongEmbed's passkey and needle tasks), every system
#             on the same documents: the original truncated at its table, chunk-and-average, position
#             interpolation, the adapted models and unadapted replace S=5, BM25 and BM25 fused with the
#             adapted S=5 model; 256 to 4,096 tokens with 100
#             documents and 50 queries a length, and the late: read-out (one vector a token, MaxSim) of
#             chunking and of the adapted S=5 model; paired intervals to the three baselines, chunking's late:
#             read-out, the bag-of-words control and the distilled S=5 model (about 25 minutes a TISA model on 2
#             CPU cores);
#   embed-8192  the same at 8,192 tokens with 50 documents and 25 queries (a TISA model reads such a document
#             in about 20 s on 2 CPU cores: about 40 minutes a TISA model);
#   classify  Hyperpartisan (configs/sweeps/hyperpartisan-minilm.yaml): every ready variant on fold 0, the rate of
#             each configuration chosen on fold 0's dev split (scripts/choose_rates.py), then the chosen
#             variants on every fold, fold by fold, so that a partial grid is balanced;
#   report    the Hyperpartisan tables of the chosen rates (`tisa-hf report`, cross-validated and per fold), paired
#             to each 512-token baseline, interpolation and the bag-of-words control, into
#             runs/hyperpartisan-minilm/report-paired-{head,head-tail,interp,s0}.{md,json}:
#             derived from the finished runs, rewritten on every call (a partial grid says how many folds it has).
# For one GPU (each a few minutes to tens of minutes there; hours to days on 2 CPU cores):
#   classify-2048  the same comparison at 2,048 tokens with three seeds (configs/sweeps/hyperpartisan-minilm-2048.yaml,
#             bf16); WORKERS=5 runs five sweeps at once sharing the device (the rate grid split between them by
#             variant, then the folds; `classify` takes WORKERS too);
#   report-2048  its tables, as `report` (REPORT_SEEDS="1" limits a report to the seeds every run has finished);
#   embed-32k  retrieval at 16,384 and 32,768 tokens, 50 documents and 25 queries a length (on an H200: about 35 s
#             a TISA model at 16,384 and 130 s at 32,768, through the blockwise route's GPU blocks).
# Real long documents (hours on 2 CPU cores; a system resumes at its next document):
#   qmsum     LongEmbed's QMSum retrieval (`tisa-hf qmsum`, 197 meetings of 1.5k-37k tokens, 1,527 summaries):
#             BM25, the three baselines, the adapted replace S=5 model, its bag-of-words control, s5-long and
#             s5-all-lscale (those that exist), the max: read-out of chunking, of the S=5 model (chosen on
#             spans) and of s5-long, the late: read-out of chunking and of the S=5 model, and BM25 fused with
#             each dense system; paired to BM25, to each baseline, to max:chunk:minilm, late:chunk:minilm and
#             s5-all, into docs/results/longdoc/qmsum-minilm: the records (committed as systems finish), with
#             every system's document embeddings (kept after each meeting) and scores, about 3 MB a system, in
#             WORK/qmsum-minilm, where an interrupted system resumes at its next meeting;
#   spans     the development task of long reading (`tisa-hf spans`: 183 passages of WikiText-2 test articles find
#             their article among 61), the same systems as qmsum and the long-range variants that exist
#             (s5-far, s5-long, s5-all-lscale), each also with the max: read-out (one vector a window; chunking and
#             interpolation too), chunking and s5-all also with the late: read-out (one vector a token, ColBERT's
#             MaxSim), into docs/results/longdoc/spans-minilm (embeddings and scores in WORK/spans-minilm);
#             variants are chosen here and on passkey/needle, never on QMSum.
# Every step resumes: finished cells and runs are skipped, interrupted ones continue.
# Every embedding record goes to docs/results/longdoc (sts-minilm; longembed-minilm, -8192 and -32k: passkey and
# needle; qmsum-minilm; spans-minilm), so that a rerun on any machine resumes it; STS_RECORDS, LONGEMBED_RECORDS (the
# folder of the three passkey and needle records), QMSUM_RECORDS and SPANS_RECORDS move them. What a rerun rebuilds
# (document embeddings, scores: `--work`) goes to WORK (default runs/longdoc), a folder a record folder's name; a
# record's finished systems need none of it, and a hybrid added later to a record whose parts' scores are not there
# measures those parts again.
#
#   bash scripts/longdoc_minilm.sh                  # every stage of the page (GPU ones too), into runs/
#   bash scripts/longdoc_minilm.sh adapt embed      # some stages, in the order given
set -euo pipefail
cd "$(dirname "$0")/.."

ADAPTED=${ADAPTED:-runs/adapt-minilm}
HYPERPARTISAN=configs/sweeps/hyperpartisan-minilm.yaml
HYPERPARTISAN_2048=configs/sweeps/hyperpartisan-minilm-2048.yaml
WORKERS=${WORKERS:-1}
BASELINES=(trunc:minilm chunk:minilm interp:minilm)
QMSUM_RECORDS=${QMSUM_RECORDS:-docs/results/longdoc/qmsum-minilm}
SPANS_RECORDS=${SPANS_RECORDS:-docs/results/longdoc/spans-minilm}
STS_RECORDS=${STS_RECORDS:-docs/results/longdoc/sts-minilm}
LONGEMBED_RECORDS=${LONGEMBED_RECORDS:-docs/results/longdoc}
WORK=${WORK:-runs/longdoc}
SHARED=${SHARED:-../shared}  # the recorded runs' data: WikiText-2 test.txt, GLUE's STS-B dev.tsv, QMSum's meetings
declare -A DATA_OPTIONS=(  # each command's data, passed explicitly (the commands' defaults read the Hub)
    [longembed]="--text $SHARED/text/wikitext-2/test.txt" [sts]="--data $SHARED/glue/STS-B/dev.tsv"
    [qmsum]="--data $SHARED/longdoc/qmsum" [spans]="--data $SHARED/text/wikitext-2/test.txt"
)
export HF_HUB_OFFLINE=1

adapted_models() {  # the finished adapted models (and s5-all-lscale, which is s5-all read another way), one a line;
    # the missing ones named on stderr
    for name in s5-all s0-all s5-embed s5-span s0-embed s5-far s5-long s5-all-lscale; do
        if [[ -f $ADAPTED/$name/metrics.json || -f $ADAPTED/$name/modules.json ]]; then
            echo "$ADAPTED/$name"
        else
            echo "not adapted yet (scripts/adapt_minilm.sh $name): $ADAPTED/$name" >&2
        fi
    done
}

adapted_has() {  # adapted_has NAME: whether the caller's `adapted` list holds $ADAPTED/NAME
    [[ " ${adapted[*]} " == *" $ADAPTED/$1 "* ]]
}

ready_variants() {  # ready_variants SWEEP: its variants whose model is there (the packaged one, or a finished
    # adapted folder)
    python - "$1" <<'PY'
import sys
from pathlib import Path

import yaml

sweep = yaml.safe_load(Path(sys.argv[1]).read_text())
for name, settings in sweep["variants"].items():
    model = (settings or {}).get("model")
    if model is None or (Path(model) / "metrics.json").is_file():
        print(name)
    else:
        print(f"waiting for {model}: {name}", file=sys.stderr)
PY
}

stage_adapt() {
    bash scripts/adapt_minilm.sh s5-all s0-all s5-embed s5-span
}

fusable() {  # fusable OUT WORK SYSTEM: whether WORK keeps SYSTEM's scores, or the record in OUT holds none of its
    # cells
    python -c 'import json, sys
from pathlib import Path
from tisa_hf.common.result_files import scores_path
out, work, system = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
record = out / "longembed.json"
measured = record.is_file() and system in json.loads(record.read_text())["results"]
sys.exit(0 if not measured or scores_path(work, system, "").parent.is_dir() else 1)' "$1" "$2" "$3"
}

retrieval() {  # retrieval NAME LONGEMBED_OPTIONS...: into $LONGEMBED_RECORDS/NAME (its scores in $WORK/NAME), the
    # baselines and the models in `adapted`, on the same documents, then BM25, and BM25 fused with the adapted S=5
    # model where its scores are kept or the record has none of its cells yet (its cells would be measured again),
    # then the late: read-out (chosen on the development task) of chunking and of the adapted S=5 model; paired to each
    # baseline, to chunking's late: read-out, to the bag-of-words control (does order help, not just length?) and
    # to the distilled S=5 model (the recipe every variant is weighed against), those adapted
    local out=$LONGEMBED_RECORDS/$1 work=$WORK/$1
    shift
    local systems=("${BASELINES[@]}" "${adapted[@]}" tisa:replace:5:minilm bm25)  # run in this order
    if adapted_has s5-all && fusable "$out" "$work" "$ADAPTED/s5-all"; then
        systems+=("hybrid:bm25+$ADAPTED/s5-all")
    fi
    systems+=(late:chunk:minilm)
    adapted_has s5-all && systems+=("late:$ADAPTED/s5-all")
    local references=("${BASELINES[@]}" late:chunk:minilm)
    adapted_has s0-all && references+=("$ADAPTED/s0-all")
    adapted_has s5-all && references+=("$ADAPTED/s5-all")
    # shellcheck disable=SC2086  # the options split into words
    tisa-hf longembed "$@" ${DATA_OPTIONS[longembed]} --out "$out" --work "$work" "${systems[@]}" --paired "${references[@]}"
}

stage_embed() {
    local adapted sts_references=(minilm)
    mapfile -t adapted < <(adapted_models)
    adapted_has s5-all && sts_references+=("$ADAPTED/s5-all")
    # shellcheck disable=SC2086
    tisa-hf sts minilm tisa:replace:5:minilm "${adapted[@]}" ${DATA_OPTIONS[sts]} --out "$STS_RECORDS" --paired "${sts_references[@]}"
    retrieval longembed-minilm --lengths 256 512 1024 2048 4096
}

stage_embed_8192() {
    local adapted
    mapfile -t adapted < <(adapted_models)
    retrieval longembed-minilm-8192 --lengths 8192 --documents 50 --queries 25
}

sweep_setting() {  # sweep_setting SWEEP KEY: the sweep file's KEY, a list as its items on one line
    python -c 'import sys, yaml
value = yaml.safe_load(open(sys.argv[1]))[sys.argv[2]]
print(*value) if isinstance(value, list) else print(value)' "$1" "$2"
}

sweep_parts() {  # sweep_parts SWEEP OPTION "ITEM..." ARG...: `tisa-hf sweep --config SWEEP ARG...` over the items
    # split round-robin into WORKERS processes at once (each run is its own folder and lock), each given its part
    # as `OPTION ITEM...`; fails if any of them failed
    local sweep=$1 option=$2 items worker i failed=0 pids=()
    read -ra items <<<"$3"
    shift 3
    for ((worker = 0; worker < WORKERS && worker < ${#items[@]}; worker++)); do
        local part=()
        for ((i = worker; i < ${#items[@]}; i += WORKERS)); do part+=("${items[i]}"); done
        tisa-hf sweep --config "$sweep" "$@" "$option" "${part[@]}" &
        pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
    ((failed == 0))
}

classify() {  # classify SWEEP: every ready variant on fold 0 with the first seed (split by variant), the rate of
    # each configuration chosen on fold 0's dev split, then the chosen variants on every fold and seed (split by
    # fold; each sweep goes seed by seed, so a stopped grid holds whole seeds)
    local ready chosen seeds folds
    mapfile -t ready < <(ready_variants "$1")
    read -ra seeds < <(sweep_setting "$1" seeds)
    sweep_parts "$1" --variants "${ready[*]}" --folds 0 --seeds "${seeds[0]}"
    read -ra chosen < <(python scripts/choose_rates.py "$1" --fold 0)
    folds=$(sweep_setting "$1" folds)
    sweep_parts "$1" --folds "$folds" --variants "${chosen[@]}"
}

stage_classify() { classify "$HYPERPARTISAN"; }
stage_classify_2048() { classify "$HYPERPARTISAN_2048"; }

report() {  # report SWEEP LENGTH: its tables at the chosen rates, paired to each 512-token baseline, to position
    # interpolation to LENGTH and to the adapted bag-of-words control, into OUTPUT_DIR/report-paired-NAME.{md,json}
    local chosen out seeds=() reference name
    out=$(sweep_setting "$1" output_dir)
    read -ra chosen < <(python scripts/choose_rates.py "$1" --fold 0 --folders)
    [[ -n ${REPORT_SEEDS:-} ]] && read -ra seeds <<<"--seeds $REPORT_SEEDS"
    # NAME:VARIANT PREFIX:ROW, each paired to once its configuration has a chosen rate
    for reference in "head:head-512-:baseline, head 512" "head-tail:head-tail-512-:baseline, head+tail 512" \
        "interp:interp-:baseline, interpolated $2" \
        "s0:s0-bag-of-words-:S=0 (bag of words), adapted (distill, trained: all), head $2"; do
        IFS=: read -r name prefix row <<<"$reference"
        [[ " ${chosen[*]} " == *"/$prefix"* ]] || continue
        tisa-hf report "${chosen[@]}" "${seeds[@]}" --paired "$row" \
            --out "$out/report-paired-$name.md" --json "$out/report-paired-$name.json"
    done
}

stage_report() { report "$HYPERPARTISAN" 1024; }
stage_report_2048() { report "$HYPERPARTISAN_2048" 2048; }

stage_embed_32k() {
    local adapted
    mapfile -t adapted < <(adapted_models)
    retrieval longembed-minilm-32k --lengths 16384 32768 --documents 50 --queries 25
}

corpus_retrieval() {  # corpus_retrieval COMMAND OUT "MAX..." "LATE..." VARIANT...: BM25, the baselines, the adapted
    # s5-all and s0-all and the named variants that exist, and BM25 fused with each dense system, paired to BM25,
    # each baseline and the adapted s5-all (the recipe every variant and read-out is weighed against); MAX lists the
    # systems also read with the max: read-out (one vector a window), LATE those also read with the late: read-out
    # (one vector a token, MaxSim): baselines as spelled, adapted models by name, `adapted` for all of them; paired
    # to max:chunk:minilm and late:chunk:minilm too when they are ones
    local command=$1 out=$2 adapted dense=("${BASELINES[@]}") system hybrids=() wanted=(s5-all s0-all) windows=()
    local references=(bm25 "${BASELINES[@]}") max late tokens=()
    read -ra max <<<"$3"
    read -ra late <<<"$4"
    shift 4
    wanted+=("$@")
    for system in "${BASELINES[@]}"; do
        [[ " ${max[*]} " == *" $system "* ]] && windows+=("$system")
        [[ " ${late[*]} " == *" $system "* ]] && tokens+=("$system")
    done
    [[ " ${windows[*]} " == *" chunk:minilm "* ]] && references+=(max:chunk:minilm)
    [[ " ${tokens[*]} " == *" chunk:minilm "* ]] && references+=(late:chunk:minilm)
    mapfile -t adapted < <(adapted_models)
    for system in "${adapted[@]}"; do
        if [[ " ${wanted[*]} " == *" $(basename "$system") "* ]]; then
            dense+=("$system")
            [[ " ${max[*]} " =~ " "(adapted|$(basename "$system"))" " ]] && windows+=("$system")
            [[ " ${late[*]} " =~ " "(adapted|$(basename "$system"))" " ]] && tokens+=("$system")
        fi
    done
    [[ " ${dense[*]} " == *" $ADAPTED/s5-all "* ]] && references+=("$ADAPTED/s5-all")
    for system in "${windows[@]}"; do dense+=("max:$system"); done
    for system in "${tokens[@]}"; do dense+=("late:$system"); done
    for system in "${dense[@]}"; do hybrids+=("hybrid:bm25+$system"); done
    # shellcheck disable=SC2086
    tisa-hf "$command" bm25 "${dense[@]}" "${hybrids[@]}" ${DATA_OPTIONS[$command]} --out "$out" --work "$WORK/$(basename "$out")" \
        --paired "${references[@]}"
}

# QMSum reads the systems the development task and passkey/needle chose: the max: and late: read-outs of chunking
# and of the adapted s5-all, and s5-all read with the length-aware logit scale; and s5-long, the remedy named in
# advance for the whole-meeting context penalty that max:s5-all showed there, read whole and with the max: read-out
# (which tells whether its windows read better than s5-all's). A late: system's scoring (MaxSim of 1,527 summaries
# against 2.6 million token vectors) takes seconds on a GPU and about half an hour on 2 CPU cores.
stage_qmsum() {
    corpus_retrieval qmsum "$QMSUM_RECORDS" "chunk:minilm s5-all s5-long" "chunk:minilm s5-all" s5-long s5-all-lscale
}
stage_spans() {
    corpus_retrieval spans "$SPANS_RECORDS" "chunk:minilm interp:minilm adapted" "chunk:minilm s5-all" \
        s5-far s5-long s5-all-lscale
}

stages=("$@")
[[ ${#stages[@]} -gt 0 ]] || stages=(adapt embed embed-8192 embed-32k classify-2048 report-2048)
for stage in "${stages[@]}"; do
    case $stage in
        adapt | embed | embed-8192 | classify | report | classify-2048 | report-2048 | embed-32k | qmsum | spans)
            "stage_${stage//-/_}"
            ;;
        *)
            echo "longdoc_minilm.sh: unknown stage $stage; give adapt, embed, embed-8192, classify, report," \
                "classify-2048, report-2048, embed-32k, qmsum or spans." >&2
            exit 2
            ;;
    esac
done

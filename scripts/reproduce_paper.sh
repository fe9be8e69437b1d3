#!/usr/bin/env bash
# Reproduces the TISA paper's table 3 on ALBERT base v2 (Wennberg & Henter, 2021) on one multi-GPU machine:
#   3a: baseline and TISA S = 1, 3, 5 added to the position embeddings;
#   3b: TISA S = 1, 3, 5 replacing the position embeddings, and the S = 0 bag-of-words model;
# every GLUE task, 5 seeds, median dev scores, best gain Δ and error reduction Δ%.
#
# Needs: pip install -e . (with a CUDA build of torch), the Hub reachable for albert-base-v2 and nyu-mll/glue
# (or GLUE_DIR=path/to/glue_data with the original TSV files), and `accelerate config` done once (or the default:
# every visible GPU). 405 runs (table 3a: 180, table 3b adds 225); rerun the script after an interruption:
# finished runs are skipped and the interrupted one resumes from its last checkpoint.
#
#   bash scripts/reproduce_paper.sh            # all of table 3
#   RUNS=runs/table3 GLUE_DIR=/data/glue bash scripts/reproduce_paper.sh
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-runs/table3}
sweeps=(configs/sweeps/table3a.yaml configs/sweeps/table3b.yaml)

for sweep in "${sweeps[@]}"; do
    config=$sweep
    if [[ -n "${GLUE_DIR:-}" || "$RUNS" != runs/table3 ]]; then
        # The same grid with the local data folder and output folder filled in.
        config=$(mktemp --suffix=.yaml)
        python - "$sweep" "$config" "$RUNS" "${GLUE_DIR:-}" <<'PY'
import sys
from pathlib import Path

import yaml

source, target, runs, glue_dir = sys.argv[1:]
sweep = yaml.safe_load(Path(source).read_text())
sweep["config_dir"] = str((Path(source).parent / sweep.get("config_dir", "../glue")).resolve())
sweep["output_dir"] = runs
if glue_dir:
    sweep.setdefault("settings", {})["data_dir"] = glue_dir
Path(target).write_text(yaml.safe_dump(sweep, sort_keys=False))
PY
    fi
    tisa-hf sweep --config "$config"
done

tisa-hf report "$RUNS" --mode add --spread --out "$RUNS/table3a.md"
tisa-hf report "$RUNS" --mode replace --spread --out "$RUNS/table3b.md"
echo "Tables: $RUNS/table3a.md and $RUNS/table3b.md"

#!/usr/bin/env bash
# The speed goals, every one measured in one run, side by side with a baseline revision:
#   bench/speed_goals.sh <baseline> <stores dir> <output dir>
# start-up, CLI and peak RSS (cold_start.py), query embedding and batch encoding against
# sentence-transformers (embedder_speed.py), remember_many against the model's batch rate (compare_revisions.py
# write-dedup, four alternating rounds, into a fresh scope and a 100k one; bench_store.py's single run too),
# search's own work at 100,000 facts (compare_revisions.py search, run twice: the host drifts). Each script's
# output goes to <output dir>; the goal table in docs/benchmarks.md is read off these files. Run it on a quiet
# machine (about 25 minutes on 2 cores; the first run builds the 100k stores in <stores dir>, about 1.5 minutes).
set -euo pipefail
baseline=${1:?baseline revision}
stores=${2:?directory for the 100k stores}
out=${3:?output directory}
cd "$(dirname "$0")/.."
mkdir -p "$out"
export HF_HUB_OFFLINE=1
run() { local name=$1; shift; echo "== $name: $*" | tee -a "$out/commands.txt"; date -u +%H:%M:%S >> "$out/commands.txt"; "$@" > "$out/$name.txt"; }
run cold_start python bench/cold_start.py --baseline "$baseline" --rounds 3 --no-first-build
run embedder_speed python bench/embedder_speed.py --rounds 5 --no-cold --wait-quiet 30 --retries 2
run write_dedup_model python bench/compare_revisions.py write-dedup --baseline "$baseline" --rounds 4 --modes model
run bench_store python bench/bench_store.py --sizes 1000,10000 --queries 100 --json "$out/bench_store.json" --wait-quiet 30 --retries 2
run search_1 python bench/compare_revisions.py search --baseline "$baseline" --rounds 4 --stores "$stores" --wait-quiet 30 --retries 2
run search_2 python bench/compare_revisions.py search --baseline "$baseline" --rounds 4 --stores "$stores" --wait-quiet 30 --retries 2
date -u +%H:%M:%S >> "$out/commands.txt"

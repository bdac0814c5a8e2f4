#!/usr/bin/env bash
# Recipe study (issue 7): cosine vs calibrated magnitude heads under training-recipe variations.
# Two chains run side by side, one CPU thread each (2-core machine); every cell is its own
# `st-magnitude ablation` run under runs/recipe/<cell>/ and is skipped when its results.json is complete,
# so an interrupted study resumes where it stopped. Aggregate with benchmarks/recipe_report.py.
#
#   bash benchmarks/recipe_study.sh            # both chains (about 1 h 45 min on 2 CPU cores)
#   CHAIN=A bash benchmarks/recipe_study.sh    # one chain
#   EXTRA=seed43-cosine bash benchmarks/recipe_study.sh; EXTRA=seed43-dnorm ...  # second seed, top pair
#
# Common protocol: all-MiniLM-L6-v2 (packaged), batch 16, 150 steps, max_seq_length 128, lr 2e-5, τ 0.05,
# calibration on, evaluation on all three BEIR test sets subsampled to 150 queries / ~1,500 documents
# (evaluation subsample seeded with 42 in every cell, so cells share the same queries).
set -euo pipefail
cd "$(dirname "$0")/.."
export ST_MAGNITUDE_DATA="${ST_MAGNITUDE_DATA:-../shared/data}" HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
OUT="${RECIPE_OUT:-runs/recipe}"
mkdir -p "$OUT"
COMMON=(--eval beir-nfcorpus,beir-scifact,beir-arguana --batch-size 16 --max-seq-length 128
        --eval-max-queries 150 --eval-max-docs 1500 --eval-seed 42 --skip-base)

cell() {  # cell NAME ARGS...
  local name="$1"; shift
  if python -c "import json,sys; sys.exit(0 if 'wall_seconds' in json.load(open('$OUT/$name/results.json')) else 1)" 2>/dev/null; then
    echo "[recipe] $name: done, skipped"; return 0
  fi
  echo "[recipe] $name: st-magnitude ablation $* (started $(date -u +%H:%M:%S))"
  OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 st-magnitude ablation "${COMMON[@]}" "$@" --output "$OUT/$name" \
    > "$OUT/$name.log" 2>&1 || { echo "[recipe] $name: FAILED (see $OUT/$name.log)"; return 1; }
  echo "[recipe] $name: finished $(date -u +%H:%M:%S)"
}

chain_a() {
  cell nf-base        --train train-nfcorpus --heads cosine,dnorm,qnorm --max-steps 150 --seed 42
  cell nf-long-cosine --train train-nfcorpus --heads cosine --max-steps 300 --seed 42
  cell nf-tau0.10     --train train-nfcorpus --heads dnorm --max-steps 150 --seed 42 --temperature 0.10
  cell nf-learn-glr0.1 --train train-nfcorpus --heads learnable --max-steps 150 --seed 42 --gamma-lr 0.1
  cell nf-tau0.02     --train train-nfcorpus --heads dnorm --max-steps 150 --seed 42 --temperature 0.02
}
chain_b() {
  cell sf-base        --train train-scifact --heads cosine,dnorm --max-steps 150 --seed 42
  cell nf-long-dnorm  --train train-nfcorpus --heads dnorm --max-steps 300 --seed 42
  cell nf-mined       --train train-nfcorpus --heads cosine,dnorm --max-steps 150 --seed 42 --mine-negatives 1
  cell nf-inbatch     --train train-nfcorpus --heads cosine,dnorm --max-steps 150 --seed 42 --no-negatives
}
# Second seed (43) of the top configuration and its cosine reference, one cell each so they run side by side;
# the evaluation subsample stays the seed-42 one (--eval-seed 42 in COMMON).
case "${EXTRA:-}" in
  seed43-cosine) cell nf-base-s43-cosine --train train-nfcorpus --heads cosine --max-steps 150 --seed 43; exit 0 ;;
  seed43-dnorm)  cell nf-base-s43-dnorm  --train train-nfcorpus --heads dnorm --max-steps 150 --seed 43; exit 0 ;;
esac
case "${CHAIN:-both}" in
  A) chain_a ;;
  B) chain_b ;;
  both) chain_a > "$OUT/chain_a.log" 2>&1 & a=$!
        chain_b > "$OUT/chain_b.log" 2>&1 & b=$!
        status=0; wait $a || status=1; wait $b || status=1; exit $status ;;
esac

#!/bin/bash
# Issue 4 validation, end to end (about 75 min on 2 idle CPU cores): κ on three base-model settings, then
# QNorm/DNorm fine-tuning (uncalibrated, 100 steps, subsampled evaluation) for seeds 42 and 43, then the
# agreement table. Finished runs are skipped on a re-run. Results: benchmarks/results/fisher_validation_nfcorpus.*
set -euo pipefail
cd "$(dirname "$0")/.."
export ST_MAGNITUDE_DATA="${ST_MAGNITUDE_DATA:-../shared/data}" HF_HUB_OFFLINE=1
OUT=${OUT:-runs/fv}
python benchmarks/fisher_validation.py --train train-nfcorpus --samples 512 --max-seq-length 128 \
  --save-models "$OUT/models" --name fisher_validation_nfcorpus
results=()
for seed in 42 43; do
  for setting in top2-reinit random-init pretrained; do
    out="$OUT/${setting}_s${seed}"
    if ! grep -qs wall_seconds "$out/results.json"; then
      st-magnitude ablation --model "$OUT/models/$setting" --train train-nfcorpus \
        --eval beir-nfcorpus,beir-scifact,beir-arguana --heads qnorm,dnorm --max-steps 100 --batch-size 16 \
        --seed "$seed" --max-seq-length 128 --eval-max-queries 100 --eval-max-docs 1500 --skip-base \
        --calibrate off --output "$out"
    fi
    results+=(--results "$setting=$out")
  done
done
python benchmarks/fisher_validation.py --render-only --name fisher_validation_nfcorpus "${results[@]}"

#!/bin/bash
# bf16 autocast on the CPU (AMX) against the fp32 seeds: cgan and per-class, 32 px, the demo's budget, seed 0.
cd /work/m53/tree
for v in cgan per-class; do
  [ -f /work/m53/bf16-$v-s0/compare.json ] && continue
  R=""; [ -d /work/m53/bf16-$v-s0 ] && R="--resume"
  taskset -c 0 nice -n 5 /work/main/.venv/bin/python -m distcgan compare --preset digits --resolution 32 \
    --steps 900 --seeds 1 --variants $v --amp bf16 --threads 1 --no-real \
    --data /work/main/data/digits32.h5 --network /work/main/data/digits32_classifier.pt \
    --out /work/m53/bf16-$v-s0 $R > /work/m53/bf16-$v-s0.log 2>&1
done

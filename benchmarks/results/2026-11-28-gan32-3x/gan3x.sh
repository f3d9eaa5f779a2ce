#!/bin/bash
# #27: the DC-GAN at 32 px at 3x the demo's budget (27,000 steps), with and without
# color,translation,cutout, seeds 0-4, bf16 autocast on the CPU (AMX), one core; resumable.
cd /work/m53/tree
CORE=${CORE:-0}
for s in 0 1 2 3 4; do for arm in none aug; do
  d=/work/m53/gan32x3-$arm-s$s
  [ -f $d/compare.json ] && continue
  A=""; [ $arm = aug ] && A="--augment color,translation,cutout"
  R=""; [ -d $d ] && R="--resume"
  taskset -c $CORE nice -n 5 /work/main/.venv/bin/python -m distcgan compare --preset digits --resolution 32 \
    --steps 2700 --seed $s --seeds 1 --variants gan --amp bf16 --score-every 900 --score-n 1000 \
    --threads 1 --no-real --data /work/main/data/digits32.h5 \
    --network /work/main/data/digits32_classifier.pt $A --out $d $R >> $d.log 2>&1 || exit 1
done; done

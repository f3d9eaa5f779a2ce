#!/bin/bash
# #27: VARIANT (per-class, cgan or gan) at 32 px at 3x the demo's budget, one arm on one core,
# seeds in SEEDS; resumable. CORE, ARM (none or aug), VARIANT, SEEDS from the environment.
cd /work/m53/tree
CORE=${CORE:-0}; ARM=${ARM:-none}; VARIANT=${VARIANT:-per-class}
TAG=$(echo $VARIANT | tr -d -)
for s in $SEEDS; do
  d=/work/m53/${TAG}32x3-$ARM-s$s
  [ -f $d/compare.json ] && continue
  A=""; [ $ARM = aug ] && A="--augment color,translation,cutout"
  R=""; [ -d $d ] && R="--resume"
  taskset -c $CORE /work/main/.venv/bin/python -m distcgan compare --preset digits --resolution 32 \
    --steps 2700 --seed $s --seeds 1 --variants $VARIANT --amp bf16 --score-every 900 \
    --score-n 1000 --threads 1 --no-real --data /work/main/data/digits32.h5 \
    --network /work/main/data/digits32_classifier.pt $A --out $d $R >> $d.log 2>&1 || exit 1
  echo "$(date -u +%H:%M) done $VARIANT $ARM s$s" >> /work/m53/done.log
done

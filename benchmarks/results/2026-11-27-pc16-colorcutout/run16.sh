#!/bin/bash
# $1 core, $2 arm (none|cc), then seeds; 16 px per-class pairs at the demo's budget (900 steps a class) (#27)
core=$1; arm=$2; shift 2
cd /work/main
aug=""; [ "$arm" = cc ] && aug="--augment color,cutout"
for seed in "$@"; do
  out=/work/m50/pc16-$arm-s$seed
  echo "$(date -u +%T) start pc16 $arm seed $seed"
  taskset -c $core nice -n 5 .venv/bin/python -m distcgan compare --preset digits --steps 900 --seed $seed --seeds 1 --variants per-class --score-every 300 --score-n 1000 --threads 1 --no-real --data data/digits16.h5 --network data/digits16_classifier.pt $aug --out $out --no-progress > $out.log 2>&1
  echo "$(date -u +%T) end pc16 $arm seed $seed rc $?"
done

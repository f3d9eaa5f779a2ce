#!/bin/bash
# $1 core, $2 arm (none|cc), then seeds; 32 px per-class pairs at the demo's budget (900 steps a class) (#27)
core=$1; arm=$2; shift 2
cd /work/main
aug=""; [ "$arm" = cc ] && aug="--augment color,cutout"
for seed in "$@"; do
  out=/work/m51/pc32-$arm-s$seed
  echo "$(date -u +%T) start pc32 $arm seed $seed"
  taskset -c $core nice -n 5 .venv/bin/python -m distcgan compare --preset digits --resolution 32 --steps 900 --seed $seed --seeds 1 --variants per-class --score-every 300 --score-n 1000 --threads 1 --no-real --data data/digits32.h5 --network data/digits32_classifier.pt $aug --out $out --no-progress > $out.log 2>&1
  rc=$?; echo "$(date -u +%T) end pc32 $arm seed $seed rc $rc"
done

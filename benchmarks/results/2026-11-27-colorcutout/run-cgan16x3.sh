#!/bin/bash
# $1 core, then seeds; 16 px DC-CGAN at 3x the demo's budget (27,000 steps), --augment color,cutout (#27)
core=$1; shift
cd /work/main
for seed in "$@"; do
  out=OUT/cgan-cc-s$seed
  echo "$(date -u +%T) start cgan cc seed $seed"
  taskset -c $core nice -n 5 .venv/bin/python -m distcgan compare --preset digits --steps 2700 --seed $seed --seeds 1 --variants cgan --score-every 300 --score-n 1000 --threads 1 --no-real --data data/digits16.h5 --network data/digits16_classifier.pt --augment color,cutout --out $out --no-progress > $out.log 2>&1
  echo "$(date -u +%T) end cgan cc seed $seed rc $?"
done

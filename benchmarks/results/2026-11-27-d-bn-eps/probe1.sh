#!/bin/bash
# $1 core, then arms NAME:AUGMENT:EPS; seed 1, 32 px DC-GAN, 3,000 steps (#27: translation with D's BatchNorm eps)
core=$1; shift
cd /work/main
for arm in "$@"; do
  IFS=: read name aug eps <<< "$arm"
  out=/work/m51/probe-s1-$name
  echo "$(date -u +%T) start $name"
  taskset -c $core nice -n 5 .venv/bin/python -m distcgan compare --preset digits --resolution 32 --steps 300 --seed 1 --seeds 1 --variants gan --score-n 1000 --threads 1 --no-real --data data/digits32.h5 --network data/digits32_classifier.pt --augment $aug --d-bn-eps $eps --out $out --no-progress > $out.log 2>&1
  rc=$?; echo "$(date -u +%T) end $name rc $rc"
done

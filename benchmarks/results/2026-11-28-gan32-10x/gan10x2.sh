#!/bin/bash
# (2 threads from step 37,386 while gan3x is paused) 32 px DC-GAN learning curve to 10x the demo's budget (90,000 steps), one seed, one core.
cd /work/m53/tree
R=""; [ -d /work/m53/gan32-10x ] && R="--resume"
exec taskset -c 0,1 nice -n 5 /work/main/.venv/bin/python -m distcgan compare --preset digits --resolution 32 \
  --steps 9000 --seeds 1 --variants gan --score-every 300 --score-n 1000 --threads 2 --no-real \
  --data /work/main/data/digits32.h5 --network /work/main/data/digits32_classifier.pt \
  --out /work/m53/gan32-10x $R

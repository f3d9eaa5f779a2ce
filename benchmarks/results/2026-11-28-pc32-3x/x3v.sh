#!/bin/bash
# #27: VARIANT (per-class, cgan or gan) at 32 px at 3x the demo's budget, one arm on one core,
# seeds in SEEDS; resumable. CORE, ARM (none or aug), VARIANT, SEEDS from the environment; REPO
# (the checkout to train with), DATA (digits32.h5 and its classifier), OUT (the run directories)
# and PY (the Python) default to this checkout, its data/, its runs/ and its .venv.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=${REPO:-$(cd "$HERE/../../.." && pwd)}
DATA=${DATA:-$REPO/data}; OUT=${OUT:-$REPO/runs}; PY=${PY:-$REPO/.venv/bin/python}
CORE=${CORE:-0}; ARM=${ARM:-none}; VARIANT=${VARIANT:-per-class}; SEEDS=${SEEDS:-0}
die() { echo "x3v.sh: $1" >&2; exit "$2"; }
case "$ARM" in none | aug) ;; *) die "ARM=$ARM is not an arm: set ARM=none or ARM=aug" 2 ;; esac
case "$VARIANT" in
  per-class | cgan | gan) ;;
  *) die "VARIANT=$VARIANT is not a variant: set VARIANT=per-class, cgan or gan" 2 ;;
esac
TAG=$(echo "$VARIANT" | tr -d -)
mkdir -p "$OUT" 2> /dev/null && cd "$REPO" 2> /dev/null ||
  die "cannot make OUT=$OUT or enter REPO=$REPO: set OUT to a writable folder, REPO to a checkout" 1
for s in $SEEDS; do
  d=$OUT/${TAG}32x3-$ARM-s$s
  [ -f "$d/compare.json" ] && continue
  A=""; [ "$ARM" = aug ] && A="--augment color,translation,cutout"
  R=""; [ -d "$d" ] && R="--resume"
  taskset -c "$CORE" "$PY" -m distcgan compare --preset digits --resolution 32 \
    --steps 2700 --seed "$s" --seeds 1 --variants "$VARIANT" --amp bf16 --score-every 900 \
    --score-n 1000 --threads 1 --no-real --data "$DATA/digits32.h5" \
    --network "$DATA/digits32_classifier.pt" $A --out "$d" $R >> "$d.log" 2>&1 ||
    die "$VARIANT $ARM seed $s failed (exit $?): see $d.log, then rerun to resume" 1
  echo "$(date -u +%H:%M) done $VARIANT $ARM s$s" >> "$OUT/done.log"
done

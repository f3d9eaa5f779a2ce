"""The three variants at 32 px at 3x, untouched, side by side over their 5 seeds: each metric's
mean and Student-t 95% interval (distcgan.compare.seeds.summarise, as `compare --seeds` gives),
from the compare.json of each one-seed run (../2026-11-28-gan32-3x/gan32x3-none-sS,
../2026-11-28-pc32-3x/perclass32x3-none-sS, cgan32x3-none-sS).

    python variants.py [ARM]    # ARM: none (the default) or aug
"""

import json
import sys
from pathlib import Path

from distcgan.compare.seeds import summarise, with_class_mean

HERE = Path(__file__).resolve().parent
ARM = sys.argv[1] if len(sys.argv) > 1 else "none"
RUNS = {"per-class": HERE.parent / "2026-11-28-pc32-3x" / f"perclass32x3-{ARM}-s{{}}",
        "gan": HERE.parent / "2026-11-28-gan32-3x" / f"gan32x3-{ARM}-s{{}}",
        "cgan": HERE / f"cgan32x3-{ARM}-s{{}}"}  # fmt: skip
METRICS = {"is_mean": "IS", "fid": "FID", "fid_class_mean": "FID a class (mean)",
           "precision": "precision", "recall": "recall", "class_accuracy": "class accuracy",
           "train_s": "train s"}  # fmt: skip


def row(d: Path, variant: str, seed: int) -> dict:
    doc = json.loads((d / "compare.json").read_text())
    return with_class_mean(doc["runs"][str(seed)][variant])


print(f"| 32 px, 27,000 steps ({ARM}), 5 seeds | " + " | ".join(METRICS.values()) + " |")
print("|---" * (len(METRICS) + 1) + "|")
for variant, pattern in RUNS.items():
    runs = {s: {variant: row(Path(str(pattern).format(s)), variant, s)} for s in range(5)}
    stats = summarise(runs)[variant]["stats"]
    cells = []
    for m in METRICS:
        st, f = stats[m], ",.0f" if m == "train_s" else ".3f"
        cells.append("n/a" if st is None else f"{st['mean']:{f}} [{st['lo']:{f}}, {st['hi']:{f}}]")
    print(f"| {variant} | " + " | ".join(cells) + " |")

"""A per-class 3x run's scores during training, one line a scoring step: the step, and over the
classes' pairs the mean FID a class, precision, recall and class accuracy (1,000 samples a
class), the mean of D's sign on real images and the largest logit gap at that step.

    python curve.py RUN/per-class > curve.txt
"""

import json
import sys
from pathlib import Path

by_step: dict[int, list[dict]] = {}
for path in sorted(Path(sys.argv[1]).glob("class_*/metrics.jsonl")):
    for line in path.read_text().splitlines():
        if '"score_fid"' in line:
            row = json.loads(line)
            by_step.setdefault(row["step"], []).append(row)


def mean(rows: list[dict], key: str) -> float:
    return sum(r[key] for r in rows) / len(rows)


print(
    "# step, pairs, mean score_fid, score_precision, score_recall, score_accuracy (1,000 "
    "samples a class), mean d_real_sign and largest logit_gap at that step"
)
for step, rows in sorted(by_step.items()):
    print(
        step,
        len(rows),
        round(mean(rows, "score_fid"), 3),
        round(mean(rows, "score_precision"), 3),
        round(mean(rows, "score_recall"), 3),
        round(mean(rows, "score_accuracy"), 3),
        round(mean(rows, "d_real_sign"), 3),
        round(max(r["logit_gap"] for r in rows), 4),
    )

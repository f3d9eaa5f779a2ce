"""A 3x run's scores during training, one line a scoring step: the step, FID, precision and
recall on 10,000 samples pooled, and D's sign on real images and logit gap at that step.

    python curve.py RUN/all/metrics.jsonl > NAME-curve.txt
"""

import json
import sys

rows = [json.loads(line) for line in open(sys.argv[1]) if '"score_fid"' in line]
print(
    "# step, score_fid, score_precision, score_recall (10,000 samples pooled) and "
    "d_real_sign, logit_gap at that step"
)
for r in rows:
    print(
        r["step"],
        round(r["score_fid"], 3),
        round(r["score_precision"], 3),
        round(r["score_recall"], 3),
        round(r["d_real_sign"], 3),
        round(r["logit_gap"], 4),
    )

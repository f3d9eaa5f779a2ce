"""The 32 px DC-GAN 10x curve's scores during training, as a Markdown table: one row a scoring
step (steps a class = steps / 10), its FID, precision and recall on 10,000 samples pooled, and
D's sign on real images at that step.

    python curve_table.py RUN/all/metrics.jsonl
"""

import json
import sys

rows = [json.loads(line) for line in open(sys.argv[1]) if '"score_fid"' in line]
print("| steps a class | FID (pooled) | precision | recall | d_real_sign |")
print("|---|---|---|---|---|")
for r in rows:
    print(
        f"| {r['step'] // 10:,} | {r['score_fid']:.2f} | {r['score_precision']:.3f} | "
        f"{r['score_recall']:.3f} | {r['d_real_sign']:+.3f} |"
    )

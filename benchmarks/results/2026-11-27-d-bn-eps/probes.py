"""D's statistics and scores of single-pair comparison runs (the DC-GAN probes), one line a run.

    python probes.py DIR [DIR ...]

For each DIR (a `compare --variants gan` output folder): D's logit_gap, d_acc and d_real_sign
averaged over the last third of the steps, its largest logit_gap after the first third, from
DIR/gan/all/metrics.jsonl; then the final scores from DIR/compare.json.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main() -> None:
    for out in map(Path, sys.argv[1:]):
        metrics = out / "gan" / "all" / "metrics.jsonl"
        logged = [json.loads(x) for x in metrics.read_text().splitlines() if x.strip()]
        logged = [m for m in logged if "logit_gap" in m]
        steps = max(m["step"] for m in logged)
        last = [m for m in logged if m["step"] > 2 * steps / 3]
        late = [m for m in logged if m["step"] > steps / 3]

        def mean(key: str, rows: list[dict] = last) -> float:
            return sum(m[key] for m in rows) / len(rows)

        v = json.loads((out / "compare.json").read_text())["variants"]["gan"]
        print(
            f"{out.name} steps {steps} gap {mean('logit_gap'):+.4f} acc {mean('d_acc'):.3f} "
            f"sign {mean('d_real_sign'):+.3f} maxgap {max(m['logit_gap'] for m in late):+.4f} | "
            f"FID {v['fid']:.2f} P {v['precision']:.3f} R {v['recall']:.3f} IS {v['is_mean']:.3f}"
            f" train_s {v['train_s']:.0f}"
        )


if __name__ == "__main__":
    main()

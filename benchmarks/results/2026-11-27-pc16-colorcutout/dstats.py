"""D's statistics and scores during training of per-class comparison runs, one line a run.

    python dstats.py RUN [RUN ...]

For each finished pair of RUN/per-class: D's logit_gap, d_acc and d_real_sign averaged over its
last 100 steps, its largest logit_gap after step 300, and its scores during training; printed as
the mean over the pairs (and the largest pair), then the mean FID and recall at each scored step
from `benchmarks/learning_curves.py`'s `curves`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from learning_curves import curves  # noqa: E402  (benchmarks/, put on the path above)


def mean(rows: list[dict], key: str) -> float:
    return sum(r[key] for r in rows) / len(rows)


def pair(metrics: Path) -> tuple[float, float, float, float]:
    lines = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    logged = [line for line in lines if "logit_gap" in line]
    last = [line for line in logged if line["step"] > 800]
    late = [line for line in logged if line["step"] > 300]
    return (
        mean(last, "logit_gap"),
        mean(last, "d_acc"),
        mean(last, "d_real_sign"),
        max(line["logit_gap"] for line in late),
    )


def main() -> None:
    for run in sys.argv[1:]:
        pairs = [
            pair(m)
            for m in sorted(Path(run).glob("per-class/class_*/metrics.jsonl"))
            if (m.parent / "result.json").exists()
        ]
        n = len(pairs)
        gaps, accs, signs = ([p[i] for p in pairs] for i in range(3))
        steps = json.loads((Path(run) / "per-class" / "config.json").read_text())["steps"]
        curve = " ".join(
            f"{round(f * steps)}:{v['score_fid']:.2f}/{v['score_recall']:.3f}"
            for f, v in curves(Path(run) / "per-class").items()
        )
        print(
            f"{Path(run).name} pairs {n} last100 gap mean {sum(gaps) / n:+.4f} max {max(gaps):+.4f}"
            f" acc {sum(accs) / n:.3f} sign mean {sum(signs) / n:+.3f} max {max(signs):+.3f}"
            f" maxgap>300 {max(p[3] for p in pairs):+.4f}"
            f" | mean FID a pair/recall during training {curve}"
        )


if __name__ == "__main__":
    main()

"""D's statistics and scores during training of per-class comparison runs (one line a run)."""
import json, sys
from pathlib import Path
for run in sys.argv[1:]:
    rows = {}
    for mf in sorted(Path(run).glob("per-class/class_*/metrics.jsonl")):
        if not (mf.parent / "result.json").exists(): continue
        lines = [json.loads(l) for l in mf.read_text().splitlines() if l.strip()]
        last = [l for l in lines if l["step"] > 800 and "logit_gap" in l]
        late = [l for l in lines if l["step"] > 300 and "logit_gap" in l]
        mean = lambda k, ls: sum(l[k] for l in ls) / len(ls)
        sc = {l["step"]: (l["score_fid"], l["score_recall"]) for l in lines if "score_fid" in l}
        rows[mf.parent.name] = (mean("logit_gap", last), mean("d_acc", last), mean("d_real_sign", last),
                                max(l["logit_gap"] for l in late), sc)
    n = len(rows)
    g = [r[0] for r in rows.values()]; s = [r[2] for r in rows.values()]; a = [r[1] for r in rows.values()]
    steps = sorted(set().union(*[r[4] for r in rows.values()]))
    curve = " ".join(f"{st}:{sum(r[4][st][0] for r in rows.values())/n:.2f}/{sum(r[4][st][1] for r in rows.values())/n:.3f}" for st in steps)
    print(f"{Path(run).name} pairs {n} last100 gap mean {sum(g)/n:+.4f} max {max(g):+.4f} acc {sum(a)/n:.3f} "
          f"sign mean {sum(s)/n:+.3f} max {max(s):+.3f} maxgap>300 {max(r[3] for r in rows.values()):+.4f} | "
          f"mean FID a pair/recall during training {curve}")

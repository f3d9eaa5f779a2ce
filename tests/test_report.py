"""`distcgan report`: RUN/report.html from a real tiny run, opened in headless Chromium; a
1,000-class run directory (built without training) stays under 20 MB; a compare directory; a
folder that is neither."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time

import numpy as np
import pytest
from helpers import run_cli, save_tiny, tiny_args

from distcgan.images import save_grid
from distcgan.report.page import write_report
from distcgan.run.rundir import RunDir, write_json

# Injected into a copy of the page: records console errors and failed loads, then, once the
# page has loaded, writes each image's state into the DOM that --dump-dom prints.
PROBE_HEAD = """<script>window.__errors=[];
const __ce=console.error;console.error=(...a)=>{window.__errors.push(a.join(' '));__ce(...a)};
window.addEventListener('error',e=>window.__errors.push(String(e.message||e.target.src)),true);
</script>"""
PROBE_END = """<script>window.addEventListener('load',()=>{const r=document.createElement('pre');
r.id='probe';const top=e=>e?e.getBoundingClientRect().top:null;
r.textContent=JSON.stringify({errors:window.__errors,images:[...document.images]
.map(i=>i.complete&&i.naturalWidth>0),headline:top(document.getElementById('headline')),
sections:[...document.querySelectorAll('h2')].map(top),
grids:[...document.querySelectorAll('img.grid')].map(i=>i.getBoundingClientRect().width)});
document.body.appendChild(r)});</script>"""


def chromium() -> str:
    path = shutil.which("chromium")
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail("the browser test under CI=true needs Debian's chromium (make sysdeps)")
        pytest.skip("no chromium (Debian's package; make sysdeps installs it)")
    return path


def _browse(cmd: list[str], timeout: float = 60) -> str:
    """Chromium's stdout. It runs in a session of its own, and its whole process group (the
    renderer and helper processes it forks) is killed when it overruns or the test fails, so
    the test leaves no browser behind."""
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
        return out
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # its helpers, if any outlived it
        except ProcessLookupError:
            pass
        proc.wait()


def test_a_demo_sized_report_loads_in_a_real_browser(tmp_path, digits_file):
    from distcgan.cli import main

    # The demo's shape: the 10 digit classes, grids along the way, then an evaluation.
    run = tmp_path / "run"
    assert main(tiny_args(digits_file, run, "--sample-every", "2")) == 0
    net = save_tiny(tmp_path / "tiny.pt")
    scored = run_cli("evaluate", "--run", str(run), "--network", str(net), "--n", "100")
    assert scored.returncode == 0, scored.stderr
    done = run_cli("report", "--run", str(run))
    assert done.returncode == 0, done.stderr
    page = (run / "report.html").read_text()
    assert not re.search(r"(src|href)=['\"]?https?:", page)  # opens offline: nothing external
    for text in ("Timeline", "class_002", "class_009", "loss_d", "Launches", "precision"):
        assert text in page
    assert page.count("<img") == 1 + 1 + 10 * 3  # timeline, curves, 3 grids per class

    probe = tmp_path / "probe.html"
    probe.write_text(
        page.replace("<head>", "<head>" + PROBE_HEAD).replace("</body>", PROBE_END + "</body>")
    )
    cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=5000"]
    cmd += ["--window-size=1400,3000"]
    dom = _browse([*cmd, "--dump-dom", probe.as_uri()])
    found = re.search(r"<pre id=\"probe\">(.*?)</pre>", dom, re.S)
    assert found, dom[-2000:]
    result = json.loads(found.group(1).replace("&quot;", '"'))
    assert result["errors"] == []
    assert len(result["images"]) == 32 and all(result["images"])
    # The headline comes first, above every section; every grid is drawn at least 192 px wide
    # (it showed 16 px grids 80 px wide, blurred).
    assert result["headline"] is not None and result["headline"] < min(result["sections"])
    assert len(result["grids"]) == 30 and min(result["grids"]) >= 192, result["grids"]
    head = page[page.index("id='headline'") :][:2000]
    assert "IS</span>" in head and "images/s" in head and "class accuracy" in head


def test_a_thousand_classes_show_distributions_and_the_worst_and_best(tmp_path):
    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    write_json(run.config_file, {"preset": "synthetic", "steps": 100})
    png = tmp_path / "grid.png"  # one random 8 x 8 grid, copied: 2,000 PNGs written cheaply
    save_grid(png, np.random.default_rng(0).integers(0, 255, (8, 8, 16, 16, 1), np.uint8), 2)
    for class_id in range(1000):
        task = run.task(f"class_{class_id:03d}")
        task.path.mkdir()
        lines = [
            {
                "step": s,
                "loss_d": 1.0,
                "loss_g": 2.0,
                "logit_gap": float(class_id) + s / 100,
                "s_per_step": 0.1,
                "rank": class_id % 8,
                "time_unix": 1e9 + class_id // 8 * 10 + s / 10,
            }
            for s in (50, 100)
        ]
        task.metrics.write_text("".join(json.dumps(x) + "\n" for x in lines))
        for step in (50, 100):
            shutil.copyfile(png, task.grid(step))
    t0 = time.perf_counter()
    out = write_report(run.path)
    page = out.read_text()
    mb = out.stat().st_size / 1e6
    print(f"report of 1,000 classes: {time.perf_counter() - t0:.1f} s, {mb:.2f} MB")
    assert out.stat().st_size < 20e6
    assert "Distributions over 1000 classes" in page
    shown = re.findall(r"alt='(class_\d+) samples", page)
    worst = {f"class_{i:03d}" for i in range(980, 1000)}  # the largest logit_gap: D wins
    best = {f"class_{i:03d}" for i in range(20)}  # gaps nearest 0: D at chance
    assert set(shown) == worst | best
    assert shown[0] == "class_999" and shown[-1] == "class_000"  # worst first


def test_a_compare_directory_shows_its_table_and_figure(tmp_path):
    (tmp_path / "compare.json").write_text("{}")
    (tmp_path / "compare.md").write_text("| variant | FID |\n| per-class | 12.5 |\n")
    save_grid(tmp_path / "compare.png", np.zeros((2, 2, 16, 16, 1), np.uint8))
    page = write_report(tmp_path).read_text()
    assert "| per-class | 12.5 |" in page and page.count("<img") == 1


def test_a_folder_that_is_no_run_is_refused_in_one_line(tmp_path):
    done = run_cli("report", "--run", str(tmp_path))
    assert done.returncode != 0
    assert "is neither a run directory (no config.json) nor a comparison directory" in done.stderr
    assert not (tmp_path / "report.html").exists()

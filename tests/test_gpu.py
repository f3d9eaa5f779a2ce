"""GPU placement (skipped without CUDA; run on a GPU machine with `pytest -m gpu`)."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import member, run_cli, tiny_args

from distcgan.cli import main
from distcgan.run.checkpoint import read
from distcgan.train.models import Generator

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def test_auto_places_g_and_d_on_the_gpu_and_samples_there(tmp_path, digits_file):
    run = tmp_path / "run"
    assert main(tiny_args(digits_file, run, "--classes", "0", "1")) == 0
    summary = json.loads((run / "summary.json").read_text())
    n = torch.cuda.device_count()
    expect = ("cuda:0", "cuda:1") if n >= 2 else ("cuda:0", "cuda:0")
    assert {(c["device_g"], c["device_d"]) for c in summary["classes"]} == {expect}
    out = tmp_path / "s.h5"
    assert main(["sample", "--run", str(run), "--per-class", "8", "--out", str(out)]) == 0
    # A GPU checkpoint loads on the CPU and gives (numerically) the same images.
    state = read(run / "class_001" / "checkpoint.pt")
    G = Generator(100, 1, 16)
    G.load_state_dict(state["G"])
    G.eval()
    z = torch.randn(4, 100)
    # cuDNN convolutions default to TF32 on Ampere and later (10 mantissa bits: differences of
    # 1e-4 on an H100); compare full float32 arithmetic.
    tf32 = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    try:
        with torch.no_grad():
            cpu = G(z)
            gpu = G.to("cuda:0")(z.to("cuda:0")).cpu()
    finally:
        torch.backends.cudnn.allow_tf32 = tf32
    assert torch.allclose(cpu, gpu, atol=1e-5)


def test_resume_on_gpu_continues_from_the_checkpoint(tmp_path, digits_file):
    run = tmp_path / "run"
    assert main(tiny_args(digits_file, run, "--classes", "2", "--steps", "4")) == 0
    assert main(["train", "--run", str(run), "--resume", "--steps", "8", "--no-progress"]) == 0
    state = read(run / "class_002" / "checkpoint.pt")
    assert state["step"] == 8 and set(state["rng"]["cuda"]) == {"G", "D"}  # by role, not index


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_g_and_d_on_two_gpus(tmp_path, digits_file):
    run = tmp_path / "run"
    assert main(tiny_args(digits_file, run, "--classes", "0", "--devices", "cuda:0,cuda:1")) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert (summary["classes"][0]["device_g"], summary["classes"][0]["device_d"]) == (
        "cuda:0",
        "cuda:1",
    )


# The first GPU, and the last where there are several: capture must happen on the step's GPU,
# whatever the current device (a rank on cuda:1 keeps cuda:0 current).
GPUS = sorted({"cuda:0", f"cuda:{max(torch.cuda.device_count() - 1, 0)}"})


def _batch(gen, classes, z_dim=100):
    """One micro-batch of 16 random images (16 px, one channel a class) and noise, on gen's GPU."""
    from distcgan.train.step import Batch

    dev = gen.device
    real = torch.rand(16, classes, 16, 16, device=dev, generator=gen) * 2 - 1
    return Batch(real, None, torch.randn(16, z_dim * classes, device=dev, generator=gen), None)


@pytest.mark.parametrize("dev", GPUS)
@pytest.mark.parametrize("dropout", [0.0, 0.25])
@pytest.mark.parametrize("amp", [False, True])
def test_a_graphed_fused_step_computes_the_eager_one(amp, dropout, dev, monkeypatch):
    """A few fused steps replayed from a CUDA graph against the same steps run eagerly, from the
    same start (bf16 autocast too): the same weights, moving average and statistics. With
    dropout, each graphed step starts from the random state its eager twin started from, so the
    replayed masks must be the eager ones (the graph reads the generator's seed and offset at
    each replay)."""
    import dataclasses

    from distcgan.config import tiny
    from distcgan.plan import make_tasks
    from distcgan.train.fused import FusedPairs
    from distcgan.train.graphs import GraphedStep
    from distcgan.train.pair import PairSpec, new_pair

    cfg = dataclasses.replace(tiny(), d_dropout=dropout, amp="bf16" if amp else "off")

    def group():
        tasks = make_tasks("per-class", (0, 1, 2))
        pairs = [new_pair(PairSpec(cfg, t, 1, 10), dev, dev) for t in tasks]
        return FusedPairs(cfg, 1, [member(p) for p in pairs], (dev, dev))

    gen = torch.Generator(device=dev).manual_seed(0)
    batches = [[_batch(gen, 3)] for _ in range(5)]
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", True)
    eager, graphed = group(), group()
    step = GraphedStep(graphed, batches[0])
    for b in batches:
        rng = torch.cuda.get_rng_state(dev)
        want = eager.eager_update(b)
        torch.cuda.set_rng_state(rng, dev)
        got = step(b)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    for a, b in ((eager.G, graphed.G), (eager.D, graphed.D), (eager.G_ema, graphed.G_ema)):
        for (name, x), y in zip(a.state_dict().items(), b.state_dict().values()):
            torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-6, msg=name)
    assert torch.equal(eager.opt_g.steps, graphed.opt_g.steps)  # no step taken twice
    assert graphed.opt_g.steps.tolist() == [5.0, 5.0, 5.0]


@pytest.mark.parametrize("amp", [False, True])
def test_a_fused_network_on_the_gpu_computes_its_linear_layers_as_batched_matmuls(amp, monkeypatch):
    """On a GPU the fused linear layers are batched matmuls (the faster kernel there: README
    "Fused class pairs"); they compute what the grouped convolutions compute, float32 (TF32
    off, as the matmuls have it) and under bf16 autocast (to bf16's rounding). Written after the
    GPU session of 2026-11-27: first run by `benchmarks/gpu_session.sh linear`
    (passed on an H100 on 2026-11-28)."""
    from distcgan.train import models

    torch.manual_seed(0)
    dev = "cuda:0"
    G = models.Generator(100, 3, 32, fuse=4).to(dev)
    D = models.Discriminator(3, 32, dropout=0.0, fuse=4).to(dev)
    z = torch.randn(8, 4 * 100, device=dev)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    calls = []
    real_bmm = torch.baddbmm

    def spy(*a, **k):
        out = real_bmm(*a, **k)
        calls.append(out.dtype)  # autocast casts inside the call
        return out

    def forward():
        with torch.no_grad(), torch.autocast("cuda", torch.bfloat16, enabled=amp):
            images = G(z)
            return images.float(), D(images).float()

    monkeypatch.setattr(torch, "baddbmm", spy)
    got = forward()
    assert calls == [torch.bfloat16 if amp else torch.float32] * 2  # G's first, D's last
    monkeypatch.setattr(models, "linear_over_maps", models.linear_conv)
    want = forward()
    assert len(calls) == 2
    for x, y in zip(got, want):  # in bf16: within 3% of the outputs' range (bf16: 0.4% a step)
        tol = dict(rtol=0, atol=3e-2 * y.abs().max().item()) if amp else dict(rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(x, y, **tol)


def test_a_fused_run_on_one_gpu_is_graphed_by_default(tmp_path, digits_file, capsys):
    """--cuda-graphs auto (the default) replays a fused group on one GPU from a CUDA graph."""
    args = ("--classes", "0", "1", "--fuse", "2", "--devices", "cuda:0")
    assert main(tiny_args(digits_file, tmp_path / "run", *args)) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines() if x.startswith("{")]
    assert [e["cuda_graph"] for e in lines if e["event"] == "fused"] == [True]


GRAPHED = ("--cuda-graphs", "on")  # the graphed run against
EAGER = ("--cuda-graphs", "off")  # the same run eager


def test_a_fused_run_with_cuda_graphs_ends_where_the_eager_run_ends(
    tmp_path, digits_file, monkeypatch
):
    # "done at step 6" alone would pass a replay that never updates the weights: the graphed
    # run's weights are compared with the same run eager, and both with where they started.
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", True)
    args = ("--classes", "0", "1", "2", "--fuse", "3", "--devices", "cuda:0", "--d-dropout", "0")
    runs = {name: tmp_path / name for name in ("graphed", "eager", "start")}
    assert main(tiny_args(digits_file, runs["graphed"], *args, *GRAPHED)) == 0
    assert main(tiny_args(digits_file, runs["eager"], *args, *EAGER)) == 0
    assert main(tiny_args(digits_file, runs["start"], *args, "--steps", "1")) == 0
    summary = json.loads((runs["graphed"] / "summary.json").read_text())
    assert [c["status"] for c in summary["classes"]] == ["done"] * 3
    for k in range(3):
        g, e, s = (read(r / f"class_{k:03d}" / "checkpoint.pt") for r in runs.values())
        assert g["step"] == e["step"] == 6 and s["step"] == 1
        for net in ("G", "D"):
            for name, want in e[net].items():
                if not want.is_floating_point():
                    continue
                moved = (want - s[net][name]).abs().max().item()  # steps 2 to 6, eager
                off = (g[net][name] - want).abs().max().item()
                assert off <= max(0.05 * moved, 1e-6), (k, net, name, off, moved)


def _graphed_and_eager(tmp_path, digits_file, *extra, device="cuda:0", step=()):
    """The same fused run (3 classes, fuse 3, one GPU) graphed and eager, and its step-1 start
    (with `step`, the flags of `extra` that change what a step computes, not its faults): each
    run's exit code, and the runs."""
    args = ("--classes", "0", "1", "2", "--fuse", "3", "--devices", device, "--d-dropout", "0")
    runs = {name: tmp_path / name for name in ("graphed", "eager", "start")}
    codes = [
        main(tiny_args(digits_file, runs["graphed"], *args, *extra, *GRAPHED)),
        main(tiny_args(digits_file, runs["eager"], *args, *extra, *EAGER)),
        main(tiny_args(digits_file, runs["start"], *args, *step, "--steps", "1")),
    ]
    return codes, runs


def _assert_graphed_ends_as_eager(runs, classes=(0, 1, 2)):
    for k in classes:
        g, e, s = (read(r / f"class_{k:03d}" / "checkpoint.pt") for r in runs.values())
        assert g["step"] == e["step"] and g["retries"] == e["retries"], k
        for net in ("G", "D"):
            for name, want in e[net].items():
                if want.is_floating_point():
                    moved = (want - s[net][name]).abs().max().item()
                    off = (g[net][name] - want).abs().max().item()
                    assert off <= max(0.05 * moved, 1e-6), (k, net, name, off, moved)


def test_a_nan_in_one_graphed_fused_class_rolls_back_as_eager(tmp_path, digits_file, monkeypatch):
    """The fault writes NaN into the class's D slices, which the graph reads; the replay spreads
    it, the class's slices are reloaded into those tensors, and the replays go on: each class
    ends where the eager run with the fault ends."""
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", True)
    codes, runs = _graphed_and_eager(tmp_path, digits_file, "--inject-fault", "nan:1:4")
    assert codes == [0, 0, 0]
    retries = [
        read(runs["graphed"] / f"class_{k:03d}" / "checkpoint.pt")["retries"] for k in range(3)
    ]
    assert retries == [0, 1, 0]
    _assert_graphed_ends_as_eager(runs)


def test_a_graphed_fused_group_that_loses_a_class_is_fused_and_captured_anew(
    tmp_path, digits_file, monkeypatch
):
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", True)
    fault = ("--inject-fault", "nan-always:1:0", "--max-retries", "1")
    codes, runs = _graphed_and_eager(tmp_path, digits_file, *fault)
    assert codes[:2] == [3, 3]  # class 1 diverged in both; 0 and 2 went on as a group of two
    summary = json.loads((runs["graphed"] / "summary.json").read_text())
    assert [c["status"] for c in summary["classes"]] == ["done", "diverged", "done"]
    _assert_graphed_ends_as_eager(runs, classes=(0, 2))


def test_a_graphed_fused_run_with_augmentation_ends_where_the_eager_run_ends(
    tmp_path, digits_file, monkeypatch
):
    """The augmentation draws are graph inputs, copied in before each replay (graphs.py)."""
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", True)
    augment = ("--augment", "color,translation,cutout")
    codes, runs = _graphed_and_eager(tmp_path, digits_file, *augment, step=augment)
    assert codes == [0, 0, 0]
    _assert_graphed_ends_as_eager(runs)


@pytest.mark.parametrize("dev", GPUS)
def test_pairs_graphed_on_streams_compute_their_eager_steps(dev, monkeypatch):
    """The alternative to a fused group that benchmarks/fused_alternatives.py --streams times: K
    pairs (each a FusedPairs of one) in one CUDA graph, a stream each; a few replays against the
    same pairs' eager steps."""
    import dataclasses

    from distcgan.config import tiny
    from distcgan.plan import make_tasks
    from distcgan.train.fused import FusedPairs
    from distcgan.train.graphs import GraphedStreams
    from distcgan.train.pair import PairSpec, new_pair

    cfg = dataclasses.replace(tiny(), d_dropout=0.0)

    def pairs():
        tasks = make_tasks("per-class", (0, 1, 2))
        made = [new_pair(PairSpec(cfg, t, 1, 10), dev, dev) for t in tasks]
        return [FusedPairs(cfg, 1, [member(p)], (dev, dev)) for p in made]

    gen = torch.Generator(device=dev).manual_seed(0)
    steps = [[[_batch(gen, 1)] for _ in range(3)] for _ in range(4)]
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", True)
    eager, graphed = pairs(), pairs()
    step = GraphedStreams(graphed, steps[0])
    for batches in steps:
        want = torch.stack([fp.eager_update(b).reshape(-1) for fp, b in zip(eager, batches)])
        torch.testing.assert_close(step(batches), want, rtol=1e-4, atol=1e-5)
    for e, g in zip(eager, graphed):  # every tensor a step changes, Adam's step counts too
        for net in ("G", "D", "G_ema"):
            if getattr(e, net) is None:
                continue
            got = getattr(g, net).state_dict().values()
            for (name, x), y in zip(getattr(e, net).state_dict().items(), got):
                torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-6, msg=f"{net} {name}")
        for opt in ("opt_g", "opt_d"):
            assert getattr(g, opt).steps.tolist() == getattr(e, opt).steps.tolist() == [4]


def test_bench_times_a_graphed_fused_step_against_one_class_at_a_time():
    args = "--resolution 16 --batch-size 16 --windows 2 --steps 2 --warmup 2 --fuse 3"
    result = run_cli("bench", *args.split(), "--cuda-graphs", "--device-g", "cuda:0")
    assert result.returncode == 0, result.stderr
    assert "the fused step a CUDA graph" in result.stdout
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["cuda_graphs"] is True and out["fuse_ratio"] > 0
    assert "util_g" in out["gpu_fused"] and "util_g" in out["gpu_one_at_a_time"]


# ---- --schedule async on a GPU (train/schedule.py: G's half on its own stream) ------------------


@pytest.mark.parametrize("dev", GPUS)
@pytest.mark.parametrize("fuse", [1, 3])
def test_the_async_step_on_one_gpu_computes_its_sequential_reference(fuse, dev, monkeypatch):
    """With G and D on one GPU, G's half runs on a side stream (schedule._g_stream) beside D's:
    a few steps of it against the sequential reference from the same start, alone and fused.
    A missing wait between the streams shows as fakes or weights read before they are made."""
    import copy
    import dataclasses

    from distcgan.config import tiny
    from distcgan.plan import make_tasks
    from distcgan.train.alone import AlonePair
    from distcgan.train.fused import FusedPairs
    from distcgan.train.pair import PairSpec, new_pair
    from distcgan.train.schedule import async_reference
    from distcgan.train.step import StepOptions

    monkeypatch.setattr(torch.backends.cudnn, "deterministic", True)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    cfg = dataclasses.replace(tiny(), schedule="async", d_dropout=0.0, ema_decay=0.0)
    tasks = make_tasks("per-class", tuple(range(fuse)))
    pairs = [new_pair(PairSpec(cfg, t, 1, 10), dev, dev) for t in tasks]
    if fuse == 1:
        real = AlonePair(cfg, member(pairs[0]))
    else:
        real = FusedPairs(cfg, 1, [member(p) for p in pairs], (dev, dev))
    mine = real.members[0].pair if fuse == 1 else real
    gen = torch.Generator(device=dev).manual_seed(0)

    def batch():
        return [_batch(gen, fuse)]

    real.update(batch())  # the first cache (a fused group's: made by each member's own G)
    ref = copy.deepcopy(mine)
    how = StepOptions.of(cfg)
    for _ in range(4):
        b = batch()
        got = real.update(b)
        want = async_reference(ref, b, how)
        torch.testing.assert_close(got.view_as(want), want, rtol=1e-4, atol=1e-5)
    torch.cuda.synchronize(dev)
    for a, b in ((mine.G, ref.G), (mine.D, ref.D)):
        for (name, x), y in zip(a.state_dict().items(), b.state_dict().values()):
            if x.is_floating_point():  # a fused num_batches_tracked is kept per member
                torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-6, msg=name)
    for x, y in zip(mine.cache, ref.cache):
        torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-5)


def test_an_async_fused_run_on_the_gpu_resumes_exactly(tmp_path, digits_file):
    straight, halves = tmp_path / "straight", tmp_path / "halves"
    args = ("--classes", "0", "1", "2", "--fuse", "3", "--devices", "cuda:0", "--d-dropout", "0")
    args += ("--schedule", "async", "--checkpoint-every", "4")
    assert main(tiny_args(digits_file, straight, *args, "--steps", "8")) == 0
    assert main(tiny_args(digits_file, halves, *args, "--steps", "4")) == 0
    assert main(["train", "--run", str(halves), "--resume", "--steps", "8", "--no-progress"]) == 0
    for k in range(3):
        a, b = (read(r / f"class_{k:03d}" / "checkpoint.pt") for r in (straight, halves))
        assert a["step"] == b["step"] == 8 and len(a["async_cache"]) == 1
        for net in ("G", "D"):
            for name, x in a[net].items():
                torch.testing.assert_close(x, b[net][name], rtol=1e-4, atol=1e-6, msg=name)


def test_bench_times_the_async_step_on_the_gpu_with_nvml():
    args = "--resolution 16 --batch-size 32 --windows 2 --steps 4 --warmup 2 --schedule async"
    result = run_cli("bench", *args.split(), "--device-g", "cuda:0")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["async_speedup"] > 0 and "util_g" in out["gpu_async"]


# ---- batches drawn on the host, copied without the host waiting (train/step.to_device) ----------


@pytest.mark.parametrize("conditional", [False, True])
def test_a_gpu_feed_gives_the_batches_of_a_cpu_feed(conditional):
    """The same seeds draw the same rows, noise, labels and augmentation draws whether the
    batch goes to a GPU (pinned memory, non-blocking copies) or stays on the CPU."""
    from distcgan.train.step import Feed

    real = torch.rand(50, 1, 16, 16) * 2 - 1
    labels = torch.arange(50) % 5

    def feed(dev):
        return Feed(
            real=real.to(dev), labels=labels.to(dev), task_classes=torch.arange(5),
            conditional=conditional, micro=8, accum=2, group_rank=1, group_size=2, shard=False,
            data_seed=3, z_dim=100, device_g=dev,
        )  # fmt: skip

    draws = {}
    for dev in ("cpu", "cuda:0"):
        noise, aug = torch.Generator().manual_seed(7), torch.Generator().manual_seed(8)
        draws[dev] = [feed(dev).batches(step, noise, (aug, 0.5)) for step in range(6)]
    torch.cuda.synchronize()
    for cpu_step, gpu_step in zip(draws["cpu"], draws["cuda:0"]):
        for a, b in zip(cpu_step, gpu_step):
            for name in ("real", "real_labels", "z", "fake_labels", "aug"):
                x, y = getattr(a, name), getattr(b, name)
                assert (x is None) == (y is None), name
                if x is not None:
                    assert y.device.type == "cuda" and torch.equal(x, y.cpu()), name

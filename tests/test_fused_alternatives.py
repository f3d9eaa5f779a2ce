"""benchmarks/fused_alternatives.py: the fused step's alternatives that training does not run
(NHWC maps, the other linear kernel, torch.compile, the K pairs on streams in one graph, and
issue 80's NHWC weights, compiled convolutions and unfolded convolutions), each timed against
the fused step as training runs it. Each is smoke-run on the CPU at a tiny configuration where a
CPU can run it (the streams graph needs a GPU: marked so), and issue 80's are checked to step
as the fused step does, in float64; the figures themselves are measurements, not asserted
here."""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys

import pytest
import torch
from helpers import REPO, spy_kernels

from distcgan.bench import Fused
from distcgan.bench_flags import check_flags
from distcgan.errors import UserError

SCRIPT = REPO / "benchmarks" / "fused_alternatives.py"


def _script():
    """The script as a module (it adds the repository to sys.path, as when run)."""
    if "fused_alternatives" not in sys.modules:
        spec = importlib.util.spec_from_file_location("fused_alternatives", SCRIPT)
        module = importlib.util.module_from_spec(spec)
        sys.modules["fused_alternatives"] = module
        spec.loader.exec_module(module)
    return sys.modules["fused_alternatives"]


def _args(line: str) -> argparse.Namespace:
    """The script's flags parsed from `line`, D's device defaulted to G's, as main() has them."""
    args = _script().parser().parse_args(line.split())
    args.device_d = args.device_d or args.device_g
    return args


def _run(*flags: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, str(SCRIPT), *flags]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO)


@pytest.mark.parametrize(
    "args, message",
    [
        ("--fuse 2", "name an alternative to time against the fused step: --streams"),
        ("--fuse 2 --streams", "--streams times K pairs in one CUDA graph on one GPU"),
        ("--channels-last", "--channels-last times the fused step with NHWC activations"),
        ("--fuse 2 --channels-last --schedule async", "without --schedule async"),
        ("--bmm-linear", "--bmm-linear times the fused step with batched-matmul linear layers"),
        ("--fuse 2 --conv-linear", "--conv-linear: the fused step with G on cpu and D on cpu"),
        (
            "--fuse 2 --bmm-linear --device-g cuda:0",
            "computes its linear layers as batched matmuls already, so it would be timed against",
        ),
        ("--fuse 2 --conv-linear --schedule async", "--conv-linear times the fused step with"),
        ("--fuse 2 --compile default --schedule async", "--compile default times the fused"),
        ("--streams --device-g cuda:0", "--fuse 1 with G on cuda:0 and D on cuda:0"),
        ("--fuse 2 --streams --device-g cuda:0", "against the fused step replayed the same way"),
        ("--fuse 2 --channels-last --windows 0", "--windows must be a whole number >= 1, got 0"),
        ("--nhwc-weights", "--nhwc-weights times the fused step with NHWC weights"),
        ("--fuse 2 --unfold-bmm --schedule async", "--unfold-bmm times the fused step's"),
        ("--compile-convs default", "--compile-convs default times the fused step's conv"),
        (
            "--fuse 2 --compile-convs max-autotune --cuda-graphs --device-g cuda:0",
            "give --compile-convs max-autotune-no-cudagraphs (or default)",
        ),
        ("--fuse 2 --profile", "name an alternative to time against the fused step"),
        (
            "--fuse 2 --profile --unfold-bmm --nhwc-weights",
            "this names --nhwc-weights and --unfold-bmm: give one other than --streams",
        ),
    ],
)
def test_it_refuses_what_it_cannot_time(args, message):
    """bench's own checks first, then the alternatives'; no GPU asked (cuda:0 is refused by the
    flags alone)."""
    parsed = _args(args)
    with pytest.raises(UserError) as said:
        check_flags(parsed)
        _script().check(parsed)
    assert message in str(said.value) and "\n" not in str(said.value)


def test_a_refusal_is_one_line_and_exit_2_and_help_lists_the_alternatives():
    result = _run("--fuse", "2", "--conv-linear")
    assert result.returncode == 2 and result.stdout == "", result.stderr
    assert result.stderr.splitlines() == [
        "fused_alternatives.py: error: --conv-linear: the fused step with G on cpu and D on cpu "
        "computes its linear layers as grouped convolutions already, so it would be timed "
        "against itself: time the other kernel with --bmm-linear"
    ]
    shown = _run("--help")
    assert shown.returncode == 0
    for flag in (
        "--streams",
        "--channels-last",
        "--bmm-linear",
        "--conv-linear",
        "--compile",
        "--nhwc-weights",
        "--compile-convs",
        "--unfold-bmm",
        "--profile",
    ):
        assert flag in shown.stdout
    assert "--worker" not in shown.stdout


def test_it_times_the_fused_pair_nhwc_and_with_the_other_linear_kernel_in_one_run():
    # on a CPU the fused step's linear layers are grouped convolutions: --bmm-linear is the other
    # kernel (--conv-linear, a GPU's other kernel, is refused here: above)
    flags = "--resolution 16 --batch-size 16 --windows 2 --steps 2 --warmup 1 --fuse 2"
    result = _run(*flags.split(), "--channels-last", "--bmm-linear")
    assert result.returncode == 0, result.stderr
    assert "2 classes fused vs one at a time, 16 px" in result.stdout  # bench's table
    for label in ("channels last", "bmm linear"):
        assert f"\n  {label} " in result.stdout
    out = json.loads(result.stdout.strip().splitlines()[-1])
    for key in ("channels_last", "bmm_linear"):
        assert len(out[f"{key}_windows"]) == len(out["fused_windows"]) == 2
        assert out[f"{key}_speedup"] == pytest.approx(
            out[f"{key}_img_s"] / out["fused_img_s"], rel=0.006
        )
    assert out["fuse_ratio"] > 0 and out["gpu_channels_last"] == {}


def _tiny(*flags: str) -> argparse.Namespace:
    return _args(" ".join(["--resolution 16 --batch-size 8 --fuse 2", *flags]))


def _forward(model) -> list[torch.Tensor]:
    """What a variant's fused networks compute: its step run with the fused pair's step replaced
    by one forward pass of G and of D on G's images, so that the variant's own way (its hooks,
    its kernel swap) applies; in training mode (BatchNorm on the batch's statistics: at
    initialisation its running ones leave D's logits almost independent of its input)."""
    out: list[torch.Tensor] = []
    fp = model.fp

    def forward() -> None:
        z = torch.randn(8, fp.fuse * model.cfg.z_dim, generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            images = fp.G(z)
            out.extend([images, fp.D(images)])

    for m in fp.D.modules():  # dropout's masks follow the memory layout, which NHWC changes
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    fp.step = forward
    model.step()
    return out


@pytest.mark.parametrize(
    "variant, picks",
    [
        ("FusedChannelsLast", "cpu"),
        ("FusedBmm", "cpu"),  # a CPU's own kernel is grouped convolutions
        ("FusedConvLinear", "cuda"),  # a CPU made to pick as a GPU: batched matmuls
    ],
)
def test_each_alternative_computes_what_the_fused_step_computes(variant, picks, monkeypatch):
    """Each alternative is the fused networks computed another way: from the same weights, G's
    images and D's logits are the fused step's, to float32 rounding (the kernels differ). (Not
    the weights after a step: Adam turns rounding in near-zero gradients into whole steps.)"""
    from distcgan.train import models

    monkeypatch.setattr(models, "BMM_DEVICES", (picks,))
    args = _tiny()
    outputs = []
    for make in (Fused, getattr(_script(), variant)):
        torch.manual_seed(0)  # as a worker does before it builds its variant
        outputs.append(_forward(make(args)))
    (images, logits), (alt_images, alt_logits) = outputs
    assert images.shape == (8, 2, 16, 16) and logits.numel() == 8 * 2
    torch.testing.assert_close(alt_images, images, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(alt_logits, logits, rtol=1e-4, atol=1e-5)


def test_the_linear_variants_step_with_their_own_kernel(monkeypatch):
    """--bmm-linear and --conv-linear each compute the two linear layers their way whatever the
    device picks, and the swap lasts the step only. Each runs where the device picks the other
    way: a CPU picks grouped convolutions, and a CPU made to pick as a GPU batched matmuls."""
    from distcgan.train import models

    alt = _script()
    args = _tiny()
    default = models.linear_over_maps
    for variant, picks, bmm in (
        (alt.FusedBmm, "cuda", True),
        (alt.FusedConvLinear, "cpu", False),
        (Fused, "cpu", True),  # the default, where the device picks batched matmuls
        (Fused, "cuda", False),
        (alt.FusedBmm, "cuda", True),  # after a swap, the default is back
    ):
        monkeypatch.setattr(models, "BMM_DEVICES", (picks,))
        model = variant(args)
        calls = spy_kernels(monkeypatch)
        model.step()
        monkeypatch.undo()
        assert ("baddbmm" in calls) is bmm, (variant, picks, calls)
        assert models.linear_over_maps is default


def test_the_compiled_variant_compiles_the_fused_update_in_its_mode(monkeypatch):
    """torch.compile itself is a GPU measurement (minutes to compile); here its wiring: the
    eager fused update (no graph of ours) is what is compiled, in the mode asked for."""
    calls = []

    def fake_compile(fn, mode):
        calls.append(mode)
        return lambda *a, **kw: (calls.append("ran"), fn(*a, **kw))[1]

    monkeypatch.setattr(torch, "compile", fake_compile)
    model = _script().FusedCompiled(_tiny("--compile reduce-overhead"))
    model.step()
    assert calls == ["reduce-overhead", "ran"] and model.fp.graphed is False


def test_the_nhwc_variant_gives_every_convolution_nhwc_inputs():
    """What --channels-last times: G's feature maps and D's images (real and fake) NHWC, the
    parameters contiguous (fused.py slices them per class)."""
    model = _script().FusedChannelsLast(_tiny())
    seen = []
    for net in (model.fp.G, model.fp.D):
        for m in net.modules():
            if isinstance(m, torch.nn.Conv2d):
                m.register_forward_pre_hook(lambda m, x: seen.append(x[0]))
    model.step()
    assert len(seen) == 3 + 4 + 4  # G's three convolutions, D's four on real+fake, D's for G
    assert all(x.is_contiguous(memory_format=torch.channels_last) for x in seen)
    assert all(p.is_contiguous() for p in model.fp.G.parameters())


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_it_times_pairs_on_streams_against_the_fused_step():
    flags = "--resolution 16 --batch-size 16 --windows 2 --steps 2 --warmup 2 --fuse 3"
    result = _run(*flags.split(), "--cuda-graphs", "--streams", "--device-g", "cuda:0")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["streams_img_s"] > 0 and out["streams_speedup"] > 0
    assert "x the fused step" in result.stdout


# ---- issue 80's candidates: the fused step without cuDNN's layout conversions -------------------


@pytest.fixture
def float64():
    """Networks, data and noise in float64 while a test builds and steps them: two ways of
    summing the same products then agree to about 1e-13, so a step's weights can be compared
    after Adam (which in float32 turns rounding in near-zero gradients into whole steps of lr)."""
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(torch.float32)


def _stepped(model, steps: int, dropout: bool):
    """The fused pair's statistics over `steps` steps, then every tensor the step changes in the
    fused layout (an NHWC-stored weight, its gradient and Adam moments permuted back)."""
    fp = model.fp
    if not dropout:  # NHWC: dropout's masks follow the memory layout
        for m in fp.D.modules():
            if isinstance(m, torch.nn.Dropout):
                m.p = 0.0
    stats = torch.stack([fp.step() for _ in range(steps)])
    nhwc = {id(p) for p in getattr(model, "nhwc", [])}

    def fused(p, t):
        return t.permute(0, 3, 1, 2) if id(p) in nhwc else t

    out = {"stats": stats}
    for role, net in (("G", fp.G), ("D", fp.D), ("G_ema", fp.G_ema)):
        for name, p in net.named_parameters():
            out[f"{role}.{name}"] = fused(p, p.detach())
            if p.grad is not None:
                out[f"{role}.{name}.grad"] = fused(p, p.grad)
    for role, opt in (("G", fp.opt_g), ("D", fp.opt_d)):
        for i, p in enumerate(opt.params):
            out[f"adam.{role}.{i}"] = fused(p, opt.exp_avg[i]), fused(p, opt.exp_avg_sq[i])
    return out


def _same(got, want):
    assert got.keys() == want.keys()
    for key in want:
        torch.testing.assert_close(got[key], want[key], rtol=1e-9, atol=1e-11, msg=key)


def _built(make, flags: str = ""):
    torch.manual_seed(0)  # as a worker does before it builds its variant
    return make(_args(f"--resolution 16 --batch-size 8 --fuse 3 {flags}"))


@pytest.mark.parametrize("variant", ["FusedNhwcWeights", "FusedUnfoldBmm"])
def test_each_candidate_steps_as_the_fused_step(variant, float64):
    """--nhwc-weights and --unfold-bmm are the fused step's arithmetic in another order: over
    two steps of 3 classes, the losses, every weight, gradient, Adam moment and G's average
    equal the fused step's to float64 rounding (with D's dropout where the layout keeps its
    masks: the unfolded convolutions' outputs are laid out as the fused step's)."""
    dropout = variant == "FusedUnfoldBmm"
    want = _stepped(_built(Fused), 2, dropout)
    got = _stepped(_built(getattr(_script(), variant)), 2, dropout)
    assert want["stats"].shape == (2, 3, 7)
    _same(got, want)


def test_the_nhwc_weights_are_each_class_s_weight_as_a_slice_of_rows(float64):
    """--nhwc-weights stores every grouped convolution's weight (F*out, kh, kw, in): class k's
    weight, after two steps, is rows [k*out, (k+1)*out) permuted, which is what the fused step
    gives that class alone (its checkpoint's weight); the convolutions get NHWC weights and
    NHWC inputs, and everything else keeps its shape."""
    ref, model = _built(Fused), _built(_script().FusedNhwcWeights)
    convs = _script().grouped_convs(model.fp.G, model.fp.D)
    assert len(convs) == 7 and len(model.nhwc) == 7 + 3  # G's 3, D's 4; G's average's 3
    seen = []
    for conv in convs:
        conv.register_forward_pre_hook(lambda m, x: seen.append(x[0]))
        assert conv.weight.is_contiguous() and conv.weight.shape[-1] == conv.in_channels // 3
    _stepped(ref, 2, False)
    _stepped(model, 2, False)
    assert len(seen) == 2 * (3 + 4 + 4)  # a step: G's 3, D's 4 on real+fake, D's 4 for G
    assert all(x.is_contiguous(memory_format=torch.channels_last) for x in seen)
    for k in range(3):
        ref.fp.store(k)
        alone = ref.classes[k].member.pair
        for role, net in (("G", alone.G), ("D", alone.D)):
            for name, w in net.state_dict().items():
                fused = model.fp.G if role == "G" else model.fp.D
                t = dict(fused.named_parameters()).get(name)
                if t is None or id(t) not in {id(p) for p in model.nhwc}:
                    continue
                rows = t.detach()[k * w.shape[0] : (k + 1) * w.shape[0]]
                torch.testing.assert_close(rows.permute(0, 3, 1, 2), w, rtol=1e-9, atol=1e-11)


def test_the_unfolded_convolution_is_the_grouped_convolution():
    """conv_as_bmm at D's stride 2 and G's stride 1, with and without a bias, forward and both
    gradients (autograd's fold of the unfolded gradient), against the grouped convolution."""
    alt = _script()
    torch.manual_seed(0)
    for stride, bias in ((2, True), (1, True), (1, False)):
        conv = torch.nn.Conv2d(12, 15, 3, stride=stride, padding=1, groups=3, bias=bias).double()
        x = torch.randn(2, 12, 9, 9, dtype=torch.float64, requires_grad=True)
        want = conv(x)
        grads = torch.autograd.grad(want.square().sum(), (x, conv.weight))
        got = alt.conv_as_bmm(conv, x)
        side = {1: 9, 2: 5}[stride]  # 9 px, padding 1
        assert got.shape == want.shape == (2, 15, side, side)
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
        for g, w in zip(torch.autograd.grad(got.square().sum(), (x, conv.weight)), grads):
            torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)


def test_the_compiled_convolutions_step_as_the_fused_step(float64):
    """--compile-convs compiles the grouped convolutions alone: here through a backend that
    counts the graphs dynamo hands it and runs them as traced (inductor's own compile takes
    about 90 s on 2 CPU cores: its figures are the GPU's). Every convolution at each batch it
    sees (G's 3 at B; D's 4 at 2B, real and fake, and at B, for G's update) is one graph, 11,
    more than dynamo's default limit of 8 recompilations (past it, they would run eager); the
    second step compiles nothing more; and the step is the fused step's to float64 rounding."""
    graphs = []

    def counting(gm, example_inputs):
        graphs.append([tuple(x.shape) for x in example_inputs])
        return gm.forward

    want = _stepped(_built(Fused), 1, True)
    model = _built(Fused)
    torch._dynamo.reset()
    _script().compile_convs(model.fp, "default", backend=counting)
    got = _stepped(model, 1, True)
    assert len(graphs) == 11
    _same(got, want)
    model.fp.step()
    assert len(graphs) == 11


def test_the_compiled_convolutions_variant_passes_its_mode(monkeypatch):
    """FusedCompiledConvs compiles with inductor in the mode asked for, static shapes."""
    calls = []

    def fake_compile(fn, **how):
        calls.append(how)
        return fn

    monkeypatch.setattr(torch, "compile", fake_compile)
    model = _script().FusedCompiledConvs(_tiny("--compile-convs max-autotune-no-cudagraphs"))
    model.step()
    assert calls == [
        {"backend": "inductor", "dynamic": False, "mode": "max-autotune-no-cudagraphs"}
    ]


def test_it_times_the_nhwc_weights_and_the_unfolded_convolutions_in_one_run():
    flags = "--resolution 16 --batch-size 16 --windows 2 --steps 2 --warmup 1 --fuse 2"
    result = _run(*flags.split(), "--nhwc-weights", "--unfold-bmm")
    assert result.returncode == 0, result.stderr
    for label in ("nhwc weights", "unfold bmm"):
        assert f"\n  {label} " in result.stdout
    out = json.loads(result.stdout.strip().splitlines()[-1])
    for key in ("nhwc_weights", "unfold_bmm"):
        assert len(out[f"{key}_windows"]) == len(out["fused_windows"]) == 2
        assert out[f"{key}_img_s"] > 0


def test_it_profiles_one_candidate_as_gpu_profile_profiles_the_fused_step():
    """--profile: gpu_profile.py's table and JSON line (on a CPU: operators) for the candidate's
    eager step: the unfolded convolutions show as im2col and matrix products, and the only
    convolutions left are a CPU's two linear layers (G's once, D's on real+fake and for G)."""
    flags = "--resolution 16 --batch-size 8 --steps 2 --warmup 1 --fuse 2 --profile --top 60"
    result = _run(*flags.split(), "--unfold-bmm")
    assert result.returncode == 0, result.stderr
    assert "profile of --unfold-bmm: gpu_profile.py with it" in result.stdout, result.stdout
    out = json.loads(result.stdout.strip().splitlines()[-1])
    calls = {name: n for name, _, n in out["top"]}
    assert out["fuse"] == 2 and out["device"] == "cpu"
    assert "aten::im2col" in calls and "aten::bmm" in calls
    assert {n for name, n in calls.items() if "convolution" in name} == {3}


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize(
    "variant, flags",
    [
        ("FusedNhwcWeights", ""),
        ("FusedUnfoldBmm", ""),
        ("FusedCompiledConvs", "--compile-convs max-autotune-no-cudagraphs"),
    ],
)
def test_each_candidate_steps_as_the_fused_step_on_a_gpu_graphed(variant, flags, float64):
    """As on the CPU, on the GPU and graphed (what bench times): two steps of 3 classes in
    float64 give the fused step's losses, weights, gradients, Adam moments and G's average to
    float64 rounding; the compiled convolutions are inductor's, autotuned."""
    gpu = "--device-g cuda:0 --cuda-graphs"
    want = _stepped(_built(Fused, gpu), 2, False)
    got = _stepped(_built(getattr(_script(), variant), f"{gpu} {flags}"), 2, False)
    assert want["stats"].device.type == "cuda"
    _same(got, want)

"""benchmarks/fused_alternatives.py: the fused step's alternatives that training does not run
(NHWC maps, the other linear kernel, torch.compile, the K pairs on streams in one graph), each
timed against the fused step as training runs it. Each is smoke-run on the CPU at a tiny
configuration where a CPU can run it (the streams graph needs a GPU: marked so); the figures
themselves are measurements, not asserted here."""

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
    for flag in ("--streams", "--channels-last", "--bmm-linear", "--conv-linear", "--compile"):
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

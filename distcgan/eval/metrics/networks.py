"""The networks that score samples: loading them from local files and preparing images for them.

Three kinds, each mapping a batch of uint8 (N, H, W, C) images to (logits, features):
  inception-v3     torchvision's Inception-v3 with its ImageNet weights (1000 outputs, 2048
                   pool features). Images go to [-1, 1] (what torchvision's `transform_input`
                   produces from ImageNet-normalised input: the Google weights expect [-1, 1]),
                   grayscale is replicated to RGB, and PyTorch's bilinear resize
                   (align_corners=False) brings them to 299 x 299.
  inception-v3-tf  the TensorFlow 2015 Inception of the original IS and FID code (inception_tf.py):
                   1008 outputs, logits without the bias (as the original IS code), 2048 pool_3
                   features; TensorFlow 1.x's resize to 299 on [0, 255] values, then
                   (x - 128) / 128.
  FILE.pt          any TorchScript module mapping images in [-1, 1] (N, C, H, W) at the data's
                   resolution and channels to logits (N, K); its `features` method, if it has one
                   (`distcgan classifier train` exports one), gives the FID features, else the
                   logits do; a `logits_and_features` method gives both in one pass.
Nothing is downloaded: weights come from `--weights PATH` or torch's hub cache
(`torch.hub.get_dir()/checkpoints/`), and a missing file gives an error naming the file, its URL,
where to put it and how to pass it. Leaves out: what is computed from the outputs (scores.py,
evaluate.py).
"""

from __future__ import annotations

import hashlib
import json
import warnings
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from distcgan.errors import UserError
from distcgan.images import to_float

INCEPTION = "inception-v3"
INCEPTION_TF = "inception-v3-tf"
# file name, URL, description: the error for a missing file names all three.
WEIGHT_FILES = {
    INCEPTION: (
        "inception_v3_google-0cc3c7bd.pth",
        "https://download.pytorch.org/models/inception_v3_google-0cc3c7bd.pth",
        "torchvision's Inception-v3 ImageNet weights (Inception_V3_Weights.IMAGENET1K_V1)",
    ),
    INCEPTION_TF: (
        "pt_inception-2015-12-05-6726825d.pth",
        "https://github.com/mseitzer/pytorch-fid/releases/download/fid_weights/"
        "pt_inception-2015-12-05-6726825d.pth",
        "pytorch-fid's port of TensorFlow's inception-2015-12-05 (FID Inception weights)",
    ),
}
METADATA = "distcgan.json"  # the extra file of a TorchScript classifier written by distcgan
_INPUT = 299


def network_tag(spec: str) -> str:
    """A network's short name for file names (evaluate-TAG.json): the network kind, or the
    TorchScript file's stem."""
    return spec if spec in WEIGHT_FILES else Path(spec).stem


@dataclass
class Network:
    """A loaded network on one device; call it on a batch of uint8 (N, H, W, C) images."""

    name: str  # inception-v3, inception-v3-tf, or the TorchScript file's name
    path: str  # the weights or TorchScript file
    sha256: str  # of that file: with `name`, the key of cached real statistics
    module: nn.Module  # prepared input -> (logits, features)
    device: str
    num_outputs: int = 0
    feature_dim: int = 0
    metadata: dict[str, Any] = field(default_factory=dict)  # a distcgan classifier's distcgan.json

    @property
    def key(self) -> str:
        return f"{self.tag}-{self.sha256[:16]}"

    @property
    def tag(self) -> str:
        return network_tag(self.name if self.name in WEIGHT_FILES else self.path)

    def prepare(self, images: np.ndarray) -> torch.Tensor:
        if self.name == INCEPTION_TF:
            x = torch.from_numpy(images).to(self.device).permute(0, 3, 1, 2).float()  # [0, 255]
        else:
            x = to_float(images, self.device)  # [-1, 1]
        if self.name in WEIGHT_FILES and x.shape[1] == 1:
            x = x.expand(-1, 3, -1, -1)  # grayscale -> RGB
        return x

    @torch.no_grad()
    def __call__(self, images: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """uint8 (N, H, W, C) -> (logits (N, num_outputs), features (N, feature_dim)), float32."""
        logits, features = self.module(self.prepare(images))
        return logits.float(), features.float()


class _TorchvisionInception(nn.Module):
    """torchvision's Inception3 -> (logits, 2048 pool features) from [-1, 1] input."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        # nn.Module.__getattr__ is typed as returning Tensor | Module; torchvision's fc is a Linear.
        self.fc: nn.Module = net.fc  # type: ignore[assignment]
        net.fc = nn.Identity()  # the net now ends at the (flattened) average pool
        self.net = net

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if x.shape[-1] != _INPUT or x.shape[-2] != _INPUT:
            x = F.interpolate(x, size=(_INPUT, _INPUT), mode="bilinear", align_corners=False)
        features = self.net(x)  # (N, 2048); dropout is inactive in eval mode
        return self.fc(features), features


class _Scripted(nn.Module):
    def __init__(self, module: Any) -> None:
        super().__init__()
        self.m = module
        self.both = hasattr(module, "logits_and_features")  # one pass (distcgan's classifier)
        self.has_features = hasattr(module, "features")

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.both:
            return self.m.logits_and_features(x)
        logits = self.m(x)
        return logits, (self.m.features(x) if self.has_features else logits)


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def default_weights(name: str) -> Path:
    """Where torch's hub cache keeps the weights file of `name` (it may not be there)."""
    return Path(torch.hub.get_dir()) / "checkpoints" / WEIGHT_FILES[name][0]


def _where_to_get(name: str) -> str:
    _, url, what = WEIGHT_FILES[name]
    return (
        f"fetch {url} ({what}) and put it at {default_weights(name)}, or pass its path with "
        "--weights PATH (nothing is downloaded)"
    )


def _weights_path(name: str, weights: str | None) -> Path:
    if weights:
        path = Path(weights)
        if not path.is_file():
            raise UserError(f"--weights {weights}: no such file; {_where_to_get(name)}")
        return path
    path = default_weights(name)
    if not path.is_file():
        raise UserError(f"{name} weights not found: {_where_to_get(name)}")
    return path


def check_zip_crc(path: Path, what: str) -> None:
    """Refuse a file torch saved (a zip) whose members fail their CRC-32: torch reads them
    without checking, so a flipped byte in a weight changed the scores without a word. A file
    that is no zip at all is left to torch's loader to refuse."""
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError):
        return
    with archive:
        try:
            bad = archive.testzip()
            why = f"its member {bad} fails its CRC-32 check"
        except Exception as exc:  # a damaged member header: zipfile's errors vary
            bad, why = "?", f"its zip index is damaged: {type(exc).__name__}: {exc}"
    if bad is not None:
        raise UserError(f"{what} {path} is damaged ({why}): copy or write the file again")


def _read_state_dict(name: str, path: Path) -> dict[str, torch.Tensor]:
    check_zip_crc(path, "weights file")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # any unpickling failure means: not a state-dict file
        raise UserError(
            f"{path} is not a PyTorch state-dict file ({type(exc).__name__}): {_where_to_get(name)}"
        ) from exc
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise UserError(f"{path} does not hold a state dict of tensors: {_where_to_get(name)}")
    return state


def check_state_dict(
    name: str, path: Path, state: dict[str, torch.Tensor], module: nn.Module
) -> dict[str, torch.Tensor]:
    """The entries of `state` to load into `module`, after checking every key and shape.

    BatchNorm's `num_batches_tracked` counters may be present or not (files ported from
    TensorFlow have none); any other missing, unexpected or mis-shaped entry is an error that
    says which file `name` needs.
    """
    counter = "num_batches_tracked"
    expected = {k: v.shape for k, v in module.state_dict().items() if not k.endswith(counter)}
    given = {k: v for k, v in state.items() if not k.endswith(counter)}
    fc = given.get("fc.weight")
    if (
        fc is not None
        and fc.shape != expected["fc.weight"]
        and tuple(fc.shape)
        in (
            (1000, 2048),
            (1008, 2048),
        )
    ):
        other = INCEPTION if fc.shape[0] == 1000 else INCEPTION_TF
        raise UserError(
            f"{path} holds {other} weights ({fc.shape[0]} outputs), not {name}: pass "
            f"--network {other}, or {_where_to_get(name)}"
        )
    missing = sorted(set(expected) - set(given))
    unexpected = sorted(set(given) - set(expected))
    wrong = sorted(k for k in set(expected) & set(given) if given[k].shape != expected[k])
    if missing or unexpected or wrong:
        problems = []
        if missing:
            problems.append(f"{len(missing)} missing keys (first {missing[0]})")
        if unexpected:
            problems.append(f"{len(unexpected)} unexpected keys (first {unexpected[0]})")
        if wrong:
            k = wrong[0]
            problems.append(
                f"{len(wrong)} mis-shaped entries (first {k}: {tuple(given[k].shape)}, expected "
                f"{tuple(expected[k])})"
            )
        raise UserError(
            f"{path} is not the {name} weights file: {'; '.join(problems)}; {_where_to_get(name)}"
        )
    return {k: v.float() for k, v in given.items()}


def build_inception(name: str, aux_logits: bool = False) -> nn.Module:
    """The architecture of `name` with untrained weights (what a weights file is loaded into)."""
    # Imported here, not with the module: torchvision takes about 1.2 s to import after torch,
    # and a run scored by a TorchScript classifier (the digits' usual network) never needs it.
    if name == INCEPTION_TF:
        from distcgan.eval.metrics.inception_tf import InceptionV3TF  # lazy: see above

        return InceptionV3TF()
    from torchvision.models import inception_v3  # lazy: 1.2 s, see above

    # init_weights=False: the weights are overwritten anyway, and scipy's truncated normal
    # initialisation of 24 M parameters takes seconds.
    return inception_v3(weights=None, aux_logits=aux_logits, init_weights=False)


def _load_inception(name: str, weights: str | None, device: str) -> Network:
    path = _weights_path(name, weights)
    state = _read_state_dict(name, path)
    if name == INCEPTION_TF:
        module = build_inception(name)  # inception_tf.InceptionV3TF: the weights go in its .net
        net = module.get_submodule("net")
        net.load_state_dict(check_state_dict(name, path, state, net), strict=False)
    else:
        # torchvision's file carries the auxiliary classifier's weights; accept it with or without.
        net = build_inception(name, aux_logits=any(k.startswith("AuxLogits.") for k in state))
        net.load_state_dict(check_state_dict(name, path, state, net), strict=False)
        module = _TorchvisionInception(net)
    return Network(name, str(path), sha256_file(path), module.to(device).eval(), device)


def _load_torchscript(spec: str, weights: str | None, device: str) -> Network:
    path = Path(spec)
    if weights:
        raise UserError(
            f"--weights is for {INCEPTION} and {INCEPTION_TF}; the TorchScript file {spec} holds "
            "its own weights: drop --weights"
        )
    if not path.is_file():
        raise UserError(
            f"--network {spec}: no such file, and not one of {INCEPTION}, {INCEPTION_TF}; pass a "
            "TorchScript classifier (make one with: distcgan classifier train DATA.h5 --out "
            "FILE.pt)"
        )
    check_zip_crc(path, "--network")
    extra = {METADATA: ""}
    try:
        with warnings.catch_warnings():  # TorchScript's deprecation notice, once per rank
            warnings.simplefilter("ignore", FutureWarning)
            module = torch.jit.load(str(path), map_location=device, _extra_files=extra)
    except Exception as exc:  # torch raises RuntimeError or ValueError for a non-TorchScript file
        raise UserError(
            f"--network {spec} is not a TorchScript file ({type(exc).__name__}): save the "
            "classifier with torch.jit.save(torch.jit.script(model), PATH)"
        ) from exc
    meta = json.loads(extra[METADATA]) if extra[METADATA] else {}
    wrapped = _Scripted(module.eval())
    return Network(path.name, str(path), sha256_file(path), wrapped, device, metadata=meta)


def load_network(
    spec: str, weights: str | None, device: str, channels: int, resolution: int
) -> Network:
    """Load `spec` (inception-v3, inception-v3-tf or a TorchScript file) onto `device` and check
    it on one blank image of the samples' shape (uint8 (1, resolution, resolution, channels))."""
    if spec in WEIGHT_FILES:
        net = _load_inception(spec, weights, device)
    else:
        net = _load_torchscript(spec, weights, device)
    meta = net.metadata
    if meta and (meta.get("resolution"), meta.get("channels")) != (resolution, channels):
        raise UserError(
            f"classifier {spec} was trained on {meta.get('resolution')} px images with "
            f"{meta.get('channels')} channel(s) but the samples are {resolution} px with "
            f"{channels}: train a classifier on the matching data (distcgan classifier train)"
        )
    blank = np.full((1, resolution, resolution, channels), 128, dtype=np.uint8)
    try:
        logits, features = net(blank)
    except Exception as exc:
        raise UserError(
            f"network {spec} fails on a (1, {channels}, {resolution}, {resolution}) input in "
            f"[-1, 1] ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}): "
            "it must take the samples' channels and resolution"
        ) from exc
    if logits.ndim != 2 or logits.shape[0] != 1 or features.ndim != 2 or features.shape[0] != 1:
        raise UserError(
            f"network {spec} must map (N, C, H, W) to logits (N, K) and features (N, D), got "
            f"{tuple(logits.shape)} and {tuple(features.shape)}"
        )
    net.num_outputs, net.feature_dim = int(logits.shape[1]), int(features.shape[1])
    return net

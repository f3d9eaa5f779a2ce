"""Differentiable augmentation of what D sees (DiffAugment), with ADA's adaptive strength.

A per-class GAN trains D on a few hundred to a few thousand images, where D memorises them and G
stops improving. DiffAugment (Zhao et al., NeurIPS 2020) applies the same differentiable
augmentations to real and fake images, in D's step and in G's step (through which G's gradient
flows); ADA (Karras et al., NeurIPS 2020) applies each with probability p and steers p so that D's
sign on real images, r_t = E[sign(D(x_real))], stays near a target (0.6).

The policies and their constants are DiffAugment's (its paper, Section 3, and its released
"color,translation,cutout" policy):
- color: brightness + u - 0.5; saturation (x - channel mean) * 2u + mean (a no-op in grayscale);
  contrast (x - image mean) * (u + 0.5) + mean; u uniform in [0, 1) for each;
- translation: a shift of up to 1/8 of the side in each direction, zeros shifted in;
- cutout: a square of half the side, zeroed, centred anywhere in the image.

Randomness: every draw comes from the class's own stream (plan.class_seed(seed, class, "augment"))
on the CPU, so a class augments the same on any device, rank count or fusion, and resumes
exactly. Each image of each batch takes DRAWS uniforms whatever the policy and p, so p changing
(ADA) does not shift the stream. The draws go into the batch as a tensor, which keeps the step
free of host work (a CUDA graph replays it with new draws copied in). For cgan D, the label maps
are joined after augmentation, so they are never augmented.
Leaves out: when p changes (the loop calls `adapt` at log steps) and the step itself (step.py).
"""

from __future__ import annotations

import torch

from distcgan.config import POLICIES, parse_policy

__all__ = ["POLICIES", "parse_policy", "draw", "augment", "adapt"]

TRANSLATION = 0.125  # of the side, each direction (DiffAugment)
CUTOUT = 0.5  # of the side (DiffAugment)
# Per image: brightness, saturation, contrast, shift y, shift x, cutout y, cutout x, then one
# uniform per policy that, compared with p, says whether the policy applies to this image.
DRAWS = 10
GATES = slice(7, 10)
SETS = 3  # draws per step: D's real images, D's fakes, G's fakes


def draw(gen: torch.Generator, n: int, p: float) -> torch.Tensor:
    """A step's draws for n images: (SETS, n, DRAWS) on the CPU, the gates already 0 or 1
    (1 with probability p)."""
    u = torch.rand(SETS, n, DRAWS, generator=gen)
    u[..., GATES] = (u[..., GATES] < p).to(u.dtype)
    return u


def augment(x: torch.Tensor, d: torch.Tensor, policy: tuple[str, ...]) -> torch.Tensor:
    """Images x (B, F*C, H, W), F classes side by side on the channel axis (F = 1 alone), with
    their draws d (F*B, DRAWS), member-major (class k's B images at [k*B, (k+1)*B)): x with
    `policy` applied image by image, differentiably."""
    b, h, w = x.shape[0], x.shape[2], x.shape[3]
    f = d.shape[0] // b
    imgs = x.reshape(b, f, -1, h, w).transpose(0, 1).reshape(f * b, -1, h, w)
    d = d.to(x.device)  # float32: the shifts and squares are whole pixels in any precision
    if "color" in policy:
        imgs = _color(imgs, d)
    if "translation" in policy:
        imgs = _translate(imgs, d)
    if "cutout" in policy:
        imgs = _cutout(imgs, d)
    return imgs.reshape(f, b, -1, h, w).transpose(0, 1).reshape(b, -1, h, w)


def _color(x: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    y = x + (d[:, 0, None, None, None] - 0.5)  # brightness
    mean = y.mean(dim=1, keepdim=True)
    y = (y - mean) * (2 * d[:, 1, None, None, None]) + mean  # saturation
    mean = y.mean(dim=(1, 2, 3), keepdim=True)
    y = (y - mean) * (d[:, 2, None, None, None] + 0.5) + mean  # contrast
    return torch.where(d[:, 7, None, None, None] > 0, y, x)  # an ungated image is x, exactly


def _translate(x: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    n, c, h, w = x.shape
    sy, sx = int(h * TRANSLATION + 0.5), int(w * TRANSLATION + 0.5)
    gate = d[:, 8]
    dy = ((torch.floor(d[:, 3] * (2 * sy + 1)) - sy) * gate).long()  # in [-sy, sy], 0 ungated
    dx = ((torch.floor(d[:, 4] * (2 * sx + 1)) - sx) * gate).long()
    padded = torch.nn.functional.pad(x, (sx, sx, sy, sy))  # zeros shifted in
    rows = torch.arange(h, device=x.device)[None, :] + sy - dy[:, None]  # (n, h)
    cols = torch.arange(w, device=x.device)[None, :] + sx - dx[:, None]  # (n, w)
    idx = torch.arange(n, device=x.device)[:, None, None]
    out = padded.permute(0, 2, 3, 1)[idx, rows[:, :, None], cols[:, None, :]]  # (n, h, w, c)
    return out.permute(0, 3, 1, 2)


def _cutout(x: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    n, _, h, w = x.shape
    ch, cw = int(h * CUTOUT + 0.5), int(w * CUTOUT + 0.5)
    y0 = torch.floor(d[:, 5] * h) - ch // 2  # the square's first row, may start above the image
    x0 = torch.floor(d[:, 6] * w) - cw // 2
    rows = torch.arange(h, device=x.device, dtype=x.dtype)[None, :]
    cols = torch.arange(w, device=x.device, dtype=x.dtype)[None, :]
    in_rows = (rows >= y0[:, None]) & (rows < y0[:, None] + ch)  # (n, h)
    in_cols = (cols >= x0[:, None]) & (cols < x0[:, None] + cw)  # (n, w)
    cut = (in_rows[:, :, None] & in_cols[:, None, :]).to(x.dtype) * d[:, 9, None, None]
    return x * (1 - cut[:, None])


def adapt(p: float, real_sign: float, images: int, target: float, kimg: float) -> float:
    """ADA's update of p after `images` images with D's mean sign on real images `real_sign`:
    up when D is more sure of the reals than `target`, down when less, at a rate that moves p
    from 0 to 1 in `kimg` thousand images; p stays in [0, 1]."""
    step = images / (kimg * 1000)
    sign = (real_sign > target) - (real_sign < target)
    return min(1.0, max(0.0, p + sign * step))

"""How fast is evaluation? Network samples/s, and a 50,000-sample IS on 1 and 2 ranks.

    python benchmarks/eval_speed.py --data data/digits16.h5 --classifier data/digits16_classifier.pt
    python benchmarks/eval_speed.py --data data/digits16.h5 --classifier clf.pt --device cuda:0 \\
        --ranks 1 2 --network inception-v3 --weights inception_v3_google-0cc3c7bd.pth

1. Throughput: the classifier and Inception-v3 (torchvision's architecture; speed does not depend on
   the weights, so random ones are used) on `--device`, on images of the data file's size,
   counting only the network calls (a warm-up batch first; CUDA synchronised before each clock).
2. A 50,000-sample (`--n`) Inception Score: writes a stand-in sample file (real images drawn with
   replacement, with noise) beside the data, then times `distcgan evaluate --samples` under
   `mpiexec -n R` for each `--ranks` (the `eval_s` of its JSON: start to scores, real statistics
   included the first time, so one untimed run fills the cache first).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from distcgan.data import load_class, read_info, write_dataset
from distcgan.eval.metrics.networks import Network, _TorchvisionInception

REPO = Path(__file__).resolve().parent.parent


def throughput(net: Network, images: np.ndarray, batch: int, seconds: float) -> float:
    """Samples/s of `net` on batches of `images` for about `seconds` (after one warm-up)."""
    net(images[:batch])
    sync = torch.cuda.synchronize if net.device.startswith("cuda") else (lambda: None)
    done, t0 = 0, time.perf_counter()
    sync()
    while time.perf_counter() - t0 < seconds:
        net(images[:batch])
        sync()
        done += batch
    return done / (time.perf_counter() - t0)


def stand_in_samples(data: str, n: int, out: Path) -> None:
    info = read_info(data)
    rng = np.random.default_rng(0)
    per_class = np.full(info.num_classes, n // info.num_classes)
    per_class[: n % info.num_classes] += 1
    xs, ys = [], []
    for k, m in enumerate(per_class):
        real = load_class(data, k)
        x = real[rng.integers(0, len(real), m)].astype(np.int16)
        xs.append(np.clip(x + rng.integers(-20, 21, x.shape), 0, 255).astype(np.uint8))
        ys.append(np.full(m, k))
    write_dataset(out, np.concatenate(xs), np.concatenate(ys), info.class_names, "benchmark")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="a data file (gives size and classes)")
    parser.add_argument("--classifier", required=True, help="a TorchScript classifier (.pt)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=20.0, help="per throughput measurement")
    parser.add_argument("--n", type=int, default=50_000, help="samples of the timed IS")
    parser.add_argument("--ranks", type=int, nargs="*", default=[1, 2])
    parser.add_argument("--network", default=None, help="network of the timed IS (classifier)")
    parser.add_argument("--weights", default=None)
    args = parser.parse_args()
    info = read_info(args.data)
    images = np.concatenate([load_class(args.data, k) for k in range(info.num_classes)])
    images = images[np.random.default_rng(0).permutation(len(images))[: args.batch]]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, device {args.device}")

    from distcgan.eval.metrics.networks import load_network

    clf = load_network(args.classifier, None, args.device, info.channels, info.resolution)
    rate = throughput(clf, images, args.batch, args.seconds)
    print(
        f"classifier {clf.name}: {rate:,.0f} samples/s (batch {args.batch}, {info.resolution} px)"
    )
    from torchvision.models import inception_v3

    tv = inception_v3(weights=None, aux_logits=False, init_weights=False)
    module = _TorchvisionInception(tv).to(args.device).eval()
    inception = Network("inception-v3", "", "", module, args.device)
    rate = throughput(inception, images, args.batch, args.seconds)
    print(f"inception-v3: {rate:,.1f} samples/s (batch {args.batch}, resized to 299 px)")

    network = args.network or args.classifier
    if not args.ranks:
        return
    with tempfile.TemporaryDirectory(dir=Path(args.data).parent) as tmp:
        samples = Path(tmp) / "samples.h5"
        stand_in_samples(args.data, args.n, samples)
        for i, ranks in enumerate([args.ranks[0], *args.ranks]):
            out = Path(tmp) / f"r{ranks}.json"
            cmd = ["mpiexec", "-n", str(ranks), sys.executable, "-m", "mpi4py", "-m", "distcgan"]
            cmd[0] = str(Path(sys.executable).parent / "mpiexec")
            cmd += ["evaluate", "--samples", str(samples), "--data", args.data]
            cmd += ["--network", network, "--json", str(out), "--devices", args.device]
            cmd += ["--batch-size", str(args.batch), "--overwrite"]  # the first run's file again
            if args.weights:
                cmd += ["--weights", args.weights]
            subprocess.run(cmd, check=True, capture_output=True, cwd=REPO)
            if i == 0:
                continue  # filled the cache of real statistics
            got = json.loads(out.read_text())
            print(
                f"{args.n:,}-sample IS + FID with {Path(network).name} on {ranks} rank(s): "
                f"{got['eval_s']:.1f} s (scoring {got['score_s']:.1f} s; IS {got['is_mean']:.3f})"
            )


if __name__ == "__main__":
    main()

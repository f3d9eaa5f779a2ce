"""Pure planning functions: which classes a rank owns, where G and D run, threads and seeds.

No MPI, no torch state: every function here maps plain values to plain values so that each edge
case is unit-tested. `dist.py` gathers the facts (ranks, GPUs, CPUs) and calls these.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from distcgan.errors import UserError


def assign_classes(class_ids: Sequence[int], size: int) -> list[tuple[int, ...]]:
    """Split `class_ids` over `size` ranks in balanced contiguous blocks (rank r gets list r).

    With K classes on R <= K ranks, the first K % R ranks own one class more than the others
    (10 classes on 3 ranks: 4, 3, 3). R > K is an error until class groups exist.
    """
    k = len(class_ids)
    if size < 1:
        raise ValueError("size must be >= 1")
    if k == 0:
        raise UserError("no classes to train: the class selection is empty")
    if size > k:
        raise UserError(
            f"{size} ranks but only {k} classes to train: launch at most {k} ranks "
            "(each rank trains one or more whole classes)"
        )
    base, extra = divmod(k, size)
    blocks, start = [], 0
    for r in range(size):
        n = base + (1 if r < extra else 0)
        blocks.append(tuple(class_ids[start : start + n]))
        start += n
    return blocks


def plan_devices(
    local_rank: int,
    local_size: int,
    n_visible: int,
    shared: bool,
    override: str = "auto",
) -> tuple[str, str]:
    """Return (G's device, D's device) for one rank.

    `n_visible` is how many GPUs this rank sees; `shared` says whether every rank on the node
    sees the same GPUs (mpirun/srun without binding) rather than its own (jsrun resource sets,
    srun --gpus-per-task). Rules, in order:
      override "cpu" / "cuda:N" / "cuda:N,cuda:M": as given, checked against n_visible;
      no GPU: both on the CPU;
      shared and >= 2 GPUs per rank: G on cuda:2l, D on cuda:2l+1;
      shared and >= 1 GPU per rank: both on cuda:l;
      shared and fewer GPUs than ranks: both on cuda:(l mod n) (ranks share a GPU);
      own GPUs: G on cuda:0 and D on cuda:1, or both on cuda:0 when the rank has one.
    """
    if override != "auto":
        parts = override.split(",")
        for dev in parts:
            if dev.startswith("cuda"):
                index = int(dev.split(":")[1]) if ":" in dev else 0
                if index >= n_visible:
                    raise UserError(
                        f"devices {override!r} asks for {dev} but rank sees {n_visible} GPU(s): "
                        "check CUDA_VISIBLE_DEVICES and the launcher's GPUs per task, or use "
                        "--devices auto"
                    )
        g = parts[0] if parts[0] != "cuda" else "cuda:0"
        d = parts[-1] if parts[-1] != "cuda" else "cuda:0"
        return g, d
    if n_visible == 0:
        return "cpu", "cpu"
    if not shared:
        return ("cuda:0", "cuda:1") if n_visible >= 2 else ("cuda:0", "cuda:0")
    if n_visible >= 2 * local_size:
        return f"cuda:{2 * local_rank}", f"cuda:{2 * local_rank + 1}"
    gpu = f"cuda:{local_rank % n_visible}"
    return gpu, gpu


def threads_for_rank(
    own_cpus: int, node_cpus: int, local_size: int, override: int = 0
) -> tuple[int, str | None]:
    """Torch threads for one rank, so that the ranks of a node never oversubscribe its cores.

    `own_cpus` is the size of this rank's CPU affinity set; `node_cpus` the size of the union of
    the affinity sets of all ranks on the node. Bound ranks (jsrun -c 7, srun --cpu-bind) get
    their own cores; unbound ranks share the node's cores evenly. An override that would put
    more threads than cores on the node is lowered, with a warning (the second value).
    """
    fair = max(1, min(own_cpus, node_cpus // max(1, local_size)))
    if override <= 0:
        return fair, None
    if override * local_size > node_cpus and override > fair:
        return fair, (
            f"--threads {override} x {local_size} ranks on this node exceeds its {node_cpus} "
            f"cores: using {fair} threads per rank instead (oversubscribed cores slow every rank)"
        )
    return override, None


# Independent random streams of one class, each seeded from (run seed, class id, stream).
STREAMS = {"init": 0, "noise": 1, "data": 2, "fixed": 3, "sample": 4}


def class_seed(run_seed: int, class_id: int, stream: str, retry: int = 0) -> int:
    """A 63-bit seed for one random stream of one class: a function of the run seed and the class
    id only, never of the rank, so a class trains the same on 1 rank or on 1,000. `retry` > 0
    gives the stream used after that many rollbacks of a diverged class."""
    key = (class_id, STREAMS[stream]) + ((retry,) if retry else ())
    seq = np.random.SeedSequence(entropy=run_seed, spawn_key=key)
    return int(seq.generate_state(1, dtype=np.uint64)[0] >> np.uint64(1))

"""Failures injected on purpose by the fault tests (`--inject-fault KIND:CLASS:STEP[:RANK]`).

Each kind imitates something that happens on clusters: an exception in one rank ("raise"), a
rank killed by the OOM killer or a node failure ("kill", SIGKILL), a diverging GAN ("nan" once,
"nan-always" on every retry; "nan-term": once, with the scheduler's SIGTERM at that step), the
scheduler's SIGTERM alone at that step ("term"), and a full disk while a checkpoint is written
("enospc"). A fault fires on every rank that trains CLASS, or with RANK on that rank alone (one
rank of a data-parallel group).
Faults reach training through `FaultyStep`, a wrapper around the step object that the loop
steps instead of the plain one under --inject-fault: nothing of a fault is in the step's
arithmetic.
Leaves out: anything a real run would use; with no --inject-fault none of this runs.
"""

from __future__ import annotations

import errno
import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from distcgan.errors import UserError
from distcgan.run.atomic import atomic_path

KINDS = ("raise", "kill", "nan", "nan-always", "nan-term", "term", "enospc")


@dataclass(frozen=True)
class Fault:
    kind: str
    class_id: int
    step: int
    rank: int | None = None  # the one rank it fires on; None: every rank that trains the class

    @staticmethod
    def parse(text: str) -> Fault:
        """Parse "KIND:CLASS:STEP" or "KIND:CLASS:STEP:RANK", e.g. "raise:1:3" or "nan:-1:4:2"."""
        try:
            kind, class_id, step, *rank = text.split(":")
            if len(rank) > 1:
                raise ValueError(text)
            fault = Fault(kind, int(class_id), int(step), int(rank[0]) if rank else None)
        except ValueError:
            raise UserError(f"--inject-fault {text!r}: expected KIND:CLASS:STEP[:RANK]") from None
        if fault.kind not in KINDS:
            raise UserError(f"--inject-fault kind {fault.kind!r}: use one of {', '.join(KINDS)}")
        return fault

    def on(self, rank: int) -> Fault | None:
        """This fault as rank `rank` sees it: None where it names another rank."""
        return self if self.rank in (None, rank) else None

    def hits(self, class_id: int, step: int, retry: int = 0) -> bool:
        """Whether this fault fires at `step` of `class_id` on try number `retry`."""
        if (self.class_id, self.step) != (class_id, step):
            return False
        return retry == 0 or self.kind == "nan-always"

    def fire(self) -> None:
        """Do what the fault imitates (for "nan", FaultyStep poisons D's weights instead)."""
        if self.kind == "raise":
            raise RuntimeError(f"injected fault at class {self.class_id}, step {self.step}")
        if self.kind == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if self.kind == "enospc":
            raise OSError(errno.ENOSPC, "No space left on device (injected)")

    def at_step(self, class_id: int, step: int, retry: int) -> bool:
        """Called before each step (FaultyStep.step): "raise" and "kill" fire here; returns
        whether this step's loss is to go non-finite ("nan", "nan-always", "nan-term")."""
        if not self.hits(class_id, step, retry):
            return False
        if self.kind in ("raise", "kill"):
            self.fire()
        if self.kind in ("term", "nan-term"):  # a stop asked for (nan-term: the loss gone bad)
            os.kill(os.getpid(), signal.SIGTERM)
        return self.kind.startswith("nan")

    def before_checkpoint(self, class_id: int, step: int, target: Path) -> None:
        """Called by the training loop before it writes `target` (a checkpoint) at `step`: an
        "enospc" fault writes part of a file the way a real write would, then fails as a full
        disk does, leaving the previous checkpoint in place."""
        if self.kind != "enospc" or not self.hits(class_id, step):
            return
        with atomic_path(target) as tmp:
            tmp.write_bytes(b"half a checkpoint")
            self.fire()


class FaultyStep:
    """A training step object (train/step.py's PairStep) with a fault injected into it: what the
    training loop steps under --inject-fault in place of the step object it wraps.

    Before each step every member's class and step are shown to the fault (Fault.at_step:
    "raise", "kill" and "term" fire there). A member hit by a "nan" fault has its D weights set
    to NaN where the step reads them, so the loss goes non-finite at that very step, the NaN
    spreads through D's and G's updates as a diverging GAN's does, and the loop rolls the
    member back at its next log step; the other members are untouched (in a fused group, each
    class's weights are its own slice of every tensor: train/fused.py)."""

    def __init__(self, inner: Any, fault: Fault) -> None:
        self.inner, self.fault = inner, fault
        self.members: list[Any] = inner.members  # task.TaskState each

    def step(self) -> Any:
        """The inner step, each member first shown to the fault."""
        members = self.members
        hit = [self.fault.at_step(m.fault_key, m.pair.step, m.pair.retries) for m in members]
        for k in (k for k, h in enumerate(hit) if h):
            for w in d_weights(self.inner, k):
                w.fill_(float("nan"))
        return self.inner.step()

    def batches(self) -> Any:
        return self.inner.batches()

    def update(self, batches: Any) -> Any:
        return self.inner.update(batches)

    def store(self, k: int) -> None:
        self.inner.store(k)

    def load(self, k: int) -> None:
        self.inner.load(k)

    def reloading(self) -> Any:
        return self.inner.reloading()


def d_weights(pairs: Any, k: int) -> list[Any]:
    """Member k's D weights as a step object updates them, detached (tensors): a fused group's
    (one with `fuse` classes) class k's slice of each fused tensor, else the member's own D."""
    fuse = getattr(pairs, "fuse", 0)
    if fuse:
        return [p.detach().view(fuse, -1)[k] for p in pairs.D.parameters()]
    return [p.detach() for p in pairs.members[k].pair.D.parameters()]

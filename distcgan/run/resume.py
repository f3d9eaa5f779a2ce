"""What a `--resume` must not change without a word, checked by rank 0 before the run directory's
config.json or dataset.json is rewritten: the content of the data file (its fingerprint), and
the steps already trained (a lower --steps).

The fingerprint is, per class trained, the BLAKE2b (128 bit) of its image bytes in file order:
`data_prep` hashes each class the same way as it writes it. It covers the pixels of every class
trained (any change to them: inverted, shuffled within the class, another resolution); names
and counts are checked apart, and the labels by `read_info`. It leaves out the classes not
trained and the file's attributes. Computing it reads every trained image once at the start of
each launch, spread over the ranks (`class_digests`): the digits' 0.5 MB take milliseconds;
ImageNet at 64 px (15.7 GB) is 250 MB a rank on 64 ranks, about a second of reading and
hashing (BLAKE2b runs at about 1 GB/s a core), and minutes on one rank, against hours of training.
A run started before the fingerprint existed has none in its dataset.json: it resumes as before
(names and counts checked), and this launch records one, which later resumes check.
Leaves out: which changes a resume allows to the config (config.check_resume_changes).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from distcgan.errors import UserError
from distcgan.run import checkpoint
from distcgan.run.rundir import RunDir

FINGERPRINT = "fingerprint"  # dataset.json's key
METHOD = "blake2b-128 of each trained class's image bytes"


def fingerprint(digests: Mapping[int, str]) -> dict[str, Any]:
    """dataset.json's record of the content trained on: {"method", "classes": {id: digest}}."""
    return {"method": METHOD, "classes": {str(k): d for k, d in sorted(digests.items())}}


def check_same_data(rd: RunDir, data_path: str, digests: Mapping[int, str]) -> None:
    """Refuse a resume whose data file's trained classes differ in content from those the run
    started with (its dataset.json's fingerprint); a run without one passes."""
    old = rd.read_dataset()
    stored = (old.get(FINGERPRINT) or {}).get("classes", {})
    for k, digest in sorted(digests.items()):
        if str(k) in stored and stored[str(k)] != digest:
            first = old.get("path", "?")
            raise UserError(
                f"--data {data_path}: class {k}'s images differ from those the run in {rd.path} "
                f"started with (from {first}): resume with that data file (--data {first}), or "
                f"train on this one as a new run (another --run, or --overwrite)"
            )


def check_steps_kept(rd: RunDir, steps: int, stored_steps: int) -> None:
    """Refuse a resume whose --steps is below the steps a task has already trained (its newest
    checkpoint's step): the task would count as done with weights of later steps, and
    config.json would say fewer. The checkpoints are read only when --steps is lowered."""
    if steps >= stored_steps:
        return  # no checkpoint is past the steps it was trained to
    for task in rd.tasks():
        state = checkpoint.load_latest(task.path, log=lambda m: None)
        done = int(state["step"]) if state is not None else 0
        if done > steps:
            raise UserError(
                f"--steps {steps} is below the {done} steps {task.path.name} has already trained "
                f"in {rd.path}: a resume cannot take steps back; pass --steps {done} or more, or "
                "start a new run (another --run, or --overwrite)"
            )

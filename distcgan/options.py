"""Every command's options, declared once: a frozen dataclass per command (`bench` and
jobs/weak_scaling.py's sweep included) whose fields carry the type and the default, with the help
as a docstring under each field, and `add_options`, which makes the argparse flags from them. The
class's own docstring is the command's help (its line in `distcgan --help`), and its second
paragraph, if any, the description atop the command's --help (command_texts). The training
configuration itself is config.TrainConfig, whose flags add_config_flags makes alike; these are
the options around it. No torch import: every command's parser is built from here, so a bad flag
is said before torch loads.

`opt()` says where a field's flag is not plainly `--field-name VALUE`: a positional argument,
a switch that turns a default-True field off (`--no-progress`), a flag of another name (compare's
`--eval-seed`), one of a required mutually exclusive pair (evaluate's --run or --samples), a
metavar, choices not written as a Literal (the presets), a value read by a function of its own
(a walltime), a field with no flag (set by code, not by users), or a "stored" field (compare's
scoring options: on --resume the stored value stands unless the flag is given). A field whose
type is another options dataclass puts that one's flags in its place (the launch options that
train and compare share), with the words its help leaves open ({folder}, {dry_run}) filled in.
Besides the declarations: the values the command line gives (resolve_config, compare_options).
Leaves out: what the commands do with them (cli.py and each command's module), and the checks of
bench's flags (bench_flags.py).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import re
import shlex
import typing
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

from distcgan.config import (
    MODES,
    PRESETS,
    TrainConfig,
    apply_overrides,
    check_resume_changes,
    field_types,
    load_config_file,
    preset,
)
from distcgan.errors import UserError

# Sample counts when --n is not given, each defined here once: evaluate's help and
# eval/sampling/source.py use EVALUATE_N (the field stays None, so that --n given with --samples
# can be refused).
EVALUATE_N = 50_000  # evaluate --run: samples in all, split evenly over the run's classes
COMPARE_N = 10_000  # compare: samples scored per variant


def opt(  # noqa: PLR0913 - one keyword per way a flag can differ, each optional
    default: Any = MISSING,
    *,
    flag: str | None = None,
    positional: bool | str = False,
    metavar: str | None = None,
    exclusive: str | None = None,
    stored: bool = False,
    cli: bool = True,
    choices: tuple[Any, ...] | None = None,
    parse: Callable[[str], Any] | None = None,
    **words: str,
) -> Any:
    """A field with how its flag differs from `--field-name VALUE` (see the module docstring);
    `words` fill the placeholders of a nested options dataclass's help."""
    meta = dict(
        flag=flag,
        positional=positional,
        metavar=metavar,
        exclusive=exclusive,
        stored=stored,
        cli=cli,
        choices=choices,
        parse=parse,
        words=words,
    )
    if isinstance(default, (list, dict, set)) or dataclasses.is_dataclass(default):
        return field(default_factory=lambda: default, metadata=meta)
    return field(default=default, metadata=meta)


# ---- the options ------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class LaunchOptions:
    """What train and compare share: where the config starts, and what to do with an existing
    directory ({folder})."""

    preset: str | None = None
    """one of {presets} (default digits)"""
    config: str | None = None
    """JSON file of config fields, over the preset"""
    resume: bool = False
    """continue what is in {folder}"""
    overwrite: bool = False
    """delete {folder} first if it exists"""
    allow_regroup: bool = False
    """with --resume, let a started class train on another group size or threads per rank
    (other weights than an uninterrupted run's; without it such a resume is refused)"""
    dry_run: bool = False
    """{dry_run}"""
    progress: bool = opt(True, flag="--no-progress")
    """no progress bar on rank 0"""


@dataclass(frozen=True, kw_only=True)
class TrainOptions:  # besides the training config's own flags (add_config_flags)
    """train one G/D pair per class, classes spread over ranks"""

    run: str
    """run directory (created; docs/file-formats.md)"""
    launch: LaunchOptions = opt(
        LaunchOptions(), folder="--run", dry_run="print config, rank and device tables"
    )
    inject_fault: str | None = opt(None, metavar="KIND:CLASS:STEP[:RANK]")
    """testing only: raise, nan or kill at STEP of CLASS (on RANK alone)"""


@dataclass(frozen=True, kw_only=True)
class SampleOptions:
    """write a sample file (and a PNG grid) from a trained run"""

    run: str
    """a trained run directory"""
    per_class: int
    """samples per class"""
    out: str
    """output HDF5 file (data-file layout)"""
    grid: str | None = None
    """PNG grid, one row per class (default: OUT.png)"""
    overwrite: bool = False
    """replace --out and the grid if they exist (a data set is never replaced)"""
    seed: int = 0
    """sampling seed (with the run seed, class id)"""
    devices: str = "auto"
    """auto, cpu or cuda:N"""
    inject_fault: str | None = opt(None, metavar="raise:CLASS:0")
    """testing only: fail while sampling CLASS"""
    progress: bool = opt(True, flag="--no-progress")
    """no progress bar (none without a terminal)"""


@dataclass(frozen=True, kw_only=True)
class EvalOptions:
    """Inception Score, FID, per-class FID and classifier accuracy of a run or sample file"""

    run: str | None = opt(None, exclusive="what")
    """a trained run: samples are generated per rank, per class"""
    samples: str | None = opt(None, exclusive="what")
    """a sample file (distcgan sample): all of its images"""
    data: str | None = None
    """real data file for FID (default with --run: the run's data)"""
    network: str = "inception-v3"
    """inception-v3, inception-v3-tf or a TorchScript classifier FILE.pt"""
    weights: str | None = None
    """the inception weights file (default: torch's hub cache)"""
    n: int | None = None
    """samples in all, with --run (default {evaluate_n})"""
    classes: tuple[int, ...] | None = opt(None, cli=False)
    """with --samples, score just these classes (compare's real images)"""
    splits: int = 10
    """Inception Score splits (default 10)"""
    seed: int = 0
    """split permutation and sampling seed"""
    json: str | None = None
    """output JSON (default RUN/evaluate-NETWORK.json)"""
    overwrite: bool = False
    """replace the output JSON if it exists"""
    devices: str = "auto"
    """auto, cpu, cuda:N, or a G,network pair (cuda:0,cuda:1)"""
    batch_size: int = 100
    """images per network call"""
    stats_dir: str | None = None
    """folder for the real data's cached FID statistics (default: beside the data file when
    that folder is writable, else ~/.cache/distcgan/fid)"""
    progress: bool = opt(True, flag="--no-progress")
    """no progress bar (none without a terminal)"""


@dataclass(frozen=True, kw_only=True)
class ClassifierOptions:  # `distcgan classifier train`
    """train on the real data, report held-out accuracy"""

    data: str = opt(positional=True)
    """the data file (HDF5 layout of distcgan)"""
    out: str
    """output TorchScript file (.pt)"""
    overwrite: bool = False
    """replace --out if it exists"""
    epochs: int = 10
    """passes over the training part"""
    held_out: float = 0.1
    """fraction held out per class"""
    seed: int = 0
    """held-out split, init and batch seed"""
    batch_size: int = 64
    """images per step"""
    devices: str = "auto"
    """auto (cuda:0 if present), cpu or cuda:N"""
    progress: bool = opt(True, flag="--no-progress")
    """no progress bar (none without a terminal)"""


@dataclass(frozen=True, kw_only=True)
class CompareOptions:
    """train per-class, gan and cgan under one budget, score them alike, write the table

    The paper's comparison: per-class DC-GANs, one DC-GAN and one DC-CGAN (and, asked for,
    per-class DC-GANs fine-tuned from one shared DC-GAN), trained at the same batch on the same
    number of real images (per-class: --steps per class; gan and cgan: K x --steps), scored with
    the same network on the same number of samples; writes DIR/compare.md, compare.json and
    compare.png (docs/comparison.md).
    """

    # Besides the training config's own flags (add_config_flags). The scoring options are
    # stored with the comparison: a --resume keeps the stored value of each one not given.

    out: str
    """comparison directory (created; docs/file-formats.md)"""
    launch: LaunchOptions = opt(
        LaunchOptions(), folder="--out", dry_run="print the budget of each variant"
    )
    variants: tuple[str, ...] = opt(MODES, metavar="VARIANT", stored=True)
    """which to train, of {modes} and shared-per-class (per-class pairs fine-tuned from one
    DC-GAN trained on all the classes first; docs/comparison.md) (default: the first three)"""
    network: str | None = opt(None, stored=True)
    """inception-v3, inception-v3-tf or a TorchScript classifier FILE.pt (default: train the
    digits-style classifier on the data into DIR/classifier.pt)"""
    weights: str | None = opt(None, stored=True)
    """the inception weights file (default: torch's hub cache)"""
    n: int = opt(COMPARE_N, stored=True)
    """samples per variant (default {default})"""
    splits: int = opt(10, stored=True)
    """Inception Score splits (default 10)"""
    seed: int = opt(0, flag="--eval-seed", stored=True)
    """sampling and split permutation seed (0)"""
    eval_batch_size: int = opt(100, stored=True)
    """images per network call (default 100)"""
    classifier_epochs: int = opt(10, stored=True)
    """epochs of the default classifier (default 10)"""
    budget: Literal["images", "steps", "time"] = opt("images", stored=True)
    """what every variant gets the same of: images (the same real images seen: per-class
    --steps steps a class, gan and cgan K times as many; the default), steps (every pair --steps
    steps: per-class then spends K times the compute) or time (--budget-s seconds of training
    on these ranks each, every pair at most its images steps); fixed for the comparison"""
    budget_s: float = opt(0.0, stored=True)
    """with --budget time: each variant's training seconds on these ranks (a rank's pairs share
    them); fixed for the comparison"""
    seeds: int = opt(1, stored=True)
    """run seeds per variant: the config's --seed, +1, ...; the table shows the mean and 95%
    interval over them (default 1; grows on --resume without retraining a seed)"""
    real: bool = opt(True, flag="--no-real", stored=True)
    """do not score the real images"""
    shared_fraction: float | None = opt(None, stored=True)
    """with the shared-per-class variant: the share of the budget its shared phase takes, in
    (0, 1) (default 0.5, the only one measured yet: docs/studies/shared-start.md); fixed for
    the comparison"""
    freeze_d: int = opt(0, stored=True)
    """with the shared-per-class variant: D's first N blocks kept as the shared phase left them
    while each class fine-tunes (train --freeze-d; default 0: none)"""

    @property
    def progress(self) -> bool:
        return self.launch.progress

    @property
    def fraction(self) -> float:
        """The shared phase's share of the budget: --shared-fraction, 0.5 when not given, 0
        without the shared-per-class variant."""
        if "shared-per-class" not in self.variants:
            return 0.0
        return 0.5 if self.shared_fraction is None else self.shared_fraction


@dataclass(frozen=True, kw_only=True)
class ExportOptions:
    """write a trained run as one conditional generator G(z, y): safetensors weights, a
    torch.export program, config and model card (one process)"""

    run: str
    """a trained run directory"""
    out: str
    """the export folder to write: model.safetensors, config.json, generator.pt2, README.md
    (docs/using-a-model.md)"""
    overwrite: bool = False
    """replace --out if it holds an export"""


@dataclass(frozen=True, kw_only=True)
class GenerateOptions:
    """images from an export: a PNG grid or a sample file"""

    model: str
    """an export folder (distcgan export --out)"""
    classes: tuple[int, ...] = opt(flag="--class", metavar="K")
    """the classes to draw (a gan export's G takes no label: its classes only pick the noise,
    as distcgan sample does)"""
    n: int
    """images per class"""
    seed: int = 0
    """noise seed, with the run seed and the class id: distcgan sample --seed's images"""
    out: str
    """FILE.png (a grid, one row per class) or FILE.h5 (a sample file)"""
    overwrite: bool = False
    """replace --out if it exists (a data set is never replaced)"""
    devices: str = "auto"
    """auto (cuda:0 if present), cpu or cuda:N"""


@dataclass(frozen=True, kw_only=True)
class InfoOptions:
    """describe a data or sample file"""

    file: str = opt(positional=True)


@dataclass(frozen=True, kw_only=True)
class AnovaOptions:
    """one-way ANOVA of the images' channel means across classes"""

    file: str = opt(positional=True)
    json: str | None = None
    """also write the result to this JSON file"""
    overwrite: bool = False
    """replace --json if it exists"""


@dataclass(frozen=True, kw_only=True)
class BenchOptions:  # what bench times and how; bench_flags.py checks them
    """images/s of our training step vs a plain reference loop"""

    resolution: Literal[16, 32, 64] = 32
    batch_size: int = 64
    windows: int = 7
    """timed windows per variant"""
    steps: int = 10
    """steps per window"""
    warmup: int = 5
    threads: int = 0
    """0: every core this process may use"""
    device_g: str = "cpu"
    device_d: str | None = None
    """default: G's device"""
    amp: Literal["off", "bf16"] = "off"
    channels: int = 1
    """1 (digits, MNIST) or 3 (RGB)"""
    fuse: int = 1
    """K > 1: K classes trained as one fused pair against the same K one at a time"""
    cuda_graphs: bool = False
    """with --fuse K on one GPU: the fused step captured as a CUDA graph and replayed"""
    scaling: int = 0
    """also time N one-thread copies of our step at once against one alone"""
    augment: str = opt("none", metavar="POLICY")
    """also time our step with D's inputs augmented (color,translation,cutout), p 1; with --fuse
    K, the fused step so"""
    schedule: Literal["sync", "async"] = "sync"
    """async: also time our step under --schedule async (and the copy of D a step)"""
    batch_size_d: int = 0
    """with --schedule async: the images D sees per step (0: the batch)"""


@dataclass(frozen=True, kw_only=True)
class StatusOptions:
    """how the last launch of a run ended: exit 0 done, 3 diverged, 75 stopped (resume), 1
    crashed"""

    run: str
    """a run directory"""


@dataclass(frozen=True, kw_only=True)
class SuperviseOptions:
    """run a launcher command; pass stop signals on as SIGUSR1; exit with the code the run
    directory records (75: resubmit)

    For job scripts: distcgan supervise --run RUN -- mpiexec -n 8 python -m mpi4py -m distcgan
    train --run RUN ... . Launchers do not return the ranks' exit code reliably (Open MPI's
    returns 1 for a job whose ranks exited 75); this does.
    """

    run: str
    """the run directory the command trains"""
    command: tuple[str, ...] = opt((), positional=argparse.REMAINDER)
    """-- then the launcher command"""


@dataclass(frozen=True, kw_only=True)
class ReportOptions:
    """write RUN/report.html: the run, a per-rank timeline, curves, grids, evaluation (one
    self-contained file; also for a compare directory)"""

    run: str
    """a run directory, or a compare --out directory"""
    overwrite: bool = False
    """replace RUN/report.html if it exists"""


def _variable(name: str) -> Any:
    """A job-plan field: a template variable as typed ("" = not set), its name the metavar."""
    return opt("", metavar=name)


@dataclass(frozen=True, kw_only=True)
class JobPlanOptions:  # one flag per field of run/jobplan.py's JobAsk, as the template has it
    """for job templates: ranks, nodes and --fuse, as NAME=value

    For job templates: the plan as NAME=value lines to eval (FUSE, and with --nodes RANKS,
    NODES, RANKS_PER_NODE, GPUS_PER_RANK, CORES_PER_RANK); a bad value is one line, exit 2.
    """

    scheduler: Literal["local", "slurm", "lsf"] = "local"
    classes_per_rank: str = _variable("CLASSES_PER_RANK")
    """CLASSES_PER_RANK"""
    classes_per_gpu: str = _variable("CLASSES_PER_GPU")
    """CLASSES_PER_GPU"""
    nodes: str = _variable("NODES")
    """NODES"""
    classes: str = _variable("CLASSES")
    """CLASSES"""
    ranks: str = _variable("RANKS")
    """RANKS"""
    ranks_per_node: str = _variable("RANKS_PER_NODE")
    """RANKS_PER_NODE"""
    gpus_per_rank: str = _variable("GPUS_PER_RANK")
    """GPUS_PER_RANK"""
    gpus_per_node: str = _variable("GPUS_PER_NODE")
    """GPUS_PER_NODE"""
    cores_per_rank: str = _variable("CORES_PER_RANK")
    """CORES_PER_RANK"""
    cores_per_node: str = _variable("CORES_PER_NODE")
    """CORES_PER_NODE"""


def walltime_minutes(text: str) -> int:
    """The weak-scaling sweep's `--walltime` in minutes: "H:MM" (hours and minutes, as LSF's -W)
    or "M" (minutes). Never handed on as typed: Slurm's -t reads "0:30" as 0 minutes 30 seconds."""
    m = re.fullmatch(r"(?:(\d+):)?(\d+)", text.strip())
    if m is None or (m.group(1) is not None and len(m.group(2)) != 2):
        raise argparse.ArgumentTypeError(f"{text!r}: give H:MM (e.g. 1:30) or minutes (e.g. 90)")
    minutes = int(m.group(1) or 0) * 60 + int(m.group(2))
    if minutes < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: a walltime of at least one minute")
    return minutes


@dataclass(frozen=True, kw_only=True)
class WeakScalingOptions:  # `python jobs/weak_scaling.py`; its docstring says how they combine
    """Weak-scaling sweep: the same work per rank (K classes of fixed steps) on 1, 2, 4... ranks."""

    launcher: Literal["local", "lsf", "slurm"] = "local"
    ranks: tuple[int, ...]
    data: Path = Path("data/digits16.h5")
    out: Path = Path("runs/weak_scaling")
    preset: str | None = opt(None, choices=tuple(PRESETS))
    """the data's preset (required but with --collect)"""
    steps: int = 300
    """steps per class (= per rank)"""
    extra: str = ""
    """more distcgan train flags"""
    collect: bool = False
    """only collect finished runs"""
    overwrite: bool = False
    """re-measure: delete the runs"""
    dry_run: bool = False
    """print the commands only"""
    progress: bool = opt(True, flag="--no-progress")
    """no bar of the sizes (none without a terminal)"""
    wait: bool = False
    """slurm: wait for the jobs, collect"""
    gpus_per_rank: int = 2
    """2 (G, D), 1, or 0: CPUs"""
    classes_per_rank: int | None = None
    """K classes a rank, trained as one fused pair (the templates' CLASSES_PER_RANK; default 1)"""
    classes_per_gpu: int | None = None
    """deprecated: --classes-per-rank"""
    gpus_per_node: int | None = None
    """default {slurm_gpus_per_node} (slurm), Summit's 6 (lsf)"""
    ranks_per_node: int | None = None
    """default: what a node's GPUs (LSF: and cores) hold"""
    cpus_per_rank: int = 1
    """slurm --cpus-per-task"""
    walltime: int = opt(30, parse=walltime_minutes)
    """H:MM or minutes (lsf, slurm)"""
    submit_args: tuple[str, ...] = opt((), parse=shlex.split)
    """more bsub/sbatch options as one string: --submit-args='-A PROJ'"""


# ---- the options' values ----------------------------------------------------------------------


def config_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The training config's fields given on the command line (add_config_flags), as JSON."""
    return {
        name: list(v) if isinstance(v, (list, tuple)) else v
        for name in field_types()
        if (v := getattr(args, f"cfg_{name}", None)) is not None
    }


def resolve_config(
    launch: LaunchOptions, flags: dict[str, Any], stored: TrainConfig | None, folder: str
) -> TrainConfig:
    """preset -> --config file -> `flags` (config_flags). On --resume, `stored` (the config the
    run or comparison in `folder` started with) replaces the preset: the same command line that
    started the run may continue it, and the preset, a config file and flags may only repeat it
    or change the fields that a resume allows."""
    if stored is None:
        cfg = preset(launch.preset or "digits")
    elif launch.preset and launch.preset != stored.preset:
        raise UserError(
            f"--resume: {folder} was started with preset {stored.preset!r}, not "
            f"{launch.preset!r}; drop --preset or start a new run"
        )
    else:
        cfg = stored
    if launch.config:
        cfg = apply_overrides(cfg, load_config_file(launch.config), where=launch.config)
    cfg = apply_overrides(cfg, flags, where="command line")
    if stored is not None:
        check_resume_changes(stored, cfg)
    return cfg


def compare_options(args: argparse.Namespace, stored: dict[str, Any]) -> CompareOptions:
    """Compare's options from parsed `args` and `stored`, the scoring options stored with the
    comparison ({} unless --resume): one not given on the command line keeps its stored value,
    and --budget and --budget-s may not change."""
    if args.resume:
        started = {"budget": "images", "budget_s": 0.0, **stored}  # older: the images rule
        for k in ("budget", "budget_s"):
            given = getattr(args, k)
            if given is not None and given != started[k]:
                flag = "--" + k.replace("_", "-")
                raise UserError(
                    f"--resume cannot change {flag} ({started[k]} -> {given}): the comparison "
                    f"in {args.out} was started under it; start a new one with another --out"
                )
    kept = {k: v for k, v in stored.items() if getattr(args, k) is None}
    if "variants" in kept:
        kept["variants"] = tuple(kept["variants"])
    return options_from(CompareOptions, args, **kept)


def stored_fields(cls: type) -> tuple[str, ...]:
    """The fields of `cls` kept with what they configure (compare's scoring options)."""
    return tuple(f.name for f in fields(cls) if f.metadata.get("stored"))


# ---- flags from fields ------------------------------------------------------------------------


def command_texts(cls: type) -> dict[str, str]:
    """A command's help, the first paragraph of its options dataclass's docstring (its line in
    `distcgan --help`), and its description, the rest if any (atop its own --help); whitespace
    folded, as argparse prints them."""
    help, _, description = (" ".join(p.split()) for p in (cls.__doc__ or "").partition("\n\n"))
    return {"help": help, **({"description": description} if description else {})}


def field_docs(cls: type) -> dict[str, str]:
    """The docstring under each field of a dataclass, read from its source (the one place they
    live), whitespace folded."""
    body = ast.parse(inspect.getsource(cls)).body[0]
    assert isinstance(body, ast.ClassDef)
    docs = {}
    for node, nxt in zip(body.body, body.body[1:]):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(nxt, ast.Expr)
            and isinstance(nxt.value, ast.Constant)
        ):
            docs[node.target.id] = " ".join(str(nxt.value.value).split())
    return docs


def add_options(
    parser: argparse.ArgumentParser, cls: type, words: dict[str, str] | None = None
) -> None:
    """One argument per field of options dataclass `cls`, in field order (see the module
    docstring for what `opt()` changes); dest is the field's name."""
    docs, hints = field_docs(cls), typing.get_type_hints(cls)
    words = {
        "presets": ", ".join(PRESETS),
        "modes": ", ".join(MODES),
        "evaluate_n": str(EVALUATE_N),
        **(words or {}),
    }
    groups: dict[str, Any] = {}
    for f in fields(cls):
        meta = f.metadata
        if not meta.get("cli", True):
            continue
        if dataclasses.is_dataclass(hints[f.name]):
            add_options(parser, hints[f.name], {**words, **meta["words"]})
            continue
        default = None if f.default is MISSING else f.default
        text = docs.get(f.name, "").format(**words, default=default)
        target = parser
        if meta.get("exclusive"):
            if meta["exclusive"] not in groups:
                groups[meta["exclusive"]] = parser.add_mutually_exclusive_group(required=True)
            target = groups[meta["exclusive"]]
        flag, kwargs = _argument(f, hints[f.name])
        target.add_argument(flag, help=text.replace("%", "%%") or None, **kwargs)


def add_config_flags(parser: argparse.ArgumentParser, skip: tuple[str, ...] = ()) -> None:
    """One --flag per TrainConfig field (but `skip`), documented by the field's docstring, in a
    group of their own; dest is cfg_NAME, None where not given (config.apply_overrides then
    changes only the fields given)."""
    docs = {k: v.replace("%", "%%") for k, v in field_docs(TrainConfig).items()}
    group = parser.add_argument_group("training configuration (override the preset)")
    for name, typ in field_types().items():
        if name == "preset" or name in skip:
            continue
        flag = "--" + name.replace("_", "-")
        kwargs: dict[str, Any] = {"dest": f"cfg_{name}", "default": None, "help": docs.get(name)}
        if typ is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        elif typ is int or typ is float or typ is str:
            kwargs["type"] = typ
            kwargs["metavar"] = typ.__name__.upper()
        else:  # tuple[int, ...]
            kwargs.update(type=int, nargs="*", metavar="ID")
        group.add_argument(flag, **kwargs)


def _argument(f: dataclasses.Field, typ: Any) -> tuple[str, dict[str, Any]]:
    """The flag (or positional name) and add_argument's keywords for one field."""
    meta = f.metadata
    name = meta.get("flag") or "--" + f.name.replace("_", "-")
    required = f.default is MISSING and f.default_factory is MISSING
    if meta.get("positional"):  # True, or argparse's nargs for it (supervise's "...")
        return f.name, {} if meta["positional"] is True else {"nargs": meta["positional"]}
    kwargs: dict[str, Any] = {"dest": f.name}
    if meta.get("stored"):
        kwargs["default"] = None  # not given: the stored value, else the field's default
    elif not required:
        kwargs["default"] = f.default if f.default is not MISSING else None
    if typ is bool:
        kwargs["action"] = "store_false" if f.default is True else "store_true"
        if meta.get("stored"):
            kwargs["default"] = None
        return name, kwargs
    kwargs.update(_value(f, typ))
    if required:
        kwargs["required"] = True
    if meta.get("metavar"):
        kwargs["metavar"] = meta["metavar"]
    return name, kwargs


def _value(f: dataclasses.Field, typ: Any) -> dict[str, Any]:
    """add_argument's keywords for how a field's value is read: type, choices, nargs."""
    meta = f.metadata
    choices = {"choices": meta["choices"]} if meta.get("choices") else {}
    if meta.get("parse"):  # a value read by a function of its own (a walltime, shell words)
        return {"type": meta["parse"], **choices}
    if typing.get_origin(typ) is tuple:
        return {"nargs": "+", "type": typing.get_args(typ)[0], **choices}
    if typing.get_origin(typ) is Literal:  # a closed choice: argparse names the others
        values = typing.get_args(typ)
        return {"type": type(values[0]), "choices": values}
    return {"type": _seed if f.name == "seed" else _value_type(typ), **choices}


def _seed(text: str) -> int:
    """A seed flag's value: numpy's SeedSequence takes only non-negative integers, and a negative
    one raised its ValueError as a traceback after the run had been read."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a seed is a whole number >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"a seed is a whole number >= 0, got {value}")
    return value


def _value_type(typ: Any) -> Any:
    """int for `int | None`, str for `str`..."""
    args = [a for a in typing.get_args(typ) if a is not type(None)]
    return args[0] if args else typ


def options_from(cls: type, args: argparse.Namespace, **given: Any) -> Any:
    """An instance of options dataclass `cls` from parsed `args` (nested ones too); `given`
    replaces fields (a stored field's value when its flag was not given, for one)."""
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for f in fields(cls):
        if f.name in given:
            values[f.name] = given[f.name]
        elif dataclasses.is_dataclass(hints[f.name]):
            values[f.name] = options_from(hints[f.name], args)
        elif f.metadata.get("cli", True) and getattr(args, f.name, None) is not None:
            value = getattr(args, f.name)
            values[f.name] = tuple(value) if isinstance(value, list) else value
    return cls(**values)

"""Every command's options, declared once: a frozen dataclass per command whose fields carry the
type and the default, with the help as a docstring under each field, and `add_options`, which
makes the argparse flags from them as cli.py makes TrainConfig's (the training configuration
itself is config.TrainConfig; these are the options around it). No torch import: the parser of
every command is built from here (bench's flags from bench_flags.py), so a bad flag is said
before torch loads.

`opt()` says where a field's flag is not plainly `--field-name VALUE`: a positional argument,
a switch that turns a default-True field off (`--no-progress`), a flag of another name (compare's
`--eval-seed`), one of a required mutually exclusive pair (evaluate's --run or --samples), a
metavar, a field with no flag (set by code, not by users), or a "stored" field (compare's scoring
options: on --resume the stored value stands unless the flag is given). A field whose type is
another options dataclass puts that one's flags in its place (the launch options that train and
compare share), with the words its help leaves open ({folder}, {dry_run}) filled in.
Leaves out: what the commands do with them (cli.py and each command's module).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import typing
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Literal

from distcgan.config import MODES, PRESETS

# Sample counts when --n is not given, each defined here once: evaluate's help and eval/evaluate.py
# use EVALUATE_N (the field stays None, so that --n given with --samples can be refused).
EVALUATE_N = 50_000  # evaluate --run: samples in all, split evenly over the run's classes
COMPARE_N = 10_000  # compare: samples scored per variant


def opt(  # noqa: PLR0913 - one keyword per way a flag can differ, each optional
    default: Any = MISSING,
    *,
    flag: str | None = None,
    positional: bool = False,
    metavar: str | None = None,
    exclusive: str | None = None,
    stored: bool = False,
    cli: bool = True,
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
class TrainOptions:
    """`distcgan train`, besides the training config's own flags."""

    run: str
    """run directory (created; docs/file-formats.md)"""
    launch: LaunchOptions = opt(
        LaunchOptions(), folder="--run", dry_run="print config, rank and device tables"
    )
    inject_fault: str | None = opt(None, metavar="KIND:CLASS:STEP[:RANK]")
    """testing only: raise, nan or kill at STEP of CLASS (on RANK alone)"""


@dataclass(frozen=True, kw_only=True)
class SampleOptions:
    """`distcgan sample`."""

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
    """`distcgan evaluate`."""

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
class ClassifierOptions:
    """`distcgan classifier train`."""

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
    """`distcgan compare`, besides the training config's own flags. The scoring options are
    stored with the comparison: a --resume keeps the stored value of each one not given."""

    out: str
    """comparison directory (created; docs/file-formats.md)"""
    launch: LaunchOptions = opt(
        LaunchOptions(), folder="--out", dry_run="print the budget of each variant"
    )
    variants: tuple[str, ...] = opt(MODES, metavar="VARIANT", stored=True)
    """which to train, of {modes} (default: all three)"""
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

    @property
    def progress(self) -> bool:
        return self.launch.progress


@dataclass(frozen=True, kw_only=True)
class ExportOptions:
    """`distcgan export`."""

    run: str
    """a trained run directory"""
    out: str
    """the export folder to write: model.safetensors, config.json, generator.pt2, README.md
    (docs/using-a-model.md)"""
    overwrite: bool = False
    """replace --out if it holds an export"""


@dataclass(frozen=True, kw_only=True)
class GenerateOptions:
    """`distcgan generate`."""

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


def stored_fields(cls: type) -> tuple[str, ...]:
    """The fields of `cls` kept with what they configure (compare's scoring options)."""
    return tuple(f.name for f in fields(cls) if f.metadata.get("stored"))


# ---- flags from fields ------------------------------------------------------------------------


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


def _argument(f: dataclasses.Field, typ: Any) -> tuple[str, dict[str, Any]]:
    """The flag (or positional name) and add_argument's keywords for one field."""
    meta = f.metadata
    name = meta.get("flag") or "--" + f.name.replace("_", "-")
    required = f.default is MISSING and f.default_factory is MISSING
    if meta.get("positional"):
        return f.name, {}
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
    if typing.get_origin(typ) is tuple:
        kwargs.update(nargs="+", type=typing.get_args(typ)[0])
    elif typing.get_origin(typ) is Literal:  # a closed choice: argparse names the others
        kwargs.update(type=str, choices=typing.get_args(typ))
    elif f.name == "seed":
        kwargs["type"] = _seed
    else:
        kwargs["type"] = _value_type(typ)
    if required:
        kwargs["required"] = True
    if meta.get("metavar"):
        kwargs["metavar"] = meta["metavar"]
    return name, kwargs


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

"""The one training configuration: a frozen, typed dataclass, its presets and its parsing.

Values are resolved in this order: preset -> `--config FILE.json` -> command-line flags. On
`--resume` the run directory's own `config.json` replaces the preset, and only the fields in
`RESUMABLE_FIELDS` may change. Leaves out: the flags made from its fields (options.py's
`add_config_flags`) and the command line (cli.py).
"""

from __future__ import annotations

import dataclasses
import json
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Literal, TypeGuard

from distcgan.errors import UserError
from distcgan.plan import check_devices

# per-class: one unconditional pair per class (the paper's method); gan: one unconditional pair on
# all the classes; cgan: one pair conditioned on the label. Also the variants of `compare`.
Mode = Literal["per-class", "gan", "cgan"]
MODES: tuple[Mode, ...] = typing.get_args(Mode)
Amp = Literal["off", "bf16"]
DBatch = Literal["joint", "separate"]
Schedule = Literal["sync", "async"]
Graphs = Literal["auto", "on", "off"]

# Image sizes the DC-GAN architectures are defined for (models.py); here, not there, so that
# data_prep and the job-script helpers can check them without importing torch.
RESOLUTIONS = (16, 32, 64)
# The device types whose fused linear layers are batched matmuls (models.linear_over_maps; here
# so that bench checks its flags without torch). models imports it: a test that patches
# models.BMM_DEVICES steers linear_over_maps, not bench's check of its flags.
BMM_DEVICES = ("cuda",)

# Differentiable augmentations of D's inputs (train/augment.py, DiffAugment's definitions).
POLICIES = ("color", "translation", "cutout")


def parse_policy(text: str) -> tuple[str, ...]:
    """An --augment value: "none" -> (); "color,cutout" -> ("color", "cutout"). An unknown or
    repeated name raises ValueError with that name."""
    if text == "none":
        return ()
    names = tuple(x.strip() for x in text.split(","))
    bad = [x for x in names if x not in POLICIES]
    if bad or not names or len(set(names)) != len(names):
        raise ValueError(bad[0] if bad else text)
    return names


def is_mode(name: str) -> TypeGuard[Mode]:
    """Whether `name` (a string from the command line) is one of MODES."""
    return name in MODES


@dataclass(frozen=True)
class TrainConfig:
    """Everything that decides what a run computes. Written to RUN/config.json."""

    preset: str = "digits"
    """Name of the preset these values started from (recorded for reference)."""
    mode: Mode = "per-class"
    """per-class (one unconditional pair per class, the paper's method), gan (one unconditional
    pair on all classes) or cgan (one pair conditioned on the label)."""
    data: str = ""
    """Path of the class-partitioned HDF5 data file (docs/file-formats.md)."""
    classes: tuple[int, ...] = ()
    """Class ids to train; empty means every class in the data file."""
    resolution: int = 16
    """Image side in pixels (16, 32 or 64); must match the data file."""
    z_dim: int = 100
    """Length of the generator's noise vector z."""
    batch_size: int = 64
    """Real (and fake) images per step per rank (a group of R ranks: R times as many)."""
    global_batch_size: int = 0
    """If > 0, images per step for a whole data-parallel group, split over its ranks (strong
    scaling: the same batch on any number of ranks); batch_size is then ignored."""
    grad_accum: int = 1
    """Micro-batches per step: a rank's batch is split in this many, gradients accumulate."""
    steps: int = 600
    """Training steps per class (one D update and one G update each)."""
    lr_g: float = 2e-4
    """Adam learning rate of G."""
    lr_d: float = 2e-4
    """Adam learning rate of D."""
    beta1: float = 0.5
    """Adam beta1 (0.5 for GANs, as in DC-GAN)."""
    beta2: float = 0.999
    """Adam beta2."""
    ema_decay: float = 0.999
    """Samples and grids come from an exponential moving average of G's weights with this
    decay (warmed up as min(decay, (1+t)/(10+t))); 0 samples from G itself."""
    d_dropout: float = 0.25
    """Dropout after each of D's blocks (the paper's 0.25)."""
    d_bn_eps: float = 0.8
    """eps of D's BatchNorm layers: the paper's (and its reference code's) 0.8, or PyTorch's
    default 1e-5, with which D normalises small activations too."""
    sync_bn: bool = False
    """In a data-parallel group, BatchNorm statistics over the whole group's batch."""
    data_shard: bool = True
    """In a data-parallel group, each rank loads only its share of the rows; without it every
    rank loads them all and takes its slice of the group's batch (then R ranks x batch B train
    exactly as one rank x batch R*B)."""
    d_batch: DBatch = "joint"
    """How D sees a step's images: "joint" (real and fake in one batch, shared BatchNorm
    statistics) or "separate" (two batches, as the paper's reference code; not at 16 px)."""
    seed: int = 0
    """Run seed; every class's seeds derive from (seed, class_id), never from the rank."""
    log_every: int = 50
    """Steps between metric lines in class_XXX/metrics.jsonl (and NaN checks)."""
    checkpoint_every: int = 200
    """Steps between checkpoints; one is always written at the end."""
    sample_every: int = 0
    """Steps between sample grids in class_XXX/; 0 writes only the final grid."""
    tensorboard: bool = True
    """TensorBoard events under RUN/tb/class_XXX/: the metrics at each log step and each grid
    (view with `tensorboard --logdir RUN/tb`)."""
    channels_last: bool = True
    """NHWC memory format for G, D and the images (faster convolutions on CPUs and GPUs)."""
    amp: Amp = "off"
    """Mixed precision: "off" or "bf16" (autocast). On GPUs, and on CPUs with AMX (2.4x faster
    at 32 px on an AMX Xeon, one thread) or AVX-512's bf16 instructions (1.68x on an AMD EPYC);
    on an AMD EPYC without either it was 20x slower: measure with `distcgan bench --amp bf16`."""
    max_retries: int = 2
    """Rollbacks to the last good checkpoint (with a new noise seed) when a class's loss is
    NaN or infinite, before that class is given up (the other classes go on)."""
    devices: str = "auto"
    """Where G and D live: "auto", "cpu", one device ("cuda:0") or a "G,D" pair (cuda:0,cuda:1)."""
    threads: int = 0
    """Torch CPU threads per rank; 0 divides the node's cores among its ranks."""
    fuse: str = "auto"
    """Classes a rank trains at once as one fused G and one fused D (per-class mode): K, or
    "auto": 1 on CPUs, on GPUs as many of the rank's classes as fit half the free memory."""
    cuda_graphs: Graphs = "auto"
    """Capture a fused group's step as a CUDA graph and replay it: "auto" does where it can (a
    fused group with G and D on one GPU, --schedule sync; 1.1x to 4.4x the eager step on an H100),
    "on" asks for it (an error with G and D apart or off a GPU, or --schedule async), "off"
    steps eagerly. Only fused groups are graphed: classes trained alone step eagerly."""
    augment: str = "none"
    """Differentiable augmentation of D's real and fake images (DiffAugment): none (the paper's
    training) or a comma list of color, translation, cutout."""
    augment_p: str = "1"
    """The probability that each augmentation applies to an image, or auto: ADA's adaptive p,
    from 0, steered so that D's mean sign on real images stays near augment_target."""
    augment_target: float = 0.6
    """ADA's target for D's mean sign on real images (the ADA paper's 0.6)."""
    augment_kimg: float = 500.0
    """ADA's speed: thousands of images in which p may go from 0 to 1 (the ADA paper's 500)."""
    schedule: Schedule = "sync"
    """How G's and D's updates follow each other: sync (the paper's step: D, then G through the
    updated D) or async (ParaGAN's: at step t, D steps on the fakes G made at step t-1 while G
    steps through a copy of D as it was before D's update, refreshed once a step; G and D on two
    devices then both work at once)."""
    batch_size_d: int = 0
    """With --schedule async: real and fake images D sees per step per rank, of the batch G
    generates (ParaGAN's asymmetric "G-128 D-64"); 0: the whole batch."""
    time_limit_s: float = 0.0
    """Training seconds per pair, every launch together (checkpoints, grids and scores not
    counted): a pair is done at the first step past them (the time is looked at on log steps and
    on the step its pace foretells), or at steps if that comes first; 0: no limit. Its step
    count then depends on the machine's speed (compare --budget time)."""
    score_every: int = 0
    """Steps between scores during training (a multiple of log_every): each pair's G draws
    score_n samples, scored by score_network against its classes' real images (FID, precision,
    recall: score_fid... in its metrics lines, drawn in the report); 0: never."""
    score_n: int = 2000
    """Samples per pair at each score (split evenly over a cgan's classes; compare passes gan and
    cgan K times its own, so that every variant is scored on as many a class)."""
    score_network: str = ""
    """The network of the scores during training: a classifier FILE.pt (distcgan classifier
    train), inception-v3 or inception-v3-tf."""
    init_from: str = ""
    """Per-class mode: the run directory of a finished --mode gan run whose final G, D and G's
    moving average every class's pair starts from, with fresh Adam states; empty: from scratch,
    the paper's."""
    freeze_d: int = 0
    """With --init-from or --shared-steps: D's first N blocks (of 4, input first) kept as the
    start left them while each class fine-tunes (FreezeD); 0: none."""
    shared_steps: int = 0
    """Per-class mode: a first phase of this many steps that trains one DC-GAN on all the
    classes, data-parallel over every rank of the job (in RUN/all/), before each class
    fine-tunes from its final weights for --steps, with no communication; 0: no shared phase,
    every pair from scratch (the paper's)."""
    shared_time_limit_s: float = 0.0
    """With --shared-steps: training seconds of the shared phase (as --time-limit-s is of each
    fine-tune; compare --budget time sets both); 0: no limit."""

    def __post_init__(self) -> None:
        """Every field checked, with a one-line error that says how to fix it."""
        self._check_numbers()
        self._check_choices()
        self._check_augment()
        self._check_scores()
        self._check_combinations()
        self._check_start()

    def _check_numbers(self) -> None:
        positive = ("z_dim", "batch_size", "steps", "log_every", "checkpoint_every", "grad_accum")
        for name in positive:
            value = getattr(self, name)
            if value <= 0:
                raise UserError(
                    f"{name} must be a positive integer, got {value} (set --{_flag(name)})"
                )
        for name in ("sample_every", "threads", "seed", "max_retries", "global_batch_size"):
            if getattr(self, name) < 0:
                raise UserError(f"{name} must be >= 0, got {getattr(self, name)}")
        for name in ("lr_g", "lr_d"):
            if not getattr(self, name) > 0:
                raise UserError(f"{name} must be > 0, got {getattr(self, name)}")
        for name in ("beta1", "beta2", "ema_decay"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise UserError(f"{name} must be in [0, 1), got {getattr(self, name)}")
        if not 0.0 <= self.d_dropout < 1.0:
            raise UserError(f"d_dropout must be in [0, 1), got {self.d_dropout}")
        if not self.d_bn_eps > 0:
            raise UserError(
                f"d_bn_eps must be > 0, got {self.d_bn_eps}: set --d-bn-eps to the paper's 0.8 or "
                "PyTorch's 1e-5"
            )
        if any(c < 0 for c in self.classes) or len(set(self.classes)) != len(self.classes):
            raise UserError(f"classes must be distinct non-negative ids, got {list(self.classes)}")

    def _check_choices(self) -> None:
        if self.resolution not in RESOLUTIONS:
            raise UserError(
                f"resolution {self.resolution} is not supported: the model takes {RESOLUTIONS} px "
                "(prepare the data at one of them with python -m data_prep ... --resolution R)"
            )
        if self.mode not in MODES:
            raise UserError(f"mode must be per-class, gan or cgan, got {self.mode!r}")
        if self.amp not in typing.get_args(Amp):
            raise UserError(f"amp must be off or bf16, got {self.amp!r}")
        if self.cuda_graphs not in typing.get_args(Graphs):
            raise UserError(
                f"cuda_graphs must be auto, on or off, got {self.cuda_graphs!r} (set "
                "--cuda-graphs auto, on or off)"
            )
        if self.schedule not in typing.get_args(Schedule):
            raise UserError(f"schedule must be sync or async, got {self.schedule!r}")
        if self.d_batch not in typing.get_args(DBatch):
            raise UserError(f"d_batch must be joint or separate, got {self.d_batch!r}")
        if self.fuse != "auto" and not (self.fuse.isdigit() and int(self.fuse) > 0):
            raise UserError(
                f"fuse must be auto or a positive number of classes, got {self.fuse!r} "
                "(set --fuse K or --fuse auto)"
            )
        check_devices(self.devices)

    def _check_augment(self) -> None:
        try:
            parse_policy(self.augment)
        except ValueError as exc:
            raise UserError(
                f"augment {self.augment!r}: {exc} is not a policy; use none or a comma list of "
                "color, translation, cutout (e.g. --augment color,translation,cutout)"
            ) from None
        if self.augment_p != "auto":
            try:
                p = float(self.augment_p)
            except ValueError:
                p = -1.0
            if not 0.0 <= p <= 1.0:
                raise UserError(
                    f"augment_p must be a probability in [0, 1] or auto, got {self.augment_p!r}"
                )
        if self.augment == "none" and self.augment_p != "1":
            raise UserError("--augment-p needs --augment POLICY (color, translation, cutout)")
        if not 0.0 < self.augment_target < 1.0 or not self.augment_kimg > 0:
            raise UserError(
                f"augment_target must be in (0, 1) and augment_kimg > 0, got "
                f"{self.augment_target} and {self.augment_kimg}"
            )

    def _check_scores(self) -> None:
        if not self.time_limit_s >= 0:
            raise UserError(f"time_limit_s must be >= 0 (0: no limit), got {self.time_limit_s}")
        if self.score_every < 0 or self.score_every % self.log_every:
            raise UserError(
                f"score_every {self.score_every} must be 0 or a multiple of log_every "
                f"({self.log_every}): scores are taken at log steps"
            )
        if self.score_n < 10:
            raise UserError(f"score_n must be >= 10 samples, got {self.score_n}")

    def _check_schedule(self) -> None:
        if self.schedule == "sync":
            if self.batch_size_d:
                raise UserError(
                    "--batch-size-d goes with --schedule async (the sync step shows D the whole "
                    "batch): add --schedule async or drop --batch-size-d"
                )
            return
        bd = self.batch_size_d
        if bd < 0 or bd > self.batch_size or bd % self.grad_accum:
            raise UserError(
                f"batch_size_d {bd} must be at most the batch size ({self.batch_size}) and a "
                f"multiple of grad_accum ({self.grad_accum}), or 0 for the whole batch"
            )
        if bd and self.global_batch_size:
            raise UserError(
                "--batch-size-d is per rank, as --batch-size is: it does not go with "
                "--global-batch-size; set --batch-size and --batch-size-d"
            )
        # What the asynchronous step does not serve (yet): each would need its own design.
        for bad, why in (
            (self.cuda_graphs == "on", "--cuda-graphs on (auto steps it eagerly)"),
            (self.sync_bn, "--sync-bn (D's copy would normalise over one rank)"),
        ):
            if bad:
                raise UserError(
                    f"--schedule async does not go with {why}: drop it or use --schedule sync"
                )

    def _check_combinations(self) -> None:
        self._check_schedule()
        if self.d_batch == "separate" and self.resolution == 16:
            # D's last BatchNorm then sees 1x1 maps: it sets every batch's mean logit to the same
            # value, so D cannot tell an all-real batch from an all-fake one and nothing learns.
            raise UserError(
                "d_batch 'separate' does not work at 16 px (D's last BatchNorm makes every "
                "batch's mean logit equal): use --d-batch joint or a resolution of 32 or 64"
            )
        if self.sync_bn and self.fuse not in ("auto", "1"):
            raise UserError(
                "--fuse trains a rank's classes side by side, --sync-bn a class over a group of "
                "ranks: they do not combine; drop --sync-bn or use --fuse 1"
            )

    def _check_start(self) -> None:
        """--init-from and --freeze-d (D's depth is checked with the start: init_from.py)."""
        if self.init_from and self.mode != "per-class":
            raise UserError(
                f"--init-from starts the pairs of --mode per-class, not --mode {self.mode}: drop "
                "--init-from, or train with --mode per-class"
            )
        if self.freeze_d < 0:
            raise UserError(f"freeze_d must be >= 0 (0: nothing frozen), got {self.freeze_d}")
        if self.freeze_d and not (self.init_from or self.shared_steps):
            raise UserError(
                f"--freeze-d {self.freeze_d} keeps D's first blocks as a start left them, and "
                "this run has no start: add --shared-steps S (a shared phase first) or "
                "--init-from RUN (a finished --mode gan run), or drop --freeze-d"
            )
        self._check_shared()

    def _check_shared(self) -> None:
        """--shared-steps and --shared-time-limit-s."""
        if self.shared_steps < 0:
            raise UserError(
                f"shared_steps must be >= 0 (0: no shared phase), got {self.shared_steps}"
            )
        if not self.shared_time_limit_s >= 0:
            raise UserError(
                f"shared_time_limit_s must be >= 0 (0: no limit), got {self.shared_time_limit_s}"
            )
        if self.shared_steps and self.mode != "per-class":
            raise UserError(
                f"--shared-steps trains a shared start for the pairs of --mode per-class, and "
                f"--mode {self.mode} trains one model on all the classes already: drop "
                "--shared-steps, or train with --mode per-class"
            )
        if self.shared_steps and self.init_from:
            raise UserError(
                "--shared-steps trains the start that --init-from would give: pass one of them"
            )
        if self.shared_time_limit_s and not self.shared_steps:
            raise UserError(
                "--shared-time-limit-s limits the shared phase, and this run has none: add "
                "--shared-steps S or drop --shared-time-limit-s"
            )

    def pair_done(self, step: int, train_s: float) -> bool:
        """Whether a pair at `step` after `train_s` training seconds has finished: its steps
        trained, or its time_limit_s spent."""
        return step >= self.steps or self.time_up(train_s)

    def time_up(self, train_s: float) -> bool:
        """Whether time_limit_s (if set) is spent."""
        return self.time_limit_s > 0 and train_s >= self.time_limit_s

    def micro_batch(self, group_size: int) -> int:
        """Images per micro-batch on each rank of a group of `group_size` ranks."""
        per_rank = self.batch_size
        if self.global_batch_size:
            if self.global_batch_size % group_size:
                raise UserError(
                    f"global_batch_size {self.global_batch_size} does not split over a group of "
                    f"{group_size} ranks: choose a multiple of {group_size}"
                )
            per_rank = self.global_batch_size // group_size
        if per_rank % self.grad_accum:
            raise UserError(
                f"a rank's batch of {per_rank} does not split into grad_accum={self.grad_accum} "
                "micro-batches: choose a batch that is a multiple of grad_accum"
            )
        return per_rank // self.grad_accum

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["classes"] = list(self.classes)
        return d


# Fields that may change when a run is resumed: where and how a step runs (devices, threads,
# channels_last, fuse, cuda_graphs: the same step, rounded as that arithmetic rounds it; amp:
# another precision), what is written and scored along the way (log_every, checkpoint_every,
# sample_every, tensorboard, score_*), how long it trains (steps, time_limit_s, max_retries) and
# where the data file is (data: checked to hold the same classes and counts). A resume that
# changes one is recorded: each launch's config is kept in RUN/launches/NNN.json.
RESUMABLE_FIELDS = frozenset(
    {
        "steps",
        "log_every",
        "checkpoint_every",
        "sample_every",
        "tensorboard",
        "devices",
        "threads",
        "data",
        "max_retries",
        "channels_last",
        "amp",
        "fuse",
        "cuda_graphs",
        "time_limit_s",
        "score_every",
        "score_n",
        "score_network",
    }
)


# ---- presets: plain functions, one per dataset ------------------------------------------------


def digits() -> TrainConfig:
    """scikit-learn's 8x8 digits at 16 px: the embedded demo (about 180 images per class)."""
    return TrainConfig(
        preset="digits", resolution=16, batch_size=32, steps=900, checkpoint_every=300
    )


def mnist() -> TrainConfig:
    """MNIST at 32 px (about 6,000 images per class); 10,000 steps is about 100 epochs per class."""
    return TrainConfig(preset="mnist", resolution=32, steps=10_000, checkpoint_every=1000)


def cifar10() -> TrainConfig:
    """CIFAR-10 at 32 px (5,000 images per class); 20,000 steps is about 250 epochs per class."""
    return TrainConfig(preset="cifar10", resolution=32, steps=20_000, checkpoint_every=1000)


def cifar100() -> TrainConfig:
    """CIFAR-100 at 32 px (500 images per class); 8,000 steps is 1,000 epochs, as published."""
    return TrainConfig(preset="cifar100", resolution=32, steps=8_000, checkpoint_every=1000)


def imagenet32() -> TrainConfig:
    """ImageNet-1k at 32 px (about 1,300 images per class); 20,000 steps is about 1,000 epochs."""
    return TrainConfig(preset="imagenet32", resolution=32, steps=20_000, checkpoint_every=1000)


def imagenet64() -> TrainConfig:
    """ImageNet-1k at 64 px; as imagenet32 at four times the pixels."""
    return TrainConfig(preset="imagenet64", resolution=64, steps=20_000, checkpoint_every=1000)


def tiny() -> TrainConfig:
    """A few steps at 16 px: the smoke-test configuration used by the test suite."""
    return TrainConfig(
        preset="tiny", resolution=16, batch_size=16, steps=6, log_every=2, checkpoint_every=3
    )


PRESETS: dict[str, Callable[[], TrainConfig]] = {
    f.__name__: f for f in (digits, mnist, cifar10, cifar100, imagenet32, imagenet64, tiny)
}


def preset(name: str) -> TrainConfig:
    if name not in PRESETS:
        raise UserError(f"unknown preset {name!r}: choose one of {', '.join(PRESETS)}")
    return PRESETS[name]()


# ---- parsing values from JSON files and command-line flags ------------------------------------


def _flag(name: str) -> str:
    return name.replace("_", "-")


def field_types() -> dict[str, Any]:
    """Each field's type as its flag and JSON value have it: a closed choice (Literal) is the
    type of its values (str), checked against the choices in TrainConfig.__post_init__."""
    hints = typing.get_type_hints(TrainConfig)

    def value_type(typ: Any) -> Any:
        if typing.get_origin(typ) is Literal:
            return type(typing.get_args(typ)[0])
        return typ

    return {f.name: value_type(hints[f.name]) for f in fields(TrainConfig)}


def _coerce(name: str, value: Any, typ: Any, where: str) -> Any:
    """Check one JSON value against the field's type; ints are accepted where floats are."""
    if typing.get_origin(typ) is tuple:
        if isinstance(value, list) and all(
            isinstance(v, int) and not isinstance(v, bool) for v in value
        ):
            return tuple(value)
        raise UserError(f"{where}: {name} must be a list of integers, got {value!r}")
    ok = {
        int: isinstance(value, int) and not isinstance(value, bool),
        float: isinstance(value, (int, float)) and not isinstance(value, bool),
        str: isinstance(value, str),
        bool: isinstance(value, bool),
    }[typ]
    if not ok:
        raise UserError(f"{where}: {name} must be of type {typ.__name__}, got {value!r}")
    return float(value) if typ is float else value


def apply_overrides(base: TrainConfig, overrides: Mapping[str, Any], where: str) -> TrainConfig:
    """Return `base` with `overrides` (field -> JSON-like value) applied and type-checked."""
    types_ = field_types()
    unknown = sorted(set(overrides) - set(types_))
    if unknown:
        raise UserError(
            f"{where}: unknown key {unknown[0]!r}; valid keys are {', '.join(sorted(types_))}"
        )
    overrides = dict(overrides)
    if isinstance(overrides.get("cuda_graphs"), bool):  # a switch before "auto" (2026-11-26):
        overrides["cuda_graphs"] = "on" if overrides["cuda_graphs"] else "off"  # as it trained
    changes = {k: _coerce(k, v, types_[k], where) for k, v in overrides.items()}
    return dataclasses.replace(base, **changes)


def load_config_file(path: str) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise UserError(f"config file {path} does not exist: check the path given to --config")
    try:
        obj = json.loads(p.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"config file {path} is not valid JSON ({exc}); fix the file") from exc
    if not isinstance(obj, dict):
        raise UserError(f"config file {path} must hold a JSON object of field: value pairs")
    obj.pop("format_version", None)
    return obj


def check_resume_changes(stored: TrainConfig, resumed: TrainConfig) -> None:
    """On --resume only placement and schedule may change; anything else would fork the run."""
    for f in fields(TrainConfig):
        if f.name in RESUMABLE_FIELDS:
            continue
        old, new = getattr(stored, f.name), getattr(resumed, f.name)
        if old != new:
            raise UserError(
                f"--resume cannot change {f.name} ({old!r} -> {new!r}): only "
                f"{', '.join(sorted(RESUMABLE_FIELDS))} may change; start a new run instead"
            )

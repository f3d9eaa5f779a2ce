"""Command line: `python -m mpi4py -m distcgan {train,sample,bench,evaluate,classifier,compare,
export,generate,info,anova}`, each run in mpi/entry.py's frame (COMM_WORLD, the launcher check,
the failure policy shared with `python -m data_prep`: one line and exit 2 for bad input, an
abort of the whole job for an error on one rank). `distcgan {status,supervise,report,job-plan}`
(NO_MPI) run beside a launcher or after a run and never initialise MPI. Each command's flags,
help and description come from its options dataclass (options.py); COMMANDS pairs it with the
body, which reads the options and calls the module that does the work.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from distcgan.bench_flags import add_moved, check_flags
from distcgan.config import TrainConfig
from distcgan.data import read_info
from distcgan.errors import AgreedError, UserError, say
from distcgan.faults import Fault
from distcgan.mpi.comm import Comm
from distcgan.mpi.context import agree
from distcgan.mpi.entry import Parser, run_mpi
from distcgan.mpi.exits import exit_process
from distcgan.mpi.signals import hold_stop_signals
from distcgan.options import (
    AnovaOptions,
    BenchOptions,
    ClassifierOptions,
    CompareOptions,
    EvalOptions,
    ExportOptions,
    GenerateOptions,
    InfoOptions,
    JobPlanOptions,
    LaunchOptions,
    ReportOptions,
    SampleOptions,
    StatusOptions,
    SuperviseOptions,
    TrainOptions,
    add_config_flags,
    add_options,
    command_texts,
    compare_options,
    config_flags,
    options_from,
    resolve_config,
)
from distcgan.run import jobplan
from distcgan.run.rundir import RunDir, read_config_file
from distcgan.run.supervise import run_status, supervise

Command = Callable[[Comm, argparse.Namespace], int]  # a command's body: comm, its parsed flags
# The config flags compare does not take: --variants names the modes; the shared-per-class
# variant's shared phase is set by --shared-fraction and the budget, and its --freeze-d is
# compare's own option (CompareOptions: the one variant's, where the base config's would be
# every variant's); a start from another run is per-class training's alone (train --init-from).
COMPARE_SKIPS = ("mode", "init_from", "freeze_d", "shared_steps", "shared_time_limit_s")


def build_parser() -> argparse.ArgumentParser:
    """Every command's parser: its help, description and flags from its options dataclass."""
    parser = Parser(
        prog="distcgan",
        description="Per-class conditional GAN training over MPI ranks (one G/D pair per class).",
        epilog="Launch with: mpiexec -n R python -m mpi4py -m distcgan train ...",
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for name, (options, func) in COMMANDS.items():
        if name == "classifier":  # one subcommand of its own: classifier train
            c = sub.add_parser(name, help="train a small CNN classifier on a data file")
            p = c.add_subparsers(dest="classifier_command", required=True, parser_class=Parser)
            _add(p, "train", options, func)
        else:
            _add(sub, name, options, func)
    return parser


def _add(sub: Any, name: str, options: type, func: Command) -> None:
    """Command `name`, its texts and flags from options dataclass `options`, run by `func`; train
    and compare take the training config's flags too, bench refuses the flags that moved."""
    p = sub.add_parser(name, **command_texts(options))
    add_options(p, options)
    if options is TrainOptions or options is CompareOptions:
        add_config_flags(p, skip=COMPARE_SKIPS if options is CompareOptions else ())
    if options is BenchOptions:
        add_moved(p)
    p.set_defaults(func=func)


# ---- the commands: each reads its options and calls the module that does the work -------------


def _config(args: argparse.Namespace, folder: str, stored_name: str = "") -> TrainConfig:
    """train's and compare's training config (options.resolve_config): on --resume, the config
    stored in `folder` (a run's config.json, or compare's `stored_name` there) is the base."""
    stored = None
    if args.resume:
        run = RunDir(Path(folder))
        if stored_name and not (run.path / stored_name).is_file():
            raise UserError(
                f"nothing to resume: {folder} has no {stored_name}, so no comparison was "
                "started there (start it without --resume)"
            )
        stored = read_config_file(run.path / stored_name if stored_name else run.config_file)
    return resolve_config(options_from(LaunchOptions, args), config_flags(args), stored, folder)


def cmd_train(comm: Comm, args: argparse.Namespace) -> int:
    t_start = time.perf_counter()
    opts: TrainOptions = options_from(TrainOptions, args)
    fault = agree(comm, lambda: Fault.parse(opts.inject_fault) if opts.inject_fault else None)
    cfg = agree(comm, lambda: _config(args, opts.run), root=0)
    # torch: after the flags are known good
    from distcgan.eval.sampling.during import train_with_scorer

    return train_with_scorer(comm, cfg, opts, fault.on(comm.rank) if fault else None, t_start)


def cmd_sample(comm: Comm, args: argparse.Namespace) -> int:
    from distcgan.eval.sampling.sample import sample_run  # torch: after the flags are known good

    sample_run(comm, options_from(SampleOptions, args))
    return 0


def cmd_bench(comm: Comm, args: argparse.Namespace) -> int:
    args.device_d = args.device_d or args.device_g
    if comm.rank == 0:  # one process measures; run it without mpiexec
        check_flags(args)  # before torch loads: a bad flag is said at once
        from distcgan.bench import print_report, run  # torch: after the flags are known good

        print_report(run(args))
    return 0


def cmd_info(comm: Comm, args: argparse.Namespace) -> int:
    opts: InfoOptions = options_from(InfoOptions, args)
    info = agree(comm, lambda: read_info(opts.file), root=0)
    if comm.rank == 0:
        print(info.describe())
    return 0


def cmd_anova(comm: Comm, args: argparse.Namespace) -> int:
    from distcgan.anova import anova_command  # scipy: a second, only for this command

    anova_command(comm, options_from(AnovaOptions, args))
    return 0


def cmd_compare(comm: Comm, args: argparse.Namespace) -> int:
    # scipy (compare/seeds.py): a second, only for this command
    from distcgan.compare.experiment import BASE_CONFIG, run_compare, stored_options

    base = agree(comm, lambda: _config(args, args.out, BASE_CONFIG), root=0)
    stored = agree(comm, lambda: stored_options(Path(args.out)) if args.resume else {}, root=0)
    opts = agree(comm, lambda: compare_options(args, stored), root=0)
    return run_compare(comm, opts, base, log=lambda m: print(m, flush=True))


def cmd_evaluate(comm: Comm, args: argparse.Namespace) -> int:
    from distcgan.eval.evaluate import evaluate  # torch: after the flags are known good

    evaluate(comm, options_from(EvalOptions, args), log=lambda m: print(m, flush=True))
    return 0


def cmd_classifier_train(comm: Comm, args: argparse.Namespace) -> int:
    # torch: after the flags are known good
    from distcgan.eval.classifier.train import results_text, train_classifier

    if comm.size > 1:
        raise AgreedError("classifier train runs on one process: launch it without mpiexec")
    opts: ClassifierOptions = options_from(ClassifierOptions, args)
    meta = train_classifier(opts, log=lambda m: print(m, flush=True))
    print(results_text(meta, opts.out))
    return 0


def cmd_export(comm: Comm, args: argparse.Namespace) -> int:
    from distcgan.export.writer import export_run  # torch: after the flags are known good

    if comm.size > 1:
        raise AgreedError("export runs on one process: launch it without mpiexec")
    export_run(options_from(ExportOptions, args), log=lambda m: print(m, flush=True))
    return 0


def cmd_generate(comm: Comm, args: argparse.Namespace) -> int:
    from distcgan.export.generate import generate  # torch: after the flags are known good

    if comm.size > 1:
        raise AgreedError("generate runs on one process: launch it without mpiexec")
    generate(options_from(GenerateOptions, args), log=lambda m: print(m, flush=True))
    return 0


def cmd_status(comm: Comm, args: argparse.Namespace) -> int:
    code, message = run_status(Path(options_from(StatusOptions, args).run))
    print(f"distcgan status: {message} (exit {code})", file=sys.stdout if code == 0 else sys.stderr)
    return code


def cmd_report(comm: Comm, args: argparse.Namespace) -> int:
    from distcgan.report.page import write_report  # matplotlib: a second, only for this command

    opts: ReportOptions = options_from(ReportOptions, args)
    print(f"wrote {write_report(Path(opts.run), opts.overwrite)}")
    return 0


def cmd_supervise(comm: Comm, args: argparse.Namespace) -> int:
    opts: SuperviseOptions = options_from(SuperviseOptions, args)
    command = opts.command[1:] if opts.command[:1] == ("--",) else opts.command
    return supervise(Path(opts.run), list(command))


# ---- entry point ------------------------------------------------------------------------------


COMMANDS: dict[str, tuple[type, Command]] = {  # in the order of `distcgan --help`
    "train": (TrainOptions, cmd_train),
    "sample": (SampleOptions, cmd_sample),
    "bench": (BenchOptions, cmd_bench),
    "evaluate": (EvalOptions, cmd_evaluate),
    "classifier": (ClassifierOptions, cmd_classifier_train),
    "compare": (CompareOptions, cmd_compare),
    "export": (ExportOptions, cmd_export),
    "generate": (GenerateOptions, cmd_generate),
    "info": (InfoOptions, cmd_info),
    "anova": (AnovaOptions, cmd_anova),
    "status": (StatusOptions, cmd_status),
    "supervise": (SuperviseOptions, cmd_supervise),
    "report": (ReportOptions, cmd_report),
    "job-plan": (JobPlanOptions, jobplan.command),
}
NO_MPI = ("status", "supervise", "report", "job-plan")  # commands that must not initialise MPI


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] and argv[0] in NO_MPI:
        try:
            args = build_parser().parse_args(argv)
            return int(args.func(None, args))
        except UserError as exc:
            say(f"distcgan: error: {exc}")
            return 2

    def command(comm: Comm) -> int:
        args = build_parser().parse_args(argv)
        return int(args.func(comm, args))

    return run_mpi("distcgan", command)


def main_console() -> None:
    """The `distcgan` console script (one process; use `python -m mpi4py -m distcgan` under MPI)."""
    hold_stop_signals(sys.argv[1:])
    exit_process(main())

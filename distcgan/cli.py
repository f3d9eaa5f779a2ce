"""Command line: `python -m mpi4py -m distcgan {train,sample,bench,evaluate,classifier,compare,
export,generate,info,anova}`, each run in mpi/entry.py's frame (COMM_WORLD, the launcher check,
the failure policy shared with `python -m data_prep`: one line and exit 2 for bad input, an
abort of the whole job for an error on one rank). `distcgan {status,supervise,report,job-plan}`
(NO_MPI) run beside a launcher or after a run and never initialise MPI.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from distcgan.bench_flags import add_arguments as add_bench_arguments
from distcgan.config import (
    TrainConfig,
    apply_overrides,
    check_resume_changes,
    field_types,
    load_config_file,
    preset,
)
from distcgan.errors import AgreedError, UserError, say
from distcgan.mpi.comm import Comm
from distcgan.mpi.entry import Parser, run_mpi
from distcgan.mpi.exits import exit_process
from distcgan.options import (
    ClassifierOptions,
    CompareOptions,
    EvalOptions,
    ExportOptions,
    GenerateOptions,
    SampleOptions,
    TrainOptions,
    add_options,
    field_docs,
    options_from,
)


def _add_config_flags(p: argparse.ArgumentParser, skip: Sequence[str] = ()) -> None:
    """One --flag per TrainConfig field (but `skip`), documented by the field's docstring."""
    docs = {k: v.replace("%", "%%") for k, v in field_docs(TrainConfig).items()}
    group = p.add_argument_group("training configuration (override the preset)")
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


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="distcgan",
        description="Per-class conditional GAN training over MPI ranks (one G/D pair per class).",
        epilog="Launch with: mpiexec -n R python -m mpi4py -m distcgan train ...",
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    _add_training_commands(sub)
    _add_scoring_commands(sub)
    _add_model_commands(sub)
    _add_job_commands(sub)
    return parser


def _add_training_commands(sub: Any) -> None:
    """train, sample, bench."""
    t = sub.add_parser("train", help="train one G/D pair per class, classes spread over ranks")
    add_options(t, TrainOptions)
    _add_config_flags(t)
    t.set_defaults(func=cmd_train)

    s = sub.add_parser("sample", help="write a sample file (and a PNG grid) from a trained run")
    add_options(s, SampleOptions)
    s.set_defaults(func=cmd_sample)

    b = sub.add_parser("bench", help="images/s of our training step vs a plain reference loop")
    add_bench_arguments(b)
    b.set_defaults(func=cmd_bench)


def _add_scoring_commands(sub: Any) -> None:
    """evaluate, classifier train, compare."""
    e = sub.add_parser(
        "evaluate",
        help="Inception Score, FID, per-class FID and classifier accuracy of a run or sample file",
    )
    add_options(e, EvalOptions)
    e.set_defaults(func=cmd_evaluate)

    c = sub.add_parser("classifier", help="train a small CNN classifier on a data file")
    csub = c.add_subparsers(dest="classifier_command", required=True, parser_class=Parser)
    ct = csub.add_parser("train", help="train on the real data, report held-out accuracy")
    add_options(ct, ClassifierOptions)
    ct.set_defaults(func=cmd_classifier_train)

    m = sub.add_parser(
        "compare",
        help="train per-class, gan and cgan under one budget, score them alike, write the table",
        description="The paper's comparison: per-class DC-GANs, one DC-GAN and one DC-CGAN, "
        "trained at the same batch on the same number of real images (per-class: --steps per "
        "class; gan and cgan: K x --steps), scored with the same network on the same number of "
        "samples; writes DIR/compare.md, compare.json and compare.png (docs/comparison.md).",
    )
    add_options(m, CompareOptions)
    _add_config_flags(m, skip=("mode",))  # the variants are the modes
    m.set_defaults(func=cmd_compare)


def _add_model_commands(sub: Any) -> None:
    """export, generate, and info and anova on data and sample files."""
    x = sub.add_parser(
        "export",
        help="write a trained run as one conditional generator G(z, y): safetensors weights, a "
        "torch.export program, config and model card (one process)",
    )
    add_options(x, ExportOptions)
    x.set_defaults(func=cmd_export)

    g = sub.add_parser("generate", help="images from an export: a PNG grid or a sample file")
    add_options(g, GenerateOptions)
    g.set_defaults(func=cmd_generate)

    i = sub.add_parser("info", help="describe a data or sample file")
    i.add_argument("file")
    i.set_defaults(func=cmd_info)

    a = sub.add_parser("anova", help="one-way ANOVA of the images' channel means across classes")
    a.add_argument("file")
    a.add_argument("--json", help="also write the result to this JSON file")
    a.add_argument("--overwrite", action="store_true", help="replace --json if it exists")
    a.set_defaults(func=cmd_anova)


NO_MPI = ("status", "supervise", "report", "job-plan")  # commands that must not initialise MPI


def _add_job_commands(sub: Any) -> None:
    """The job-script helpers: they run beside the launcher, not under it (no MPI, no torch)."""
    st = sub.add_parser(
        "status",
        help="how the last launch of a run ended: exit 0 done, 3 diverged, 75 stopped (resume), "
        "1 crashed",
    )
    st.add_argument("--run", required=True, help="a run directory")
    st.set_defaults(func=cmd_status)
    su = sub.add_parser(
        "supervise",
        help="run a launcher command; pass stop signals on as SIGUSR1; exit with the code the "
        "run directory records (75: resubmit)",
        description="For job scripts: distcgan supervise --run RUN -- mpiexec -n 8 python -m "
        "mpi4py -m distcgan train --run RUN ... . Launchers do not return the ranks' exit code "
        "reliably (Open MPI's returns 1 for a job whose ranks exited 75); this does.",
    )
    su.add_argument("--run", required=True, help="the run directory the command trains")
    su.add_argument("command", nargs=argparse.REMAINDER, help="-- then the launcher command")
    su.set_defaults(func=cmd_supervise)
    rp = sub.add_parser(
        "report",
        help="write RUN/report.html: the run, a per-rank timeline, curves, grids, evaluation "
        "(one self-contained file; also for a compare directory)",
    )
    rp.add_argument("--run", required=True, help="a run directory, or a compare --out directory")
    rp.add_argument("--overwrite", action="store_true", help="replace RUN/report.html if it exists")
    rp.set_defaults(func=cmd_report)
    from distcgan.run import jobplan

    jp = sub.add_parser(
        "job-plan", help="for job templates: ranks, nodes and --fuse, as NAME=value"
    )
    jobplan.add_arguments(jp)
    jp.set_defaults(func=jobplan.command)


# ---- train ------------------------------------------------------------------------------------


def resolve_config(args: argparse.Namespace, stored_name: str | None = None) -> TrainConfig:
    """preset -> --config file -> flags; on --resume the run's stored config (its config.json,
    or `stored_name` in --run) replaces the preset."""
    flags = {
        name: (tuple(v) if isinstance(v, list) else v)
        for name in field_types()
        if (v := getattr(args, f"cfg_{name}", None)) is not None
    }
    if args.resume:
        from distcgan.run.rundir import RunDir, read_config_file

        # The same command line that started the run may continue it: the stored config is the
        # base, and the preset, a config file and flags may only repeat it or change the fields
        # that a resume allows.
        run = RunDir(Path(args.run))
        stored = read_config_file(run.path / stored_name if stored_name else run.config_file)
        if args.preset and args.preset != stored.preset:
            raise UserError(
                f"--resume: {args.run} was started with preset {stored.preset!r}, not "
                f"{args.preset!r}; drop --preset or start a new run"
            )
        cfg = stored
        if args.config:
            cfg = apply_overrides(cfg, load_config_file(args.config), where=args.config)
        cfg = apply_overrides(cfg, _jsonable(flags), where="command line")
        check_resume_changes(stored, cfg)
        return cfg
    cfg = preset(args.preset or "digits")
    if args.config:
        cfg = apply_overrides(cfg, load_config_file(args.config), where=args.config)
    return apply_overrides(cfg, _jsonable(flags), where="command line")


def _jsonable(flags: dict[str, Any]) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in flags.items()}


def cmd_train(comm: Comm, args: argparse.Namespace) -> int:
    from distcgan.faults import Fault
    from distcgan.mpi.context import agree

    t_start = time.perf_counter()
    opts: TrainOptions = options_from(TrainOptions, args)
    fault = agree(comm, lambda: Fault.parse(opts.inject_fault) if opts.inject_fault else None)
    cfg = agree(comm, lambda: resolve_config(args), root=0)
    from distcgan.eval.during import train_with_scorer  # torch: after the flags are known good

    return train_with_scorer(comm, cfg, opts, fault.on(comm.rank) if fault else None, t_start)


# ---- sample / info ----------------------------------------------------------------------------


def cmd_sample(comm: Comm, args: argparse.Namespace) -> int:
    from distcgan.eval.sample import sample_run

    sample_run(comm, options_from(SampleOptions, args))
    return 0


def cmd_bench(comm: Comm, args: argparse.Namespace) -> int:
    from distcgan.bench_flags import check_flags

    args.device_d = args.device_d or args.device_g
    if comm.rank == 0:  # one process measures; run it without mpiexec
        check_flags(args)  # before torch loads: a bad flag is said at once
        from distcgan.bench import print_report, run

        print_report(run(args))
    return 0


def cmd_info(comm: Comm, args: argparse.Namespace) -> int:
    from distcgan.data import read_info
    from distcgan.mpi.context import agree, format_table

    info = agree(comm, lambda: read_info(args.file), root=0)
    if comm.rank == 0:
        print(
            f"{info.path}: {sum(info.counts)} images, {info.num_classes} classes, "
            f"{info.resolution}x{info.resolution}x{info.channels} uint8, source "
            f"{info.source!r}, {info.size_bytes / 1e6:.1f} MB on disk"
        )
        rows = [
            {"class_id": k, "name": n, "images": c}
            for k, (n, c) in enumerate(zip(info.class_names, info.counts))
        ]
        print(format_table(rows, ["class_id", "name", "images"]))
    return 0


def cmd_anova(comm: Comm, args: argparse.Namespace) -> int:
    """The paper's ANOVA (distcgan/anova.py): a table, one JSON line, and --json if given."""
    import json

    from distcgan.anova import anova_file
    from distcgan.mpi.context import agree, format_table
    from distcgan.run.atomic import atomic_write_json, check_out_file

    def check_json() -> None:
        # Rank 0 writes the file, so its file system decides (another node's may differ).
        if args.json:
            check_out_file(args.json, "--json", "anova.json", overwrite=args.overwrite)

    agree(comm, check_json, root=0)
    result = anova_file(comm, args.file)
    if args.json:
        agree(comm, lambda: atomic_write_json(args.json, result), root=0)
    if comm.rank == 0:
        print(
            f"{result['file']}: one-way ANOVA of per-image channel means over "
            f"{result['classes']} classes, {result['images']} images"
        )
        rows = [
            {
                **r,
                "F": "undefined (no within-class variance)" if r["F"] is None else f"{r['F']:.6g}",
                "p": "" if r["p"] is None else f"{r['p']:.3g}",
                "log10_p": "" if r["log10_p"] is None else f"{r['log10_p']:.1f}",
            }
            for r in result["channels"]
        ]
        print(format_table(rows, ["channel", "F", "p", "log10_p", "df_between", "df_within"]))
        print(json.dumps(result, allow_nan=False))
    return 0


# ---- compare ----------------------------------------------------------------------------------


def cmd_compare(comm: Comm, args: argparse.Namespace) -> int:
    from distcgan.compare.experiment import BASE_CONFIG, run_compare, stored_options
    from distcgan.mpi.context import agree

    def check_resume() -> None:
        if args.resume and not (Path(args.out) / BASE_CONFIG).is_file():
            raise UserError(
                f"nothing to resume: {args.out} has no {BASE_CONFIG}, so no comparison was "
                "started there (start it without --resume)"
            )

    agree(comm, check_resume, root=0)
    args.run = args.out  # where resolve_config finds the stored config on --resume
    base = agree(comm, lambda: resolve_config(args, BASE_CONFIG), root=0)
    stored = agree(comm, lambda: stored_options(Path(args.out)) if args.resume else {}, root=0)

    def check_budget_kept() -> None:
        if not args.resume:
            return
        started = {"budget": "images", "budget_s": 0.0, **stored}  # older: the images rule
        for k in ("budget", "budget_s"):
            given = getattr(args, k)
            if given is not None and given != started[k]:
                flag = "--" + k.replace("_", "-")
                raise UserError(
                    f"--resume cannot change {flag} ({started[k]} -> {given}): the comparison "
                    f"in {args.out} was started under it; start a new one with another --out"
                )

    agree(comm, check_budget_kept, root=0)
    # A scoring option not given on the command line keeps its stored value on --resume.
    kept = {k: v for k, v in stored.items() if getattr(args, k) is None}
    if "variants" in kept:
        kept["variants"] = tuple(kept["variants"])
    opts = options_from(CompareOptions, args, **kept)
    return run_compare(comm, opts, base, log=lambda m: print(m, flush=True))


# ---- evaluate / classifier --------------------------------------------------------------------


def cmd_evaluate(comm: Comm, args: argparse.Namespace) -> int:
    from distcgan.eval.evaluate import evaluate

    evaluate(comm, options_from(EvalOptions, args), log=lambda m: print(m, flush=True))
    return 0


def cmd_classifier_train(comm: Comm, args: argparse.Namespace) -> int:
    from distcgan.eval.classifier import train_classifier
    from distcgan.mpi.context import format_table

    if comm.size > 1:
        raise AgreedError("classifier train runs on one process: launch it without mpiexec")
    opts: ClassifierOptions = options_from(ClassifierOptions, args)
    meta = train_classifier(opts, log=lambda m: print(m, flush=True))
    rows = [
        {"class_id": k, "name": meta["class_names"][int(k)], "held_out_accuracy": f"{a:.3f}"}
        for k, a in meta["held_out_per_class"].items()
    ]
    if rows:
        print(format_table(rows, ["class_id", "name", "held_out_accuracy"]))
    acc = meta["held_out_accuracy"]
    print(
        f"held-out accuracy {acc:.4f} on {meta['held_out_images']} images"
        if acc is not None
        else "no held-out images (--held-out 0)"
    )
    print(f"wrote {opts.out} (TorchScript; use it with distcgan evaluate --network {opts.out})")
    return 0


# ---- export / generate ------------------------------------------------------------------------


def cmd_export(comm: Comm, args: argparse.Namespace) -> int:
    from distcgan.export.writer import export_run

    if comm.size > 1:
        raise AgreedError("export runs on one process: launch it without mpiexec")
    export_run(options_from(ExportOptions, args), log=lambda m: print(m, flush=True))
    return 0


def cmd_generate(comm: Comm, args: argparse.Namespace) -> int:
    from distcgan.export.generate import generate

    if comm.size > 1:
        raise AgreedError("generate runs on one process: launch it without mpiexec")
    generate(options_from(GenerateOptions, args), log=lambda m: print(m, flush=True))
    return 0


# ---- entry point ------------------------------------------------------------------------------


def cmd_status(comm: Comm, args: argparse.Namespace) -> int:
    from distcgan.run.supervise import run_status

    code, message = run_status(Path(args.run))
    print(f"distcgan status: {message} (exit {code})", file=sys.stdout if code == 0 else sys.stderr)
    return code


def cmd_report(comm: Comm, args: argparse.Namespace) -> int:
    from distcgan.report.page import write_report

    print(f"wrote {write_report(Path(args.run), args.overwrite)}")
    return 0


def cmd_supervise(comm: Comm, args: argparse.Namespace) -> int:
    from distcgan.run.supervise import supervise

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    return supervise(Path(args.run), command)


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
    from distcgan.mpi.signals import hold_stop_signals

    hold_stop_signals(sys.argv[1:])
    exit_process(main())

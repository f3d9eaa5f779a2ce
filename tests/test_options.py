"""Every command's options declared one way (distcgan/options.py): each flag of each command is a
field of its options dataclass (train's and compare's config flags are TrainConfig's fields), a
command's help is its options class's docstring, job-plan's flags are JobAsk's fields, the
weak-scaling sweep parses into its frozen dataclass, and the config's resolution is a pure
function of the options and the stored config."""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import typing

import pytest
from helpers import REPO, fresh_python

from distcgan.cli import COMMANDS, build_parser
from distcgan.config import TrainConfig, preset
from distcgan.errors import UserError
from distcgan.options import (
    LaunchOptions,
    SuperviseOptions,
    WeakScalingOptions,
    command_texts,
    resolve_config,
)
from distcgan.run.jobplan import JobAsk


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return {name: p for a in actions for name, p in a.choices.items()}


def _fields(cls: type) -> set[str]:
    """The fields of an options dataclass that have a flag, a nested one's included."""
    hints = typing.get_type_hints(cls)
    names: set[str] = set()
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            names |= _fields(hints[f.name])
        elif f.metadata.get("cli", True):
            names.add(f.name)
    return names


def test_every_flag_of_every_command_is_a_field_of_its_options():
    commands = _subparsers(build_parser())
    assert list(commands) == list(COMMANDS)
    config = {f"cfg_{f.name}" for f in dataclasses.fields(TrainConfig)}
    for name, (options, _) in COMMANDS.items():
        parser = commands[name]
        if name == "classifier":
            parser = _subparsers(parser)["train"]
        dests = {a.dest for a in parser._actions} - {"help"}
        assert dests - config - {"moved"} == _fields(options), name
        if name in ("train", "compare"):
            assert dests & config, name  # the training config's flags, from its fields
        assert ("moved" in dests) == (name == "bench"), name  # bench's refusals of moved flags
        assert parser.description == command_texts(options).get("description"), name


def test_every_commands_parser_is_built_before_torch_scipy_or_matplotlib_load():
    # A bad flag or --help answers at once: the modules that take a second or more to import
    # are imported by the one command that needs them, after its flags parsed.
    code = (
        "import sys\n"
        "from distcgan.cli import build_parser\n"
        "build_parser().parse_args(['status', '--run', 'r'])\n"
        "print([m for m in ('torch', 'scipy', 'matplotlib', 'mpi4py.MPI') if m in sys.modules])\n"
    )
    assert fresh_python(code) == "[]"


def test_a_commands_help_is_the_first_paragraph_of_its_options_docstring():
    texts = command_texts(SuperviseOptions)
    assert texts["help"].startswith("run a launcher command;")
    assert texts["description"].startswith("For job scripts: distcgan supervise --run RUN")
    top = " ".join(build_parser().format_help().split())  # unwrapped
    assert f"supervise {texts['help']}" in top


def test_job_plans_flags_are_the_template_variables_of_jobask():
    parser = _subparsers(build_parser())["job-plan"]
    flags = [a.dest for a in parser._actions if a.dest != "help"]
    assert flags == [f.name for f in dataclasses.fields(JobAsk)]


def _sweep():
    spec = importlib.util.spec_from_file_location("weak_scaling", REPO / "jobs" / "weak_scaling.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_weak_scaling_sweep_parses_into_its_frozen_options():
    ws = _sweep()
    opts = ws.parse_args(["--ranks", "1", "2", "--preset", "tiny"])
    assert isinstance(opts, WeakScalingOptions)
    assert (opts.ranks, opts.walltime, opts.submit_args, opts.progress) == ((1, 2), 30, (), True)
    assert opts.classes_per_rank == 1  # resolved: given, its deprecated name, or 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.steps = 1  # type: ignore[misc]
    opts = ws.parse_args(
        ["--ranks", "3", "--preset", "tiny", "--no-progress", "--walltime", "1:30",
         "--submit-args=-A PROJ", "--classes-per-gpu", "2"]
    )  # fmt: skip
    assert (opts.progress, opts.walltime, opts.submit_args) == (False, 90, ("-A", "PROJ"))
    assert opts.classes_per_rank == 2


def test_the_config_is_the_preset_then_the_file_then_the_flags_or_the_stored_one():
    assert resolve_config(LaunchOptions(), {}, None, "r") == preset("digits")
    cfg = resolve_config(LaunchOptions(preset="mnist"), {"steps": 7}, None, "r")
    assert (cfg.preset, cfg.steps) == ("mnist", 7)
    stored = preset("tiny")
    assert resolve_config(LaunchOptions(resume=True), {}, stored, "r") == stored
    with pytest.raises(UserError, match=r"^--resume: runs/x was started with preset 'tiny'"):
        resolve_config(LaunchOptions(preset="mnist", resume=True), {}, stored, "runs/x")

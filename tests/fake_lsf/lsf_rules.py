"""The documented LSF and jsrun rules that our stand-ins (`bsub`, `jsrun`, `jskill` beside this
file) apply, as pure functions. A test tool, not product: there is no open-source LSF, so
`tests/test_lsf.py` runs `jobs/lsf_jsrun.lsf` under these rules, each citing its page.

Pages (IBM Spectrum LSF 10.1 and OLCF's Summit guide):
  BSUB_CMD  https://www.ibm.com/docs/SSWRJV_10.1.0/lsf_command_ref/bsub.zz1argument.command.1.html
  BSUB_SCR  https://www.ibm.com/docs/SSWRJV_10.1.0/lsf_command_ref/bsub.zz1argument.job_script.1.html
  BSUB_O    https://www.ibm.com/docs/en/SSWRJV_10.1.0/lsf_command_ref/bsub.o.1.html (-oo: bsub.oo.1)
  BSUB_E    https://www.ibm.com/docs/en/SSWRJV_10.1.0/lsf_command_ref/bsub.e.1.html (-eo: bsub.eo.1)
  BSUB_W    https://www.ibm.com/docs/en/SSWRJV_10.1.0/lsf_command_ref/bsub.__w.1.html
  BSUB_WA   https://www.ibm.com/docs/en/SSWRJV_10.1.0/lsf_command_ref/bsub.wa.1.html (and bsub.wt.1)
  BSUB_Q    https://www.ibm.com/docs/en/SSWRJV_10.1.0/lsf_command_ref/bsub.__q.1.html
  REQUEUE   https://www.ibm.com/docs/en/SSWRJV_10.1.0/lsf_command_ref/brequeue.1.html
  JOB_ENV   https://www.ibm.com/docs/en/spectrum-lsf/10.1.0?topic=variables-environment-set-job-execution
  KILL_ALL  https://www.ibm.com/docs/en/SSWRJV_10.1.0/lsf_command_ref/bsub.__t.1.html ("-T": signals
            go "to all processes belongs to the job")
  JSRUN     https://ibm.com/support/knowledgecenter/SSWRJV_10.1.0/jsm/jsrun.html
  JSKILL    https://www.ibm.com/support/knowledgecenter/en/SSWRJV_10.1.0/jsm/jskill.html
  OLCF      https://docs.olcf.ornl.gov/systems/summit_user_guide.html (olcf/olcf-user-docs,
            systems/summit_user_guide.rst: -nnodes, launch nodes, jsrun flags and defaults,
            SMT4, OMP_PLACES per task)
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass

# ---- bsub ---------------------------------------------------------------------------------------

# Options that take a value (those the template and the tests use, and common harmless ones).
VALUE_OPTS = {"-J", "-o", "-oo", "-e", "-eo", "-W", "-wa", "-wt", "-Q", "-nnodes", "-P", "-q"}
VALUE_OPTS |= {"-alloc_flags", "-n", "-R", "-G"}
FLAG_OPTS = {"-K", "-r", "-rn", "-x"}


def parse_options(args: Sequence[str]) -> tuple[dict[str, str | bool], list[str]]:
    """bsub's options and the command after them (BSUB_CMD: "command is assumed to begin with
    the first word that is not part of a bsub option")."""
    opts: dict[str, str | bool] = {}
    i = 0
    while i < len(args) and args[i].startswith("-"):
        opt = args[i]
        if opt in FLAG_OPTS:
            opts[opt] = True
            i += 1
        elif opt in VALUE_OPTS and i + 1 < len(args):
            opts[opt] = args[i + 1]
            i += 2
        else:
            raise SystemExit(f"bsub (stand-in): unknown or incomplete option {opt}")
    return opts, list(args[i:])


def script_options(script: str) -> dict[str, str | bool]:
    """The options of a script's `#BSUB` lines (BSUB_CMD: "bsub options can also be specified in
    the standard input if the line begins with #BSUB"; BSUB_SCR's example puts one after the
    commands, so every such line counts)."""
    words: list[str] = []
    for line in script.splitlines():
        if line.startswith("#BSUB"):
            words += shlex.split(line[len("#BSUB") :])
    return parse_options(words)[0]


def merge(from_script: dict, from_command_line: dict) -> dict:
    """BSUB_CMD: "If an option is given on both the bsub command line, and in the standard
    input, the command line option overrides the option in the standard input." -o and -oo (and
    -e, -eo) are one setting each."""
    out = dict(from_script)
    for opt, value in from_command_line.items():
        for twin in {"-o": "-oo", "-oo": "-o", "-e": "-eo", "-eo": "-e"}.get(opt, ""), opt:
            out.pop(twin, None)
        out[opt] = value
    return out


def minutes(text: str) -> float:
    """[hour:]minute (BSUB_W, BSUB_WA: `-W 0:30` is 30 minutes; minutes may exceed 59)."""
    parts = [float(p) for p in text.split(":")]
    if len(parts) == 1:
        return parts[0]
    if len(parts) == 2:
        return parts[0] * 60 + parts[1]
    raise SystemExit(f"bsub (stand-in): bad time {text!r}: use [hour:]minute")


def requeues(spec: str, code: int) -> bool:
    """Whether exit code `code` requeues under -Q "spec" (BSUB_Q: space-separated codes, `all`,
    `~n` excludes n, EXCLUDE(n) requeues n, away from the host, which the stand-in ignores)."""
    words = spec.replace("EXCLUDE(", " ").replace(")", " ").split()
    excluded = {int(w[1:]) for w in words if w.startswith("~")}
    listed = {int(w) for w in words if w.isdigit()}
    return code not in excluded and ("all" in words or code in listed)


def output_path(pattern: str, job_id: int) -> str:
    """BSUB_O: %J is the job ID, %I the array index (0 outside an array)."""
    return pattern.replace("%J", str(job_id)).replace("%I", "0")


@dataclass(frozen=True)
class Allocation:
    """A CSM allocation as Summit's bsub gives one (OLCF: `-nnodes N` whole compute nodes; the
    job script runs on a shared launch node)."""

    launch: str
    hosts: tuple[str, ...]
    slots: int  # per compute host (Summit: 42, the cores a user gets)

    def hostfile(self) -> str:
        """LSB_DJOB_HOSTFILE's content: one line per slot, the launch node first."""
        return "".join(
            f"{h}\n" for h in [self.launch] + [h for h in self.hosts for _ in range(self.slots)]
        )

    def lsb_hosts(self) -> str:
        """LSB_HOSTS (JOB_ENV: "the list of hosts that are used to run the batch job"): the same
        names as the host file, on ONE line, space-separated."""
        return " ".join(self.hostfile().split())

    def mcpu_hosts(self) -> str:
        """LSB_MCPU_HOSTS: "host_nameA num_processors1 host_nameB num_processors2..."."""
        return " ".join([f"{self.launch} 1"] + [f"{h} {self.slots}" for h in self.hosts])


def allocation(nnodes: int, slots: int = 42) -> Allocation:
    return Allocation("batch1", tuple(f"h{i}" for i in range(1, nnodes + 1)), slots)


# ---- jsrun --------------------------------------------------------------------------------------

# OLCF's table of jsrun flags (long, short) and their OLCF defaults.
JSRUN_FLAGS = {
    "--nrs": "-n",
    "--tasks_per_rs": "-a",
    "--cpu_per_rs": "-c",
    "--gpu_per_rs": "-g",
    "--rs_per_host": "-r",
    "--bind": "-b",
    "--launch_distribution": "-d",
    "--smpiargs": None,  # Spectrum MPI's own arguments: nothing to do under mpich
}


def parse_jsrun(args: Sequence[str]) -> tuple[dict[str, str], list[str]]:
    """jsrun's flags (long, `--flag=value`, short with the value attached as in `-n12` or
    `-bpacked:4`, as in OLCF's examples) and the program after them."""
    short = {s: long for long, s in JSRUN_FLAGS.items() if s}
    opts: dict[str, str] = {}
    i = 0
    while i < len(args) and args[i].startswith("-"):
        word = args[i]
        if word.startswith("--"):
            name, _, value = word.partition("=")
            if name not in JSRUN_FLAGS:
                raise SystemExit(f"jsrun (stand-in): unknown flag {name}")
            if not value:
                i += 1
                value = args[i]
        else:
            name = short.get(word[:2]) or ""
            if not name:
                raise SystemExit(f"jsrun (stand-in): unknown flag {word}")
            value = word[2:]
            if not value:
                i += 1
                value = args[i]
        opts[name] = value
        i += 1
    return opts, list(args[i:])


@dataclass(frozen=True)
class Task:
    rank: int
    rs: int  # resource set
    host: str
    local_rank: int  # among the tasks on its host
    local_size: int
    gpus: tuple[int, ...]  # the host's physical GPUs of its resource set
    cores: tuple[int, ...]  # the host's cores this task is bound to

    def env(self, size: int, smt: int) -> dict[str, str]:
        """What the task sees. CUDA_VISIBLE_DEVICES: its resource set's GPUs numbered from 0
        (OLCF: a resource set is a cgroup that controls which of a node's GPUs a job sees; the
        task sees only its own, as cuda:0..g-1). JSM_NAMESPACE_*: set by jsrun for every task
        (used by Lightning's LSFEnvironment and by launch.py). OMP_NUM_THREADS: every hardware
        thread of its cores unless set (OLCF, "Controlling Number of Threads for Tasks": -c8
        -a2 -bpacked:4 gives 16 and places "0:4,4:4,8:4,12:4", "16:4,20:4,24:4,28:4").
        FAKE_JSRUN_*: what the stand-in cannot impose on this machine, for tests: the host, the
        physical GPUs, the affinity mask (hardware threads), and the OMP places in libgomp's
        form ({0:4} as in OLCF's SMT4 example; a real OMP_PLACES naming CPUs this machine lacks
        would make libgomp refuse or misplace the rank's threads)."""
        threads = [c * smt + t for c in self.cores for t in range(smt)]
        return {
            "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in range(len(self.gpus))),
            "JSM_NAMESPACE_RANK": str(self.rank),
            "JSM_NAMESPACE_SIZE": str(size),
            "JSM_NAMESPACE_LOCAL_RANK": str(self.local_rank),
            "JSM_NAMESPACE_LOCAL_SIZE": str(self.local_size),
            "FAKE_JSRUN_OMP_PLACES": ",".join(f"{{{c * smt}:{smt}}}" for c in self.cores),
            "FAKE_JSRUN_HOST": self.host,
            "FAKE_JSRUN_GPUS": ",".join(map(str, self.gpus)),
            "FAKE_JSRUN_CPUS": ",".join(map(str, threads)),
        }


def plan_step(
    opts: dict[str, str], hosts: Sequence[str], cores: int = 42, gpus: int = 6
) -> list[Task]:
    """Lay resource sets onto the allocation's hosts and tasks into them, or fail as jsrun does
    when the request does not fit. Defaults (OLCF's table): -c 1, -g 0, -a 1, -b packed:1,
    -r as many as fit; -n defaults to all that fit. Resource sets fill a host before the next
    (-d packed, the default and the only distribution the stand-in knows)."""
    c, g = int(opts.get("--cpu_per_rs", 1)), int(opts.get("--gpu_per_rs", 0))
    a = int(opts.get("--tasks_per_rs", 1))
    if opts.get("--launch_distribution", "packed") != "packed":
        raise SystemExit("jsrun (stand-in): only --launch_distribution packed is modelled")
    fit = min(cores // c, gpus // g if g else cores)
    per_host = int(opts.get("--rs_per_host", fit))
    if per_host > fit:
        raise SystemExit(
            f"jsrun (stand-in): --rs_per_host {per_host} does not fit a host of {cores} cores "
            f"and {gpus} GPUs with {c} cores and {g} GPUs per resource set (at most {fit})"
        )
    nrs = int(opts.get("--nrs", per_host * len(hosts)))
    if nrs < 1 or nrs > per_host * len(hosts):
        raise SystemExit(
            f"jsrun (stand-in): {nrs} resource sets requested but the allocation holds "
            f"{per_host * len(hosts)} ({len(hosts)} hosts x {per_host})"
        )
    bind = opts.get("--bind", "packed:1")
    per_task = c if bind == "rs" else 0 if bind == "none" else int(bind.split(":")[1])
    if bind.startswith("packed") and per_task * a > c:
        raise SystemExit(f"jsrun (stand-in): --bind {bind} x {a} tasks exceeds {c} cores per rs")
    tasks = []
    for rs in range(nrs):
        host, slot = divmod(rs, per_host)
        on_host = min(per_host, nrs - host * per_host)
        rs_cores = range(slot * c, slot * c + c)
        for k in range(a):
            bound = rs_cores if bind == "rs" else rs_cores[k * per_task : (k + 1) * per_task]
            tasks.append(
                Task(
                    rank=len(tasks),
                    rs=rs,
                    host=hosts[host],
                    local_rank=slot * a + k,
                    local_size=on_host * a,
                    gpus=tuple(range(slot * g, slot * g + g)),
                    cores=tuple(bound),
                )
            )
    return tasks

"""The facts `build_context` gathers on a node (physical GPU identities, physical cores) and the
decisions they feed, with a fake node of two ranks, fake GPUs and a fake sysfs topology."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from distcgan.errors import AgreedError
from distcgan.mpi import context as dist
from distcgan.plan import gpu_sharing, physical_cores


class FakeComm:
    """Rank `rank` of a two-rank job on one node. World collectives: every rank gave this rank's
    value (so no errors). The node's allgathers return the other rank's values from `peer`, in
    call order (GPUs, then cores)."""

    def __init__(self, rank: int, peer: list, node: bool = False) -> None:
        self.rank, self.size, self.peer, self.node = rank, 2, peer, node

    def Split_type(self, split_type: int, key: int) -> FakeComm:
        return FakeComm(self.rank, list(self.peer), node=True)

    def allgather(self, value):
        if not self.node:
            return [value, value]
        other = self.peer.pop(0)
        return [value, other] if self.rank == 0 else [other, value]

    def gather(self, value, root: int = 0):
        return [value, value] if self.rank == root else None

    def bcast(self, value, root: int = 0):
        return value

    def Free(self) -> None:
        pass


def v100(bus: int) -> SimpleNamespace:
    """Device properties as an older torch gives them: no `uuid`, a PCI address."""
    return SimpleNamespace(
        name="Tesla V100-SXM2-16GB", pci_domain_id=4, pci_bus_id=bus, pci_device_id=0
    )


def fake_gpus(monkeypatch, props: list) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: len(props))
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props[i])


def fake_cores(monkeypatch, cores: set) -> None:
    """This rank's affinity mask and topology give `cores`; no sysfs read."""
    monkeypatch.setattr(dist.os, "sched_getaffinity", lambda pid: set(range(4 * len(cores))))
    monkeypatch.setattr(
        dist, "cpu_topology", lambda cpus, root=None: {c: sorted(cores)[c // 4] for c in cpus}
    )


def test_resource_sets_numbered_from_zero_on_different_physical_gpus_are_not_shared(monkeypatch):
    # jsrun -g2: rank 0 sees physical GPUs 0004:04 and 0004:05, rank 1 sees 0004:35 and 0004:36,
    # each as cuda:0 and cuda:1. Names and indices are equal; the PCI addresses are not.
    fake_gpus(monkeypatch, [v100(0x04), v100(0x05)])
    fake_cores(monkeypatch, {(0, 0), (0, 8)})
    peer_gpus = [dist.gpu_identity(v100(0x35)), dist.gpu_identity(v100(0x36))]
    comm = FakeComm(0, peer=[peer_gpus, {(0, 16), (0, 24)}])
    ctx = dist.build_context(comm, [0, 1], devices="auto", threads=0)
    assert (ctx.device_g, ctx.device_d) == ("cuda:0", "cuda:1")  # not both on cuda:0
    assert ctx.threads == 2  # its two cores, not its 8 hardware threads


def test_ranks_that_see_the_same_physical_gpus_share_them(monkeypatch):
    fake_gpus(monkeypatch, [v100(b) for b in (4, 5, 6, 7)])
    fake_cores(monkeypatch, {(0, 0)})
    same = [dist.gpu_identity(v100(b)) for b in (4, 5, 6, 7)]
    ctx = dist.build_context(FakeComm(1, peer=[same, {(0, 0)}]), [0, 1], "auto", 0)
    assert (ctx.device_g, ctx.device_d) == ("cuda:2", "cuda:3")


def test_no_physical_identity_is_not_guessed(monkeypatch):
    fake_gpus(monkeypatch, [SimpleNamespace(name="old"), SimpleNamespace(name="old")])
    fake_cores(monkeypatch, {(0, 0)})
    comm = FakeComm(0, peer=[[None, None], {(0, 1)}])
    with pytest.raises(AgreedError, match="cannot tell whether the ranks on this node share"):
        dist.build_context(comm, [0, 1], "auto", 0)
    comm = FakeComm(0, peer=[[None, None], {(0, 1)}])
    ctx = dist.build_context(comm, [0, 1], "cuda:0,cuda:1", 0)  # an explicit choice is fine
    assert (ctx.device_g, ctx.device_d) == ("cuda:0", "cuda:1")


def test_gpu_identity_prefers_the_uuid_then_the_pci_address():
    assert dist.gpu_identity(SimpleNamespace(uuid="5c5b-e1", pci_bus_id=4)) == "5c5b-e1"
    assert dist.gpu_identity(v100(0x35)) == "pci:0004:35:00"
    assert dist.gpu_identity(SimpleNamespace(name="x")) is None


def test_gpu_sharing_decisions():
    assert gpu_sharing([["a", "b"], ["a", "b"]], 0) == (True, "")
    assert gpu_sharing([["a", "b"], ["c", "d"]], 1) == (False, "")
    shared, problem = gpu_sharing([["a", "b"], ["b", "c"]], 0)
    assert not shared and "overlapping but different GPU sets" in problem
    assert gpu_sharing([[], []], 0) == (True, "")  # no GPU: the CPU either way
    assert gpu_sharing([[None, None]], 0) == (True, "")  # alone on its node: nothing to tell


SUMMIT_SMT4 = {4 * core + t: (core // 21, core) for core in range(42) for t in range(4)}


def test_physical_cores_of_an_smt4_mask():
    # jsrun --bind packed:7 on Summit (SMT4): the mask holds 28 hardware threads of 7 cores.
    mask = range(28)
    assert len(physical_cores(mask, SUMMIT_SMT4)) == 7
    assert len(physical_cores(range(168), SUMMIT_SMT4)) == 42
    assert len(physical_cores([0, 1, 5], {})) == 3  # no topology known: each CPU a core


def test_cpu_topology_reads_sysfs(tmp_path: Path):
    for cpu in range(8):  # two cores of four hardware threads on one package
        base = tmp_path / f"cpu{cpu}" / "topology"
        base.mkdir(parents=True)
        (base / "physical_package_id").write_text("0\n")
        (base / "core_id").write_text(f"{cpu // 4 * 8}\n")
    topology = dist.cpu_topology(range(9), root=tmp_path)  # cpu8 has no files
    assert topology[5] == (0, 8) and 8 not in topology
    assert len(physical_cores(range(9), topology)) == 3


def test_bench_counts_cores_not_hardware_threads(monkeypatch):
    from distcgan import bench

    monkeypatch.setattr(bench.os, "sched_getaffinity", lambda pid: set(range(28)))
    monkeypatch.setattr(dist, "cpu_topology", lambda cpus, root=None: SUMMIT_SMT4)
    assert bench.own_cores() == 7


def test_a_group_of_ranks_on_a_gpu_and_a_cpu_is_refused_before_torch_distributed():
    """A data-parallel group with D on a GPU on one rank and on the CPU on another (--devices
    auto on a node without GPUs beside nodes with them) would wait in DDP's first broadcast,
    NCCL on one rank and gloo on the other, for 30 minutes."""
    from distcgan.mpi.group import check_group_devices

    # rank r's (group, D's device) at [r]; a rank alone may differ from the others
    gpus, cpus = [((0, 1), "cuda:0"), ((0, 1), "cuda:1")], [((3, 4), "cpu")] * 2
    check_group_devices([*gpus, ((2,), "cpu"), *cpus])
    mixed = [((0,), "cuda:0"), ((1, 2, 3), "cuda:0"), ((1, 2, 3), "cuda:1"), ((1, 2, 3), "cpu")]
    with pytest.raises(AgreedError) as err:
        check_group_devices(mixed)
    assert str(err.value) == (
        "ranks 1, 2, 3 train one pair together, but rank 1's D is on cuda:0 and rank 3's on cpu: "
        "give every rank of a group the same kind of device (--devices cpu, or a GPU on every "
        "node)"
    )


def test_rank_0_holds_the_rendezvous_port_from_the_moment_it_picks_it(monkeypatch):
    """The port rank 0 sends out is already served by its store, so no other job on the node
    can take it before torch.distributed starts (binding a free port, closing it and handing
    the number on left that window open); a rank after the first meets rank 0 through it."""
    import datetime
    import socket

    from distcgan.mpi.group import _rendezvous

    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")  # whatever this machine's hostname gives
    timeout = datetime.timedelta(seconds=30)
    master = _rendezvous(FakeComm(0, []), timeout)
    with socket.socket() as other, pytest.raises(OSError):  # EADDRINUSE: held, not just picked
        other.bind(("", master.port))

    class Rank1(FakeComm):
        def bcast(self, value, root: int = 0):
            return ("127.0.0.1", master.port, "MASTER_ADDR=127.0.0.1", None)  # rank 0's

    client = _rendezvous(Rank1(1, []), timeout)
    client.set("from-rank-1", "hello")
    assert master.get("from-rank-1") == b"hello"


class TwoHosts(FakeComm):
    """Rank 0 of a job whose other rank is on another host."""

    def allgather(self, value):
        return [value, value + "-other"] if isinstance(value, str) else super().allgather(value)


@pytest.mark.parametrize(
    ("master_addr", "hosts", "said"),
    [
        # 203.0.113.0/24 is for documentation (RFC 5737): no machine's own address
        ("203.0.113.77", 1, "MASTER_ADDR=203.0.113.77 gives 203.0.113.77, which is not an "
         "address of rank 0's host {host}: set MASTER_ADDR to one of its addresses on the "
         "network the ranks share"),
        ("localhost", 2, "MASTER_ADDR=localhost gives 127.0.0.1, which other nodes cannot reach: "
         "set MASTER_ADDR to rank 0's address on the high-speed network"),
        ("::1", 2, "MASTER_ADDR=::1 gives ::1, which other nodes cannot reach: set MASTER_ADDR to "
         "rank 0's address on the high-speed network"),
    ],
    ids=["not-this-host", "localhost", "ipv6-loopback"],
)  # fmt: skip
def test_an_address_the_others_cannot_reach_is_said_before_anyone_waits(
    monkeypatch, master_addr, hosts, said
):
    """Each would leave ranks retrying their connection to the store for the 30 minutes'
    timeout (a loopback address was caught only as "127.", and only from the hostname)."""
    import datetime
    import socket

    from distcgan.mpi.group import _rendezvous

    if master_addr == "::1":
        try:
            with socket.socket(socket.AF_INET6) as s:
                s.bind(("::1", 0))
        except OSError:
            pytest.skip("no IPv6 loopback address on this machine")
    monkeypatch.setenv("MASTER_ADDR", master_addr)
    comm = TwoHosts(0, []) if hosts == 2 else FakeComm(0, [])
    with pytest.raises(AgreedError) as err:
        _rendezvous(comm, datetime.timedelta(seconds=5))
    said = said.format(host=socket.gethostname())  # localhost: 127.0.0.1 on most machines
    assert str(err.value) == said.replace("127.0.0.1", socket.gethostbyname("localhost"))

"""The ranks that train one G/D pair together: torch.distributed from MPI, groups, DDP.

A run whose ranks outnumber its tasks (gan and cgan modes on several ranks; per-class mode with
more ranks than classes) trains each pair data-parallel in a group of ranks: the multi-node
StyleGAN2 recipe on torch.distributed (gloo on CPUs, NCCL on GPUs). torch.distributed is set up
from MPI (rank 0 serves the rendezvous store on a port the kernel picks, and its address and
port go out with mpi4py's bcast), which works the same under jsrun, srun and mpirun. Every
function here that talks to other ranks says so; all of them are called by every rank of the
group (or of the world), in the same order.
Leaves out: anything when every group has one rank (no torch.distributed then at all).
"""

from __future__ import annotations

import dataclasses
import datetime
import inspect
import ipaddress
import os
import socket
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from distcgan.errors import AgreedError
from distcgan.mpi.comm import Comm
from distcgan.mpi.context import RankContext, TrainGroup


def _rendezvous(comm: Comm, timeout: datetime.timedelta) -> Any:
    """Collective (bcast, then allgather): the TCPStore through which torch.distributed's ranks
    meet, served by rank 0 on rank 0's reachable address.

    Rank 0 opens the store on a port the kernel picks (port 0) and sends the port out; the
    usual recipe (bind port 0, close it, hand the number to init_process_group to bind again)
    leaves a window in which another job on the node can take the port. An address the others
    could not reach is an AgreedError before anyone connects: every rank would otherwise retry
    its connection until the 30 minutes' timeout.
    """
    addr, port, source, said, store = None, None, None, None, None
    if comm.rank == 0:
        addr, source, said = own_address(os.environ.get("MASTER_ADDR"))
        if said is None:  # the store listens on every interface
            store = dist.TCPStore(
                addr, 0, comm.size, is_master=True, timeout=timeout, wait_for_workers=False
            )
            port = store.port
    addr, port, source, said = comm.bcast((addr, port, source, said), root=0)
    if said is not None:
        raise AgreedError(said)
    # addr is rank 0's, broadcast: every rank takes this branch, and the collective in it
    if ipaddress.ip_address(addr).is_loopback and _spans_hosts(comm):
        raise AgreedError(
            f"{source} gives {addr}, which other nodes cannot reach: set MASTER_ADDR to rank 0's "
            "address on the high-speed network"
        )
    if store is None:
        store = dist.TCPStore(addr, port, comm.size, is_master=False, timeout=timeout)
    return store


def own_address(master_addr: str | None) -> tuple[str, str, str | None]:
    """Rank 0's address for the other ranks (MASTER_ADDR, which lets a site name the right
    interface where the hostname resolves to a management network, else the hostname's IPv4
    address), where it came from, and what is wrong with it (None: nothing). Rank 0 connects
    to its own store at that address too, so one of another host's would keep it waiting."""
    host = socket.gethostname()
    source = f"MASTER_ADDR={master_addr}" if master_addr else f"rank 0's hostname {host}"
    try:
        addr = str(ipaddress.ip_address(master_addr or ""))  # an IPv4 or IPv6 address as given
    except ValueError:
        try:
            addr = socket.gethostbyname(master_addr or host)
        except OSError as exc:
            said = f"{source} does not resolve ({exc}): set MASTER_ADDR to rank 0's address"
            return "", source, said
    family = socket.AF_INET6 if ipaddress.ip_address(addr).version == 6 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.bind((addr, 0))
    except OSError:
        said = (
            f"{source} gives {addr}, which is not an address of rank 0's host {host}: set "
            "MASTER_ADDR to one of its addresses on the network the ranks share"
        )
        return addr, source, said
    return addr, source, None


def connect_group(comm: Comm, ctx: RankContext) -> RankContext:
    """Collective over the world: `ctx` with its group connected (the group's MPI
    sub-communicator, and its torch.distributed process group when it has several ranks).

    torch.distributed is initialised only when some group has more than one rank; then every
    rank joins it and every multi-rank group gets its own process group.
    """
    devices = comm.allgather((ctx.group.ranks, ctx.device_d))
    check_group_devices(devices)
    groups = sorted({ranks for ranks, _ in devices})
    device = ctx.device_d
    mine = ctx.group.ranks
    sub = comm.Split(color=mine[0], key=comm.rank)
    group = dataclasses.replace(ctx.group, comm=sub)
    if all(len(g) == 1 for g in groups):
        return dataclasses.replace(ctx, group=group)
    if not dist.is_initialized():
        timeout = datetime.timedelta(minutes=30)
        store = _rendezvous(comm, timeout)
        backend = "cpu:gloo,cuda:nccl" if device.startswith("cuda") else "gloo"
        # The process group keeps the store (and so rank 0's server) for the job's life.
        dist.init_process_group(
            backend, store=store, rank=comm.rank, world_size=comm.size, timeout=timeout
        )
    # new_subgroups_by_enumeration creates every group (a collective over all ranks, in the
    # same order everywhere) and hands back this rank's.
    multi = [list(g) for g in groups if len(g) > 1]
    if len(mine) > 1:
        group.pg, _ = dist.new_subgroups_by_enumeration(multi)
    else:
        dist.new_subgroups_by_enumeration(multi)
    return dataclasses.replace(ctx, group=group)


def check_group_devices(devices: list[tuple[tuple[int, ...], str]]) -> None:
    """Every rank's (group, D's device), in rank order: the ranks of a group must train on one
    kind of device. Each rank picks its torch.distributed backend from its own device (NCCL
    for a GPU, gloo for a CPU), so a group of both would wait in DDP's first broadcast, each
    rank on its own backend, until the 30 minutes' timeout. Computed alike on every rank, from
    one allgather: an AgreedError."""
    for ranks in {ranks for ranks, _ in devices if len(ranks) > 1}:
        kinds = {devices[r][1].split(":")[0]: r for r in reversed(ranks)}
        if len(kinds) > 1:
            (_, a), (_, b) = sorted(kinds.items(), key=lambda kind: kind[1])[:2]
            raise AgreedError(
                f"ranks {', '.join(map(str, ranks))} train one pair together, but rank {a}'s D "
                f"is on {devices[a][1]} and rank {b}'s on {devices[b][1]}: give every rank of a "
                "group the same kind of device (--devices cpu, or a GPU on every node)"
            )


def _spans_hosts(comm: Comm) -> bool:
    return len(set(comm.allgather(socket.gethostname()))) > 1


def wrap(module: nn.Module, group: TrainGroup, device: str) -> nn.Module:
    """DDP around `module` for a multi-rank group; the module itself otherwise.

    No buffer sync in forward: DDP would otherwise overwrite BatchNorm's running statistics from
    rank 0 at every forward, in place, which breaks a backward through D's second forward in
    a step; the statistics are averaged explicitly instead (groupbn.average_buffers).
    """
    if group.pg is None:
        return module
    ids = [torch.device(device).index or 0] if device.startswith("cuda") else None
    # torch >= 2.12 renamed the option (and warns about the old name); older torch has only it.
    no_buffer_sync: dict[str, Any]  # keywords of one torch version or the other
    if "forward_sync_buffers" in inspect.signature(DistributedDataParallel).parameters:
        no_buffer_sync = {"forward_sync_buffers": False, "broadcast_buffers": None}
    else:
        no_buffer_sync = {"broadcast_buffers": False}
    return DistributedDataParallel(module, device_ids=ids, process_group=group.pg, **no_buffer_sync)

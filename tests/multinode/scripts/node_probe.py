"""Every rank says what its node is, as MPI and as Linux see it; rank 0 prints all of it as one JSON line.

Run across the test hosts by tests/multinode/test_fixture.py: ``node_probe.py NODE_LOCAL_DIR``.
Before reporting, every rank sends a message to every other rank, so that
the TCP connections Open MPI opens between hosts exist when they are listed.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import sys
from pathlib import Path

from mpi4py import MPI


def tcp_peers() -> list[str]:
    """The remote IPv4 addresses of this process's own established TCP connections."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[len("socket:[") : -1])
    peers = []
    for line in Path("/proc/self/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[3] == "01" and fields[9] in inodes:  # 01: ESTABLISHED
            peers.append(socket.inet_ntoa(struct.pack("<I", int(fields[2].split(":")[0], 16))))
    return sorted(set(peers))


def main() -> None:
    local = Path(sys.argv[1])
    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    node = world.Split_type(MPI.COMM_TYPE_SHARED, key=rank)
    host = socket.gethostname()
    if node.Get_rank() == 0:  # the node's first rank leaves a mark in node-local storage and in /dev/shm
        (local / f"probe-{host}").write_text(host)
        Path(f"/dev/shm/aiperf-probe-{host}").write_text(host)
    world.Barrier()
    sends = [world.isend(rank, dest=peer, tag=7) for peer in range(size) if peer != rank]
    heard = sorted(world.recv(source=peer, tag=7) for peer in range(size) if peer != rank)
    MPI.Request.waitall(sends)
    parent = os.getppid()
    row = {
        "rank": rank,
        "host": host,
        "processor": MPI.Get_processor_name(),
        "node": node.allreduce(rank, op=MPI.MIN),
        "node_size": node.Get_size(),
        "namespaces": {kind: os.stat(f"/proc/self/ns/{kind}").st_ino for kind in ("net", "uts", "mnt")},
        "parent": {
            "pid": parent,
            "name": Path(f"/proc/{parent}/comm").read_text().strip(),
            "uts": os.stat(f"/proc/{parent}/ns/uts").st_ino,
        },
        "tcp_peers": tcp_peers(),
        "address": socket.gethostbyname(host),
        "heard": heard,
        "node_local": sorted(p.name for p in local.glob("probe-*")),
        "shm": sorted(p.name for p in Path("/dev/shm").glob("aiperf-probe-*")),
    }
    rows = world.gather(row, root=0)
    world.Barrier()
    if node.Get_rank() == 0:
        (local / f"probe-{host}").unlink()
        Path(f"/dev/shm/aiperf-probe-{host}").unlink()
    if rank == 0:
        print("PROBE " + json.dumps(rows), flush=True)
    node.Free()


if __name__ == "__main__":
    main()

"""How rank 0 can receive a leader's message, apart from the master: CPU per message, small and large.

Run by hand on two ranks (BENCHMARKS.md, "The master at 65,536 groups"; its notes of 2026-12-02 11:20
in docs/benchmarks-history.md)::

    .venv/bin/mpirun -n 2 --oversubscribe .venv/bin/python -m benchmarks.receive

Rank 1 sends 20,000 messages of one size, all pending; rank 0 takes them in a tight loop in each of four
ways, then through the transport's own poll (which unpickles with ``wire.plain_loads``).  The ways the
master did not take are kept here so that the comparison can be made again on another machine.
"""

from __future__ import annotations

import pickle
import time

from mpi4py import MPI

from aiperf_mpi.job.messages import TAGS, EpochStarted
from aiperf_mpi.job.wire import to_wire
from aiperf_mpi.mpi.transport import MpiMasterTransport

COUNT = 20_000
SMALL = pickle.dumps(to_wire(EpochStarted(5, 1, 1.7e9, 64)), pickle.HIGHEST_PROTOCOL)
LARGE = pickle.dumps((5, "x" * 18_000, {}, ""), pickle.HIGHEST_PROTOCOL)
WAYS = ("Iprobe + recv", "improbe + Message.recv", "Iprobe + Recv into a buffer + loads",
        "8 pre-posted Irecv + Testany", "the transport's poll")


def send_all(comm: MPI.Comm, data: bytes) -> None:
    requests = []
    for _ in range(COUNT):
        requests.append(comm.Isend([data, MPI.BYTE], dest=0, tag=TAGS[EpochStarted]))
        if len(requests) > 256:
            MPI.Request.Waitall(requests[:128])
            del requests[:128]
    MPI.Request.Waitall(requests)


def receive_all(comm: MPI.Comm, way: str) -> float:
    """CPU seconds per message to take COUNT messages ``way``."""
    status, got, buffer = MPI.Status(), 0, bytearray(1 << 16)
    transport = MpiMasterTransport(comm, {0: 1})
    posted = [comm.Irecv([bytearray(1 << 16), MPI.BYTE], MPI.ANY_SOURCE, MPI.ANY_TAG) for _ in range(8)] \
        if way.startswith("8 pre-posted") else []  # fmt: skip
    start = time.thread_time()
    while got < COUNT:
        if way == "Iprobe + recv":
            if comm.Iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG, status):
                comm.recv(None, status.source, status.tag)
                got += 1
        elif way == "improbe + Message.recv":
            message = comm.improbe(MPI.ANY_SOURCE, MPI.ANY_TAG, status)
            if message is not None:
                message.recv()
                got += 1
        elif way.startswith("Iprobe + Recv"):
            if comm.Iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG, status):
                size = status.Get_count(MPI.BYTE)
                comm.Recv([buffer, size, MPI.BYTE], status.source, status.tag)
                pickle.loads(memoryview(buffer)[:size])
                got += 1
        elif posted:
            index, done = MPI.Request.Testany(posted, status)
            if done and index != MPI.UNDEFINED:
                posted[index] = comm.Irecv([bytearray(1 << 16), MPI.BYTE], MPI.ANY_SOURCE, MPI.ANY_TAG)
                got += 1
        elif transport.poll(0.0) is not None:
            got += 1
    seconds = (time.thread_time() - start) / COUNT
    for request in posted:
        request.Cancel()
    MPI.Request.Waitall(posted)
    return seconds


def main() -> None:
    comm = MPI.COMM_WORLD
    if comm.Get_size() != 2:
        raise SystemExit("run on 2 ranks: mpirun -n 2 python -m benchmarks.receive")
    rows = []
    for way in WAYS:
        sizes = [SMALL] if way == WAYS[-1] else [SMALL, LARGE]  # the transport takes only its messages' shapes
        costs = []
        for data in sizes:
            comm.Barrier()
            if comm.Get_rank() == 1:
                send_all(comm, data)
            else:
                costs.append(receive_all(comm, way))
        if comm.Get_rank() == 0:
            rows.append(f"| {way} | " + " | ".join(f"{c * 1e6:.1f} µs" for c in costs) + (" | – |" if len(costs) == 1
                                                                                           else " |"))  # fmt: skip
    if comm.Get_rank() == 0:
        header = f"| how rank 0 receives | {len(SMALL)} B | {len(LARGE) / 1e3:.0f} kB |\n|---|---|---|\n"
        print(header + "\n".join(rows))


if __name__ == "__main__":
    main()

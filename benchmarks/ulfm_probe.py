"""ULFM probe (issue 25): does rank 0 learn of a dead or stopped rank, and what does a Horovod survivor see?

Rank 0 polls ``Iprobe(ANY_SOURCE)`` as the master does; rank 1 sends it a
message every 0.1 s; ranks 2 and 3 run Horovod all-reduces on their own
sub-communicator, and rank 3 ends itself (``exit``: ``os._exit``) or stops
(``stop``: SIGSTOP) at its 30th all-reduce.  How the job then ends is the
second argument: ``finalize``, ``exit`` (``os._exit``) or ``abort``.

    mpirun -n 4 --oversubscribe --tag-output --with-ft ulfm --enable-recovery --mca mpi_ft_enable true \\
        --mca mpi_ft_detector true --mca mpi_ft_detector_thread true --mca mpi_ft_detector_timeout 10 \\
        --mca mpi_ft_detector_period 2 python benchmarks/ulfm_probe.py exit abort

Results are in docs/benchmarks-history.md ("Failure detection", 2026-12-01: "a lost rank under ULFM").
"""

from __future__ import annotations

import os
import signal
import sys
import time

from mpi4py import MPI

POLL_SECONDS = 25


def say(rank: int, start: float, *words: object) -> None:
    print(f"[r{rank} t={MPI.Wtime() - start:6.2f}]", *words, flush=True)


def master(world: MPI.Comm, start: float, ending: str) -> None:
    """Poll every source; report each failure, acknowledge it and go on."""
    status = MPI.Status()
    until = time.monotonic() + POLL_SECONDS
    while time.monotonic() < until:
        try:
            if world.Iprobe(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=status):
                world.recv(source=status.Get_source(), tag=status.Get_tag())
        except MPI.Exception as exc:
            say(0, start, "error", exc.Get_error_class(), exc.Get_error_string())
            world.Ack_failed()
            failed = world.Get_failed()
            ranks = MPI.Group.Translate_ranks(failed, list(range(failed.Get_size())), world.Get_group())
            say(0, start, "failed ranks", list(ranks))
        time.sleep(0.01)
    say(0, start, "done polling; ending:", ending)
    world.send("bye", dest=1, tag=9)
    time.sleep(1)
    end(world, ending, 0, start)


def sender(world: MPI.Comm, start: float, ending: str) -> None:
    count = 0
    while not world.Iprobe(source=0, tag=9):
        world.send(count, dest=0, tag=1)
        count += 1
        time.sleep(0.1)
    world.recv(source=0, tag=9)
    end(world, ending, 1, start)


def trainer(world: MPI.Comm, sub: MPI.Comm, start: float, mode: str) -> None:
    import horovod.tensorflow as hvd
    import tensorflow as tf

    rank = world.Get_rank()
    hvd.init(comm=sub)
    world.barrier()
    tensor = tf.ones([1000])
    for step in range(100_000):
        if rank == 3 and step == 30:
            say(rank, start, "dying:", mode)
            if mode == "exit":
                os._exit(9)
            os.kill(os.getpid(), signal.SIGSTOP)
        try:
            hvd.allreduce(tensor, name="probe")
        except tf.errors.OpError as exc:
            say(rank, start, "all-reduce error:", type(exc).__name__, str(exc)[:120])
            break
        if step % 10 == 0:
            world.send(step, dest=0, tag=2)
        time.sleep(0.1)
    say(rank, start, "survivor leaves with os._exit")
    os._exit(0)


def end(world: MPI.Comm, ending: str, rank: int, start: float) -> None:
    if ending == "exit":
        os._exit(0)
    if ending == "abort" and rank == 0:
        world.Abort(3)  # Abort(0) did not end the job under --enable-recovery; a non-zero code does
    say(rank, start, "finalizing")
    MPI.Finalize()
    say(rank, start, "finalized")


def main() -> None:
    mode, ending = sys.argv[1], sys.argv[2]  # exit | stop, finalize | exit | abort
    world = MPI.COMM_WORLD
    world.Set_errhandler(MPI.ERRORS_RETURN)
    rank = world.Get_rank()
    start = MPI.Wtime()
    sub = world.Split(1 if rank in (2, 3) else rank + 10, rank)
    if rank == 0:
        world.barrier()
        master(world, start, ending)
    elif rank == 1:
        world.barrier()
        sender(world, start, ending)
    else:
        trainer(world, sub, start, mode)


if __name__ == "__main__":
    main()

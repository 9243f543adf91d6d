"""Rank 0 against simulated groups: cost per message, bytes per model and memory, flat in groups and models.

The real :class:`~aiperf_mpi.job.master.Master` (history, event log with its
fsyncs, the appended graphs file, duplicate check, weights retention) handles a synthetic
stream of messages on two MPI ranks: rank 1 plays the leaders, pickles each
message and sends it to rank 0, whose loop receives it with the transport's
own poll and unpickles it before it is handled; every reply is pickled, as
mpi4py does.  The MPI calls matter beyond their cost: each lets go of the
interpreter lock, which the master's I/O thread is waiting for.

Steady state without simulating whole rounds: the master first holds a
history of N models (ResNet-50 32² graphs, from a pool of real morph chains,
each made distinct) appended directly, and each of the G groups got its
current Work as the last G of those arrived (group g when the history had
N − G + g models), as when every group finishes one model a minute.  Then
a fixed number of models are timed: per model the group's Proposed, the
first epoch's EpochStarted, three EpochDone (each carrying the next epoch's
start but the last) and the Result whose reply is its next Work, which
carries the view members appended since the group's previous one.  So each
size costs seconds, not the G models of a round.

What a group feels is measured too: messages arrive in real time at the
machine's rate (message i at i / rate seconds), and a message's queueing
delay is the time from its arrival to the end of its handling — measured on
the clock, not replayed, so a loop that cannot keep up shows a delay that
grows through the run; its reply's delay adds the I/O thread's work (the
fsync) before the reply is released.  The largest machine is also run at
twice that rate.

A leader's memory is measured apart: a view fed by the master's updates
while the history grows to 100,000 models, with the Bayesian search asking
on it (ResNet-50 graphs) — its objects by tracemalloc, and the process's
RSS (this process imports neither TensorFlow nor Horovod).
"""

from __future__ import annotations

import gc
import json
import multiprocessing
import os
import pickle
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections import deque
from pathlib import Path

from mpi4py import MPI

from aiperf_mpi.config import RunConfig
from aiperf_mpi.graph.model import to_json
from aiperf_mpi.graph.morph import MorphError, random_morph
from aiperf_mpi.graph.seeds import resnet50
from aiperf_mpi.job.batchio import BatchIO
from aiperf_mpi.job.faults import HangPolicy
from aiperf_mpi.job.master import BATCH, HANG_CHECK_SLICE, Master, retire_survivors
from aiperf_mpi.job.messages import RELAYED, TAGS, EpochStarted, Ready, Result, Stop, epoch_done, proposed
from aiperf_mpi.job.mllog import MLLogWriter
from aiperf_mpi.job.wire import to_wire
from aiperf_mpi.mpi.heartbeat import RankZeroHeartbeat
from aiperf_mpi.mpi.relay import INTERVAL as RELAY_INTERVAL
from aiperf_mpi.mpi.relay import Relay
from aiperf_mpi.mpi.transport import MpiMasterTransport
from aiperf_mpi.results import runlog
from aiperf_mpi.search.bayesian import BayesianSearch, SearchConfig
from aiperf_mpi.search.history import ModelRecord
from aiperf_mpi.search.view import MasterHistory, SearchView, ViewUpdate, WireCodec
from tests.support.mpirun import mpi_env, mpirun_command

GROUPS = (4_096, 16_384, 65_536)
HISTORY = 100_000
HISTORY_SWEEP = (1_000, 10_000)
"""further history sizes, at the smallest machine"""
FASTER = 2.0
"""the largest machine is run again with messages arriving this many times faster: rank 0's headroom"""
TIMED_MODELS = 4_000
PREFETCH = 512
"""how many messages ahead of their arrival the leaders' rank sends them (so each is there when it arrives); with a
relay, none: each goes at its arrival time, and what rank 0 gets is what the relay handed on by then"""
RELAY_REPORT = 77
"""the bench's own tag: the relay rank's CPU and batches, to rank 0 once the timed part is over"""
TIMED_SECONDS = 15.0
"""at most this much arrival time per size: fewer models at the smaller machines, whose messages come slower"""
EPOCHS = 3
MODEL_SECONDS = 60.0
POOL = 96
LEADER_HISTORY = 100_000
LEADER_ASKS = 4
RUNS = Path(__file__).resolve().parents[1] / "runs"
"""where the simulated run directories go, as a real run's (here /tmp creates a file 20× slower than runs/)"""


def graph_pool(size: int, seed: int = 0) -> list[str]:
    """Distinct ResNet-50 32² architectures: random morph chains from the seed, 1 to 12 morphs long."""
    rng = random.Random(seed)
    base = resnet50(32, 3, 10)
    pool = [to_json(base)]
    current, depth = base, 0
    while len(pool) < size:
        if depth >= rng.randint(1, 12):
            current, depth = base, 0
        try:
            current = random_morph(current, rng).graph
        except MorphError:
            continue
        depth += 1
        pool.append(to_json(current))
    return pool


def variant(pool: list[str], index: int) -> str:
    """A distinct graph per model: a pool member tagged with the model's number (graph attribute)."""
    base = pool[index % len(pool)]
    return base.replace('"graph":{', f'"graph":{{"variant":{index},', 1)


def accuracy_of(model_id: int, rng: random.Random) -> float:
    """The search's progress: accuracy rising towards a plateau, with noise."""
    return 0.55 + 0.35 * (1.0 - 2.718281828 ** (-model_id / 30_000)) + rng.gauss(0.0, 0.02)


def timed_models(groups: int, speed: float = 1.0) -> int:
    """Models timed at ``groups`` groups: TIMED_MODELS, or what arrives in TIMED_SECONDS when that is fewer."""
    return min(TIMED_MODELS, int(TIMED_SECONDS * groups * speed / MODEL_SECONDS))


def rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def simulate(groups: int, history_size: int, speed: float = 1.0, comm: MPI.Comm | None = None,
             relay: str = "none") -> dict | None:  # fmt: skip
    """One machine size and history size, on two MPI ranks of their own (so that rank 0's RSS is its own).

    Rank 0 is the master; the last rank plays the leaders (:func:`leaders_side`) and returns None.
    ``speed``: models arrive this many times faster than one per group per :data:`MODEL_SECONDS`.
    ``relay`` (``--relays``, mpi/relay.py): "none", rank 0 receives every leader message; "inline", rank 1 also
    does what the relay does (its own code, :meth:`Relay.item`, ahead of time) and sends rank 0 the relay's
    batches, one per :data:`~aiperf_mpi.mpi.relay.INTERVAL` of arrivals, each when its interval ends — rank 0's
    side of a run with relays, on two ranks, so that the relay's CPU does not take rank 0's core on a 2-core
    machine (a run's relays have cores of their own); "rank", a real relay process on rank 1 between the
    leaders (rank 2, sending at arrival times) and rank 0 — three busy processes, for a machine with the cores.
    """
    comm = MPI.COMM_WORLD if comm is None else comm
    ranks = {"none": 2, "inline": 2, "rank": 3}
    if comm.Get_size() != ranks.get(relay):
        raise RuntimeError(f"the master bench runs on {ranks.get(relay, '2 or 3')} MPI ranks with relay={relay!r}: "
                           "rank 0 the master, the last the leaders, a relay between them for 'rank'")  # fmt: skip
    pool = graph_pool(POOL)
    leaders_rank = comm.Get_size() - 1
    if comm.Get_rank() == leaders_rank:
        leaders_side(comm, pool, history_size, upstream=1 if relay == "rank" else 0,
                     prefetch=0 if relay == "rank" else PREFETCH, inline=relay == "inline")  # fmt: skip
        return None
    if comm.Get_rank() == 1:  # relay == "rank": the relay, until rank 0's loop is over; then its CPU to rank 0
        relayed = Relay(comm, {leaders_rank: 0})
        relayed.run()
        comm.send({"cpu": relayed.cpu_seconds, "batches": relayed.batches}, dest=0, tag=RELAY_REPORT)
        return None
    rng = random.Random(groups + history_size)
    base_rss = rss_mb()
    RUNS.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=RUNS, prefix="bench-master-") as scratch:
        run_dir = Path(scratch)
        (run_dir / "weights").mkdir()
        log = runlog.EventLog(run_dir)
        bounds = SearchConfig().view_bounds()
        mllog = MLLogWriter(run_dir)  # the real master writes MLLOG lines per epoch too
        # the hang deadline on (a fault-tolerant run's master): its once-a-second walk over the groups is timed too
        master = Master(RunConfig(time_limit=1e9), log, MasterHistory(bounds), groups, run_dir, mllog=mllog,
                        hang=HangPolicy())  # fmt: skip
        tasks: dict[int, int] = {}

        def ready(group: int) -> None:
            [(_, work)] = master.handle(group, Ready(group, 4, "node"))
            tasks[group] = work.task_id

        def model(model_id: int) -> ModelRecord:
            parent = master.history.best_ids(1)[0] if model_id else None
            # no weights file: the retention of the timed models' files is what is measured
            return ModelRecord(model_id, parent, variant(pool, model_id), accuracy=accuracy_of(model_id, rng))

        # the history, with each group's current Work handed out as the last G models arrived
        first_ready = max(0, history_size - groups)
        group = 0
        for model_id in range(history_size):
            while group < groups and model_id >= first_ready + (group if history_size >= groups
                                                                else group * history_size // groups):  # fmt: skip
                ready(group)
                group += 1
            master.append(model(model_id))
        while group < groups:
            ready(group)
            group += 1
        master.take_batch()
        log.sync()
        master.compress_later = True  # from now on as in master_loop: the I/O thread compresses new view records
        now = master.clock()
        for state in master.state.values():  # every group has timed epochs (a deadline to check) and just spoke
            state.longest_epoch, state.first_epoch_cost, state.last_heard = MODEL_SECONDS / EPOCHS, MODEL_SECONDS, now
        leader = SearchView(bounds)  # what a leader compresses its model's view record with: the run's dictionary
        leader.codec = WireCodec(master.history.codec.dictionary)
        gc.collect()
        gc.freeze()  # as master_loop does once the run is set up
        preload_rss = rss_mb()

        wall: list[float] = []
        cpu: list[float] = []
        queued: list[float] = []
        """per message: from its arrival to the end of its handling"""
        answered: list[float] = []
        """per reply: from its message's arrival to the reply's release by the I/O thread"""
        handing: list[float] = []
        handing_cpu: list[float] = []
        sent = {"bytes": 0, "works": 0, "records": 0}
        fsyncs: list[float] = []
        """each fsync of the event log, on the clock (the I/O thread's; a reply waits for the one after it)"""

        def timed_fsync() -> None:
            began = time.perf_counter()
            log.fsync()
            fsyncs.append(time.perf_counter() - began)

        io = BatchIO(timed_fsync)
        # rank 0's heartbeat to a watching leader (mpi/heartbeat.py), here rank 1, which leaves them unread: as in
        # master_loop, a call at every pass (a send every 2 s), and the pass's own pace (Master.pace)
        heartbeat = RankZeroHeartbeat(comm, [leaders_rank])
        walks: list[float] = []
        """the CPU of each tick that walked a slice of the groups for the hang deadline (a round once a second)"""
        timed = timed_models(groups, speed)
        per_model = EPOCHS + 3  # Proposed, EpochStarted, EPOCHS × EpochDone, Result
        rate = groups * per_model * speed / MODEL_SECONDS

        # the leaders' weights files, each written before its Result: made now, since a new file costs this
        # machine's disk ≈ 0.5 ms of CPU, which would fall on the loop's thread that plays the leaders here;
        # a group's next task is the next the master hands out (one Work per Result, in order)
        first_tasks = [tasks[g] for g in range(min(timed, groups))]
        for task in [*first_tasks, *range(master.next_task, master.next_task + max(0, timed - groups))]:
            (run_dir / f"weights/task-{task}.npz").write_bytes(b"")

        # what the leaders decide apart from rank 0, made before the clock starts: each timed model's accuracy,
        # parent and view record (a leader compresses its model's record).  The parent is the best model the
        # master had when the group proposed: messages are made ahead of their arrival (PREFETCH), so the best
        # of the models more than PREFETCH / per_model models earlier
        lag = PREFETCH // per_model
        best = [(record.accuracy, record.id) for record in [master.history.record(master.history.best_ids(1)[0])]]
        planned: list[tuple[int | None, float, int, bytes]] = []
        for number in range(timed):
            if number >= lag:
                best.append(max(best[-1], (planned[number - lag][1], history_size + number - lag)))
            task, graph = tasks[number % groups], variant(pool, history_size + number)
            accuracy, parent = accuracy_of(history_size + number, rng), best[-1][1]
            record = ModelRecord(-1, parent, graph, accuracy=accuracy, weights=f"weights/task-{task}.npz")
            planned.append((parent, accuracy, task, leader.own_record(record)))

        # the leaders: rank 1 makes and pickles every message (≈ 0.1 ms a model, not rank 0's) and sends it
        # to rank 0 ahead of its arrival (at most PREFETCH early); the loop takes it with the transport's own
        # poll (Iprobe, mpi4py's receive and unpickling), so the MPI calls that let go of the interpreter lock,
        # which the I/O thread waits for, are the real ones
        relays = relay != "none"
        transport = MpiMasterTransport(comm, {0: leaders_rank}, relays=(1,) if relays else ())
        sent_models = timed * per_model
        comm.send((planned, rate), dest=leaders_rank)
        begin = comm.recv(source=leaders_rank)  # the clock's zero (time.perf_counter: one clock for both ranks)

        def receive() -> object:
            found = transport.poll(0.0)
            while found is None:  # the message was posted before its arrival: found at once, unless MPI is slow
                found = transport.poll(0.01)
            return found[1]

        def deliver(group: int, replies: list, arrival: float) -> bool:
            start, start_cpu = time.perf_counter(), time.thread_time()
            if relay == "rank":  # what the relay handed on so far: the master's loop polls, it does not know it
                found = transport.poll(0.0)
                if found is None:
                    polling.append(time.thread_time() - start_cpu)
                    return False
                message = found[1]
            else:
                message = receive()
            answer = master.handle(group, message)
            cpu.append(time.thread_time() - start_cpu)
            end = time.perf_counter()
            wall.append(end - start)
            queued.append(end - arrival)
            for target, reply in answer:  # pickled when the I/O thread releases them (send, below)
                replies.append((target, reply, arrival))
                if hasattr(reply, "view"):
                    sent["works"] += 1
                    sent["records"] += len(reply.view.records)
                    tasks[target] = reply.task_id
            return True

        def send(released: list) -> None:
            """What master_loop's transport does with the released replies: pickle their wire tuples (isend)."""
            for _, reply, arrival in released:
                sent["bytes"] += len(pickle.dumps(to_wire(reply), protocol=pickle.HIGHEST_PROTOCOL))
                answered.append(time.perf_counter() - arrival)

        # as master_loop: take what has arrived (at most BATCH), hand the batch to the I/O thread, send what
        # it released; messages arrive at the machine's rate, one every 1/rate seconds, in real time
        def following() -> int | None:
            """The next message's group: rank 1 sends them in order, group after group."""
            return number // per_model % groups if number < sent_models else None

        number = 0
        upcoming = following()
        time.sleep(max(0.0, begin - time.perf_counter()))
        load = os.getloadavg()[0]
        replies: list = []
        held = 0
        def due(index: int) -> float:
            """When message ``index`` is there: its arrival, or with a relay the end of its batch's interval."""
            return (relay_window(index, rate) + 1) * RELAY_INTERVAL if relay == "inline" else index / rate

        polling: list[float] = []
        """with a relay: the CPU of the polls that found nothing (the master's loop makes them too)"""
        while upcoming is not None or io.pending or held:
            handled = 0
            while upcoming is not None and handled < BATCH and (relay == "rank"
                                                                or time.perf_counter() - begin >= due(number)):
                if not deliver(upcoming, replies, begin + number / rate):
                    break
                number += 1
                handled += 1
                upcoming = following()
            held += handled
            start, start_cpu = time.perf_counter(), time.thread_time()
            walking = master.checking_hangs or time.monotonic() >= master._next_hang_check
            heartbeat.beat()  # as master_loop, at every pass: rank 0's heartbeat, and its own stall's count
            master.pace(io.waiting())
            master.tick()  # as master_loop, after each pass: the hang check, a round once a second (no stop here)
            if walking:
                walks.append(time.thread_time() - start_cpu)
            submitted = bool(held) and (not io.pending or held >= BATCH)  # as master_loop: when the thread is free
            if submitted:
                io.submit(master.take_batch(), replies)
                replies = []
                retire_survivors()  # as master_loop does after each batch
                held = 0
            released = io.completed()
            send(released)
            if handled or released or submitted:
                handing.append(time.perf_counter() - start)
                handing_cpu.append(time.thread_time() - start_cpu)
            if not handled and relay == "rank":  # as the transport's poll: a first pause of 0.5 ms when nothing came
                time.sleep(0.0005)
            elif not handled:
                wait = due(number) - (time.perf_counter() - begin) if upcoming is not None else 0.001
                time.sleep(min(max(wait, 0.0), 0.001) if io.pending else max(wait, 0.0))
        elapsed = time.perf_counter() - begin
        send(io.completed())  # what the I/O thread released after the loop's last look
        burst = stop_burst(master, io, groups)
        relay_report = {}
        if relay == "rank":
            transport.stop_relays()
            relay_report = comm.recv(source=1, tag=RELAY_REPORT)
        elif relay == "inline":  # asked for once the loop is over, so that no poll takes it for a batch
            comm.send(None, dest=1, tag=RELAY_REPORT)
            relay_report = comm.recv(source=1, tag=RELAY_REPORT)
        load = max(load, os.getloadavg()[0])
        io.close()
        send(io.completed())  # what the I/O thread released after the loop's last look
        log.close()
        mllog.close()
        end_rss = rss_mb()
        weights_left = sum(1 for _ in (run_dir / "weights").iterdir())
        log_bytes = (run_dir / runlog.EVENTS_FILE).stat().st_size
        event_bytes: dict[str, list[int]] = {}
        with open(run_dir / runlog.EVENTS_FILE, "rb") as events:
            for line in events:
                kind = json.loads(line)[runlog.EVENT]
                event_bytes.setdefault(kind, [0, 0])
                event_bytes[kind][0] += len(line)
                event_bytes[kind][1] += 1
        graph_bytes = sum(path.stat().st_size for path in (run_dir / "graphs").iterdir())  # one appended file
    messages = len(wall)
    ordered_wall, ordered_cpu, ordered_queued, ordered_answered = sorted(wall), sorted(cpu), sorted(queued), \
        sorted(answered)
    window = messages / rate  # the time the messages take to arrive: what rank 0 must keep up with
    return {
        "groups": groups,
        "history": history_size,
        "speed": speed,
        "timed": timed,
        "messages": messages,
        "messages_per_model": messages / timed,
        "queued_p50": ordered_queued[messages // 2],
        "queued_p99": ordered_queued[int(messages * 0.99)],
        "queued_max": ordered_queued[-1],
        "answered_p99": ordered_answered[int(len(answered) * 0.99)],
        "p50": ordered_wall[messages // 2],
        "p99": ordered_wall[int(messages * 0.99)],
        "max": ordered_wall[-1],
        "cpu_p50": ordered_cpu[messages // 2],
        "cpu_p99": ordered_cpu[int(messages * 0.99)],
        "cpu_max": ordered_cpu[-1],
        "cpu_mean": statistics.mean(cpu),
        "rate": rate,
        "lag": elapsed - window,
        "busy": (sum(wall) + sum(handing)) / window,
        "busy_cpu": (sum(cpu) + sum(handing_cpu) + sum(polling)) / window,
        "relays": int(relays),
        "relay": relay,
        "relay_cpu": relay_report.get("cpu", 0.0) / window,
        "receives_per_model": relay_report.get("batches", messages) / timed,
        "io_cpu": io.cpu_seconds / window,
        "io_wall": io.busy_seconds / window,
        "fsyncs": io.rounds,
        "load": load,
        "bytes_per_model": sent["bytes"] / timed,
        "records_per_work": sent["records"] / max(1, sent["works"]),
        "base_rss": base_rss,
        "preload_rss": preload_rss,
        "rss": end_rss,
        "weights_left": weights_left,
        "log_bytes_per_model": log_bytes / timed,
        "event_bytes": {kind: total / count for kind, (total, count) in event_bytes.items()},
        "graph_bytes": graph_bytes / timed,  # the timed models' graphs: the preloaded history wrote none
        "hashes": master.history.hashes,
        "lost": master.lost_groups,
        "walks": len(walks),
        "walk_mean": statistics.mean(walks) if walks else 0.0,
        "walk_max": max(walks, default=0.0),
        "fsync_p50": sorted(fsyncs)[len(fsyncs) // 2] if fsyncs else 0.0,
        "fsync_p99": sorted(fsyncs)[int(len(fsyncs) * 0.99)] if fsyncs else 0.0,
        "fsync_max": max(fsyncs, default=0.0),
        **burst,
    }


STOP_SAMPLE = 256
"""groups whose Stop is also measured as it was before Stops left their view records out (extrapolated to all)"""


def stop_burst(master: Master, io: BatchIO, groups: int) -> dict:
    """The end of the run: every group's Stop at once (``Master.tick`` when the stop begins, as master_loop).

    What rank 0 holds: each Stop pickled (mpi4py keeps an ``isend``'s buffer until its leader receives it,
    which a training leader does after its epoch: so all of them at once), the loop's CPU for the Stops and
    their release through the I/O thread.  ``before``: what the Stops carried when each took the view members
    its group lacked — measured on :data:`STOP_SAMPLE` groups spread over the machine, times ``groups``.
    """
    step = max(1, groups // STOP_SAMPLE)
    sampled = [master.state[g] for g in range(0, groups, step)]
    before = sum(len(pickle.dumps(to_wire(Stop("time limit", master.history.update(state.seen,
                                                                                      not state.has_dictionary)))))
                 for state in sampled) * groups / len(sampled)  # fmt: skip
    gc.collect()
    rss_before = rss_mb()
    began, began_cpu = time.perf_counter(), time.thread_time()
    held, passes, largest = [], 0, 0.0
    reason = "time limit"
    while reason or master.sending_stops:  # as master_loop: a slice of the Stops a pass
        pass_cpu = time.thread_time()
        stops = master.tick(reason)
        reason = ""
        io.submit(master.take_batch(), stops)
        held += [pickle.dumps(to_wire(stop), protocol=pickle.HIGHEST_PROTOCOL) for _, stop in io_released(io)]
        passes += 1
        largest = max(largest, time.thread_time() - pass_cpu)
    return {"stops": len(held), "stop_bytes": sum(map(len, held)), "stop_bytes_before": before,
            "stop_cpu": time.thread_time() - began_cpu, "stop_wall": time.perf_counter() - began,
            "stop_rss": rss_mb() - rss_before, "stop_passes": passes, "stop_pass_max": largest}  # fmt: skip


def io_released(io: BatchIO) -> list:
    """Every reply the I/O thread holds, once it released them all (the loop's wait at the end)."""
    released = []
    while io.pending:
        released += io.completed()
        time.sleep(0.001)
    return [(target, reply) for target, reply in [*released, *io.completed()]]


def relay_window(index: int, rate: float) -> int:
    """The relay's batch that message ``index`` goes in (--relay inline): one per interval of arrivals."""
    return int(index / rate / RELAY_INTERVAL)


def leaders_side(comm: MPI.Comm, pool: list[str], history_size: int, upstream: int = 0,
                 prefetch: int = PREFETCH, inline: bool = False) -> None:  # fmt: skip
    """The last rank: the timed models' messages as their leaders make them, sent to rank 0 before their arrival.

    Per model: Proposed, the first epoch's EpochStarted alone, each later epoch's start on the EpochDone
    before it, and the Result with the view record rank 0 planned (compressed as a leader does).  A message
    goes at most :data:`PREFETCH` messages before its arrival time; this rank sleeps, never spins in MPI, so
    that it takes as little as it can of the two cores rank 0 runs on.  ``inline``: each message, pickled as
    a leader sends it, goes through the relay's own :meth:`Relay.item` here, and the relay's batches go to rank
    0 (one per interval of arrivals, as :func:`relay_window` says), all made before the clock starts (this rank's
    CPU for that is the relay's), then each sent when due.
    """
    planned, rate = comm.recv(source=0)  # rank 0 plans; the messages go to ``upstream`` (a relay, or rank 0)
    morphs = list(random_morph(resnet50(32, 3, 10), random.Random(1)).steps)  # a proposal's lineage, as sent
    search_info = {"search": "bayesian", "tuner": "tpe", "strategy": "gp-ucb", "search_seconds": 1.25}
    pending: deque = deque()

    def isend(data: bytes, tag: int) -> None:
        pending.append((comm.Isend([data, MPI.BYTE], dest=upstream, tag=tag), data))
        while pending and pending[0][0].Test():
            pending.popleft()

    def messages():
        for number, (parent, accuracy, task, view_record) in enumerate(planned):
            graph = variant(pool, history_size + number)
            hparams = {"batch_size": 64, "kernel_size": 3}
            yield proposed(task, parent, graph, hparams, "bench", search_info, morphs)
            epochs = []
            now = time.time()
            yield EpochStarted(task, 1, now, 64)
            for epoch in range(1, EPOCHS + 1):
                epochs.append({"epoch": epoch, "train_loss": 1.0, "val_accuracy": 0.5 + 0.01 * epoch, "start": now,
                               "end": now, "ops": 10**15, "ops_train": 9 * 10**14, "ops_update": 10**12,
                               "ops_validation": 99 * 10**12, "steps": 100, "train_samples": 6400,
                               "validation_samples": 1000, "data_wait": 0.1, "compute": 50.0, "evaluation": 2.0,
                               "compile": 0.0, "xla": False, "learning_rate": 0.1})  # a real epoch  # fmt: skip
                following = EpochStarted(task, epoch + 1, now, 64) if epoch < EPOCHS else None
                yield epoch_done(task, epochs[-1], following)  # encoded by the leader
            weights = f"weights/task-{task}.npz"  # made before the timing, as a leader writes it before its Result
            yield Result(task, parent, graph, hparams, [], accuracy, None, {"total": 3 * 10**15}, {"train": 60.0},
                         "bench", "epoch limit", weights, {}, runlog.value_text(epochs), view_record)  # fmt: skip

    if not inline:
        begin = time.perf_counter() + 1.0  # time to send the first PREFETCH messages
        comm.send(begin, dest=0)
        for sent, message in enumerate(messages()):
            ahead = begin + (sent - prefetch) / rate - time.perf_counter()
            if ahead > 0:
                time.sleep(ahead)
            isend(pickle.dumps(to_wire(message), protocol=pickle.HIGHEST_PROTOCOL), TAGS[type(message)])  # a leader's
    else:  # the relay's work done before the clock starts (its CPU measured), its batches sent when due
        relay = Relay(comm, {comm.Get_rank(): 0})
        relay_cpu = 0.0
        windows: list[list[tuple]] = []
        for sent, message in enumerate(messages()):
            data = bytearray(pickle.dumps(to_wire(message), protocol=pickle.HIGHEST_PROTOCOL))  # as the relay gets it
            start = time.thread_time()
            item = relay.item(comm.Get_rank(), TAGS[type(message)], data)
            relay_cpu += time.thread_time() - start
            window = relay_window(sent, rate)
            while len(windows) <= window:
                windows.append([])
            windows[window].append(item)
        batches = []
        for window, items in enumerate(windows):
            if items:
                start = time.thread_time()
                batches.append((window, pickle.dumps(items, protocol=pickle.HIGHEST_PROTOCOL)))  # as Relay.run
                relay_cpu += time.thread_time() - start
        begin = time.perf_counter() + 1.0
        comm.send(begin, dest=0)
        for window, data in batches:
            ahead = begin + (window + 1) * RELAY_INTERVAL - 0.05 - time.perf_counter()  # there 50 ms before it is due
            if ahead > 0:
                time.sleep(ahead)
            isend(data, RELAYED)
    while pending:  # rank 0 receives them all: wait without spinning
        while pending and pending[0][0].Test():
            pending.popleft()
        time.sleep(0.01)
    if inline:  # the relay's CPU, when rank 0 asks (after its loop: no poll of its takes this for a batch)
        comm.recv(source=0, tag=RELAY_REPORT)
        comm.send({"cpu": relay_cpu, "batches": len(batches)}, dest=0, tag=RELAY_REPORT)


def leader_updates() -> list[tuple[int, ViewUpdate, bool]]:
    """What one group's leader receives while the history grows to 100,000 models: an update per 4,096 models.

    Made apart (in a process of its own) so that the master's memory does not
    count as the leader's; each entry says whether the leader asks its search
    after applying it.
    """
    pool = graph_pool(POOL)
    rng = random.Random(1)
    master = MasterHistory(SearchConfig().view_bounds())
    ask_at = {LEADER_HISTORY * (i + 1) // LEADER_ASKS for i in range(LEADER_ASKS)}
    updates, seen = [], 0
    for model_id in range(LEADER_HISTORY):
        parent = master.best_ids(1)[0] if model_id else None
        master.append(ModelRecord(model_id, parent, variant(pool, model_id), accuracy=accuracy_of(model_id, rng)))
        if (model_id + 1) % 4_096 == 0 or model_id + 1 in ask_at:
            updates.append((len(master), master.update(seen, with_dictionary=not seen), model_id + 1 in ask_at))
            seen = len(master)
    return updates


def leader_memory(updates: list[tuple[int, ViewUpdate, bool]]) -> dict:
    """A leader's view and Bayesian search fed ``updates``: its objects (tracemalloc) and its process's RSS."""
    gc.collect()
    start_rss = rss_mb()
    tracemalloc.start()
    config = SearchConfig()
    view = SearchView(config.view_bounds())
    search = BayesianSearch(view, seed=0, config=config)
    samples = []
    for length, update, ask in updates:
        view.apply(update)
        if ask:
            search.ask()
            gc.collect()
            samples.append((length, tracemalloc.get_traced_memory()[0] / 2**20))
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {"samples": samples, "current": current / 2**20, "peak": peak / 2**20, "start_rss": start_rss,
            "rss": rss_mb(), "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "members": len(view.ids()), "cached": len(search._cache.graphs)}  # fmt: skip


def simulate_under_mpi(groups: int, history_size: int, speed: float = 1.0, relay: str = "none") -> dict:
    """:func:`simulate` on its ranks of ``mpirun`` (the venv's, as the tests launch it), its result from rank 0."""
    with tempfile.TemporaryDirectory(prefix="bench-master-") as scratch:
        out = Path(scratch) / "result.json"
        command = mpirun_command(3 if relay == "rank" else 2, [sys.executable, "-m", "benchmarks.master", str(groups),
                                                               str(history_size), str(speed), str(out), relay],
                                 Path(scratch))  # fmt: skip
        done = subprocess.run(command, env=mpi_env(), capture_output=True, text=True, timeout=1200)
        if done.returncode != 0 or not out.exists():
            raise RuntimeError(f"the master bench on 2 ranks failed ({done.returncode}): {done.stdout[-2000:]}"
                               f"{done.stderr[-2000:]}")  # fmt: skip
        return json.loads(out.read_text())


def _in_child(function, *args):
    context = multiprocessing.get_context("spawn")
    with context.Pool(1, maxtasksperchild=1) as workers:
        return workers.apply(function, args)


def run() -> str:
    rows = ["| groups | history | arrival rate | messages per model: leaders' (rank 0's receives) "
            "| per message, CPU: p50 / p99 / max "
            "| wall: p50 / p99 / max | queueing delay: p50 / p99 / max | reply released: p99 "
            "| busy: CPU (wall) | relay: CPU | I/O thread: CPU (wall) | bytes per model | records per Work "
            "| master RSS: imports → loaded → end | load |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    limits = ["| groups | history | arrival rate | hang check: slices, CPU mean / max | fsync: p50 / p99 / max "
              "| Stops at the end: bytes (before: each with its group's view records) "
              "| Stops: CPU (wall), passes of the loop, RSS rise |",
              "|---|---|---|---|---|---|---|"]  # fmt: skip
    results = []
    cases = [*((g, HISTORY, 1.0, "none") for g in GROUPS), (GROUPS[-1], HISTORY, FASTER, "none"),
             (GROUPS[-1], HISTORY, 1.0, "inline"), (GROUPS[-1], HISTORY, FASTER, "inline"),
             *((GROUPS[0], h, 1.0, "none") for h in HISTORY_SWEEP)]  # fmt: skip
    for groups, history, speed, relay in cases:
        r = simulate_under_mpi(groups, history, speed, relay)
        results.append(r)
        rows.append(
            f"| {groups:,}{' + 1 relay' if r['relays'] else ''} | {history:,} "
            f"| {r['rate']:,.0f} msg/s{f' ({speed:g}×)' if speed != 1 else ''} "
            f"| {r['messages_per_model']:.0f} ({r['receives_per_model']:.2f}) "
            f"| {r['cpu_p50'] * 1e3:.3f} / {r['cpu_p99'] * 1e3:.2f} / "
            f"{r['cpu_max'] * 1e3:.1f} ms | {r['p50'] * 1e3:.3f} / {r['p99'] * 1e3:.2f} / {r['max'] * 1e3:.0f} ms "
            f"| {r['queued_p50'] * 1e3:.2f} / {r['queued_p99'] * 1e3:.1f} / {r['queued_max'] * 1e3:.0f} ms "
            f"| {r['answered_p99'] * 1e3:.0f} ms | {r['busy_cpu']:.0%} ({r['busy']:.0%}) "
            f"| {f'{r_relay:.0%}' if (r_relay := r['relay_cpu']) else '–'} "
            f"| {r['io_cpu']:.0%} ({r['io_wall']:.0%}) "
            f"| {r['bytes_per_model'] / 1e3:.1f} kB | {r['records_per_work']:.1f} "
            f"| {r['base_rss']:.0f} → {r['preload_rss']:.0f} → {r['rss']:.0f} MB | {r['load']:.1f} |"
        )
        print(rows[-1], flush=True)
        limits.append(
            f"| {groups:,}{' + 1 relay' if r['relays'] else ''} | {history:,} "
            f"| {r['rate']:,.0f} msg/s{f' ({speed:g}×)' if speed != 1 else ''} "
            f"| {r['walks']}, {r['walk_mean'] * 1e3:.2f} / {r['walk_max'] * 1e3:.1f} ms "
            f"| {r['fsync_p50'] * 1e3:.1f} / {r['fsync_p99'] * 1e3:.1f} / {r['fsync_max'] * 1e3:.0f} ms "
            f"| {r['stop_bytes'] / 1e6:.2f} MB ({r['stop_bytes_before'] / 1e6:.0f} MB) "
            f"| {r['stop_cpu'] * 1e3:.0f} ms ({r['stop_wall'] * 1e3:.0f} ms) in {r['stop_passes']} passes, the "
            f"largest {r['stop_pass_max'] * 1e3:.0f} ms; {r['stop_rss']:+.0f} MB |"
        )
        print(limits[-1], flush=True)
    leader = _in_child(leader_memory, _in_child(leader_updates))
    by_groups = [r for r in results if r["history"] == HISTORY and r["speed"] == 1.0 and not r["relays"]]
    largest = by_groups[-1]
    faster = next(r for r in results if r["speed"] != 1.0 and not r["relays"])
    relayed = next(r for r in results if r["speed"] == 1.0 and r["relays"])
    relayed_faster = next(r for r in results if r["speed"] != 1.0 and r["relays"])
    by_history = sorted((r for r in results if r["groups"] == GROUPS[0]), key=lambda r: r["history"])

    def spread(values: list[float]) -> float:
        return max(values) / min(values) - 1

    def verdict(ok: bool) -> str:
        return "meets" if ok else "MISSES"

    groups_spread = spread([r["bytes_per_model"] for r in by_groups])
    history_spread = spread([r["bytes_per_model"] for r in by_history])
    bounds = SearchConfig().view_bounds()
    bound = max(r["bytes_per_model"] / r["records_per_work"] for r in results) * (bounds.top + bounds.recent)
    sizes = largest["event_bytes"]
    leader_lines = ", ".join(f"{mb:.1f} MB at {n:,} models" for n, mb in leader["samples"])
    goals = [
        f"p99 < 5 ms at {largest['groups']:,} groups — CPU {largest['cpu_p99'] * 1e3:.2f} ms "
        f"({verdict(largest['cpu_p99'] < 0.005)}); wall {largest['p99'] * 1e3:.2f} ms at load "
        f"{largest['load']:.0f} ({verdict(largest['p99'] < 0.005)})",
        f"busy ≤ 50 % — CPU {largest['busy_cpu']:.0%} ({verdict(largest['busy_cpu'] <= 0.5)}); wall "
        f"{largest['busy']:.0%} ({verdict(largest['busy'] <= 0.5)})",
        f"queueing delay p99 < 50 ms — {largest['queued_p99'] * 1e3:.1f} ms ({verdict(largest['queued_p99'] < 0.05)})",
        f"at {faster['speed']:g}× the rate busy < 100 % — CPU {faster['busy_cpu']:.0%} "
        f"({verdict(faster['busy_cpu'] < 1.0)}); wall {faster['busy']:.0%} ({verdict(faster['busy'] < 1.0)}); "
        f"queueing delay p99 {faster['queued_p99'] * 1e3:.1f} ms",
        f"with one relay rank (--relays 1) at {relayed['groups']:,} groups: busy ≤ 50 % — CPU "
        f"{relayed['busy_cpu']:.0%} ({verdict(relayed['busy_cpu'] <= 0.5)}), wall {relayed['busy']:.0%}; queueing "
        f"delay p99 < 50 ms — {relayed['queued_p99'] * 1e3:.1f} ms ({verdict(relayed['queued_p99'] < 0.05)}); "
        f"per-message p99 < 5 ms — CPU {relayed['cpu_p99'] * 1e3:.2f} ms ({verdict(relayed['cpu_p99'] < 0.005)}); "
        f"at {relayed_faster['speed']:g}× busy < 100 % — CPU {relayed_faster['busy_cpu']:.0%} "
        f"({verdict(relayed_faster['busy_cpu'] < 1.0)}), wall {relayed_faster['busy']:.0%}, queueing delay p99 "
        f"{relayed_faster['queued_p99'] * 1e3:.1f} ms; the relay's own CPU {relayed['relay_cpu']:.0%} at 1×, "
        f"{relayed_faster['relay_cpu']:.0%} at {relayed_faster['speed']:g}× (under 100 %: it keeps up)",
        f"bytes per model flat within 10 % from {GROUPS[0]:,} to {GROUPS[-1]:,} groups — "
        f"{by_groups[0]['bytes_per_model'] / 1e3:.1f} to {largest['bytes_per_model'] / 1e3:.1f} kB, spread "
        f"{groups_spread:.0%} ({verdict(groups_spread <= 0.1)}); from {by_history[0]['history']:,} to "
        f"{by_history[-1]['history']:,} models — {by_history[0]['bytes_per_model'] / 1e3:.1f} to "
        f"{by_history[-1]['bytes_per_model'] / 1e3:.1f} kB, spread {history_spread:.0%} "
        f"({verdict(history_spread <= 0.1)}); never above the whole view, ≈ {bound / 1e3:.0f} kB, at any G or N",
        f"leader < 300 MB beyond TensorFlow's — {leader['rss']:.0f} MB RSS (peak {leader['peak_rss']:.0f} MB) "
        f"with no TensorFlow loaded ({verdict(leader['peak_rss'] < 300)})",
        f"issue 43, with the hang check, the fsyncs and the Stops included: at {relayed_faster['speed']:g}× the rate "
        f"at {relayed_faster['groups']:,} groups with a relay, busy ≤ 50 % — CPU {relayed_faster['busy_cpu']:.0%} "
        f"({verdict(relayed_faster['busy_cpu'] <= 0.5)}), wall {relayed_faster['busy']:.0%}; queueing delay p99 "
        f"< 5 ms — {relayed_faster['queued_p99'] * 1e3:.1f} ms ({verdict(relayed_faster['queued_p99'] < 0.005)}); "
        f"a Stop at the end ≤ 64 bytes at any size (flat: no view records) — "
        f"{max(r['stop_bytes'] / r['stops'] for r in results):.0f} bytes "
        f"({verdict(max(r['stop_bytes'] / r['stops'] for r in results) <= 64)})",
    ]
    return "\n".join(
        [
            *rows,
            "",
            *limits,
            "",
            "Rank 0's limits (issue 43), per row of the table above: the hang check (the master's walk over the "
            "groups for the deadline of a fault-tolerant run, a round at most once a second, "
            f"{HANG_CHECK_SLICE:,} groups a pass of the loop, on the loop's thread: its CPU is in the busy "
            "figure); the event log's fsyncs on the I/O thread (each reply waits for the one after "
            "its message); and the end, every group's Stop at once, as `Master.tick` sends them when the stop "
            "begins: their pickled bytes, which MPI holds until each leader receives its Stop (after its epoch), "
            f"and in brackets what they were when each carried its group's missing view records ({STOP_SAMPLE} "
            "groups measured, times the groups).",
            "",
            "Per size: a history of the stated number of ResNet-50 32² models (graph JSON ≈ 17 kB each), then "
            f"{TIMED_MODELS:,} models timed, or those that arrive in {TIMED_SECONDS:.0f} s when fewer (each: Proposed, "
            f"the first epoch's EpochStarted, {EPOCHS} EpochDone — each but the last carrying the next epoch's "
            "start, as a leader sends them — and Result with its reply Work; MLLOG written as in a run); one model "
            f"per group every {MODEL_SECONDS:.0f} s sets the arrival rate ({FASTER:g}× that in the row so marked), "
            "and messages arrive at that rate in real time. Each group's previous Work went out as the last G "
            "models of the history arrived, so a Work carries the view members appended since (steady state) "
            "without simulating whole rounds. The bench runs on two MPI ranks (`mpirun -n 2`): rank 1 plays "
            "the leaders — it makes and pickles each message as a leader does (the Result with its view record "
            "compressed there) and sends it to rank 0 ahead of its arrival. Rows marked \"+ 1 relay\" are rank "
            "0's side of `--relays 1`: rank 1 also runs each message, pickled as a leader sends it, through the "
            "relay's own code (`Relay.item`: unpickling, vetting, the wire tuple) and sends rank 0 the relay's "
            "batches, one per 2 ms of arrivals (mpi/relay.py's interval), each due when its interval ends; so the "
            "relay's CPU is not on rank 0's core (a run's relays have cores of their own), and a message's "
            "queueing delay includes its wait for the batch. Messages per model: what the leaders send, and in "
            "brackets what rank 0 receives (with a relay, its batches). Relay: that work's CPU over the arrival "
            "window (its receives from the leaders, ≈ 10–30 µs a message, not included). "
            "A message's time is receiving it with "
            "the transport's own poll (Iprobe, mpi4py's recv and unpickling: the MPI calls let go of the "
            "interpreter lock, as in a run) and handling it (event log, "
            "duplicate check, view, retention) on the loop's thread: CPU is that thread's time, wall the clock. "
            "Queueing delay: from the message's arrival (its place in the real-time stream) to the end of its "
            "handling, on the clock — what a group feels; measured, not replayed from handling times, so a loop "
            "that falls behind shows it. Reply released: from the arrival of the message answered (Proposed, "
            "Result) to its reply's release by the I/O thread, after the batch's fsync. As in the master's loop, "
            f"what has arrived (up to {BATCH} messages) is handled, then its file work (the graphs appended, the "
            "fsync, weights removals, the compression of any view record new to the replies that its leader did not "
            "compress) and its replies go to "
            "the I/O thread; the released replies are pickled on the loop's thread (mpi4py's isend). Busy: the loop "
            "thread's time (messages, handing over batches, pickling replies) over the time the messages take to "
            "arrive; the I/O thread's likewise (its wall time is mostly waiting for the disk). Bytes per model: "
            "every reply rank 0 pickled (Accepted and Work), per model. Records "
            f"per Work: view members the group lacked — the {bounds.recent} most recent, plus the models that "
            f"entered the {bounds.top} best since its previous Work (more of them the more groups finish between "
            "two of its Works, and the faster the accuracy improves), never more than the whole view. Accuracy "
            "rises towards a plateau with noise, as in a search that makes progress. The run directory is under "
            "runs/, as a real run's. Load: the machine's 1-minute load average during the timed part; this "
            "machine is shared, and at a load above its 2 cores the wall times are mostly waiting for a core.",
            "",
            f"Run directory per model ({EPOCHS} epochs each): event log {largest['log_bytes_per_model'] / 1e3:.1f} kB "
            f"— model_done {sizes['model_done'] / 1e3:.1f} kB (the record without its graph, which is stored once, "
            "in the graphs file), "
            f"epoch {sizes['epoch'] / 1e3:.2f} kB each, model_proposed {sizes['model_proposed'] / 1e3:.2f} kB, "
            f"weights_removed {sizes.get('weights_removed', 0.0) / 1e3:.2f} kB per batch of removals; graph "
            f"(a line of the segment's graphs file) {largest['graph_bytes'] / 1e3:.1f} kB. So a run of N models and "
            "E epochs writes ≈ "
            f"N × {(sizes['model_done'] + sizes['model_proposed'] + largest['graph_bytes']) / 1e3:.0f} kB + "
            f"E × {sizes['epoch'] / 1e3:.2f} kB besides weights. Weights files left after {largest['timed']:,} models "
            f"at {largest['groups']:,} groups: {largest['weights_left']} (the preloaded models had none; what stays "
            "is the candidate parents', the best model's and the running tasks' parents'). Master memory at "
            f"{HISTORY:,} models: the view and one graph hash per model ({largest['hashes']:,} hashes).",
            "",
            f"A leader (Bayesian search, default settings, ResNet-50 32² graphs; an update every 4,096 models, "
            f"{LEADER_ASKS} asks as the history grows to {LEADER_HISTORY:,}): view and search objects "
            f"{leader_lines} (tracemalloc; {leader['peak']:.0f} MB at the peak of an ask); view {leader['members']} "
            f"models, {leader['cached']} parsed graphs cached; process RSS {leader['start_rss']:.0f} MB after imports, "
            f"{leader['rss']:.0f} MB at the end (no TensorFlow in this process).",
            "",
            "Goals: " + "; ".join(goals) + ".",
        ]
    )


if __name__ == "__main__":  # one size: mpirun -n 2 python -m benchmarks.master G N SPEED OUT [none|inline|rank]
    measured = simulate(int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]),
                        relay=sys.argv[5] if len(sys.argv) > 5 else "none")  # fmt: skip
    if measured is not None:
        Path(sys.argv[4]).write_text(json.dumps(measured))

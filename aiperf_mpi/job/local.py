"""The in-process backend of the job's transport: master and leaders as threads of one process.

No MPI here: the same session (:mod:`aiperf_mpi.job.session`: the checks, the
log, the :class:`~aiperf_mpi.job.master.Master`, the score), leader loop and
search run in unit tests and on a laptop through this hub
(:func:`run_in_process`), and over MPI through :mod:`aiperf_mpi.mpi.run` and
:mod:`aiperf_mpi.mpi.transport`; one contract test suite drives both.
"""

from __future__ import annotations

import os
import pickle
import platform
import queue
import socket
import threading
from collections import deque
from collections.abc import Mapping

import networkx as nx

from aiperf_mpi.config import RunConfig
from aiperf_mpi.job.faults import HangPolicy
from aiperf_mpi.job.leader import Runner, leader_loop
from aiperf_mpi.job.messages import Stop
from aiperf_mpi.job.session import NO_HOOKS, Ended, EndOfRunHooks, create_run_dir, prepare, run_master
from aiperf_mpi.search.bayesian import SearchConfig
from aiperf_mpi.search.view import SearchView

LEADER_JOIN_TIMEOUT = 30.0
"""seconds each leader thread may take to leave after the session ended (it has had its Stop)"""


class LocalHub:
    """In-process transport: the master and the leaders are threads of one process.

    Messages go pickled, as over MPI: what a receiver gets is the message as it was when it was sent, not an
    object the sender may still complete or change (a Work's view records are filled in by the master's I/O
    thread before the reply is released; one released too early must fail here as it fails over MPI).
    """

    def __init__(self, groups: int) -> None:
        self.to_master: queue.Queue = queue.Queue()
        self.to_leader = {g: queue.Queue() for g in range(groups)}
        self.lost: set[int] = set()

    # master side
    def send(self, group: int, message: object) -> None:
        if group not in self.lost:
            self.to_leader[group].put(_wire(message))

    def lose(self, group: int) -> None:
        self.lost.add(group)

    def poll(self, timeout: float) -> tuple[int, object] | None:
        try:
            group, data = self.to_master.get(timeout=timeout)
        except queue.Empty:
            return None
        return group, pickle.loads(data)

    def close(self) -> None:
        pass

    def channel(self, group: int) -> LocalChannel:
        return LocalChannel(self, group)


class LocalChannel:
    """A leader thread's side of :class:`LocalHub`."""

    def __init__(self, hub: LocalHub, group: int) -> None:
        self.hub, self.group = hub, group
        self._buffer: deque = deque()

    def send(self, message: object) -> None:
        self.hub.to_master.put((self.group, _wire(message)))

    def recv(self) -> object:
        if self._buffer:
            return self._buffer.popleft()
        return pickle.loads(self.hub.to_leader[self.group].get())

    def hold(self, messages: list) -> None:
        """Put received messages back, in order, ahead of anything not yet received."""
        self._buffer.extendleft(reversed(messages))

    def stop_pending(self) -> bool:
        inbox = self.hub.to_leader[self.group]
        while True:
            try:
                self._buffer.append(pickle.loads(inbox.get_nowait()))
            except queue.Empty:
                break
        return any(isinstance(m, Stop) for m in self._buffer)


def run_in_process(
    config: RunConfig,
    runners: Mapping[int, Runner],
    seed_graph: nx.DiGraph,
    *,
    version: str,
    views: Mapping[int, SearchView] | None = None,
    search_config: SearchConfig | None = None,
    end: EndOfRunHooks = NO_HOOKS,
    hang: HangPolicy | None = None,
    resume: str | None = None,
) -> Ended:
    """A whole run in this process: the session as the master, one leader thread per group of one rank.

    ``runners[g]`` trains group ``g``'s models; ``views[g]``, if given, is the
    (empty) view its leader keeps, for a caller to inspect; ``hang`` loses a
    group silent past its deadline (:mod:`aiperf_mpi.job.faults`).  The checks, the
    log's events, the score and the hooks are the MPI run's
    (:func:`~aiperf_mpi.job.session.run_master`); only the transport and the
    layout (one host, one rank per group) differ.  ``resume``: a run directory
    to go on with, as ``--resume`` does (``config`` then gives the new
    segment's time limit and model budget).
    """
    groups = len(runners)
    prepared = prepare(config, resume, groups + 1)
    create_run_dir(prepared, largest_group=1)
    config, search = prepared.config, search_config or SearchConfig()
    hub = LocalHub(groups)

    def leader(group: int) -> None:
        leader_loop(hub.channel(group), group, 1, config, seed_graph, runners[group],
                    view=None if views is None else views[group], search_config=search)  # fmt: skip

    threads = [threading.Thread(target=leader, args=(group,), daemon=True) for group in range(groups)]
    for thread in threads:
        thread.start()
    system, layout = one_host_layout(groups)
    ended = run_master(prepared, config, hub, system=system, layout=layout, staging=[], stop=lambda: "",
                       urgent=lambda: False, version=version, end=end, search_config=search,
                       hang=hang)  # fmt: skip
    for group, thread in enumerate(threads):
        if group not in hub.lost:  # a lost group's thread may never leave (a daemon: it ends with the process)
            thread.join(timeout=LEADER_JOIN_TIMEOUT)
    return ended


def one_host_layout(groups: int) -> tuple[dict, dict]:
    """The ``system`` and ``layout`` events of an in-process run: rank 0 the master, rank g + 1 group g's leader.

    One host, and no accelerator claimed (the threads share this process's).
    """
    host, ranks = socket.gethostname(), groups + 1
    system = {"ranks": ranks, "nodes": 1, "accelerators_per_node": 0, "python": platform.python_version(),
              "hosts": [{"host": host, "cores": os.cpu_count(), "ranks": list(range(ranks))}]}  # fmt: skip
    layout = {"world_size": ranks, "master_rank": 0, "hosts": [host] * ranks, "nodes": [0] * ranks, "group_size": 1,
              "groups": [{"index": g, "node": 0, "host": host, "ranks": [g + 1], "leader": g + 1, "horovod_size": 1}
                         for g in range(groups)], "node_count": 1}  # fmt: skip
    return system, layout


def _wire(message: object) -> bytes:
    """A message as the MPI transport sends it (mpi4py pickles at ``isend``)."""
    return pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)

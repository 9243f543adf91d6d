"""The real job (master, leaders, transport, search, tuner, log, score) with fake training.

Usage: fake_run.py RUN_DIR GROUP_SIZE TIME_LIMIT [SLOW_GROUP] [FAIL_TASK]
(FAKE_RUN_CONFIG in the environment: a JSON object of further run options; FAKE_RUN_GARBLE: a world rank
whose leader sends its first EpochDone in a form rank 0 cannot read, as a broken or forged leader would)
Prints, from each leader, its final view of the history as JSON for comparison.
"""

import json
import os
import sys

from mpi4py import MPI

from aiperf_mpi.__main__ import _preload, no_report_hooks
from aiperf_mpi.config import load_config
from aiperf_mpi.job import leader as leader_module
from aiperf_mpi.job.messages import TAGS, EpochDone
from aiperf_mpi.mpi import run as run_module
from aiperf_mpi.mpi import transport as transport_module
from aiperf_mpi.mpi.guard import run_guarded
from aiperf_mpi.mpi.run import TrainingBackend, run_benchmark
from aiperf_mpi.search.bayesian import SearchConfig
from aiperf_mpi.search.view import SearchView
from tests.support.fake_runner import FakeRunner


def rank_main(comm: MPI.Comm) -> int:
    run_dir, group_size, limit = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    slow = [int(sys.argv[4])] if len(sys.argv) > 4 and sys.argv[4] != "-" else []
    fail = [int(sys.argv[5])] if len(sys.argv) > 5 else []
    extra = json.loads(os.environ.get("FAKE_RUN_CONFIG", "{}"))  # more run options, e.g. data and staging
    options = {"run_dir": run_dir, "group_size": group_size, "time_limit": limit, "seed_model": "tiny",
               "score_step": 1.0, "progress_interval": 1.0,
               "monitor_interval": 1.0, "peak_probe": False}  # fmt: skip
    config = load_config(None, {**options, **extra})
    views = []
    original = leader_module.leader_loop

    def recording_loop(*args, **kwargs):  # keep a handle on the leader's view to print it at the end
        view = SearchView(SearchConfig().view_bounds())
        views.append(view)
        return original(*args, view=view, **kwargs)

    run_module.leader_loop = recording_loop
    if os.environ.get("FAKE_RUN_GARBLE") == str(comm.Get_rank()):
        garble_first_epoch_done()

    def factory(hvd, group_comm, source, cfg, directory):
        group = comm.Get_rank()  # identifies the leader; FakeRunner only uses it for slowness
        return FakeRunner(group, slow_groups=slow, fail_tasks=fail, run_dir=directory, rank=comm.Get_rank())

    # the real launch's preload: what a leader imports (the search's and tuner's libraries, scikit-learn for the
    # digits) is loaded before the scored window, as on a real launch; without it three leaders imported them at
    # once inside the tests' 8 s windows, 2-5 s of them on two loaded cores (too few monitor samples, models)
    backend = TrainingBackend(runner=factory, preload=_preload)
    status = run_benchmark(comm, config, backend, no_report_hooks(), horovod=False)
    for view in views:
        members = {i: [view[i].graph, view[i].accuracy, view[i].weights] for i in view.ids()}
        print("VIEW " + json.dumps({"rank": comm.Get_rank(), "length": len(view), "members": members}), flush=True)
    return status


def garble_first_epoch_done() -> None:
    """This leader's first EpochDone goes out as a tuple of the wrong length, under EpochDone's tag."""
    channel = transport_module.MpiLeaderChannel
    send = channel.send
    garbled = []

    def garbling(self, message):
        if isinstance(message, EpochDone) and not garbled:
            garbled.append(message)
            self.comm.send(("not", "an", "epoch"), dest=self.upstream, tag=TAGS[EpochDone])
            return
        send(self, message)

    channel.send = garbling


if __name__ == "__main__":
    world = MPI.COMM_WORLD
    sys.exit(run_guarded(world, lambda: rank_main(world)))

"""The last start-up phase, the first ``Work`` to every group, said once on rank 0 (issue 38's rehearsals)."""

from __future__ import annotations

import time

from aiperf_mpi.job.local import LocalHub
from aiperf_mpi.job.messages import Stop, Work
from aiperf_mpi.job.transport import FirstWorkClock
from aiperf_mpi.search.view import ViewUpdate


def test_said_once_when_the_last_group_got_its_first_work_and_a_lost_group_is_not_waited_for() -> None:
    said: list[str] = []
    hub = LocalHub(3)
    clock = FirstWorkClock(hub, 3, time.monotonic() - 2.0, said.append)
    clock.send(0, Work(0, ViewUpdate(), 1))
    clock.send(1, Stop("time limit", ViewUpdate()))  # not a Work: group 1 still waits
    clock.send(0, Work(3, ViewUpdate(), 2))  # a second Work to group 0 changes nothing
    assert said == []
    clock.lose(2)  # lost before its first Work: not waited for
    assert said == []
    clock.send(1, Work(1, ViewUpdate(), 1))
    assert len(said) == 1 and said[0].startswith("aiperf_mpi: start-up on rank 0: first Work to every group 2.")
    clock.send(1, Work(4, ViewUpdate(), 2))
    assert len(said) == 1  # once
    assert hub.to_leader[0].qsize() == 2 and hub.to_leader[1].qsize() == 3 and 2 in hub.lost  # all passed on

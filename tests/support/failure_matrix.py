"""Failures as users meet them (issue 43): one row per (failure, phase, launcher), with who must detect it and how soon.

Pure data, no MPI: ``tests/multinode/test_failures.py`` runs each row that is a test in the two-node Slurm
fixture or the multi-host fixture; ``docs/cluster.md`` ("Failures, phase by phase") is the same table in words,
with the figures measured here.  A row whose outcome depends on work not on this branch yet (fault tolerance
decided from the launcher, issue 43 item 1; a deadline at every phase, item 2) says so in ``pending``: the test
is then skipped with that reason (never run, so nothing is claimed), or ``xfail_today`` names what happens
instead when it was run and failed.

The words:

- ``failure``: ``kill-9-rank`` (a training rank of node2's group that is not its leader), ``kill-9-leader``,
  ``kill-9-rank0`` (the master), ``sigstop-rank`` (the same training rank, stopped), ``node-loss`` (node2's link
  down and everything on it killed: ``VirtualCluster.lose_node``), ``fsync-stall-rank0`` (every fsync of rank 0's
  run directory held by a FUSE file system), ``graphs-stall-rank0`` (only the graphs file's), ``sigstop-rank0``
  (the master stopped), ``none`` (the healthy run: nothing struck);
- ``phase``: ``start-up`` (before the start line: every rank started, nothing logged yet), ``first-model`` (the
  victim's group has a model but no epoch), ``mid-run`` (both groups have logged an epoch), ``end`` (the run
  has logged ``run_stop``: drain, score, report, agreement);
- ``launcher``: ``srun`` (the templates' default, ``srun --mpi=pmix``, Slurm's PMIx and no PRRTE) or
  ``mpirun`` (Open MPI's, PRRTE daemons; under Slurm the template's ``AIPERF_LAUNCHER=mpirun``);
- ``detector``: ``mpi`` (the launcher's report reaches the master through ULFM: ``group_lost`` naming the dead
  ranks), ``launcher`` (srun or mpirun ends the job: a rank exited badly), ``slurm`` (slurmctld sets the node
  DOWN after ``SlurmdTimeout`` and ends the job), ``keepalive`` (mpirun's TCP keepalive on its connection to the
  lost node's daemon fails, PRRTE says it "lost communication with a remote daemon" and ends the job:
  ``FT_PRTE_LIVENESS`` of aiperf_mpi/mpi/launch_settings.py), ``deadline`` (the master's: ``group_lost`` "past its
  deadline"), ``watchers`` (the leaders that watch rank 0's heartbeat end the job at ``--master-deadline``),
  ``nobody`` (the job is held until the test's own limit: the failure is not detected; the healthy row's word);
- ``outcome``: ``group-lost`` (the run goes on and scores in the same job) or ``job-ends`` (the log is intact and
  ``--resume`` scores it; ``scores`` says whether the job itself wrote a score first).
"""

from __future__ import annotations

from dataclasses import dataclass

from aiperf_mpi.job.deadlines import DEFAULT_BOUNDS, LAUNCH_MARGIN, startup_for

SLURMD_TIMEOUT = 30
"""the two-node Slurm's ``SlurmdTimeout`` in these tests (Slurm's default: 300 s; a site's bound scales with it)"""


def deadline_bound(margin: float = DEFAULT_BOUNDS.hang_margin) -> float:
    """seconds: the master's deadline (3 × the group's longest epoch, a rehearsal's under 30 s here, + ``margin``,
    ``--hang-margin``), plus the once-a-second check and the load of a shared 2-core machine"""
    return 3 * 30 + margin + 30


DEADLINE_BOUND = deadline_bound()
"""the bound of a stopped rank's row at the default ``--hang-margin`` (60 s)"""
HANG_MARGIN = 15
"""``--hang-margin`` of the one-node mid-run rows (tests/slurm/test_deadlines.py): the default's 60 s allows a
check-point write or a busy file system, which a rehearsal's groups never wait for (their epochs: ≈ 4 s); 45 s less
to wait out in each of make test-long's two rows (issue 51: test-long ≤ 20 minutes)"""


@dataclass(frozen=True)
class Case:
    """One row of the matrix: a failure at a phase under a launcher, and what must happen."""

    failure: str
    phase: str
    launcher: str
    fault_tolerance: bool
    detector: str
    bound_s: float
    """seconds from the failure to its detection (``group_lost`` logged, or the job's end) that the test allows"""
    outcome: str
    fixture: str = "slurm"
    """``slurm`` (tests/support/multihost_slurm.py, the template), ``multihost`` (mpirun of the fixture), or
    :data:`ONE_NODE` (the template in the one-node Slurm of tests/support/slurm.py: tests/slurm/, not
    tests/multinode/test_failures.py)"""
    rehearse: bool = True
    """a rehearsal (no TensorFlow, starts in seconds) unless the failure needs real training"""
    pending: str | None = None
    """why the row is not run here yet (its outcome depends on unmerged work, or nothing here can cause it)"""
    options: tuple[str, ...] = ()
    """more benchmark options (a phase's deadline set small, so the case ends in minutes)"""
    xfail_today: str | None = None
    """what happens today instead, for a row that was run and fails: the test is ``xfail(strict=True)``"""
    scores: int | None = None
    """score events a ``job-ends`` job writes before its ``--resume``: 0 or 1 where it is known (asserted), None
    where it may be either (a race the row does not settle); a ``group-lost`` row always writes one"""
    closed_after: bool | None = None
    """the job's score is the template's close (``run_stop`` reason ``launch ended``, aiperf_mpi/job/close.py):
    True where rank 0 cannot write it (asserted), False where rank 0 does (asserted), None where either may"""
    per_node: int = 2
    """tasks per node: 2 (the 2 × 2 rows), or :data:`SCALE` (the 2 × 64 rows: the ResNet-50 seed as a rehearsal,
    groups of 4)"""

    @property
    def id(self) -> str:
        ft = "-ft" if self.fault_tolerance else ""
        size = "" if self.per_node == 2 else f"/2x{self.per_node}"
        kind = "" if self.rehearse else "/training"
        return f"{self.failure}@{self.phase}/{self.launcher}{ft}/{self.fixture}{size}{kind}"


ONE_NODE = "slurm-one-node"
"""the fixture of the rows that tests/slurm/test_deadlines.py runs (``make test-long``); the two-node test skips them.
Its first-model row stops group 0's leader (as tests/mpi/test_deadlines.py does), the others a training rank that
leads nothing"""

TCP_ABORT_FIRST = True
"""whether a ``kill -9`` under a direct srun across nodes leaves the score to the template's close: yes, rank 0
writes none.  The dead rank's TCP peers on the other
node (rank 0 among them: it talks to every leader, and start-up's collectives connected it to the other ranks)
read the closed connection; Open MPI's TCP transport then calls ``MPI_ERRORS_ARE_FATAL``'s handler itself, not the
communicator's (mpi4py's ``ERRORS_RETURN`` does not stop it): ``mca_btl_tcp_frag_recv`` → ``ompi_mpi_abort`` →
``PMIx_Abort`` → ``_exit(14)``, and Slurm SIGKILLs the whole step on the abort — 0.05–0.12 s after the death, before
srun has reaped the task, so its ``--kill-on-bad-exit=1`` SIGTERM never comes (ftrace of the signals and exits,
gdb on rank 0: docs/cluster.md, "A direct srun across nodes").  With ``OMPI_MCA_mpi_ft_enable=true`` rank 0's
library reports the failure as a PMIx event instead, and Slurm's PMIx plugin SIGKILLs the step on it (0.05 s).
On one node the ranks share memory, no connection closes, and srun's SIGTERM comes first (rank 0 scored on it).
The job's score is then the template's close, from the log, after srun returned (before the close: none)"""

SCALE = 64
"""tasks per node of the rows at 128 ranks across the two nodes (issue 50, item 5): 128 training ranks of
TensorFlow do not fit this machine's memory, so these are rehearsals of the ResNet-50 seed"""

MASTER_DEADLINE = 30
"""``--master-deadline`` of the rows that stop rank 0: its watchers' bound"""

LAUNCHER_MARGIN = LAUNCH_MARGIN
"""the templates' ``MARGIN`` (jobscripts/src/common.sh): past the ranks' start-up bound, the batch shell's
watcher ends a launcher whose run has not logged its ``run_start``.  Under fault tolerance a rank stopped inside
MPI_Init is bounded only so: the waiting ranks' SIGALRM ends them, mpirun keeps a job whose ranks died and waits
for the stopped one, and no thread runs inside MPI_Init (before the watcher: projected not bounded)"""
KEEPALIVE_BOUND = 20 + 4 * 5 + 30
"""seconds: the launcher's keepalive (``FT_PRTE_LIVENESS``: 20 s idle, 4 probes 5 s apart) and the job's end under
load.  Before it, prterun (PRRTE 3.0.14, no daemon heartbeat) never ended: the master's deadline lost the group
(67 s), the run scored at its time limit, rank 0 called MPI_Abort, and prterun waited for node2's daemon for good
(still running 1,000 s after the loss, measured 2026-12-04)"""

CASES: tuple[Case, ...] = (
    # -- srun, the templates' default: Slurm's PMIx reports no death; --kill-on-bad-exit=1 ends the step ---------
    Case("kill-9-rank", "mid-run", "srun", False, "launcher", 30, "job-ends", scores=1, closed_after=TCP_ABORT_FIRST),
    Case("kill-9-leader", "mid-run", "srun", False, "launcher", 30, "job-ends", scores=1,
         closed_after=TCP_ABORT_FIRST),  # fmt: skip
    Case("kill-9-rank0", "mid-run", "srun", False, "launcher", 30, "job-ends", scores=1,
         closed_after=True),  # the scorer is dead  # fmt: skip
    Case("kill-9-rank", "mid-run", "srun", True, "launcher", 30, "job-ends",  # FT asked, off under srun (h-srun)
         scores=1, closed_after=TCP_ABORT_FIRST),  # fmt: skip
    Case("sigstop-rank", "start-up", "srun", False, "deadline", 40 + 20, "job-ends",
         options=("--startup-deadline", "40")),  # fmt: skip
    Case("sigstop-rank", "first-model", "srun", False, "deadline", 40 + 40, "job-ends",
         options=("--first-model-deadline", "40", "--end-deadline", "30")),  # fmt: skip
    Case("sigstop-rank", "mid-run", "srun", False, "deadline", DEADLINE_BOUND, "job-ends"),
    Case("sigstop-rank", "end", "srun", False, "deadline", 30 + 20, "job-ends",
         options=("--end-deadline", "30", "--time-limit", "30")),  # fmt: skip
    Case("node-loss", "mid-run", "srun", False, "slurm", SLURMD_TIMEOUT + 60, "job-ends", scores=1),
    Case("fsync-stall-rank0", "mid-run", "srun", False, "deadline", 10 + 20, "job-ends",
         options=("--io-deadline", "10")),  # fmt: skip
    # -- srun on one node (tests/slurm/test_deadlines.py): a stopped rank at each phase, the phase's deadline ------
    Case("sigstop-rank", "mid-run", "srun", False, "deadline", deadline_bound(HANG_MARGIN), "job-ends",
         fixture=ONE_NODE, options=("--hang-margin", str(HANG_MARGIN))),  # fmt: skip
    Case("sigstop-rank", "mid-run", "srun", True, "deadline", deadline_bound(HANG_MARGIN), "job-ends",
         fixture=ONE_NODE, options=("--hang-margin", str(HANG_MARGIN))),  # fmt: skip
    Case("sigstop-rank", "first-model", "srun", False, "deadline", 40 + 40, "job-ends", fixture=ONE_NODE),
    Case("sigstop-rank", "start-up", "srun", False, "deadline", 40 + 20, "job-ends", fixture=ONE_NODE),
    Case("sigstop-rank", "end", "srun", False, "deadline", 30 + 20, "job-ends", fixture=ONE_NODE),
    # -- mpirun with fault tolerance (the template's AIPERF_LAUNCHER=mpirun AIPERF_FAULT_TOLERANCE=1) -----------
    Case("kill-9-rank", "mid-run", "mpirun", True, "mpi", 30, "group-lost"),
    Case("kill-9-leader", "mid-run", "mpirun", True, "mpi", 30, "group-lost"),
    Case("kill-9-rank0", "mid-run", "mpirun", True, "launcher", 30, "job-ends", scores=1,
         closed_after=True),  # the scorer is dead  # fmt: skip
    Case("sigstop-rank", "start-up", "mpirun", True, "deadline", 40 + LAUNCHER_MARGIN + 40, "job-ends",
         options=("--startup-deadline", "40")),  # the waiting ranks' alarm, then the template's watcher  # fmt: skip
    Case("sigstop-rank", "first-model", "mpirun", True, "deadline", 40 + 40, "group-lost",
         options=("--first-model-deadline", "40")),  # fmt: skip
    Case("sigstop-rank", "mid-run", "mpirun", True, "deadline", DEADLINE_BOUND, "group-lost"),
    Case("sigstop-rank", "end", "mpirun", True, "deadline", 30 + 20, "job-ends",
         options=("--end-deadline", "30", "--time-limit", "30")),  # fmt: skip
    Case("node-loss", "mid-run", "mpirun", True, "slurm", SLURMD_TIMEOUT + 60, "job-ends"),
    Case("fsync-stall-rank0", "mid-run", "mpirun", True, "deadline", 10 + 20, "job-ends",
         options=("--io-deadline", "10")),  # the same FUSE file system as srun's row  # fmt: skip
    # -- rank 0 stopped mid-run: its watchers end the job at --master-deadline, the template's close scores it ------
    Case("sigstop-rank0", "mid-run", "srun", False, "watchers", MASTER_DEADLINE + 40, "job-ends", scores=1,
         options=("--master-deadline", str(MASTER_DEADLINE))),  # fmt: skip
    Case("sigstop-rank0", "mid-run", "mpirun", True, "watchers", MASTER_DEADLINE + 40, "job-ends", scores=1,
         options=("--master-deadline", str(MASTER_DEADLINE))),  # fmt: skip
    # -- real training, Horovod groups of 2 (2 × 2): a kill and a stop, as the rehearsals above ------------------
    Case("kill-9-rank", "mid-run", "mpirun", True, "mpi", 30, "group-lost", rehearse=False),
    Case("sigstop-rank", "mid-run", "srun", False, "deadline", DEADLINE_BOUND + 60, "job-ends", rehearse=False),
    # -- 2 × 64 (issue 50, item 5): the ResNet-50 seed as a rehearsal, groups of 4, each node's limits just above
    # its need (tests/multinode/test_failures.py, node_limits) --------------------------------------------------
    Case("none", "mid-run", "srun", False, "nobody", startup_for(2 * SCALE), "scores", per_node=SCALE),
    # ^ the healthy run outlives its start-up bound, the default at 128 ranks (a bound of 150 s was too short for
    # start-up here: 128 ranks passed it in "layout", waiting for the slowest rank's imports, 2026-12-07)
    Case("kill-9-rank", "mid-run", "srun", False, "launcher", 60, "job-ends", scores=1, closed_after=TCP_ABORT_FIRST,
         per_node=SCALE),  # fmt: skip
    Case("sigstop-rank0", "mid-run", "srun", False, "watchers", MASTER_DEADLINE + 60, "job-ends", scores=1,
         options=("--master-deadline", str(MASTER_DEADLINE)), per_node=SCALE),  # fmt: skip
    Case("sigstop-rank0", "mid-run", "mpirun", True, "watchers", MASTER_DEADLINE + 60, "job-ends", scores=1,
         options=("--master-deadline", str(MASTER_DEADLINE)), per_node=SCALE),  # fmt: skip
    Case("graphs-stall-rank0", "mid-run", "srun", False, "deadline", 10 + 30, "job-ends",
         options=("--io-deadline", "10", "--max-epochs", "1"), per_node=SCALE),  # fmt: skip
    # ^ one epoch a model, so that new models' graphs are written after the stall begins (with the default, the
    # 32 groups' first ResNet-50 models outlived the run and no graph was written after the seeds', 2026-12-07)
    # -- mpirun of the multi-host fixture (ssh launch, no Slurm): a lost node is PRRTE's and TCP's alone --------
    Case("node-loss", "mid-run", "mpirun", True, "keepalive", KEEPALIVE_BOUND, "job-ends", fixture="multihost"),
)
"""every row; ``tests/multinode/test_failures.py`` runs each one whose ``pending`` is None"""

"""The operating system's limits a large job hits at start: open files on rank 0, memory on each node.

**Open files.**  Under Open MPI's ``pml ob1`` with the TCP transport (``btl tcp``, what fault tolerance
uses: ULFM has no UCX code), a rank holds one socket for every peer it has exchanged a message with, opened
on the first message and kept to the end.  Rank 0 talks to every group's leader (each ``Work`` and ``Stop``
goes to the leader itself, relays or not; without relays every leader's messages come to it too), to each
relay, and to the few partners of the collectives' trees: at 4,096 ranks in groups of 1 that is ≈ 4,100
sockets, against a soft limit of 1,024 on many systems.  A socket past the limit is not an error the job
survives: measured here (33 ranks over TCP, each launched under ``prlimit --nofile=40:4096``), rank 0's TCP
transport fails to accept the leaders' connections ("accept failed: Too many open files", thousands of
times) and the job hangs until its launcher's time limit.  So every rank raises its soft limit to its hard
limit (which an unprivileged process may do) before its first collective, and rank 0 says in one line
when even the hard limit is below what it needs.

**Memory.**  A rehearsal of 128 ranks in groups of 2 under fault tolerance on a 24 GiB machine lost 28
groups to the kernel's OOM killer before any fault was injected, and nothing had warned.  What a rank holds
depends on its role and, for a group's leader (the search parses and morphs the seed's graphs), on the seed
model: :data:`REHEARSAL_MIB`, measured by ``benchmarks/memory.py``.  At start every rank reports its node's
``MemAvailable`` and its own anonymous memory so far; rank 0 adds up, per node of the layout, what its ranks
will hold at their peak, and says in one line when a node's available memory (plus what its ranks already
hold) falls short.  A run that trains holds TensorFlow, its model, optimizer and batches in every training rank:
:data:`TRAINING_MIB`, measured on the embedded digits (32×32 images); larger images hold more, so for them the
line is a floor.

Each rank calls :func:`raise_open_files` first thing (``aiperf_mpi/__main__.py``: before the first collective, since
the start's broadcasts and gathers already connected rank 0 to enough ranks to fail under a soft limit of 40
at 33 ranks), and :func:`say_limits` once the layout is known.  The rules are pure and unit-tested
(tests/unit/test_limits.py); the launch under ``prlimit`` is tests/mpi/test_limits.py.
"""

from __future__ import annotations

import math
import os
import resource
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from aiperf_mpi.errors import UsageError
from aiperf_mpi.mpi.plan import LayoutPlan

FILES_BESIDE_PEERS = 64
"""rank 0's open files that are not a socket to a peer: stdin/out/err, the event log, MLLOG, the graphs file and
the run's lock, the launcher's PMIx connection, the TCP transport's listening sockets, Open MPI's eventfds,
pipes and shared-memory files, Python's own.  Measured: 18 of them on rank 0 of a 33-rank rehearsal over TCP
(53 open files, 35 sockets: 32 leaders, the PMIx server, two listening); the rest is headroom for the
monitor, the report's fonts and libraries opened later"""


REHEARSAL_MIB = {"master": 130, "relay": 40, "other": 50, "leader": {"tiny": 100, "resnet50": 230}}
"""a rehearsing rank's peak anonymous memory (``RssAnon``, MiB) by role, a leader's by seed model.  Measured by
``benchmarks/memory.py`` (8 ranks in groups of 2 with a relay, 40 s, after the stand-in's all-reduce went in
4 MiB pieces, job/rehearsal.py; before, a ResNet-50 group's ranks held 129–184 MiB each there, and up to 490 MB
in longer runs): the master, the relay 38, another training rank 38 (tiny) and 46 (resnet50), a leader 66 and
72 MiB.  What grows with the run is added from the master bench (BENCHMARKS.md, the master): rank 0 ≈ 127 MB
at 100,000 models, a ResNet-50 leader's search 183 MB resident (peak 258 MB) at 100,000 models.  The shared
libraries' pages (≈ 30 MiB of each rank's VmRSS) are left out.  A seed not named here counts as the largest"""
REHEARSAL_DATA_MIB = {"digits": 90}
"""what a rehearsing rank holds beside :data:`REHEARSAL_MIB` (measured on synthetic data, generated as it is used)
when its data set is held in memory: the embedded digits, which every rank but a relay loads (the data check).
Measured (``benchmarks/memory.py`` with ``--dataset digits``, 6 ranks, tiny seed, Intel Xeon, 2026-12-07): the master
111 MiB against 39 on synthetic data, a leader 121 against 67, another training rank 117 against 39 (+72 to +78);
found by the 2 × 64 failure table (tests/multinode/test_failures.py), whose ResNet-50 rehearsal on the digits held
123–125 MiB a non-leader against the start line's 50.  Data sets read from files are not counted (their readers
stream them): the start line says so"""
TRAINING_MIB = {"master": {"tiny": 310, "resnet50": 710}, "relay": 40, "other": {"tiny": 450, "resnet50": 1460},
                "leader": {"tiny": 500, "resnet50": 1460}}  # fmt: skip
"""a rank's peak anonymous memory (``RssAnon``, MiB) in a run that trains, by role and seed model: the highest measured
on either machine of this kind, with about 10 % above it. Measured by ``python -m benchmarks.memory --real tiny
resnet50`` (6 ranks: the master, a relay, two groups of 2; the embedded digits at 32×32, 40 s): on an AMD EPYC
(2026-12-05) the master 112–113, the relay 38, a training rank 349–355 (tiny) and 1,087–1,150 (ResNet-50: TensorFlow,
Horovod, the model's weights, gradients and optimizer slots, and a batch's activations); on an Intel Xeon
(2026-12-07, tests/scale/test_memory_table.py, which holds this table to the measurement) the master 111–112, the
relay 38–39, the tiny seed's leader 447 and other rank 405, ResNet-50's leader 1,123 and other rank 1,138 — above the
figures then in this table (360, 360, 1,160, 1,110), which the test failed. Before this was measured a training rank
counted the rehearsal's figure plus ``import tensorflow``'s 530 MiB: 580–630 MiB, too much for the tiny seed and too
little by half for ResNet-50. Larger images hold more: the start line counts their activations (:class:`Batches`) by
the estimate on 32×32 images; no larger set was measured here. The master's 310: those measurements ran with
``--no-report``, and the run's default end (the report, the best model's export) took rank 0 to 280 MiB (3 ranks,
tiny, digits, Intel Xeon, 2026-12-07; a rehearsal's rank 0 145 with the digits held, inside its 220), which the 2 × 2
training rows of the failure table held against the start line's 130; a ResNet-50 run's end took it to 644 MiB (the
40 s run of tests/scale/test_memory_table.py, Intel Xeon, 2026-12-07: the best model's export builds the model in
TensorFlow on rank 0), so the master's figure is by seed too. These 40 s runs never leave the warm-up's batch (32,
:data:`TABLE_BATCH`): a training rank's memory follows its tuner's batch (the 2 × 2 failure rows' leaders held
785–1,911 MiB against a start line of 500), which the start line adds (:class:`Batches`, :data:`ACTIVATION_FACTOR`).
A child deeper than the seed holds more a sample (the tiny seed's leader at batch 512 went from 1,529 MiB at its
first model to 1,945 at its 45th, ≈ 9.5 MiB a model, 3 ranks on the digits, Intel Xeon, 2026-12-07; the 2 × 2 kill -9
training row's leader 1,862 against 1,822): its leader halves its batch until its activations fit the seed's at the
largest (``graph.model.batch_within``), so the figure holds for every child. The same test, run twice that day, found
ResNet-50's training ranks at 1,118–1,198 and then 1,295–1,323 MiB (the second beside the unit tests, its run further
along when the time limit came): 1,460 holds the higher with 10 % above it"""


ACTIVATION_FACTOR = {"tiny": 3.0, "resnet50": 0.6}
"""by seed model, a training rank's anonymous memory per sample of its batch over the seed's activation estimate
(``graph.model.activation_bytes_per_sample``: every layer's output as one float32).  TensorFlow on a CPU keeps
more than that for a narrow model (the gradients of the activations, batch normalisation's saved inputs, the input
pipeline's batches) and less for a deep one (the estimate counts every output, the executor frees each once its
gradient is taken); its allocator keeps the largest batch's pages.  Measured on the embedded digits (Intel Xeon,
2026-12-07, every rank's ``RssAnon``): the tiny seed's leader at 441 MiB with batches 16–64, 886 at 256, 1,529 at
512 (3 ranks), against an estimate of 0.918 MiB a sample: 2.3–2.5 MiB a sample, 2.5–2.6 × the estimate (a 4-rank
run whose four models trained at 512 and 64 held 941–958 MiB a training rank);
ResNet-50's training ranks at 1,118–1,323 MiB at batch 32 (:data:`TRAINING_MIB`) and 1,929–1,984 at 512 (4
ranks, every model at 512), against 2.82 MiB a sample: 1.4–1.8 MiB, 0.49–0.64 × the estimate.  Each figure holds
the highest with about 10 % above it; tests/scale/test_memory_table.py holds them to runs whose every model trains
at 512.  A seed not named here counts the largest"""
TABLE_BATCH = 32
"""the per-rank batch :data:`TRAINING_MIB` was measured at (its runs never left the warm-up's, the default
``--batch-size``): a training rank's figure adds the activations of its tuner's largest batch beyond it"""
TABLE_IMAGES = (32, 3, 10)
"""the images :data:`TRAINING_MIB` was measured on (the embedded digits: 32×32, 3 channels, 10 classes)"""


@dataclass(frozen=True)
class Batches:
    """What a training rank's memory follows beyond the table: the largest per-rank batch its tuner may choose, and
    the seed's activations a sample (MiB, :func:`~aiperf_mpi.graph.model.activation_bytes_per_sample`) on the
    run's images and on the table's (:data:`TABLE_IMAGES`)."""

    largest: int
    per_sample_mib: float
    table_per_sample_mib: float

    factor: float
    """the seed's :data:`ACTIVATION_FACTOR`"""

    def extra_mib(self) -> float:
        """A CPU training rank's memory above the table's figure: the activations of ``largest`` samples of the
        run's images, less those of the table's batch of its images, ``factor`` × the estimate."""
        extra = self.per_sample_mib * self.largest - self.table_per_sample_mib * TABLE_BATCH
        return max(0.0, self.factor * extra)


def training_batches(seed: str, config_batch: int, device_memory_gb: float, data_check: Mapping,
                     plan: LayoutPlan) -> Batches | None:  # fmt: skip
    """The run's :class:`Batches`: the seed on the run's images (``data_check``'s ``image_shape`` and ``classes``),
    the tuner's space as its leaders make it (``graph.model.tuner_batches``: the device memory, and the training
    samples a rank of the smallest group holds); None where the data check gave no images (nothing to size)."""
    from aiperf_mpi.graph.model import activation_bytes_per_sample, tuner_batches
    from aiperf_mpi.graph.seeds import seed_model

    shape, classes = data_check.get("image_shape"), data_check.get("classes")
    if not shape or not classes or not plan.groups:
        return None
    graph = seed_model(seed, int(shape[0]), int(shape[2]), int(classes))
    table = seed_model(seed, *TABLE_IMAGES)
    train = data_check.get("train")
    horovod = min(group.horovod_size for group in plan.groups)
    largest = max(tuner_batches(graph, int(device_memory_gb * 2**30), train // horovod if train else None,
                                config_batch))  # fmt: skip
    factor = ACTIVATION_FACTOR.get(seed, max(ACTIVATION_FACTOR.values()))
    return Batches(largest, activation_bytes_per_sample(graph) / 2**20, activation_bytes_per_sample(table) / 2**20,
                   factor)  # fmt: skip


def rank_need_mib(role: str, seed: str, rehearse: bool, dataset: str = "synthetic", batches: Batches | None = None,
                  gpu: bool = False) -> float:  # fmt: skip
    """A rank's peak anonymous memory (MiB) by role (master, relay, leader, other), seed model, run kind and data
    set (a rehearsal's ranks but its relays hold the embedded digits: :data:`REHEARSAL_DATA_MIB`; the training
    table was measured on them).  A rank that trains on a CPU (``gpu`` False) also holds its tuner's largest
    batch (``batches``: :meth:`Batches.extra_mib`); on a GPU the activations lie in the device's memory."""
    figure = (REHEARSAL_MIB if rehearse else TRAINING_MIB)[role]
    if isinstance(figure, dict):
        figure = figure.get(seed, max(figure.values()))
    if rehearse and role != "relay":
        figure += REHEARSAL_DATA_MIB.get(dataset, 0)
    if not rehearse and role in ("leader", "other") and batches is not None and not gpu:
        figure += batches.extra_mib()
    return figure


def role_of(plan: LayoutPlan, rank: int) -> str:
    if rank == plan.master_rank:
        return "master"
    if rank in plan.relay_ranks:
        return "relay"
    group = plan.group_of(rank)
    return "leader" if group is not None and group.leader == rank else "other"


def node_room(plan: LayoutPlan, reports: list[tuple[int, ...]], seed: str, rehearse: bool,
              dataset: str = "synthetic", batches: Batches | None = None) -> dict[int, tuple[float, float | None]]:
    """Each node's (need, room) in MiB; room None where a rank could not read its memory.

    ``reports[rank]``: (the node's ``MemAvailable``, the rank's ``RssAnon``[, its cgroup's room[, the GPUs it
    sees]]), memory in KiB, as each rank read them at start (0 where it could not).  A rank's reading is the
    smaller of ``MemAvailable`` and its cgroup's room (``memory.max`` less ``memory.current``, the tightest of its
    cgroup and their parents: under Slurm the job's limit, which the kernel's OOM killer enforces whatever the
    node has free).  A node's room is its least reading plus what its ranks already hold (counted in neither); its
    need is its ranks' peak figures (:func:`rank_need_mib`).
    """
    held: dict[int, float] = {}
    need: dict[int, float] = {}
    readings: dict[int, list[int]] = {}
    for rank, report in enumerate(reports):
        available, anonymous = report[0], report[1]
        cgroup = report[2] if len(report) > 2 else 0
        node = plan.nodes[rank]
        readings.setdefault(node, []).append(min(available, cgroup) if available and cgroup else available)
        held[node] = held.get(node, 0.0) + anonymous / 1024
        gpu = len(report) > 3 and report[3] > 0
        need[node] = need.get(node, 0.0) + rank_need_mib(role_of(plan, rank), seed, rehearse, dataset, batches, gpu)
    return {node: (need[node], min(values) / 1024 + held[node] if all(values) else None)
            for node, values in readings.items()}  # fmt: skip


def on_cpu(reports: list[tuple[int, ...]]) -> bool:
    """Whether any rank sees no GPU (it trains on its CPU, its batches' activations in the host's memory)."""
    return any(not (len(report) > 3 and report[3] > 0) for report in reports)


def batch_words(batches: Batches | None, rehearse: bool, reports: list[tuple[int, ...]]) -> str:
    """What a training rank's figure counts of its batch, for the start line ('' for a rehearsal)."""
    if rehearse:
        return ""
    if batches is None:
        return "; at the table's batch: its tuner's largest not known"
    if not on_cpu(reports):
        return f"; its tuner's largest batch {batches.largest} on its GPU, not counted here"
    return (f"; a training rank's at its tuner's largest batch, {batches.largest}: {batches.extra_mib():.0f} MiB of "
            f"activations, {batches.factor:g} × the seed's estimate, on its CPU")


def memory_summary(plan: LayoutPlan, reports: list[tuple[int, ...]], seed: str, rehearse: bool,
                   dataset: str = "synthetic", batches: Batches | None = None) -> str:  # fmt: skip
    """Rank 0's start line on memory: a rank's figure by role (a training rank's on a CPU where any rank has no
    GPU), the busiest node's need and the tightest room."""
    rooms = node_room(plan, reports, seed, rehearse, dataset, batches)
    roles = ("master", "relay", "leader", "other")
    gpu = not on_cpu(reports)
    figures = ", ".join(f"{role} {rank_need_mib(role, seed, rehearse, dataset, batches, gpu):.0f}" for role in roles
                        if any(role_of(plan, rank) == role for rank in range(len(plan.nodes))))  # fmt: skip
    busiest = max(rooms, key=lambda node: rooms[node][0])
    known = [room for _, room in rooms.values() if room is not None]
    tightest = f"{min(known) / 1024:.1f} GiB" if known else "unknown (no /proc/meminfo)"
    cgroups = sum(1 for report in reports if len(report) > 2 and report[2])
    held = ("with the digits held" if dataset in REHEARSAL_DATA_MIB else "on synthetic data" if dataset == "synthetic"
            else f"its {dataset} files not counted")  # fmt: skip
    kind = f"a rehearsal's {held}" if rehearse else "measured on 32×32 images at batch 32"
    return (f"aiperf_mpi: memory: a rank's peak MiB by role {figures} ({kind}, seed {seed}: mpi/limits.py's "
            f"measured table{batch_words(batches, rehearse, reports)}); the busiest node needs ≈ "
            f"{rooms[busiest][0] / 1024:.1f} GiB, the tightest node has "
            f"{tightest} (MemAvailable{', the job cgroup' + chr(39) + 's memory.max' if cgroups else ''})")


def memory_line(plan: LayoutPlan, reports: list[tuple[int, ...]], seed: str, rehearse: bool,
                dataset: str = "synthetic", batches: Batches | None = None) -> str | None:  # fmt: skip
    """Rank 0's one line when a node cannot hold its ranks (None when every node can): :func:`node_room`."""
    short = []
    for node, (need, have) in node_room(plan, reports, seed, rehearse, dataset, batches).items():
        if have is not None and need > have:  # a node that could not say (no /proc/meminfo): nothing to hold it to
            short.append((need - have, node, need, have))
    if not short:
        return None
    gap, node, wanted, have = max(short)
    host = plan.hosts[plan.nodes.index(node)]
    ranks = plan.nodes.count(node)
    kind = "a rehearsal's" if rehearse else "training"
    if not rehearse and batches is not None and on_cpu(reports):
        kind += (f" at its tuner's largest batch, {batches.largest}, on the CPU: a smaller --device-memory-gb "
                 "or --batch-size bounds it")
    return (f"aiperf_mpi: warning: {len(short)} node(s) may not hold their ranks' memory: e.g. {host}'s {ranks} "
            f"ranks need ≈ {wanted / 1024:.1f} GiB ({kind}, seed {seed}) and it has {have / 1024:.1f} GiB; the "
            "kernel's OOM killer may take ranks, each costing its group (docs/cluster.md, \"Open files and "
            "memory\")")


def cgroup_room_kib(proc_self_cgroup: str = "/proc/self/cgroup", root: str = "/sys/fs/cgroup") -> int:
    """KiB this process's memory cgroup (v2, or v1's memory controller) and its parents still allow: the
    tightest ``memory.max`` − (``memory.current`` − the inactive file cache, which the kernel reclaims before its
    OOM killer acts: ``memory.stat``'s ``inactive_file``, v1's ``total_inactive_file``) among them, at least 1
    where a limit is set (0: no limit, or none could be read)."""
    try:
        with open(proc_self_cgroup, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return 0
    places = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":  # v2: the unified hierarchy
            places.append((Path(root), parts[2], "memory.max", "memory.current", "inactive_file"))
        elif "memory" in parts[1].split(","):  # v1: the memory controller's own hierarchy
            places.append((Path(root) / "memory", parts[2], "memory.limit_in_bytes", "memory.usage_in_bytes",
                           "total_inactive_file"))  # fmt: skip
    rooms = []
    for base, path, limit_name, usage_name, cache_name in places:
        folder = base / path.lstrip("/")
        while True:
            try:
                limit = (folder / limit_name).read_text().strip()
                usage = int((folder / usage_name).read_text().strip()) - _stat(folder / "memory.stat", cache_name)
                if limit != "max" and int(limit) < 1 << 60:  # v1 says 'no limit' as a huge number
                    rooms.append(max(1, (int(limit) - max(0, usage)) // 1024))
            except (OSError, ValueError):
                pass
            if folder == base or base not in folder.parents:
                break
            folder = folder.parent
    return min(rooms) if rooms else 0


def _stat(path: Path, name: str) -> int:
    """A field of a cgroup's ``memory.stat`` in bytes (0 where it cannot be read)."""
    try:
        for line in path.read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == name:
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


def visible_gpus(environ: Mapping[str, str], dev: str = "/dev") -> int:
    """The NVIDIA GPUs this rank's TensorFlow would train on: the node's ``/dev/nvidia<N>`` devices, none where
    ``CUDA_VISIBLE_DEVICES`` hides them all ("" or a list starting at -1, CUDA's own reading), else at most as many
    as it names.  Read without CUDA or NVML, which a rank has not loaded yet."""
    try:
        devices = sum(1 for name in os.listdir(dev) if name.startswith("nvidia") and name[6:].isdigit())
    except OSError:
        return 0
    named = environ.get("CUDA_VISIBLE_DEVICES")
    if named is None:
        return devices
    listed = [item.strip() for item in named.split(",")]
    if not listed or listed[0] in ("", "-1"):
        return 0
    return min(devices, len(listed))


def memory_report() -> tuple[int, int, int, int]:
    """(``MemAvailable`` of this node, ``RssAnon`` of this process, its cgroup's room: :func:`cgroup_room_kib`),
    KiB, 0 for what cannot be read; and the GPUs it sees (:func:`visible_gpus`: a training rank with none holds
    its batches' activations in the host's memory)."""
    def field(path: str, name: str) -> int:
        try:
            with open(path, encoding="ascii") as handle:
                for line in handle:
                    if line.startswith(name):
                        return int(line.split()[1])
        except (OSError, ValueError, IndexError):
            pass
        return 0

    return (field("/proc/meminfo", "MemAvailable:"), field("/proc/self/status", "RssAnon:"), cgroup_room_kib(),
            visible_gpus(os.environ))


def collective_partners(world_size: int) -> int:
    """The peers a rank meets in the world's collectives (binomial and recursive-doubling trees): ⌈log₂ P⌉."""
    return max(1, math.ceil(math.log2(max(world_size, 2))))


def rank0_peers(plan: LayoutPlan) -> int:
    """The ranks rank 0 holds a connection to by the end of the run: every leader, every relay, the collectives'.

    A group's other ranks talk only to their group and the world's collective trees; a relay to its own
    leaders and rank 0: each fewer than rank 0, so rank 0's need is the job's largest.
    """
    leaders = {group.leader for group in plan.groups}
    return len(leaders | set(plan.relay_ranks)) + collective_partners(plan.world_size)


def open_files_needed(plan: LayoutPlan) -> int:
    """Rank 0's open files at the end of a run over TCP: a socket per peer (:func:`rank0_peers`) and the rest."""
    return rank0_peers(plan) + FILES_BESIDE_PEERS


def talks_tcp(environ: Mapping[str, str]) -> bool:
    """Whether this job's ranks may reach each other by TCP sockets (Open MPI's ``--mca`` settings, as each rank
    reads them from its environment): not when the point-to-point layer is UCX (sockets only to connect) or the
    transports named exclude ``tcp``.  Unset (Open MPI's choice at run time): TCP where nothing faster exists."""
    pml = environ.get("OMPI_MCA_pml", "").strip().lower()
    if pml and not pml.startswith("^") and "ob1" not in pml.split(","):
        return False  # ucx, cm: no TCP transport of their own per peer
    btl = environ.get("OMPI_MCA_btl", "").strip().lower()
    if not btl:
        return True
    if btl.startswith("^"):
        return "tcp" not in btl[1:].split(",")
    return "tcp" in btl.split(",")


def raised_soft_limit(soft: int, hard: int, nr_open: int | None) -> int:
    """The soft limit to ask for: the hard limit; when that is unlimited, the kernel's ceiling (``fs.nr_open``:
    Linux refuses an unlimited ``RLIMIT_NOFILE``), or the soft limit as it is when that cannot be read."""
    if hard == resource.RLIM_INFINITY:
        return soft if nr_open is None or (soft != resource.RLIM_INFINITY and soft >= nr_open) else nr_open
    return hard


def _nr_open() -> int | None:
    try:
        with open("/proc/sys/fs/nr_open", encoding="ascii") as handle:
            return int(handle.read())
    except (OSError, ValueError):
        return None


def raise_open_files() -> tuple[int, int]:
    """This process's ``RLIMIT_NOFILE`` soft limit raised to its hard limit; (soft, hard) as they are after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = raised_soft_limit(soft, hard, _nr_open())
    if wanted != soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        except (ValueError, OSError):
            pass  # left as it was; rank 0's line says so when it matters
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def open_files_line(plan: LayoutPlan, soft: int, hard: int, tcp: bool) -> str | None:
    """Rank 0's one line when its limit cannot cover its sockets over TCP (None when it can, or off TCP)."""
    needed = open_files_needed(plan)
    if not tcp or soft == resource.RLIM_INFINITY or soft >= needed:
        return None
    shown = "unlimited" if hard == resource.RLIM_INFINITY else f"{hard:,}"
    return (f"aiperf_mpi: warning: rank 0 may open ≈ {needed:,} files over TCP (a socket to each of "
            f"{len(plan.groups):,} group leaders and {len(plan.relay_ranks)} relay(s), ⌈log₂ "
            f"{plan.world_size:,}⌉ collective partners, {FILES_BESIDE_PEERS} other files) but its open-file limit "
            f"is {soft:,} (hard {shown}): past it the job hangs; raise the hard limit (`ulimit -Hn`, limits.conf, "
            "Slurm's PropagateResourceLimits) or use fewer groups (docs/cluster.md, \"Open files and memory\")")


OVERRIDE = "--ignore-limits"
"""the option that starts a job rank 0 would refuse for its limits"""


def say_limits(comm, plan: LayoutPlan, seed: str, rehearse: bool, ignore: bool = False,
               dataset: str = "synthetic", batches: Callable[[], Batches | None] = lambda: None) -> None:
    """Collective, once the layout is known (``mpi/run.py``): rank 0 states the job's memory and its room, and
    refuses in one line each limit that cannot hold the job — its open files over TCP (the hard limit, to which
    every rank raised its soft one: past it the job hangs), a node's memory (past it the OOM killer takes
    ranks) — unless ``ignore`` (``--ignore-limits``), when the line is a warning and the job starts.

    ``batches`` makes the run's :class:`Batches` on rank 0 (a training rank's memory follows its largest batch).
    ``comm`` is the world communicator (mpi4py's ``gather``, ``bcast`` and ``Get_rank``): one gather of three
    numbers a rank, one broadcast of the verdict, so that every rank raises the same ``UsageError`` and the job
    ends at once.  The open-file limits are read as :func:`raise_open_files` left them.
    """
    reports = comm.gather(memory_report(), root=plan.master_rank)
    refusal = None
    if comm.Get_rank() == plan.master_rank:
        sized = None if rehearse else batches()
        print(memory_summary(plan, reports, seed, rehearse, dataset, sized), flush=True)
        lines = [open_files_line(plan, *resource.getrlimit(resource.RLIMIT_NOFILE), talks_tcp(os.environ)),
                 memory_line(plan, reports, seed, rehearse, dataset, sized)]  # fmt: skip
        short = [line for line in lines if line]
        if short and not ignore:
            refusal = "; ".join(line.removeprefix("aiperf_mpi: warning: ") for line in short)
            refusal += f"; refused before anything started ({OVERRIDE} starts it anyway)"
        for line in short if ignore else ():
            print(f"{line} ({OVERRIDE}: starting anyway)", flush=True)
    refusal = comm.bcast(refusal, root=plan.master_rank)
    if refusal:
        raise UsageError(refusal)

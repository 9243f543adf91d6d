"""The limits a large job hits at start (aiperf_mpi/mpi/limits.py): rank 0's open files, pure rules."""

from __future__ import annotations

import resource

from aiperf_mpi.mpi.limits import (
    FILES_BESIDE_PEERS,
    open_files_line,
    open_files_needed,
    raised_soft_limit,
    rank0_peers,
    talks_tcp,
)
from aiperf_mpi.mpi.plan import plan_layout


def nodes_of(ranks: int, per_node: int) -> tuple[list[str], list[int]]:
    nodes = [rank // per_node for rank in range(ranks)]
    return [f"node{n}" for n in nodes], nodes


def test_rank_0_needs_a_socket_per_leader_and_relay_and_the_collectives_trees() -> None:
    # the case: 4,096 ranks in groups of 1 — 4,095 leaders and 12 tree partners, ≈ 4,100 sockets
    plan = plan_layout(*nodes_of(4096, 64), group_size=1)
    assert rank0_peers(plan) == 4095 + 12
    assert open_files_needed(plan) == 4095 + 12 + FILES_BESIDE_PEERS
    # groups of 8 with 4 relays on rank 0's node: leaders and relays, not every rank
    plan = plan_layout(*nodes_of(4096, 64), group_size=8, relays=4)
    assert len(plan.groups) == 512 and rank0_peers(plan) == 512 + 4 + 12  # node 0: 59 workers, 8 groups
    assert rank0_peers(plan_layout(*nodes_of(2, 2))) == 1 + 1  # one leader, which is also its tree partner


def test_the_need_grows_with_groups_not_ranks() -> None:
    small = rank0_peers(plan_layout(*nodes_of(1024, 8)))  # a group per node: 128 leaders
    large = rank0_peers(plan_layout(*nodes_of(8192, 64)))  # a group per node: 128 leaders, 8× the ranks
    assert large - small == 3  # only the trees' ⌈log₂ P⌉ grew (10 → 13)


def test_the_soft_limit_goes_to_the_hard_one_or_the_kernels_ceiling_when_unlimited() -> None:
    infinity = resource.RLIM_INFINITY
    assert raised_soft_limit(1024, 4096, 1 << 20) == 4096
    assert raised_soft_limit(4096, 4096, None) == 4096
    assert raised_soft_limit(1024, infinity, 1 << 20) == 1 << 20  # Linux refuses an unlimited RLIMIT_NOFILE
    assert raised_soft_limit(1024, infinity, None) == 1024  # no ceiling known: left as it is


def test_one_line_when_the_hard_limit_cannot_cover_rank_0s_sockets_over_tcp() -> None:
    plan = plan_layout(*nodes_of(4096, 64), group_size=1)
    needed = open_files_needed(plan)
    line = open_files_line(plan, 1024, 1024, tcp=True)
    assert line is not None and "\n" not in line and line.startswith("aiperf_mpi: warning: rank 0 may open")
    assert f"≈ {needed:,} files" in line and "4,095 group leaders" in line and "limit is 1,024 (hard 1,024)" in line
    assert open_files_line(plan, needed, needed, tcp=True) is None  # enough
    assert open_files_line(plan, 1024, 1024, tcp=False) is None  # UCX, shared memory: no socket per peer
    assert open_files_line(plan, resource.RLIM_INFINITY, resource.RLIM_INFINITY, tcp=True) is None


def test_tcp_is_read_from_open_mpis_settings() -> None:
    assert talks_tcp({})  # Open MPI picks TCP where nothing faster exists
    assert talks_tcp({"OMPI_MCA_pml": "ob1", "OMPI_MCA_btl": "tcp,self"})
    assert talks_tcp({"OMPI_MCA_btl": "^sm"})
    assert not talks_tcp({"OMPI_MCA_btl": "self,sm"})
    assert not talks_tcp({"OMPI_MCA_btl": "^tcp"})
    assert not talks_tcp({"OMPI_MCA_pml": "ucx"})


def test_one_line_when_a_nodes_memory_cannot_hold_its_ranks() -> None:
    """The issue's case: 128 rehearsing ranks in groups of 2 with a relay on one node (63 leaders of ResNet-50
    children, 63 other training ranks): ≈ 17 GiB at the measured figures."""
    from aiperf_mpi.mpi.limits import REHEARSAL_MIB, memory_line, rank_need_mib

    plan = plan_layout(*nodes_of(128, 128), group_size=2, relays=1)
    need = (REHEARSAL_MIB["master"] + REHEARSAL_MIB["relay"] + 63 * REHEARSAL_MIB["leader"]["resnet50"]
            + 63 * REHEARSAL_MIB["other"])  # fmt: skip
    assert sum(rank_need_mib(role, "resnet50", True) for role in ["master", "relay"] + ["leader", "other"] * 63) == need
    gib = 1024 * 1024  # KiB
    held = 60 * 1024  # what each rank holds already at start (its imports), KiB
    short = memory_line(plan, [(6 * gib, held)] * 128, "resnet50", rehearse=True)
    assert short is not None and "\n" not in short and short.startswith("aiperf_mpi: warning: 1 node(s) may not hold")
    assert f"node0's 128 ranks need ≈ {need / 1024:.1f} GiB" in short and "it has 13.5 GiB" in short
    assert memory_line(plan, [(24 * gib, held)] * 128, "resnet50", rehearse=True) is None
    assert memory_line(plan, [(6 * gib, held)] * 128, "tiny", rehearse=True) is None  # tiny leaders: ≈ 9 GiB
    assert memory_line(plan, [(0, 0)] * 128, "resnet50", rehearse=True) is None  # no /proc/meminfo: no verdict
    real = memory_line(plan, [(24 * gib, held)] * 128, "resnet50", rehearse=False)  # TensorFlow on 126 ranks
    assert real is not None and "(training, seed resnet50)" in real


def test_the_node_short_of_memory_is_the_one_named() -> None:
    from aiperf_mpi.mpi.limits import memory_line

    plan = plan_layout(*nodes_of(16, 8), group_size=2)
    gib = 1024 * 1024
    reports = [(4 * gib, 0)] * 8 + [(gib // 4, 0)] * 8  # node1 has 0.25 GiB for 4 leaders and 4 others
    line = memory_line(plan, reports, "resnet50", rehearse=True)
    assert line is not None and "1 node(s)" in line and "node1's 8 ranks" in line


def _cgroup_tree(tmp_path, version: int, limit: str, usage: int, parent_limit: str = "max") -> tuple[str, str]:
    """A /proc/self/cgroup and a /sys/fs/cgroup tree in the kernel's layouts: Slurm's job/step/task nesting, the
    limit on the job's cgroup, the process in its task's."""
    root = tmp_path / "cgroup"
    place = "/system.slice/slurmstepd.scope/job_7/step_0/task_1"
    base = root if version == 2 else root / "memory"
    limit_name, usage_name = ("memory.max", "memory.current") if version == 2 else \
        ("memory.limit_in_bytes", "memory.usage_in_bytes")  # fmt: skip
    folder = base / place.lstrip("/")
    folder.mkdir(parents=True)
    unlimited = "max" if version == 2 else str(2**63 - 4096)
    for level in (folder, folder.parent, folder.parent.parent, folder.parent.parent.parent):
        (level / limit_name).write_text(unlimited + "\n")
        (level / usage_name).write_text(f"{usage}\n")
    job = folder.parent.parent
    (job / limit_name).write_text(f"{limit}\n")
    if parent_limit != "max":
        (job.parent / limit_name).write_text(f"{parent_limit}\n")
    proc = tmp_path / "cgroup-of-self"
    proc.write_text(f"0::{place}\n" if version == 2 else f"12:pids:/\n4:memory:{place}\n0::/\n")
    return str(proc), str(root)


def test_the_cgroups_room_is_its_tightest_limit_less_its_usage_in_both_layouts(tmp_path) -> None:
    """Issue 50: under Slurm the limit that matters is the job's cgroup, not the node's MemAvailable."""
    from aiperf_mpi.mpi.limits import cgroup_room_kib

    gib = 2**30
    for version in (1, 2):
        proc, root = _cgroup_tree(tmp_path / f"v{version}", version, str(4 * gib), gib)
        assert cgroup_room_kib(proc, root) == 3 * gib // 1024
        proc, root = _cgroup_tree(tmp_path / f"v{version}-parent", version, str(4 * gib), gib, str(2 * gib))
        assert cgroup_room_kib(proc, root) == gib // 1024  # a tighter limit above the job's
    proc, root = _cgroup_tree(tmp_path / "unlimited", 2, "max", gib)
    assert cgroup_room_kib(proc, root) == 0  # no limit: the node's MemAvailable alone
    assert cgroup_room_kib(str(tmp_path / "absent"), root) == 0


def test_a_cgroup_tighter_than_the_node_is_what_the_ranks_are_held_to() -> None:
    """The by-hand 128-rank ResNet-50 run lost 28 groups to the OOM killer: a node with 24 GiB free whose job's
    cgroup allows 8 is short, and the line names it; the start line states need and room either way."""
    from aiperf_mpi.mpi.limits import memory_line, memory_summary

    plan = plan_layout(*nodes_of(128, 128), group_size=2, relays=1)
    gib = 1024 * 1024  # KiB
    held = 60 * 1024
    assert memory_line(plan, [(24 * gib, held, 0)] * 128, "resnet50", rehearse=True) is None
    short = memory_line(plan, [(24 * gib, held, 8 * gib)] * 128, "resnet50", rehearse=True)
    assert short is not None and "it has 15.5 GiB" in short  # 8 GiB of room + 7.5 GiB the ranks hold already
    summary = memory_summary(plan, [(24 * gib, held, 8 * gib)] * 128, "resnet50", rehearse=True)
    assert "the busiest node needs ≈ 17." in summary and "the tightest node has 15.5 GiB" in summary
    assert "memory.max" in summary and "leader 230" in summary and "\n" not in summary


# -- a training rank's memory follows its tuner's batch (issue 50: the 2 × 2 training rows' leaders held 785 and
# 1,911 MiB against the start line's 500, which counted the warm-up's batch) ------------------------------------

DIGITS_CHECK = {"image_shape": [32, 32, 3], "classes": 10, "train": 1437}
"""what the data check finds in the embedded digits"""


def test_a_training_ranks_figure_is_the_tables_plus_its_tuners_largest_batch() -> None:
    """The tiny seed on the digits in groups of 2: the tuner may choose 512 (718 samples a rank); the figure adds
    3 × the estimate's activations beyond the table's batch of 32, which the measurement at 512 (1,529 MiB) needs."""
    from aiperf_mpi.mpi.limits import ACTIVATION_FACTOR, TABLE_BATCH, TRAINING_MIB, rank_need_mib, training_batches

    plan = plan_layout(*nodes_of(5, 5), group_size=2)
    batches = training_batches("tiny", 32, 16.0, DIGITS_CHECK, plan)
    assert batches is not None and batches.largest == 512
    assert batches.per_sample_mib == batches.table_per_sample_mib  # the table's images are the digits'
    extra = ACTIVATION_FACTOR["tiny"] * batches.per_sample_mib * (512 - TABLE_BATCH)
    assert abs(batches.extra_mib() - extra) < 1e-6
    leader = rank_need_mib("leader", "tiny", False, "digits", batches)
    assert leader == TRAINING_MIB["leader"]["tiny"] + extra and leader > 1529  # measured at batch 512
    assert rank_need_mib("leader", "tiny", False, "digits", batches, gpu=True) == TRAINING_MIB["leader"]["tiny"]
    assert rank_need_mib("master", "tiny", False, "digits", batches) == TRAINING_MIB["master"]["tiny"]
    assert rank_need_mib("leader", "tiny", True, "digits", batches) < 500  # a rehearsal trains nothing
    resnet = training_batches("resnet50", 32, 16.0, DIGITS_CHECK, plan)
    assert resnet.largest == 512 and rank_need_mib("other", "resnet50", False, "digits", resnet) > 1984  # measured


def test_the_largest_batch_is_the_tuners_own_space() -> None:
    """Fewer samples a rank, a smaller device memory or larger images bound the tuner's batch, and the figure
    follows; a configured batch above the space is still the warm-up's (its figure counts it)."""
    from aiperf_mpi.graph.model import tuner_batches
    from aiperf_mpi.graph.seeds import seed_model
    from aiperf_mpi.mpi.limits import training_batches

    plan = plan_layout(*nodes_of(5, 5), group_size=2)
    small = {**DIGITS_CHECK, "train": 300}  # 150 samples a rank
    assert training_batches("tiny", 32, 16.0, small, plan).largest == 128
    assert training_batches("tiny", 32, 0.1, DIGITS_CHECK, plan).largest == 32  # 51 MiB for activations
    assert training_batches("tiny", 1024, 16.0, DIGITS_CHECK, plan).largest == 1024
    imagenet = {"image_shape": [224, 224, 3], "classes": 1000, "train": 1_281_167}
    sized = training_batches("resnet50", 32, 16.0, imagenet, plan)
    graph = seed_model("resnet50", 224, 3, 1000)
    assert sized.largest == max(tuner_batches(graph, 16 * 2**30, 1_281_167 // 2, 32)) == 32
    assert sized.per_sample_mib > 40 * sized.table_per_sample_mib  # 224² against 32² images
    assert sized.factor == 0.6  # ResNet-50's own (mpi/limits.py)
    assert training_batches("tiny", 32, 16.0, {}, plan) is None  # no images found: nothing to size


def test_the_start_line_says_what_a_training_ranks_batch_costs_and_a_gpu_node_counts_none() -> None:
    from aiperf_mpi.mpi.limits import memory_line, memory_summary, training_batches

    plan = plan_layout(*nodes_of(5, 5), group_size=2)
    batches = training_batches("tiny", 32, 16.0, DIGITS_CHECK, plan)
    gib = 1024 * 1024
    cpu = [(6 * gib, 100 * 1024, 0, 0)] * 5
    summary = memory_summary(plan, cpu, "tiny", False, "digits", batches)
    assert "at its tuner's largest batch, 512:" in summary and "on its CPU" in summary and "\n" not in summary
    line = memory_line(plan, cpu, "tiny", False, "digits", batches)  # 4 × ≈ 1.8 GiB on a node with 6
    assert line is not None and "largest batch, 512, on the CPU" in line and "--device-memory-gb" in line
    gpus = [(6 * gib, 100 * 1024, 0, 4)] * 5
    assert memory_line(plan, gpus, "tiny", False, "digits", batches) is None  # activations on the devices
    assert "on its GPU, not counted here" in memory_summary(plan, gpus, "tiny", False, "digits", batches)
    assert memory_line(plan, cpu, "tiny", False, "digits", None) is None  # the table's figure alone fits


def test_the_gpus_a_rank_sees_are_the_nodes_devices_less_what_cuda_visible_devices_hides(tmp_path) -> None:
    from aiperf_mpi.mpi.limits import visible_gpus

    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "null"):
        (tmp_path / name).touch()
    assert visible_gpus({}, str(tmp_path)) == 2
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "1"}, str(tmp_path)) == 1
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}, str(tmp_path)) == 0
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "-1"}, str(tmp_path)) == 0
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "0,1,2,3"}, str(tmp_path)) == 2
    assert visible_gpus({}, str(tmp_path / "absent")) == 0

"""``python -m analysis.audit``: the bounds an epoch must keep, the draw, the lineage rebuild, the hardware claim,
and bad input refused in one line before anything is timed.

The timing itself needs TensorFlow (``python -m aiperf_mpi.export.audit``, a child process):
tests/integration/test_audit.py audits a real run, untouched and squeezed.  Here the parent's side, on the
hand-made runs of tests/support.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from aiperf_mpi.export.audit import AuditError, _checked
from aiperf_mpi.graph.model import as_trained, from_json, to_json
from aiperf_mpi.graph.seeds import tiny_resnet
from aiperf_mpi.results import runlog
from analysis import audit
from analysis.audit import (
    Audit,
    Hardware,
    Sampled,
    cannot_judge,
    claimed_hardware,
    copies,
    epoch_bounds,
    exceeded,
    fastest_window,  # fmt: skip
    judge,
    miss_chance,
    read_run,
    sample_tasks,
    sampled,
    uniform_draws,
    worst,
)
from tests.support.event_logs import start, write_log
from tests.support.lineage_runs import CHILD, lineage_run
from tests.support.verify_runs import consistent_run, find, read_log, rewrite_log

HERE_CPU = {"host": "laptop", "cpu": "AMD EPYC 9575F", "cores": 128, "accelerators": []}
HERE_B200 = {"host": "g0", "cpu": "Intel Xeon", "cores": 64, "accelerators": ["NVIDIA B200"]}


def logged_epoch(steps: int = 40, batch: int = 32, ranks: int = 1, validation: int = 320, step: float = 0.03,
                 batch_seconds: float = 0.01, compile_: float = 0.0, squeeze: float = 1.0) -> dict:  # fmt: skip
    """An epoch as the trainer logs it when each step took ``step`` s and each validation batch ``batch_seconds``."""
    per_step, per_sample = 3_000_000, 50_000  # ops of a step's samples, of one validation sample
    traced = 1 if compile_ else 0
    compute = (steps - traced) * step
    full = validation // ranks // batch
    evaluation = (full - traced) * batch_seconds
    duration = compute + evaluation + compile_ + 0.2
    return {"epoch": 1, "steps": steps, "train_samples": steps * batch * ranks, "validation_samples": validation,
            "ops_train": steps * per_step * ranks, "ops_update": steps * 1000,
            "ops_validation": validation * per_sample,
            "ops": steps * (per_step * ranks + 1000) + validation * per_sample, "start": 100.0,
            "end": 100.0 + duration / squeeze, "compute": compute / squeeze, "evaluation": evaluation / squeeze,
            "compile": compile_ / squeeze}  # fmt: skip


def test_an_epoch_at_this_machines_speed_is_at_its_ceiling_and_a_squeezed_one_above() -> None:
    honest = {b.kind: b for b in epoch_bounds(7, logged_epoch(), 32, 0.03, 0.01)}
    assert set(honest) == {"training", "evaluation", "epoch"}
    assert honest["training"].ratio == pytest.approx(1.0) and honest["evaluation"].ratio == pytest.approx(1.0)
    assert honest["epoch"].ratio < 1.0  # its data wait and agreement are time no step accounts for
    assert not any(b.exceeds(0.0) for b in honest.values())
    squeezed = {b.kind: b for b in epoch_bounds(7, logged_epoch(squeeze=1.5), 32, 0.03, 0.01)}
    assert squeezed["training"].ratio == pytest.approx(1.5) and squeezed["evaluation"].ratio == pytest.approx(1.5)
    assert squeezed["training"].exceeds(0.25) and not squeezed["training"].exceeds(0.5)
    assert squeezed["training"].logged_rate == pytest.approx(1.5 * squeezed["training"].ceiling)


def test_a_slower_epoch_passes_and_its_rates_are_the_logged_operations_over_the_logged_seconds() -> None:
    epoch = logged_epoch(step=0.06, batch_seconds=0.02)
    bounds = {b.kind: b for b in epoch_bounds(7, epoch, 32, 0.03, 0.01)}
    assert bounds["training"].ratio == pytest.approx(0.5) and bounds["evaluation"].ratio == pytest.approx(0.5)
    assert bounds["training"].logged_rate == pytest.approx((epoch["ops_train"] + epoch["ops_update"]) /
                                                           epoch["compute"])  # fmt: skip
    assert bounds["epoch"].logged_rate == pytest.approx(epoch["ops"] / (epoch["end"] - epoch["start"]))


def test_the_step_and_batch_that_traced_are_left_out_as_the_trainer_leaves_them_out() -> None:
    # the trainer's compute and evaluation leave out the step and the batch that traced (their time is compile)
    bounds = {b.kind: b for b in epoch_bounds(7, logged_epoch(compile_=2.0), 32, 0.03, 0.01)}
    assert bounds["training"].ratio == pytest.approx(1.0) and bounds["evaluation"].ratio == pytest.approx(1.0)
    assert bounds["epoch"].ratio < 0.5  # the compile time is inside the epoch


def test_each_rank_of_a_group_runs_every_step_so_the_ceiling_grows_with_the_ranks() -> None:
    one = {b.kind: b for b in epoch_bounds(7, logged_epoch(ranks=1, validation=640), 32, 0.03, 0.01)}
    four = {b.kind: b for b in epoch_bounds(7, logged_epoch(ranks=4, validation=640), 32, 0.03, 0.01)}
    assert four["training"].ratio == pytest.approx(1.0) and four["evaluation"].ratio == pytest.approx(1.0)
    assert four["training"].ceiling == pytest.approx(4 * one["training"].ceiling, rel=1e-3)


def test_zero_negative_or_missing_times_are_not_a_pass() -> None:
    zero = {b.kind: b for b in epoch_bounds(7, {**logged_epoch(), "compute": 0.0, "end": 90.0}, 32, 0.03, 0.01)}
    assert math.isinf(zero["training"].logged_rate) and zero["training"].exceeds(10.0)
    assert zero["epoch"].exceeds(10.0)  # it ended before it started
    nan = epoch_bounds(7, {**logged_epoch(), "evaluation": "soon"}, 32, 0.03, 0.01)
    assert {b.kind for b in nan} == {"training", "epoch"}  # what it does not record is not bounded
    assert epoch_bounds(7, {**logged_epoch(), "steps": 0}, 32, 0.03, 0.01) == []
    assert epoch_bounds(7, {"epoch": 1}, 32, 0.03, 0.01) == []


def test_the_worst_bound_of_each_kind_is_the_epoch_nearest_its_ceiling() -> None:
    slow, fast = logged_epoch(step=0.06), {**logged_epoch(squeeze=1.2), "epoch": 2}
    found = worst([*epoch_bounds(7, slow, 32, 0.03, 0.01), *epoch_bounds(7, fast, 32, 0.03, 0.01)])
    assert {b.epoch for b in found.values()} == {2}


def test_the_ceiling_is_the_fastest_run_of_consecutive_calls_not_one_lucky_call() -> None:
    times = [0.05, 0.031, 0.03, 0.032, 0.031, 0.030, 0.05, 0.02, 0.05, 0.05, 0.05]
    assert fastest_window(times, 5) == pytest.approx((0.031 + 0.03 + 0.032 + 0.031 + 0.030) / 5)
    assert fastest_window([0.2, 0.1], 5) == pytest.approx(0.15)  # fewer than a window: their mean
    assert fastest_window(times, 1) == 0.02


def test_the_draw_is_reproducible_prefers_long_tasks_and_takes_all_when_asked_for_more() -> None:
    weights = {task: 1.0 for task in range(20)} | {20: 1000.0}
    assert sample_tasks(weights, 3, seed=5) == sample_tasks(weights, 3, seed=5)
    # 2 draws: one uniform (task 20 by chance 1/21), one weighted (task 20 nearly always)
    assert sum(20 in sample_tasks(weights, 2, seed) for seed in range(200)) > 190
    assert len({tuple(sample_tasks(weights, 3, seed)) for seed in range(20)}) > 5  # every task can be drawn
    assert sample_tasks({1: 5.0, 2: 0.0, 3: math.nan}, 10, seed=0) == [1, 2, 3]


def test_the_draw_reaches_a_segment_of_many_short_tasks_and_every_stratum() -> None:
    """Issue 45: a resumed segment of many very short forged epochs was never drawn by the time-weighted draw.
    Segment 1: four long tasks; segment 2: forty tasks of a thousandth of their time each."""
    weights = {task: 1000.0 for task in range(4)} | {task: 1.0 for task in range(4, 44)}
    strata = {task: (1 if task < 4 else 2, ("h0",)) for task in weights}
    old_style = sum(any(t >= 4 for t in sample_tasks(weights, 1, seed)) for seed in range(200))
    drawn = [sample_tasks(weights, 4, seed, strata) for seed in range(200)]
    assert all(any(t >= 4 for t in tasks) and any(t < 4 for t in tasks) for tasks in drawn)  # both segments, always
    assert old_style > 100  # the one draw is uniform now: the short segment holds 40 of the 44 tasks


def test_the_chance_to_miss_a_forged_share_is_the_hypergeometric_one() -> None:
    assert miss_chance(10, 0.1, 1) == pytest.approx(0.9)  # one of ten forged, one draw
    assert miss_chance(10, 0.5, 6) == 0.0  # six draws out of ten cannot all miss five forged
    assert miss_chance(100, 0.1, 10) == pytest.approx(math.comb(90, 10) / math.comb(100, 10))
    assert miss_chance(100, 0.1, 10) <= 0.9**10
    assert uniform_draws(1) == 1 and uniform_draws(4) == 2 and uniform_draws(5) == 3


def test_each_task_is_rebuilt_from_the_seed_and_the_logged_morphisms(tmp_path: Path) -> None:
    run_dir = lineage_run(tmp_path / "run")
    model, lineage = read_run(run_dir)
    for task in (0, 1, CHILD):
        found = sampled(model, lineage, task, 20.0, HERE_B200)
        stored = as_trained(from_json(model.graph_text(model.tasks[task])), model.tasks[task].kernel_size)
        assert found.graph == to_json(stored) and not found.notes and not found.problems, (task, found.notes)
        assert found.precision == "fp16" and found.batch == model.tasks[task].hparams["batch_size"]
        assert not found.not_judged and found.claim.kind == "gpu"
    assert from_json(sampled(model, lineage, CHILD, 20.0, HERE_B200).graph).has_node("b1_relu1")


def test_a_stored_graph_that_is_not_its_lineages_is_named_and_the_lineages_is_timed(tmp_path: Path) -> None:
    run_dir = lineage_run(tmp_path / "run")
    events = read_log(run_dir)
    proposal = find(events, runlog.MODEL_PROPOSED, task=CHILD)
    proposal["morphs"] = proposal["morphs"][:1]  # the lineage now says: one morphism fewer than the stored graph has
    write_log(run_dir, events)
    model, lineage = read_run(run_dir)
    found = sampled(model, lineage, CHILD, 20.0, HERE_B200)
    assert any("is not its lineage's" in note for note in found.notes), found.notes
    proposal["morphs"] = [{"kind": "wider", "args": ["no_such_layer", 8]}]
    write_log(run_dir, events)
    model, lineage = read_run(run_dir)
    found = sampled(model, lineage, CHILD, 20.0, HERE_B200)
    assert found.graph == "" and found.problems[0].startswith("its graph cannot be rebuilt from the lineage")


def test_a_log_without_lineage_records_times_the_stored_graph_and_says_so(tmp_path: Path) -> None:
    run_dir = consistent_run(tmp_path / "run")
    rewrite_log(run_dir, lambda events: [{k: v for k, v in e.items() if k != "seed"} for e in events])
    model, lineage = read_run(run_dir)
    found = sampled(model, lineage, 1, 20.0, HERE_B200)
    assert found.notes == ["the log records no lineage for it: its stored graph was timed"]
    assert found.graph == to_json(as_trained(from_json(model.graph_text(model.tasks[1])), 5))


def test_the_claimed_hardware_is_the_groups_hosts_and_another_kind_is_not_judged(tmp_path: Path) -> None:
    model, _ = read_run(consistent_run(tmp_path / "run"))
    claim = claimed_hardware(model, 0)
    assert (claim.kind, claim.name, claim.hosts) == ("gpu", "NVIDIA B200", ["h0"])
    assert cannot_judge(claim, HERE_B200) == ""
    assert cannot_judge(claim, HERE_CPU) == "the run trained on NVIDIA B200, this machine has no GPU"
    assert "NVIDIA H200" in cannot_judge(claim, {**HERE_B200, "accelerators": ["NVIDIA H200"]})
    cpu = Hardware("cpu", "AMD EPYC 9575F", 128, 64, ["h0"])
    assert cannot_judge(cpu, HERE_CPU) == ""
    assert cannot_judge(cpu, {**HERE_CPU, "cpu": "AMD EPYC"}) == ("the run trained on AMD EPYC 9575F processors, "
                                                                 "this machine has AMD EPYC")  # fmt: skip
    assert "32 cores" in cannot_judge(cpu, {**HERE_CPU, "cores": 32})
    assert "does not say" in cannot_judge(Hardware("unknown", "no system or layout event in the log"), HERE_CPU)


def test_ranks_that_shared_a_host_are_timed_as_copies_at_once_and_the_report_says_so(tmp_path: Path) -> None:
    """Issue 45: the groups of a host trained at the same time, sharing its cores; timed alone, each could claim the
    whole host's rate.  The audit times as many copies at once as the busiest of its hosts held training ranks
    (four here: two groups of two, the master apart), at most two a core of the reviewer's machine; one on an
    accelerator, where each rank had its own device."""
    run_dir = consistent_run(tmp_path / "run")

    def on_cpus(events: list[dict]) -> None:
        find(events, runlog.SYSTEM)["hosts"][0]["accelerators"] = []

    rewrite_log(run_dir, on_cpus)
    model, lineage = read_run(run_dir)
    claim = claimed_hardware(model, 0)
    assert (claim.kind, claim.company, claim.hosts) == ("cpu", 4, ["h0"])
    assert "4 training ranks on its host" in claim.text()
    assert copies(claim, HERE_CPU) == 4
    assert copies(claim, {**HERE_CPU, "cores": 1}) == 2  # a 1-core reviewer: at most two copies a core
    assert copies(Hardware("cpu", "x", 2, 1, ["h0"], company=1), HERE_CPU) == 1
    assert copies(Hardware("gpu", "NVIDIA B200", hosts=["h0"], company=4), HERE_B200) == 1
    gpu_model, _ = read_run(consistent_run(tmp_path / "gpu"))
    assert copies(claimed_hardware(gpu_model, 0), HERE_B200) == 1
    task = sampled(model, lineage, 0, 20.0, HERE_CPU)
    task.copies = copies(task.claim, HERE_CPU)
    assert task.claim.threads == 64  # ⌈128 cores ÷ the group's 2 ranks there⌉: four copies keep 256 threads busy
    result = Audit("run", 1, 0, 0.25, 2, HERE_CPU, "CPU:0", load=250.0)
    result.tasks = [task]
    assert "busy" not in result.text()  # the load of its own copies is not a busy machine
    result.load = 300.0
    assert "this machine was busy (load average 300.0 on 128 cores)" in result.text()


def _audit_of(tmp_path: Path, train_times: list[float], here: dict) -> Audit:
    """An audit of the consistent run's task 0, judged on ``train_times`` (no child: the timing is given)."""
    model, lineage = read_run(consistent_run(tmp_path / "run"))
    task = sampled(model, lineage, 0, 20.0, here)
    judge(task, {"train_times": train_times, "eval_times": [0.001] * 5})  # 781 batches a rank in its 1 s
    result = Audit("run", 1, 0, 0.25, 2, here, "GPU:0 (NVIDIA B200)")
    result.tasks = [task]
    return result


def test_a_task_faster_than_this_machine_fails_and_is_named_with_both_rates(tmp_path: Path) -> None:
    # the consistent run: 8 s of compute for a pass over ImageNet at batch 32 on 2 ranks (20,018 steps)
    steps = 1_281_167 // 2 // 32
    honest = _audit_of(tmp_path / "a", [8.0 / steps] * 5, HERE_B200)
    assert honest.status == 0 and "PASSED" in honest.text()
    fast = _audit_of(tmp_path / "b", [8.0 / steps * 2] * 5, HERE_B200)
    assert fast.status == audit.EXIT_FAILED
    text = fast.text()
    line = next(x for x in text.splitlines() if x.startswith("FAIL: task 0: epoch"))
    assert "training at" in line and "logged, at most" in line and "×2.00 the ceiling, ×1.25 allowed" in line
    assert "FAILED: task(s) 0" in text
    assert exceeded(fast.tasks[0], 0.25) and not exceeded(fast.tasks[0], 1.5)


def test_another_kind_of_hardware_is_not_judged_and_the_report_says_where_each_ran(tmp_path: Path) -> None:
    steps = 1_281_167 // 2 // 32
    result = _audit_of(tmp_path, [8.0 / steps * 2] * 5, HERE_CPU)
    assert result.status == audit.EXIT_NOT_JUDGED
    text = result.text()
    assert "timed on: AMD EPYC 9575F, 128 cores, no accelerator (laptop)" in text
    assert "warning: task 0: claims NVIDIA B200 (h0): not judged: the run trained on NVIDIA B200" in text
    assert "NOT JUDGED" in text and "FAIL:" not in text
    assert json.loads(json.dumps(result.to_dict()))["verdict"] == "not judged"


def one_line_exit_2(argv: list[str], capsys, *expected: str) -> None:
    assert audit.main(argv) == 2
    printed = capsys.readouterr()
    assert printed.out == "" and len(printed.err.strip().splitlines()) == 1, printed.err
    assert printed.err.startswith("analysis.audit: error: ") and all(e in printed.err for e in expected), printed.err


@pytest.mark.parametrize("sample", ["0", "-3", "two", "1.5"])
def test_a_sample_that_is_not_a_positive_integer_is_one_line_and_exit_2(tmp_path, capsys, sample: str) -> None:
    with pytest.raises(SystemExit) as exited:
        audit.main([str(consistent_run(tmp_path / "run")), "--sample", sample])
    assert exited.value.code == 2
    printed = capsys.readouterr()
    assert len(printed.err.strip().splitlines()) == 1 and "--sample" in printed.err and "positive" in printed.err


def test_what_is_not_a_run_is_one_line_and_exit_2_and_a_fifo_is_never_opened(tmp_path, capsys) -> None:
    one_line_exit_2([str(tmp_path / "none"), "--sample", "1"], capsys, "no such run directory")
    (tmp_path / "file").write_text("x")
    one_line_exit_2([str(tmp_path / "file"), "--sample", "1"], capsys, "not a run directory")
    (tmp_path / "empty").mkdir()
    one_line_exit_2([str(tmp_path / "empty"), "--sample", "1"], capsys, "no events.jsonl")
    os.mkfifo(tmp_path / "fifo")
    one_line_exit_2([str(tmp_path / "fifo"), "--sample", "1"], capsys, "not a run directory")
    (tmp_path / "fifo-log").mkdir()
    os.mkfifo(tmp_path / "fifo-log" / runlog.EVENTS_FILE)
    one_line_exit_2([str(tmp_path / "fifo-log"), "--sample", "1"], capsys, "not a regular file")


def test_a_log_without_a_trained_epoch_is_one_line_and_exit_2(tmp_path, capsys) -> None:
    write_log(tmp_path / "run", [start(0.0, dataset="digits")])
    one_line_exit_2([str(tmp_path / "run"), "--sample", "2"], capsys, "no model in the log has an epoch to audit")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / runlog.EVENTS_FILE).write_text('{"event": "run_start"\n{}\n')
    one_line_exit_2([str(tmp_path / "bad"), "--sample", "2"], capsys)


def test_the_childs_request_is_checked_before_tensorflow_loads() -> None:
    task = {"task": 0, "graph": to_json(tiny_resnet()), "batch": 32, "precision": "fp32", "xla": False}
    good = {"device": "cpu", "threads": None, "seconds": 2.0, "tasks": [task]}
    assert _checked(good) is good
    for bad, said in (({**good, "tasks": []}, "non-empty list"), ({**good, "device": "tpu"}, "neither cpu nor gpu"),
                      ({**good, "seconds": 0}, "not a positive number"),
                      ({**good, "tasks": [{**task, "batch": 0}]}, "not a positive integer"),
                      ({**good, "tasks": [{**task, "precision": "fp8"}]}, "is none of")):  # fmt: skip
        with pytest.raises(AuditError, match=said):
            _checked(bad)


def test_the_report_of_a_sampled_task_without_timings_says_so() -> None:
    task = Sampled(3, 32, "fp32", False, 1.0, [], Hardware("cpu", "AMD EPYC", 2, 2, ["vm"]))
    task.problems.append("its graph cannot be rebuilt from the lineage (no)")
    result = Audit("run", 1, 0, 0.25, 1, {"host": "vm", "cpu": "AMD EPYC", "cores": 2, "accelerators": []})
    result.tasks = [task]
    assert result.status == audit.EXIT_FAILED
    assert "FAIL: task 3: its graph cannot be rebuilt from the lineage (no)" in result.text()

"""What physics and the bookkeeping allow: each forgery, made consistent as a careful forger would make it, is named.

Every forgery here rescores the log with the package's own score code
(:func:`tests.support.verify_runs.forge`), so the recount, the records and
the score agree with it; each test asserts that only the rule classes of
:mod:`analysis.verify.evidence` fail, that the rule is named on the event's
line, and that the verdict is exit 1.  Before those rules the verifier
passed every one of these logs with exit 0.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

from aiperf_mpi.results import runlog
from aiperf_mpi.results.graphs import append_graph, segment_graph_file
from analysis import checks, verify
from analysis.verify.evidence import PEAK_MULTIPLE
from tests.support.verify_runs import (
    PEAK,
    consistent_run,
    data_check,
    find,
    forge,
    full_pass,
    read_log,
    recount,
    sync_record,
    write_log,
)

RULE_CHECKS = {"times", "physics", "counts", "configuration", "hardware bounds", "data splits", "search space",
               "repeated graphs"}


def failing(result: checks.Verification) -> dict[str, list[str]]:
    """The checks that did not pass, with their problem (or not-recorded) lines."""
    return {c.name: [*c.problems, *c.missing] for c in result.checks if c.verdict != checks.OK}


def assert_named(run: Path, check: str, *fragments: str, also: frozenset[str] = frozenset()) -> list[str]:
    """Only the new rule classes (and ``also``) fail; ``check`` has a line holding every fragment; exit 1."""
    result = verify.verify(run)
    bad = failing(result)
    assert set(bad) <= RULE_CHECKS | also and check in bad, bad
    assert any(all(f in line for f in fragments) for line in bad[check]), bad[check]
    assert verify.main([str(run)]) == 1
    return bad[check]


def _epochs(events: list[dict]) -> list[dict]:
    return [e for e in events if e["event"] == runlog.EPOCH]


def _retime(events: list[dict], factor: float, fields=("time",), phases: bool = False) -> None:
    """Squeeze times toward the run's start by ``factor`` (the records' copies too)."""
    origin = events[0]["time"]
    for event in events:
        for name in fields:
            if name in event:
                event[name] = origin + (event[name] - origin) / factor
        if phases and event["event"] == runlog.EPOCH:
            for name in ("compute", "evaluation", "data_wait", "compile"):
                event[name] /= factor
    for task in {e["task"] for e in _epochs(events)}:
        sync_record(events, task)


def _renumber(events: list[dict]) -> None:
    """Model ids in the order of the model_done events, as the master gives them."""
    for number, done in enumerate(e for e in events if e["event"] == runlog.MODEL_DONE):
        done["model"]["id"] = number


def test_the_consistent_run_passes_every_rule(pristine, capsys) -> None:
    assert verify.main([str(pristine)]) == 0
    out = capsys.readouterr().out
    for name in RULE_CHECKS:
        assert any(line.startswith(name + " ") and " ok " in line for line in out.splitlines()), (name, out)
    assert f"4 epoch rates ≤ {PEAK_MULTIPLE} × their group's peak" in out
    assert "2 graphs against dataset imagenet (224×224×3 images to 1000 classes)" in out


# --------------------------------------------------------------------------- time


def test_a_time_that_goes_backwards(run) -> None:
    forge(run, lambda events: find(events, runlog.MODEL_PROPOSED, task=1).update(time=1000.95))
    assert_named(run, "times", "event 7 (model_proposed of task 1, group 1): order: time 1000.950")


def test_event_times_squeezed_with_the_epochs_left_as_they_were(run) -> None:
    """The log's times ×1/4 (active time 25 s, score ×4); the epochs' own start and end untouched."""
    forge(run, lambda events: _retime(events, 4.0))
    assert_named(run, "times", "(epoch 1 of task 0, group 0): logged after: logged at", "before the epoch ended")


def test_every_time_squeezed_but_the_phases(run) -> None:
    forge(run, lambda events: _retime(events, 4.0, ("time", "start", "end")))
    assert_named(run, "times", "(epoch 2 of task 1, group 1): phases: data_wait 0.100 + compute 8.000",
                 "more than its wall time end − start = 2.500 s")  # fmt: skip


def test_an_invented_model_on_a_busy_group(run) -> None:
    """Task 2 on group 0 while task 0 trains there: proposed, one epoch, done, between task 0's epochs."""

    def invent(events):
        graph = find(events, runlog.MODEL_DONE, task=0)["model"]["graph"]
        proposal = dict(find(events, runlog.MODEL_PROPOSED, task=0), task=2, time=1031.0,
                        **append_graph(run, segment_graph_file(1), graph))  # fmt: skip
        epoch = dict(find(events, runlog.EPOCH, task=0, epoch=1), task=2, start=1032.0, end=1042.0, time=1042.5)
        done = copy.deepcopy(find(events, runlog.MODEL_DONE, task=0))
        done.update(task=2, time=1043.0)
        done["model"]["id"] = 2
        at = events.index(find(events, runlog.EPOCH, task=0, epoch=1)) + 1
        events[at:at] = [proposal, epoch, done]
        sync_record(events, 2)
        _renumber(events)

    forge(run, invent)
    assert_named(run, "times", "(model_proposed of task 2, group 0): one model at a time: group 0 is still "
                               "training task 0")  # fmt: skip


def test_an_invented_epoch_on_top_of_another(run) -> None:
    def invent(events):
        third = dict(find(events, runlog.EPOCH, task=0, epoch=2), epoch=3, time=1070.6)
        events.insert(events.index(find(events, runlog.MODEL_DONE, task=0)), third)
        sync_record(events, 0)
        events[0]["config"]["max_epochs"] = 3

    forge(run, invent)
    assert_named(run, "times", "(epoch 3 of task 0, group 0): one model at a time: starts at 1060.000, before "
                               "the group's previous epoch (event 10 (epoch 2 of task 0, group 0)) ended")


def _second_segment(run: Path, events: list[dict], start: float, epoch_start: float) -> None:
    """A resumed segment at ``start`` with one model of one epoch (10 s of wall, 8 s of compute), its graph in
    the segment's own graphs file."""
    graph = find(events, runlog.MODEL_DONE, task=0)["model"]["graph"]
    head = [dict(e, time=start + i / 10) for i, e in enumerate(events[:5])]
    head[0].update(segment=2, resumed=True)
    proposal = dict(find(events, runlog.MODEL_PROPOSED, task=0), task=2, time=start + 1,
                    **append_graph(run, segment_graph_file(2), graph))  # fmt: skip
    epoch = dict(find(events, runlog.EPOCH, task=0, epoch=2), task=2, epoch=1, start=epoch_start, end=start + 11,
                 time=start + 11.5)  # fmt: skip
    done = copy.deepcopy(find(events, runlog.MODEL_DONE, task=0))
    done.update(task=2, time=start + 12)
    done["model"]["id"] = 2
    stop = dict(find(events, runlog.RUN_STOP), time=start + 20, segment=2)
    events += [*head, proposal, epoch, done, stop, dict(find(events, runlog.SCORE), time=start + 20.1)]
    sync_record(events, 2)


def test_a_resumed_segment_that_hides_an_epoch_in_the_gap(run) -> None:
    """The epoch ran from 1500 to 2011, nearly all of it between the segments, where no time is scored."""
    forge(run, lambda events: _second_segment(run, events, 2000.0, 1500.0))
    assert_named(run, "times", "(epoch 1 of task 2, group 0): inside segment: starts at 1500.000, before "
                               "segment 2 started at 2000.000")  # fmt: skip


def test_a_resumed_segment_that_starts_before_the_last_one_ended(run) -> None:
    forge(run, lambda events: _second_segment(run, events, 1095.0, 1096.0))
    assert_named(run, "times", "(run_start of segment 2): resume: starts at 1095.000, before the last time "
                               "segment 1 claims (1100.100")  # fmt: skip


# --------------------------------------------------------------------------- physics


def test_an_epoch_faster_than_its_machine(run) -> None:
    """Every time and phase squeezed ×10 alike: the log is self-consistent, the rates are not physical."""
    forge(run, lambda events: _retime(events, 10.0, ("time", "start", "end"), phases=True))
    lines = assert_named(run, "physics", "(epoch 1 of task 1, group 1): training rate:",
                         f"× group 1's measured peak {PEAK / 1e9:.2g} G ops/s (at most 2.0)")  # fmt: skip
    assert not any("score:" in line for line in lines)


def test_samples_times_ten_recounted(run) -> None:
    """train_samples ×10 with steps and ops recounted to match (the score ×9): 10 × the same compute time."""

    def inflate(events):
        for epoch in _epochs(events):
            recount(events, epoch, epoch["train_samples"] * 10)

    forge(run, inflate)
    assert_named(run, "physics", "(epoch 1 of task 1, group 1): training rate:")


def test_a_score_above_the_sum_of_the_peaks(run) -> None:
    """Each group's two epochs back to back at 1.9 × its peak, and the run ended with them: every epoch
    rate is allowed, the score is not (two groups busy all the time at 1.9 × are 1.9 × the peaks' sum)."""

    def pack(events):
        start = events[0]["time"]
        for task in (0, 1):
            find(events, runlog.MODEL_PROPOSED, task=task)["time"] = start + 0.5 + task / 100
        walls = {}
        for epoch in _epochs(events):
            wall = epoch["ops_train"] / (1.9 * PEAK)
            walls[epoch["task"]] = wall
            begin = start + 0.6 + (epoch["epoch"] - 1) * wall
            epoch.update(start=begin, end=begin + wall, time=begin + wall, compute=wall, evaluation=0.0,
                         data_wait=0.0, compile=0.0)  # fmt: skip
        end = start + 0.6 + 2 * max(walls.values())
        for task in walls:
            find(events, runlog.MODEL_DONE, task=task)["time"] = end + task / 1000
            sync_record(events, task)
        find(events, runlog.RUN_STOP)["time"] = end + 0.01
        find(events, runlog.SCORE)["time"] = end + 0.02
        # the time limit ends with the epochs: the score's window is then as short as they are
        find(events, runlog.RUN_START)["config"]["time_limit"] = end + 0.01 - start
        events.sort(key=lambda e: (e["event"] == runlog.SCORE, e["event"] == runlog.RUN_STOP, e["time"]))

    forge(run, pack)
    lines = assert_named(run, "physics", "(score): score:", "is more than the sum of the groups' measured peaks "
                                                             f"({2 * PEAK / 1e9:.2g} G ops/s)")  # fmt: skip
    assert not any("training rate" in line for line in lines), lines


def test_a_group_without_a_peak_is_not_recorded(run, capsys) -> None:
    forge(run, lambda events: events.remove(find(events, runlog.PEAK, group=1)))
    row = next(c for c in verify.verify(run).checks if c.name == "physics")
    assert row.verdict == checks.NOT_RECORDED and not row.problems
    assert row.missing == ["segment 1 group 1: no peak event (the probe was off): its epochs' rates and the score "
                           "cannot be held to its machine"]  # fmt: skip
    assert verify.main([str(run)]) == 1


# --------------------------------------------------------------------------- counts


def test_samples_that_are_not_steps_times_the_global_batch(run) -> None:
    def partial(events):  # a last batch of 40 of 64: the ops recounted for 616 samples (the steps stay 10)
        recount(events, find(events, runlog.EPOCH, task=0, epoch=1), 616)
        recount(events, find(events, runlog.EPOCH, task=0, epoch=2), 616)

    forge(run, partial)
    assert_named(run, "counts", "(epoch 1 of task 0, group 0): samples: 616 train samples, not steps 10 × global "
                                "batch 64 (batch size 32 × 2 ranks)")  # fmt: skip


def test_samples_that_change_between_epochs_of_a_model(run) -> None:
    forge(run, lambda events: recount(events, find(events, runlog.EPOCH, task=1, epoch=2), 640))
    steps, validation = full_pass("imagenet", 16)
    assert_named(run, "counts", f"(epoch 2 of task 1, group 1): same samples: 640 train and {validation} validation "
                                f"samples, its model's first epoch had {steps * 16 * 2} and {validation}")  # fmt: skip


def test_more_epochs_than_max_epochs(run) -> None:
    def third(events):  # a third epoch in group 0's idle time after its second, the record and end moved on
        epoch = dict(find(events, runlog.EPOCH, task=0, epoch=2), epoch=3, start=1071.0, end=1081.0, time=1081.5)
        done = find(events, runlog.MODEL_DONE, task=0)
        events.remove(done)
        done["time"] = 1081.6
        at = events.index(find(events, runlog.EPOCH, task=1, epoch=2))
        events[at + 1:at + 1] = [epoch, done]
        sync_record(events, 0)

    forge(run, third)
    assert_named(run, "counts", "(epoch 3 of task 0, group 0): max epochs: epoch 3 of a run whose max_epochs is 2")


def test_a_horovod_size_that_is_not_its_ranks(run) -> None:
    """Group 0 claims 4 Horovod ranks on its 2: a global batch of 128, the epochs recounted for it."""

    def grow(events):
        find(events, runlog.LAYOUT)["groups"][0]["horovod_size"] = 4
        for epoch in _epochs(events):
            if epoch["group"] == 0:
                recount(events, epoch, 1280, ranks=4)

    forge(run, grow)
    lines = assert_named(run, "counts", "(layout): horovod size: group 0 says horovod_size 4, its list of ranks "
                                        "has 2")  # fmt: skip
    assert any("samples: 1280 train samples, not steps 10 × global batch 64" in line for line in lines), lines


# --------------------------------------------------------------------------- configuration against evidence


def test_a_digits_run_relabelled_imagenet(tmp_path) -> None:
    run = consistent_run(tmp_path / "run", dataset="digits")

    def relabel(events):  # and the data check's counts too: ImageNet's standard split, or the run is unofficial
        events[0]["config"].update(dataset="imagenet")
        events[0].update(data=data_check("imagenet"))

    forge(run, relabel)
    assert json.loads((run / "score.json").read_text())["valid"]  # the forgery's aim: valid by the score's rules
    assert_named(run, "configuration", "task 0: data shape: graphs/segment-1.jsonl at byte 0 (+",
                 ") takes 32×32×3 images to 10 classes, dataset imagenet has 224×224×3 images to 1000 classes")


def test_an_image_size_the_graphs_do_not_have(run) -> None:
    forge(run, lambda events: events[0]["config"].update(image_size=64))
    assert_named(run, "configuration", "task 1: data shape: graphs/segment-1.jsonl at byte ",
                 ") takes 224×224×3 images to 1000 classes, dataset imagenet has 64×64×3")


def test_a_precision_the_system_event_did_not_choose(tmp_path) -> None:
    """A run that chose fp32 (auto, on a CPU), its configuration and peaks relabelled bf16."""
    run = consistent_run(tmp_path / "run", precision="fp32")

    def relabel(events):
        events[0]["config"]["precision"] = "bf16"
        find(events, runlog.SYSTEM)["precision"] = {"setting": "auto", "chosen": "fp32", "reason": "a CPU"}
        for peak in (e for e in events if e["event"] == runlog.PEAK):
            peak["precision"] = "bf16"

    forge(run, relabel)
    assert_named(run, "configuration", "(system): precision: the system event chose 'fp32', the configuration "
                                       "says 'bf16'")  # fmt: skip


def test_the_rules_read_a_real_layout_field_by_field(run) -> None:
    """A layout without horovod_size (older logs) counts its ranks: nothing to name."""
    def older(events):
        for group in find(events, runlog.LAYOUT)["groups"]:
            del group["horovod_size"]

    forge(run, older)
    assert verify.verify(run).ok
    assert json.loads((run / "score.json").read_text())["valid"]
    assert read_log(run)[2]["groups"][0]["ranks"] == [1, 2]


# --------------------------------------------------------------------------- the data check's counts


def test_train_samples_beyond_the_split_the_data_check_counted(tmp_path) -> None:
    """A digits run (1,437 training images) whose epochs claim 3 × their samples, steps and ops recounted: a
    rate of 0.84 × the peak is physical, 1,920 samples of a 1,437-image split are not."""
    run = consistent_run(tmp_path / "run", dataset="digits")

    def inflate(events):
        for epoch in _epochs(events):
            recount(events, epoch, epoch["train_samples"] * 3)

    forge(run, inflate)
    steps, _ = full_pass("digits", 32)
    assert_named(run, "counts", f"event 8 (epoch 1 of task 0, group 0): split: {steps * 32 * 2 * 3} train samples, the "
                                "train split holds 1437 (as the data check counted it)")  # fmt: skip


def test_validation_samples_beyond_the_split(tmp_path) -> None:
    """1,000 validation samples (the correct counts scaled alike) of a split of 360."""
    run = consistent_run(tmp_path / "run", dataset="digits")

    def inflate(events):
        for epoch in _epochs(events):
            epoch.update(validation_samples=1000, correct=epoch["correct"] * 10)
            recount(events, epoch)

    forge(run, inflate)
    assert_named(run, "counts", "(epoch 2 of task 1, group 1): split: 1000 validation samples, the validation split "
                                "holds 360")  # fmt: skip


def test_a_data_check_of_other_images_than_the_configuration(run) -> None:
    """The data check relabelled: another data set's name, its images and classes."""
    forge(run, lambda events: events[0].update(data=dict(data_check("digits"), train=1_281_167, validation=50_000)))
    lines = assert_named(run, "configuration", "event 1 (run_start of segment 1): data check: it read 'digits', the "
                                               "configuration says 'imagenet'")  # fmt: skip
    assert any("data shape: the data check found 32×32×3 images to 10 classes, dataset imagenet has 224×224×3 "
               "images to 1000 classes" in line for line in lines), lines


def test_a_small_imagenet_is_an_unofficial_run_that_verifies(tmp_path, capsys) -> None:
    """An ImageNet-format set of 48/16 images (as tests/mpi write) is no documented split: verified, unofficial."""
    run = consistent_run(tmp_path / "run")

    def small(events):  # each epoch one pass over the small split, as the pipeline would make it
        events[0]["data"].update(train=1280, validation=100)
        for epoch in _epochs(events):
            batch = find(events, runlog.MODEL_PROPOSED, task=epoch["task"])["hparams"]["batch_size"]
            epoch.update(validation_samples=100, correct=round(epoch["val_accuracy"] * 100))
            recount(events, epoch, (1280 // 2) // batch * batch * 2)

    forge(run, small)
    assert verify.main([str(run)]) == 0
    out = capsys.readouterr().out
    assert "verdict: VERIFIED, an unofficial run (rules not met: dataset)" in out, out
    assert "imagenet, an undocumented split (1280 train, 100 validation, 1000 classes)" in out
    assert "imagenet of 1280 train, 100 validation, 1000 classes: not the ILSVRC-2012 split" in out


def test_a_small_imagenet_relabelled_the_standard_split(tmp_path) -> None:
    """The 1,280/100-image set's epochs kept, its data check relabelled ILSVRC-2012's: valid by the rules, but an
    epoch is one whole pass over the split the check counted, so 20 steps of a 640-image share are not."""
    run = consistent_run(tmp_path / "run")

    def small_epochs(events):
        for epoch in _epochs(events):
            batch = find(events, runlog.MODEL_PROPOSED, task=epoch["task"])["hparams"]["batch_size"]
            epoch.update(validation_samples=100, correct=round(epoch["val_accuracy"] * 100))
            recount(events, epoch, (1280 // 2) // batch * batch * 2)

    forge(run, small_epochs)
    assert json.loads((run / "score.json").read_text())["valid"]  # the forgery's aim
    steps, validation = full_pass("imagenet", 32)
    lines = assert_named(run, "counts", "event 8 (epoch 1 of task 0, group 0): split: 20 steps of batch size 32 a "
                                        f"rank, where one pass over the train split is (1281167 // 2 ranks) // 32 = "
                                        f"{steps} steps")  # fmt: skip
    assert any(f"100 validation samples, the validation split holds {validation}" in line for line in lines), lines


def test_a_log_without_the_data_check_is_not_recorded(run) -> None:
    forge(run, lambda events: events[0].__delitem__("data"))
    row = next(c for c in verify.verify(run).checks if c.name == "counts")
    assert row.verdict == checks.NOT_RECORDED and not row.problems
    assert row.missing == ["event 1 (run_start of segment 1): no data check counts (a log older than the field): "
                           "its epochs' samples cannot be held to the splits"]  # fmt: skip
    assert verify.main([str(run)]) == 1


# --------------------------------------------------------------------------- accuracy as a count


def test_an_accuracy_that_is_not_its_count(run) -> None:
    """The best epoch's accuracy raised to 0.99 in its event, its record and the score; its count left at 0.75's."""

    def raise_best(events):
        find(events, runlog.EPOCH, task=0, epoch=2)["val_accuracy"] = 0.99
        sync_record(events, 0)

    forge(run, raise_best)
    _, validation = full_pass("imagenet", 32)
    assert_named(run, "counts", "event 10 (epoch 2 of task 0, group 0): accuracy: val_accuracy 0.99 is not correct "
                                f"{round(0.75 * validation)} / validation_samples {validation} = 0.75")  # fmt: skip


def test_a_correct_count_above_the_validation_samples(run) -> None:
    """correct 1.5 × the validation samples: an accuracy of 1.5, the division agreeing."""

    def overcount(events):
        find(events, runlog.EPOCH, task=0, epoch=2).update(correct=validation * 3 // 2, val_accuracy=1.5)
        sync_record(events, 0)

    _, validation = full_pass("imagenet", 32)
    forge(run, overcount)
    assert_named(run, "counts", f"(epoch 2 of task 0, group 0): accuracy: correct {validation * 3 // 2} is not in "
                                f"[0, validation_samples {validation}]")  # fmt: skip


def test_without_counts_an_accuracy_must_be_a_whole_number_of_samples(run) -> None:
    """A log older than ``correct``: 0.75501 of 50,000 samples is 37,750.5 predictions."""

    def older(events):
        for epoch in _epochs(events):
            del epoch["correct"]
        find(events, runlog.EPOCH, task=0, epoch=2)["val_accuracy"] = 0.75501
        for task in (0, 1):
            sync_record(events, task)

    forge(run, older)
    _, validation = full_pass("imagenet", 32)
    lines = assert_named(run, "counts", f"(epoch 2 of task 0, group 0): accuracy: val_accuracy 0.75501 × {validation} "
                                        f"validation samples is not a count of correct predictions in "
                                        f"[0, {validation}]")  # fmt: skip
    assert "4 of 4 epochs have no correct count (a log older than the field): their accuracy is held to a whole " \
           "number of their validation samples only" in lines  # fmt: skip


# --------------------------------------------------------------------------- search and tuner per proposal


def test_proposals_of_another_search_than_the_run_claims(tmp_path) -> None:
    """A random-search run (its proposals say random, their strategies too) relabelled bayesian+tpe in its
    configuration and strategies: valid by the score's rules, but each proposal still names its search."""
    run = consistent_run(tmp_path / "run")

    def random_search(events):
        find(events, runlog.MODEL_PROPOSED, task=1).update(parent=0)
        find(events, runlog.MODEL_PROPOSED, task=1)["search"].update(search="random", strategy="explore")

    forge(run, random_search)
    assert json.loads((run / "score.json").read_text())["valid"]  # the forgery's aim
    assert_named(run, "configuration", "event 7 (model_proposed of task 1, group 1): algorithms: produced by search "
                                       "'random' and tuner 'tpe', the configuration (rule algorithms: bayesian+tpe) "
                                       "needs 'bayesian' and 'tpe'",
                 also=frozenset({"lineage"}))  # fmt: skip  # a child of 0 that logs a seed record: lineage too


def test_a_seed_proposal_must_name_the_seed_and_the_tuner(run) -> None:
    forge(run, lambda events: find(events, runlog.MODEL_PROPOSED, task=0)["search"].update(tuner="random"))
    assert_named(run, "configuration", "event 6 (model_proposed of task 0, group 0): algorithms: produced by search "
                                       "'seed' and tuner 'random', the configuration (rule algorithms: bayesian+tpe) "
                                       "needs 'seed' and 'tpe'")  # fmt: skip


def test_proposals_that_name_no_search_are_not_recorded(run) -> None:
    def older(events):
        for proposal in (e for e in events if e["event"] == runlog.MODEL_PROPOSED):
            proposal["search"] = {"strategy": "seed"}

    forge(run, older)
    row = next(c for c in verify.verify(run).checks if c.name == "configuration")
    assert row.verdict == checks.NOT_RECORDED and not row.problems
    assert row.missing == ["2 of 2 model_proposed events name no search and tuner (a log older than the field)"]


# --------------------------------------------------------------------------- numbers the rules cannot compute with


def test_an_event_whose_numbers_cannot_be_computed_with_is_named_by_the_log_row_and_reaches_no_rule(run) -> None:
    """A layout logged at a time before every float (-10**400: valid JSON): since rules version 2026.12-7 the log row
    names it (an integer beyond the float range, as it names a NaN), and no rule reads the event, so no row names
    'numbers' and its group's ``horovod_size`` that is not its ranks is not named either: the segment has no layout
    (the peaks' groups are not in it).  Before, the evidence rules named it in the times row and judged no more of
    it; the corpus has no case of either, this test pins it."""
    events = read_log(run)
    layout = find(events, runlog.LAYOUT)
    layout["time"] = -(10**400)
    layout["groups"][0]["horovod_size"] = 4
    write_log(run, events)
    result = verify.verify(run)
    rows = {c.name: [*c.problems, *c.missing] for c in result.checks}
    layout_event = f"event {events.index(layout) + 1} (layout)"
    assert rows["log"] == [f"{layout_event}: time: an integer beyond the float range (±1.8e308: valid JSON, but no "
                           "rule can compute with it; the package never writes one)"], rows["log"]  # fmt: skip
    assert not any("numbers:" in line for lines in rows.values() for line in lines), rows
    assert rows["times"] == [], rows["times"]
    assert not any("horovod size" in line for line in rows["counts"]), rows["counts"]
    assert any(line.endswith(": peak: group 0 is not in its segment's layout") for line in rows["physics"]), rows
    assert "segment 1: no system description or no layout" in rows["inventory"], rows["inventory"]


def test_a_count_the_counts_rule_cannot_compute_is_named_in_the_counts_row(run) -> None:
    """A batch size of 0 (an integer, as the counts rule holds it): no number of steps is one pass over the split.
    Since rules version 2026.12-7 the counts rule names it in its own row and judges the rest of the epoch (its
    samples against steps × global batch); before, its division raised and the times row named 'numbers' for each
    epoch, judging no more of it.  No row says 'numbers'."""
    events = read_log(run)
    find(events, runlog.MODEL_PROPOSED, task=0)["hparams"]["batch_size"] = 0
    write_log(run, events)
    rows = {c.name: [*c.problems, *c.missing] for c in verify.verify(run).checks}
    epochs = [number for number, event in enumerate(events, 1) if event["event"] == runlog.EPOCH and event["task"] == 0]
    assert epochs
    assert rows["times"] == [], rows["times"]
    assert not any("numbers:" in line for lines in rows.values() for line in lines), rows
    labels = [f"event {number} (epoch {events[number - 1]['epoch']} of task 0, group {events[number - 1]['group']})"
              for number in epochs]  # fmt: skip
    assert [line for line in rows["counts"] if ": split: batch size 0 a rank" in line] == [
        f"{label}: split: batch size 0 a rank: no number of steps is one pass over the train split (1281167 samples)"
        for label in labels], rows["counts"]  # fmt: skip
    assert all(any(line.startswith(f"{label}: samples: ") for line in rows["counts"]) for label in labels), rows

"""The family ``mllog``: ``mllog.log`` against the event log (its row: :data:`analysis.verify.registry.FAMILIES`).

``events.jsonl`` is the record verify recomputes everything from; the side
files repeat parts of it for other readers (mlcommons' tools, a person
loading the best model, a reviewer opening a bundle).  A forger who edits
the log and rescores it consistently leaves them telling the old story, and
one who edits a side file leaves it disagreeing with the log; either way a
row here names the file, the event or task, and the rule (``best/``:
:mod:`analysis.verify.best`; a bundle's files: :mod:`analysis.verify.bundle`).

The row's rules are plain functions of units (:mod:`analysis.verify.units`): ``mllog.log`` is read streaming, in
step with the event walk, by :class:`analysis.verify.mllog_reader.MLLogFollower`, which the unit stream owns and
which hands back, at each event that read or matched lines, a unit finished at once (an epoch's lines, the power
lines matched at a ``monitor`` sample, a ``run_stop``'s line, a segment's start and end) and, at the log's end,
what follows the last segment on the run unit; the functions here judge them and keep nothing.

What the rule cannot say: ``mllog.log`` (:mod:`aiperf_mpi.job.mllog`) is read streaming, line by line,
beside the event walk, and its writer flushes at most once a second, so a
segment killed without ``run_stop`` may lack the lines written after its
last flush.  Missing epochs are tolerated then, and only then, when they
are the segment's last epochs (no epoch after the first missing one has its
lines) and were logged within :data:`FLUSH_WINDOW` seconds of each other;
they are noted, not failed: a forger can hide at most that last second.
Memory: the reader's (:mod:`analysis.verify.mllog_reader`).
"""

from __future__ import annotations

from collections import Counter

from aiperf_mpi.graph.model import search_space
from aiperf_mpi.results import runlog
from aiperf_mpi.results.energy import PowerStep
from aiperf_mpi.results.mllog_format import (
    DESCRIPTION,
    EVENT_TIME_MS,
    EVENT_TYPES,
    PRELUDE,
    logged_ms,
    true_time_ms,
)
from analysis.checks import Lines, same, short
from analysis.verify.mllog_reader import (
    DESCRIPTION_KEYS,
    FLUSH_WINDOW,
    KEPT_REPEATS,
    MLLOG_RULE,
    POWER_MARKS,
    PRELUDE_KEYS,
    EpochLines,
    PowerLines,
    RunStopLine,
    SegmentEnded,
    SegmentStarted,
)
from analysis.verify.units import END, Findings, RunUnit, count, note, problem, summary

__all__ = ["DESCRIPTION_KEYS", "FLUSH_WINDOW", "MLLOG_RULE", "PRELUDE_KEYS", "mllog", "mllog_epoch", "mllog_power",
           "mllog_run_stop", "mllog_segment_end", "mllog_segment_start"]  # fmt: skip
"""the rules, and the constants the tests and docs know this module by (the reader's)"""


def _read(at: float, read: Lines) -> Findings:
    """The problems of the lines read at one event, in the order met; those the reader counted past the few it
    kept, as many findings (a row keeps its earliest lines and counts the rest, as the reader did)."""
    yield from (problem(at, text) for text in read)
    yield from (problem(at, read[-1]) for _ in range(read.dropped))


def _records_of(config: dict, system: dict, layout: dict, data: dict) -> dict[str, tuple | str]:
    """Key → each description line the writer makes of a segment (``mllog_format``'s :data:`PRELUDE` and
    :data:`DESCRIPTION`), or, for one the log's events cannot make (a field they lack, a value of the wrong type),
    why not, in words."""
    made: dict[str, tuple | str] = {}
    for kind, key, make in (*PRELUDE, *DESCRIPTION):
        try:
            made[key] = (kind, key, *make(config, system, layout, data, search_space))
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            made[key] = f"{type(exc).__name__} {' '.join(str(exc).split())[:60]}"
    return made



def mllog(run: RunUnit, counted: Counter) -> Findings:
    """read streaming beside the event walk (`analysis/verify/mllog.py`): each epoch event has its `epoch_start` (time
    = the epoch's `start`), `epoch_stop` (time = its `end`, `ops`, `train_samples`) and `eval_accuracy`
    (`val_accuracy`, `eval_samples` = `validation_samples`), times in whole ms as the writer rounds them (`int(s ×
    1000)`; a late line's true time is its `metadata.event_time_ms`); each segment's `run_start` and `run_stop`
    lines at the events' times, with their segment and reason; no mllog epoch without its event, except an
    `epoch_start` alone for the epoch after its task's last when the task was discarded at `run_stop`, failed, gave
    up with no epoch (the time limit) or was training when its segment was killed. Each segment's description lines
    (`number_of_nodes`, `accelerators_per_node`, `seed`, the optimiser's, `aiperf_dataset`, `train_samples`,
    `eval_samples`, `aiperf_time_limit`, `aiperf_search_space`, `aiperf_system`: the hardware and data an mlcommons
    reader believes) equal what the writer makes of the segment's `run_start`, `system` and `layout` events, one
    line of each key at most (a line the file lacks claims nothing; one after the last segment's `run_start` or
    `run_stop`, which no segment follows, fails); no line of a key aiperf_mpi never writes, and no cut last line
    after a `run_stop` (a segment that stopped wrote whole lines; a killed one may end in a cut line, noted).
    MLPerf's power lines (issue 53): a segment whose `system` event has a node with energy readings has one
    `power_measurement_start` at that event's time and, when the run stopped it, one `power_measurement_stop` at its
    `run_stop`'s; each `monitor` sample whose readings step (the ledger of `aiperf_mpi/results/energy.py`) has its
    `power_reading` line, the node's mean watts since its previous sample at the later reading's time with its
    `host`, each line's `time_ms`, event type and metadata the writer's (mlcommons' summarizer integrates by
    `time_ms`); no power line that the readings do not make, none before its segment's `run_start` or after its
    `run_stop` (a killed segment's last second excepted, as for epochs). A missing file fails (every run writes one)"""
    ended = run.mllog
    if ended is None:
        yield problem(0, f"mllog.log is missing: every run writes one ({MLLOG_RULE})")
        return
    yield from _read(END, ended.read)
    if ended.held is not None:
        yield problem(END, f"mllog.log line {ended.held[0]}: a run_start of a segment the event log does not have "
                           f"({MLLOG_RULE})")  # fmt: skip
    for key, lines in sorted(ended.upcoming.items(), key=lambda item: item[1].number):
        for number in [lines.number, *lines.later]:
            yield problem(END, f"mllog.log line {number}: {key} after segment {ended.segments}'s "
                               f"{'run_stop' if key in DESCRIPTION_KEYS else 'run_start'}, which no segment follows "
                               f"({MLLOG_RULE}: a segment's description comes before its run_start, or right after "
                               "it)")  # fmt: skip
    if ended.cut_tail and ended.stopped and not ended.closed_after:
        yield problem(END, f"mllog.log ends in a cut line ({ended.cut_tail} bytes) after segment {ended.segments}'s "
                           "run_stop: a segment that stopped wrote whole lines, and mlcommons' checker reads the cut "
                           f"one ({MLLOG_RULE})")  # fmt: skip
    elif ended.cut_tail:
        yield note(END, f"mllog.log ends in a cut line ({ended.cut_tail} bytes): the run was killed while writing")
    tolerated = f", {counted['tolerated']} lost with a killed segment's last second" if counted["tolerated"] else ""
    yield summary(f"{ended.lines} lines; {counted['compared']} of {ended.epochs} epochs equal their events "
                  f"(start, stop, ops, samples, accuracy){tolerated}; {counted['described']} of "
                  f"{counted['description lines']} description lines equal the log's (hardware, data, time limit, "
                  f"space); {ended.segments} segment(s)"
                  + (f"; {counted['power compared']} of {ended.power_steps} power steps equal their nodes' readings"
                     if ended.power_steps else ""))  # fmt: skip


def mllog_epoch(unit: EpochLines) -> Findings:
    """(mllog.log) an epoch event's lines (read whole within the read-ahead) say its start and stop times, ops,
    train samples, accuracy and eval samples; one without them is named missing at its segment's end."""
    yield from _read(unit.at, unit.read)
    entry, event = unit.entry, unit.event
    if entry is None:
        return
    wrong = []
    for label, theirs, mine in (
        ("epoch_start time", entry.start_ms, logged_ms(event.get("start"))),
        ("epoch_stop time", entry.stop_ms, logged_ms(event.get("end"))),
        ("ops", entry.ops, event.get("ops")),
        ("train_samples", entry.train_samples, event.get("train_samples")),
        ("eval_accuracy", entry.accuracy, event.get("val_accuracy")),
        ("eval_samples", entry.eval_samples, event.get("validation_samples")),
    ):
        if not same(theirs, mine):
            wrong.append(f"{label} {short(theirs)}, the epoch event {short(mine)}")
    if wrong:
        yield problem(unit.at, f"mllog.log line {entry.line}: task {event.get('task')} epoch {event.get('epoch')}: "
                               f"{'; '.join(wrong)} ({MLLOG_RULE})")  # fmt: skip
    else:
        yield count("compared")


def _power(at: float, matched: list[tuple[PowerStep, int, object]]) -> Findings:
    """Each power step and its line's watts: equal, or a problem."""
    for step, number, watts in matched:
        try:
            equal = same(watts, step.watts)
            said = short(watts)
        except RecursionError:  # a value nested past what a comparison can walk
            equal, said = False, "a value nested too deeply to compare"
        if not equal:
            yield problem(at, f"mllog.log line {number}: power_reading of {short(step.host)} {said} W, the log's "
                              f"readings give {step.watts!r} W ({MLLOG_RULE}: a node's power is its counters' "
                              "step)")  # fmt: skip
        else:
            yield count("power compared")


def mllog_power(unit: PowerLines) -> Findings:
    """(mllog.log) a node's sample whose readings step has its `power_reading` line (the mean watts since the
    node's previous sample, at the later reading's time), compared when its line has been read (a line the master
    wrote late is matched when read, or named missing at its segment's end)."""
    yield from _read(unit.at, unit.read)
    yield from _power(unit.at, unit.matched)


def mllog_segment_start(unit: SegmentStarted) -> Findings:
    """(mllog.log) each `run_start` event has its `run_start` line, of its segment, at its time (the segment's
    prelude lines read on the way)."""
    yield from _read(unit.at, unit.read)
    event, where = unit.event, f"segment {unit.segment}'s run_start"
    if unit.line is None:
        yield problem(unit.at, f"mllog.log: no run_start line for {where} ({MLLOG_RULE})")
        return
    number, record = unit.line
    meta = record.get("metadata") if isinstance(record.get("metadata"), dict) else {}
    if meta.get("segment") != event.get("segment"):
        yield problem(unit.at, f"mllog.log line {number}: run_start of segment {short(meta.get('segment'))}, the "
                               f"event log's {where} is segment {event.get('segment')} ({MLLOG_RULE})")  # fmt: skip
    if true_time_ms(record) != logged_ms(event.get(runlog.TIME)):
        yield problem(unit.at, f"mllog.log line {number}: run_start at {true_time_ms(record)} ms, {where} at "
                               f"{logged_ms(event.get(runlog.TIME))} ms ({MLLOG_RULE})")  # fmt: skip


def mllog_run_stop(unit: RunStopLine) -> Findings:
    """(mllog.log) each `run_stop` event has its segment's `run_stop` line at its time, with its reason."""
    yield from _read(unit.at, unit.read)
    event, where = unit.event, f"segment {unit.segment}'s run_stop"
    if unit.line is None:
        yield problem(unit.at, f"mllog.log: no run_stop line for {where} ({MLLOG_RULE})")
        return
    number, record = unit.line
    meta = record.get("metadata") if isinstance(record.get("metadata"), dict) else {}
    if true_time_ms(record) != logged_ms(event.get(runlog.TIME)):
        yield problem(unit.at, f"mllog.log line {number}: run_stop at {true_time_ms(record)} ms, {where} at "
                               f"{logged_ms(event.get(runlog.TIME))} ms ({MLLOG_RULE})")  # fmt: skip
    if meta.get("reason") != event.get("reason"):
        yield problem(unit.at, f"mllog.log line {number}: run_stop reason {short(meta.get('reason'))}, {where} "
                               f"{short(event.get('reason'))} ({MLLOG_RULE})")  # fmt: skip


def mllog_segment_end(unit: SegmentEnded) -> Findings:
    """(mllog.log) at a segment's end: its description lines, its last power lines and marks, its run_stop line,
    its mllog epochs without an event, and its epochs and power steps without lines (a killed segment's last
    second noted)."""
    yield from _read(unit.at, unit.read)
    yield from _description(unit)
    yield from _power(unit.at, unit.matched)
    yield from _power_marks(unit)
    at, segment = unit.at, unit.segment
    if not unit.stopped and unit.stop_line is not None:
        yield problem(at, f"mllog.log line {unit.stop_line[0]}: a run_stop for segment {segment}, which the event "
                          f"log does not stop ({MLLOG_RULE})")  # fmt: skip
    for (task, number), entry in sorted(unit.pending.items()):
        where = f"mllog.log line {entry.line}: task {task} epoch {number}"
        if entry.stop_ms is not None or entry.has_eval:
            yield problem(at, f"{where}: an epoch_stop/eval_accuracy without an epoch event ({MLLOG_RULE}: no "
                              "mllog epoch without its event)")  # fmt: skip
        elif unit.cut_allowed.get(task) == number or (not unit.stopped and
                                                      unit.open_epochs.get(task, 0) + 1 == number):  # fmt: skip
            continue  # begun and cut: discarded at run_stop, failed, given up, lost, or killed while training
        else:
            yield problem(at, f"{where}: an epoch_start without an epoch event, and its task was neither discarded "
                              "at run_stop, failed, given up at the time limit, lost with its group nor training "
                              f"when its segment was killed ({MLLOG_RULE})")  # fmt: skip
    missing = unit.missing
    if not missing.count:
        return
    lost_tail = ((not unit.stopped or unit.closed_after) and not missing.matched_after
                 and missing.last_time - missing.first_time <= FLUSH_WINDOW)  # fmt: skip
    if lost_tail:
        yield from (count("tolerated") for _ in range(missing.count))
        how = "closed after its launch ended" if unit.closed_after else "no run_stop"
        steps = f" and {missing.power} power step(s)" if missing.power else ""
        yield note(at, f"segment {segment} was killed ({how}): its last {missing.count - missing.power} epoch(s)"
                       f"{steps}, logged within {FLUSH_WINDOW:g} s, have no mllog lines (mllog.log is flushed once a "
                       "second)")  # fmt: skip
    else:
        yield from _read(at, missing.lines)


def _power_marks(unit: SegmentEnded) -> Findings:
    """The segment's ``power_measurement_start`` (at its ``system`` event's time, where a node was measured)
    and ``power_measurement_stop`` (at its ``run_stop``'s, when the run stopped it), once each; none where no
    node was measured; and no ``power_reading`` line that no sample of the log makes."""
    at, where = unit.at, f"segment {unit.segment}"
    for (host, ms), (number, _) in sorted(unit.power.items(), key=lambda item: item[1][0])[:KEPT_REPEATS]:
        yield problem(at, f"mllog.log line {number}: a power_reading of {short(host)} at {short(ms)} ms that no "
                          f"monitor sample of {where} gives ({MLLOG_RULE})")  # fmt: skip
    if len(unit.power) > KEPT_REPEATS:
        yield problem(at, f"mllog.log: {len(unit.power) - KEPT_REPEATS} more power_reading lines of {where} that no "
                          f"sample gives ({MLLOG_RULE})")  # fmt: skip
    # the stop is written with run_stop, and flushed with it: a killed or closed segment has none
    measured = unit.measured
    expected = {"power_measurement_start": measured.get(runlog.TIME) if measured else None,
                "power_measurement_stop": unit.stop_time if measured and unit.stopped
                and not unit.closed_after else None}  # fmt: skip
    for key in POWER_MARKS:
        lines = unit.power_marks.get(key, [])
        when = expected[key]
        if when is None:
            why = "whose system event measured no node" if measured is None else "which the run did not stop"
            for number, _ in lines:
                yield problem(at, f"mllog.log line {number}: {key} in {where}, {why} ({MLLOG_RULE})")
            continue
        if not lines and key == POWER_MARKS[0] and not unit.stopped and not unit.steps:
            yield note(at, f"{where} was killed before its power_measurement_start line was flushed (no power line "
                           "of it follows)")  # fmt: skip
            continue
        if not lines:
            yield problem(at, f"mllog.log: no {key} line in {where}, whose nodes were measured ({MLLOG_RULE})")
        elif key == POWER_MARKS[0]:
            meta = lines[0][1].get("metadata") or {}
            made = {"segment": unit.started.get("segment") if unit.started else None, "nodes": unit.measured_nodes}
            if lines[0][1].get("value") is not None or any(meta.get(k) != v for k, v in made.items()):
                yield problem(at, f"mllog.log line {lines[0][0]}: {key} of {where}: value "
                                  f"{short(lines[0][1].get('value'))}, metadata {short(meta)}; the log's {made} "
                                  f"({MLLOG_RULE})")  # fmt: skip
        elif lines[0][1].get("value") is not None:
            yield problem(at, f"mllog.log line {lines[0][0]}: {key} of {where} with a value ({MLLOG_RULE})")
        for number, _ in lines[1:]:
            yield problem(at, f"mllog.log line {number}: a second {key} in {where} ({MLLOG_RULE})")
        if lines and true_time_ms(lines[0][1]) != logged_ms(when):
            yield problem(at, f"mllog.log line {lines[0][0]}: {key} at {true_time_ms(lines[0][1])} ms, the log's at "
                              f"{logged_ms(when)} ms ({MLLOG_RULE})")  # fmt: skip


def _description(unit: SegmentEnded) -> Findings:
    """The segment's description lines (the hardware, the data, the time limit, the space) against what the
    writer makes of the segment's ``run_start``, ``system`` and ``layout`` events (issue 52: ``mllog.log``
    claiming 64 nodes of 8 B200 over a one-host run verified).  A line the file lacks claims nothing; a
    second one, or one that differs, is a problem."""
    found, at, where = unit.described, unit.at, f"segment {unit.segment}"
    started, system, layout = unit.started, unit.system, unit.layout
    if started is None or system is None or layout is None:
        return  # the segments and inventory rows name the missing event; nothing to recompute from
    config = started.get("config") if isinstance(started.get("config"), dict) else {}
    data = started.get("data") if isinstance(started.get("data"), dict) else {}
    hosts = [host for host in system.get("hosts") or [] if isinstance(host, dict)]
    most = max((len(host["accelerators"]) for host in hosts if isinstance(host.get("accelerators"), list)),
               default=0)  # fmt: skip
    # the hardware lines are always made: a log without these two fields (one written by hand) has their
    # values in its hosts, as the run's system description counts them (mpi/system.py; the fields and
    # inventory rows hold the fields to the hosts where the log has them)
    system = {"nodes": len(hosts), "accelerators_per_node": most, **system}
    expected = _records_of(config, system, layout, data)
    unmade: list[str] = []
    for key in sorted(found, key=lambda name: found[name].number):
        lines = found[key]
        for number in lines.later:
            yield problem(at, f"mllog.log line {number}: a second {key} line in {where} ({MLLOG_RULE})")
        if lines.more:
            yield problem(at, f"mllog.log: {lines.more} more {key} lines in {where} ({MLLOG_RULE})")
        number, record = lines.number, lines.record
        yield count("description lines")
        made = expected.get(key)
        if isinstance(made, str):
            unmade.append(f"{key} ({made})")
            continue
        kind, _, value, metadata = made
        theirs = record.get("metadata") if isinstance(record.get("metadata"), dict) else {}
        theirs = {name: item for name, item in theirs.items() if name != EVENT_TIME_MS}
        try:
            wrong = [f"{what} {short(mine_)}, the log's {short(logged)}" for what, mine_, logged in (
                ("event type", record.get("event_type"), EVENT_TYPES[kind]),
                ("value", record.get("value"), value),
                ("metadata", theirs, metadata or {}),
            ) if not same(mine_, logged)]  # fmt: skip
        except RecursionError:  # a value nested past what JSON's encoder or a comparison can walk
            wrong = ["a value nested too deeply to compare"]
        if wrong:
            yield problem(at, f"mllog.log line {number}: {key} of {where}: {'; '.join(wrong)} ({MLLOG_RULE}: a "
                              "segment's description is its run_start's, system's and layout's)")  # fmt: skip
        else:
            yield count("described")
    if unmade:
        yield note(at, f"{where}: not compared: {', '.join(unmade)}: a configuration written by hand lacks what "
                       "makes it (a run's always has it; none of these lines bounds a rate)")  # fmt: skip

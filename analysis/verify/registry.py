"""verify's rules, versioned: each family of rules, what it reads and the rows it fills, in one list.

In the manner of mlcommons' compliance checker, whose rulesets are
versioned files of keys and what each must hold, ``analysis.verify`` judges
a run by the families listed in :data:`FAMILIES`, under
:data:`VERIFY_RULES_VERSION`; ``verify.json`` (and so a bundle) records the
version, so a verdict says which rules made it, and ``docs/verify.md``'s
table of checks is generated from this list (:func:`markdown`).

A rule is a plain function of one finished unit of the run (issue 51, :mod:`analysis.verify.units`): a task once
it has ended, an event of a task not open, an event out of place, a proposal, an epoch, an event of no task, what
``mllog.log`` said at an event, a segment once the next has opened, the run.  Its entry is one line, a (row,
function) pair (:class:`By`); the unit it reads is the type its first parameter names, and the row's text, what
must hold for it, is the docstring of the row's first function (a later function of the same row says in brackets
which row it adds to; a run function may read its row's counts, a second parameter).  :func:`walk` reads
``events.jsonl`` once, into the run's model (:func:`aiperf_mpi.results.logmodel.read_model`) and the unit stream
(:class:`analysis.verify.units.UnitStream`, which keeps what needs the log's order and puts it on the units: no rule
keeps state), and hands each unit, as it finishes, to the functions of its type; a row's findings are put in the
log's order (each carries the event it was found at).  The bundle's rows (its files against the segments of the
run's model: ``Run.model``), the side files and the re-evaluation come after the walk; ``analysis.verify`` runs
them (their entries have no rules).

Adding a rule: one function of the unit it reads, its docstring what must hold, and one line in its family's
entry (a new family: one entry); what the function needs of the log's order goes on the unit, in the stream.
A change of what a rule holds is a new :data:`VERIFY_RULES_VERSION`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from aiperf_mpi.results import runlog
from aiperf_mpi.results.logmodel import RunModel, read_model
from aiperf_mpi.results.schema import (
    SCHEMA_VERSION,
    beyond_floats,
    check_event,
    non_finite_numbers,
    non_finite_problems,
)
from analysis.checks import Check, Run
from analysis.verify.best import best_export
from analysis.verify.data import data_splits, epoch_splits, seed_split
from analysis.verify.energy import energy
from analysis.verify.evidence import (
    configuration,
    configuration_counted,
    configuration_segment,
    configuration_stray,
    counts,
    counts_counted,
    counts_segment,
    counts_stray,
    physics,
    physics_closed,
    physics_counted,
    physics_segment,
    physics_stray,
    times,
    times_counted,
    times_segment,
    times_stray,
)
from analysis.verify.fields import probe_and_layout_fields
from analysis.verify.hardware import (
    bounds_counted,
    early_bounds,
    epoch_bounds,
    hardware_bounds,
    inventory,
    inventory_summary,
    stray_epoch_bounds,
)
from analysis.verify.mllog import (
    mllog,
    mllog_epoch,
    mllog_power,
    mllog_run_stop,
    mllog_segment_end,
    mllog_segment_start,
)
from analysis.verify.provenance import provenance, provenance_recorded
from analysis.verify.record import (
    epochs_counted,
    epochs_in_segments,
    graph_files,
    graph_files_counted,
    lineage,
    lineage_counted,
    misplaced_events,
    model_records,
    ops_counted,
    ops_recount,
    records_counted,
    segments,
    segments_closed,
    stray_epochs,
    stray_model_ids,
)
from analysis.verify.score import score, score_events, scored_window, validity_rules
from analysis.verify.search import repeated_graphs, repeats_counted, search_space, space_counted
from analysis.verify.units import UNIT_NAMES, Finding, RowFindings, RunUnit, UnitStream, takes_counts, unit_of
from analysis.verify.weights import weights_files

VERIFY_RULES_VERSION = "2026.12-13"
"""the version of :data:`FAMILIES`: what verify checks, and how (a new one for any change of a row's rule).
2026.12-13: no rule holds anything new: rules became plain functions of the run's finished units (issue 51,
:mod:`analysis.verify.units`: a task, an event out of place, a segment, the run), each listed as a (row, function)
pair, its row's text its docstring, the unit stream keeping what needs the log's order (the corpus of 386 entries
recorded at 2b7ecf3 compared identical, apart from this version; a differential fuzz of the event walk against the
units, 13,135 mutants of that corpus, found three causes, each mended: an epoch is recounted against the layouts as
of it, a log with no ``run_start`` is refused before ``score.json`` is opened, and a child whose rebuild no JSON can
hold — a forged parent graph carrying an inf — is a ``lineage`` problem, where it had ended the log's reading);
and ``segments`` lets a resumed segment change ``hang_margin``, a new run option (``--hang-margin``, the
margin of the master's mid-run bound: issue 51) that belongs to the machine, not the result, as it lets it change
the deadlines; a segment logged before the option (no such key) and a resume that logs it are one configuration
(the corpus: 386 entries, no verdict or row's verdict changed; 11 bundles' note on the version, and one resume that
changes ``hang_margin`` no longer a problem of its ``segments`` row, which fails for its missing ``run_stop``);
2026.12-12: ``mllog.log`` holds MLPerf's power lines (issue 53), which the ``mllog.log`` row holds to the log's
energy readings: a measured segment's ``power_measurement_start`` (at its ``system`` event) and
``power_measurement_stop`` (at its ``run_stop``, when the run stopped it), once each, and one ``power_reading`` per
node and stepping ``monitor`` sample with the watts the ledger computes, each line's ``time_ms``, event type and
metadata the writer's; a power line the readings do not make fails, as any other key does (the corpus: 374 entries
recorded at 328825f, no verdict or row changed; 10 bundles gained the note on the version);
2026.12-11: side files are read or named (issue 52, item 5): ``mllog.log``'s description lines (the hardware an
mlcommons reader believes — ``number_of_nodes``, ``accelerators_per_node``, ``aiperf_system`` — the data splits, the
time limit, the space, the seed and optimiser) equal what the writer makes of the segment's ``run_start``,
``system`` and ``layout`` events, one of each key at most, and no line has a key aiperf_mpi never writes (a line the
file lacks claims nothing; one a hand-written configuration cannot make is noted; one after the last segment's
run_start or run_stop fails), nor a cut last line after a run_stop (mlcommons' checker reads it); a new row, ``side
files``, names
every file no row reads (the report, serving's record, the cut lines a resume set aside, anything added), which never
fails; the verdict names the best accuracy (its factor over a model at chance) and the ranks of the busiest host
(up to × their count) as trusted claims (the corpus:
355 entries, no ``verified`` or ``valid`` changed; 329 gained the ``side files`` row, ok; 22 forgeries of the log
whose ``mllog.log`` was left honest now fail ``mllog.log`` as well, each already failing other rows); the timings
claim's factor is the claimed rate over the highest the evidence supports (issue 52, item 3): the reviewer's audit's
highest logged rate over its measured ceiling, and without an audit none ("no bound verify can hold": the headroom
the table's bound leaves is said, not printed as what a squeeze bought, ×6.13 having printed as ×1.22), and the
together line names the claims with no bound (a corpus of 373 entries at 750c510: no verdict or row changed; 324
timings lines and the together lines changed); the tuner's kernel sizes are a trusted claim (issue 52, item 2: the
search's free choices), up to (k/3)² at the largest size a proposal logged (every kernel at 7 but the best's had
bought ×1.83 under no claim); after a forger's review, the sizes are counted from the proposals (the size every
epoch is recounted at: a discarded or failed task's raised kernel had bought its epochs under no claim), an audit
record with a ratio that is no finite non-negative number names no timings bound, one with a ratio past its
tolerance is no pass, and ``verify.json`` names the unbounded claims (``trusted_unbounded``) beside the product
(the corpus: no verdict or row changed; 345 of 373 entries gained the kernel line);
2026.12-10: a new row, ``energy`` (issue 53): the nodes' energy readings held to physics (a counter never lower
unless it wraps, no step above the power table's bound); ``score`` compares the score's ``energy`` record with the
one recomputed from the readings where the record has one; the schema's optional ``energy`` of the ``system``,
``monitor`` and ``score`` events; a host of more logical processors than one Linux host can run (hardware table
2026.12-3) has no bound, so its groups are *not recorded* (10**300 cores verified with every factor ×inf: issue
52), and the verdict ends with the product of every trusted factor; an audit counts only from the record its
reviewer names (``--audit RECORD``), made at the default tolerance (issue 52: ``audit.json`` in the run directory is
the submitter's claim, listed and never counted), and a bundle's ``verify.txt`` written under other rules is held to
the recomputed verdict's kind, not its words (the corpus: 355 entries, no verdict or row changed, 329 with the new
``energy`` row, ok);
2026.12-9: the schema's optional ``rank0_stalls`` record of a ``run_stop`` (rank 0's own stalls, which moved every
group's deadline: issue 50), typed as an object when present; ``segments`` lets a resumed segment change the two
new run options that belong to the machine, not the result (``master_deadline``, ``ignore_limits``: issue 50), as
it lets it change the other deadlines (the corpus: 345 of 355 identical apart from the version, the 10 others
nine bundles' note on the version and one resume that changes ``master_deadline``, no longer a mismatch there);
2026.12-8: a ``run_stop`` of reason ``launch ended`` (the job script's close of a segment whose launch ended
before rank 0 wrote one, ``aiperf_mpi/job/close.py``, issue 43) is a stop the run writes; the segment it closes is
judged as a killed one: ``scored window`` takes it on the axis as it ran to its last event before the close, and
``mllog.log`` tolerates its lost last second of lines as a killed segment's; the schema's optional ``closed``
record of a ``run_stop``;
2026.12-7: the ``log`` row refuses an integer beyond the float range (``±10**400``: valid JSON) in any field, as it
refuses a NaN or an infinity, so such an event reaches no rule and the rest of the log is judged (before, the
evidence rules named it 'numbers' in the ``times`` row and judged no more of that event, and one in an epoch's ops
stopped the whole verdict as an unreadable log); a ``run_start`` holding one is still a log that cannot be read
(no configuration, no run to judge: exit 2, as the scorer says); ``counts`` names a batch size of 0 in its own row
(no number of steps is one pass) and judges the rest of the epoch, where its division raised and ``times`` named
'numbers' for the epoch;
2026.12-6: a new row, ``probe and layout fields`` (``analysis/verify/fields.py``): the fields of the ``system``,
``peak`` and ``layout`` events that no row read (a probe's ``threads`` and ``host``, a layout group's ``leader``,
``host`` and ``node``, the layout's ``nodes`` and ``node_count``, ``accelerators_per_node``, ``mpi4py``) are checked;
the package moved into ``analysis/verify/`` (verdicts compared equal over the corpus).
2026.12-5: ``segments`` reads a logged configuration under today's option names (the search's warm-up cap
``warmup_epochs`` became ``search_warmup_epochs``, told apart from the learning rate's warm-up that ``mllog.log``
now logs truly), so a run resumed across the rename is one configuration; the ``log`` row refuses a NaN or an
infinity in any field; ``weights files`` refuses a file larger than its graph's arrays can need before hashing it;
``hardware bounds`` holds a rehearsal's phases to its stand-in's stated rate"""
ANY = "*"
"""(the docs' table) a row that reads every event: the log row"""


@dataclass(frozen=True)
class Row:
    """A row of the verdict: its name and what must hold for it to be ``ok`` (the docs' table)."""

    name: str
    holds: str


@dataclass(frozen=True)
class By:
    """One rule as a plain function (issue 51): the row it fills and ``def rule(unit) -> findings``, a function of
    one finished unit of the run (:mod:`analysis.verify.units`: the type its first parameter names; a run rule may
    take its row's counts as a second).  The row's text is the docstring of the row's first function in the
    registry; a later one's says, in brackets, which row it adds to."""

    row: str
    rule: Callable[..., Iterable[Finding]]

    @property
    def unit(self) -> type:
        return unit_of(self.rule)

    @property
    def holds(self) -> str:
        """the rule's docstring on one line: what must hold for its row"""
        return " ".join((inspect.getdoc(self.rule) or "").split())


@dataclass(frozen=True)
class Family:
    """Rules that share what they read: its rules (functions of units, several may fill one row), the files it
    reads, its rows (those of its rules; a family judged outside the walk lists its rows and the events it reads,
    for the docs' table)."""

    name: str
    rows: tuple[Row, ...] = ()
    events: tuple[str, ...] = ()
    """(a family judged outside the walk: the log, the bundle) the events it reads, for the docs' table"""
    files: tuple[str, ...] = ()
    rules: tuple[By, ...] = ()
    """its rules, in the verdict's order: the rows they fill, each named by its first function"""

    def __post_init__(self) -> None:
        if self.rules:
            rows: dict[str, Row] = {}
            for rule in self.rules:
                rows.setdefault(rule.row, Row(rule.row, rule.holds))
            object.__setattr__(self, "rows", tuple(rows.values()))


FAMILIES = (
    Family("bundle manifest", files=("MANIFEST", "every file of the bundle"), rows=(
        Row("bundle manifest",
            "(a bundle only) every file listed in `MANIFEST` with its sha256, and no file that is not listed"),
    )),
    Family("log", events=(ANY,), files=(runlog.EVENTS_FILE,), rows=(
        Row("log",
            "every line is one JSON event that keeps to [the schema](events.md), every number in it finite and "
            "within the float range (JSON has no NaN or Infinity, an integer such as 10**400 cannot be computed "
            "with, and the package never writes one); no cut last line"),
    )),
    Family("record", files=("graphs/",), rules=(
        By("segments", segments),
        By("segments", misplaced_events),
        By("segments", segments_closed),
        By("epochs in segments", epochs_in_segments),
        By("epochs in segments", stray_epochs),
        By("epochs in segments", epochs_counted),
        By("graph files", graph_files),
        By("graph files", graph_files_counted),
        By("lineage", lineage),
        By("lineage", lineage_counted),
        By("ops recount", ops_recount),
        By("ops recount", ops_counted),
        By("model records", model_records),
        By("model records", stray_model_ids),
        By("model records", records_counted),
    )),
    Family("evidence", files=("graphs/ (each graph as the shared view parsed it)",), rules=(
        By("times", times),
        By("times", times_stray),
        By("times", times_segment),
        By("times", times_counted),
        By("physics", physics),
        By("physics", physics_stray),
        By("physics", physics_segment),
        By("physics", physics_closed),
        By("physics", physics_counted),
        By("counts", counts),
        By("counts", counts_stray),
        By("counts", counts_segment),
        By("counts", counts_counted),
        By("configuration", configuration),
        By("configuration", configuration_stray),
        By("configuration", configuration_segment),
        By("configuration", configuration_counted),
    )),
    Family("hardware", rules=(
        By("inventory", inventory),
        By("inventory", inventory_summary),
        By("hardware bounds", hardware_bounds),
        By("hardware bounds", epoch_bounds),
        By("hardware bounds", stray_epoch_bounds),
        By("hardware bounds", early_bounds),
        By("hardware bounds", bounds_counted),
    )),
    Family("data", rules=(
        By("data splits", data_splits),
        By("data splits", seed_split),
        By("data splits", epoch_splits),
    )),
    Family("search", files=("graphs/ (each child's parent graph)",), rules=(
        By("search space", search_space),
        By("search space", space_counted),
        By("repeated graphs", repeated_graphs),
        By("repeated graphs", repeats_counted),
    )),
    Family("score", files=("score.json",), rules=(
        By("score", score),
        By("score", score_events),
        By("scored window", scored_window),
        By("rule *name*", validity_rules),
    )),
    Family("energy", rules=(
        By("energy", energy),
    )),
    Family("provenance", rules=(
        By("provenance", provenance),
        By("provenance", provenance_recorded),
    )),
    Family("mllog", files=("mllog.log",), rules=(
        By("mllog.log", mllog),
        By("mllog.log", mllog_segment_start),
        By("mllog.log", mllog_epoch),
        By("mllog.log", mllog_power),
        By("mllog.log", mllog_run_stop),
        By("mllog.log", mllog_segment_end),
    )),
    Family("best", files=("best/metadata.json", "best/ops.json", "best/graph.json", "graphs/"), rules=(
        By("best/ (exported model)", best_export),
    )),
    Family("weights", files=("weights/*.npz", "best/model.keras", "best/metadata.json", "graphs/"), rules=(
        By("weights files", weights_files),
    )),
    Family("fields", rules=(
        By("probe and layout fields", probe_and_layout_fields),
    )),
    Family("side files", files=("every other file of the run directory or bundle",), rows=(
        Row("side files",
            "every file no row above reads (the report, serving's record, a resume's set-aside cut lines, anything "
            "added) is named, one note for each reason it is not evidence with what would check it, at most 40 by "
            "name and the rest counted: its figures are the submitter's words, not evidence (a report showing ten "
            "times the score verified: "
            "issue 52). It never fails: the verdict says what it did not judge"),
    )),
    Family("bundle", events=("run_start", "system", "layout", "peak"),
           files=("verify.txt", "verify.json", "system.json"), rows=(
        Row("bundle verify.txt/json",
            "(a bundle only) `verify.json`'s `verified`, `valid`, `broken_rules` and each row's verdict, and "
            "`verify.txt`'s verdict line and rows, equal what verify recomputes now (the bundle's own rows apart)"),
        Row("bundle system.json",
            "(a bundle only) each segment's `system`, `layout`, `peak` events and `run_start` provenance, as the "
            "log has them"),
    )),
    Family("re-evaluation", files=("weights/task-N.npz or best/model.keras", "the data set"), rows=(
        Row("re-evaluation",
            "(with `--reevaluate` only) the run's claimed best epoch — the highest logged `val_accuracy`, the "
            "regulated score's — is the epoch whose weights the best model saved (`weights_epoch`); those weights "
            "are present (its `.npz`, or `best/model.keras` where a single-copy export removed it) with the sha256"
            " the log records, and are the graph's; the reviewer's data is the split the run validated; and the "
            "correct predictions recounted from them equal the claimed epoch's logged count within the reviewer's"
            " `--reevaluate-tolerance` ([below](#re-evaluating-the-best-model-the-reviewers-second-step)), and a "
            "claim above its recount by at most what lifts the regulated score's −ln E by 5 % (none near the error "
            "floor). Any of these missing fails the row with one line naming the rule; never taken on trust"),
    )),
)  # fmt: skip
"""every rule of verify, in the verdict's order"""
def family(name: str, families: tuple[Family, ...] = FAMILIES) -> Family:
    """The family of that name (KeyError: none)."""
    for entry in families:
        if entry.name == name:
            return entry
    raise KeyError(name)


def family_of(row: str, families: tuple[Family, ...] = FAMILIES) -> Family:
    """The family whose rules fill the verdict row ``row`` (``rule dataset``: the family of ``rule *name*``)."""
    for entry in families:
        if any(r.name == row or (r.name == "rule *name*" and row.startswith("rule ")) for r in entry.rows):
            return entry
    raise KeyError(row)


def walk(run: Run, families: tuple[Family, ...] = FAMILIES) -> list[Check]:
    """Every family's rows, the log row first: ``events.jsonl`` read once into the run's model and the unit stream,
    each unit handed, as it finishes, to the rules that are functions of it, the run's last."""
    by_unit: dict[type, list[By]] = {}
    for entry in families:
        for rule in entry.rules:
            by_unit.setdefault(rule.unit, []).append(rule)
    rows: dict[str, RowFindings] = {}
    placed: dict[str, list[str]] = {}
    """a row filled by name (``rule *name*``) → the rows its rule named, in order"""

    def findings(by: By, unit: object) -> None:
        counts = rows.setdefault(by.row, RowFindings(by.row)).counts
        for finding in by.rule(unit, counts) if takes_counts(by.rule) else by.rule(unit):
            name = finding.row or by.row
            if name not in rows:
                rows[name] = RowFindings(name)
                placed.setdefault(by.row, []).append(name)
            rows[name].add(finding)

    def judge_units(units: list[object]) -> None:
        for unit in units:
            for by in by_unit.get(type(unit), ()):
                findings(by, unit)

    log, events = Check("log"), 0
    stream = UnitStream(run.run_dir)

    def admit(event: object) -> bool:
        """The log row's rule, asked of every event: one JSON object that keeps to the schema (else no unit holds
        it)."""
        nonlocal events
        events += 1
        if not isinstance(event, dict):
            log.problems.append(f"event {events}: not a JSON object")
            return False
        if event.get(runlog.EVENT) == runlog.RUN_START and non_finite_numbers(event, refused=beyond_floats):
            # a configuration no float can hold leaves no run to judge: the log cannot be read, as the scorer says
            raise OverflowError("int too large to convert to float")
        problems = check_event(event) + non_finite_problems(event)
        if problems:
            log.problems.append(f"event {events} ({event.get('event')}): {'; '.join(problems)}")
        return not problems

    def judge(event: dict, model: RunModel) -> None:
        run.model = model  # the model so far: the bundle's rows read its segments, even of a log cut short
        judge_units(stream.see(event, events, model))

    try:
        model = read_model(run.run_dir, judge, require_start=False, epochs_too=True, keep_ended=False, admit=admit)
        run.truncated = model.truncated_tail
    except ValueError as exc:  # a bad line before the last: the log was edited or broken
        log.problems.append(f"{exc} (the log cannot be read past it)")
    if run.truncated:
        log.problems.append(f"the log ends in a cut line ({model.truncated_bytes} bytes: "
                            f"{model.truncated_line[:60]!r}): the run was killed while writing")  # fmt: skip
    log.summary = (f"{events} events, schema version {SCHEMA_VERSION}, one JSON object a line"
                   + ("" if not run.truncated else ", a cut tail"))  # fmt: skip
    ended = stream.end(run.model, run.truncated)
    judge_units(ended[:-1])
    whole: RunUnit = ended[-1]
    out = [log]
    for entry in families:
        last = {rule.row: place for place, rule in enumerate(entry.rules)}
        for place, rule in enumerate(entry.rules):
            if rule.unit is RunUnit:
                findings(rule, whole)
            if last[rule.row] == place:  # the row's last function has run: its row is whole
                names = placed.get(rule.row, []) if "*" in rule.row else [rule.row]
                out += [rows.setdefault(name, RowFindings(name)).check() for name in names]
    run.score, run.graph_files = whole.score, whole.graph_files
    return out


def markdown(families: tuple[Family, ...] = FAMILIES) -> str:
    """The rules as Markdown (``docs/verify.md``): each row and what must hold, then what each family reads."""
    lines = [f"verify's rules, version {VERIFY_RULES_VERSION} (`analysis/verify/registry.py`), in the verdict's "
             "order:", "", "| check | what must hold |", "|---|---|"]  # fmt: skip
    lines += [f"| {row.name} | {row.holds} |" for entry in families for row in entry.rows]
    lines += ["", "| family | reads events, or units | reads files | rows |", "|---|---|---|---|"]
    for entry in families:
        named = ", ".join(f"`{name}`" for name in entry.events if name != ANY)
        events = "; by name: ".join(part for part in ("every event" if ANY in entry.events else "", named) if part)
        units = dict.fromkeys(UNIT_NAMES[rule.unit] for rule in entry.rules)
        events = "; ".join(part for part in (events, f"units: {', '.join(units)}" if units else "") if part)
        files = ", ".join(f"`{f}`" if " " not in f else f for f in entry.files) or "–"
        lines.append(f"| {entry.name} | {events or '–'} | {files} | {', '.join(row.name for row in entry.rows)} |")
    return "\n".join(lines) + "\n"

"""verify's rules, versioned: each family of rules, what it reads and the rows it fills, in one list.

In the manner of mlcommons' compliance checker, whose rulesets are
versioned files of keys and what each must hold, ``analysis.verify`` judges
a run by the families listed in :data:`FAMILIES`, under
:data:`VERIFY_RULES_VERSION`; ``verify.json`` (and so a bundle) records the
version, so a verdict says which rules made it, and ``docs/verify.md``'s
table of checks is generated from this list (:func:`markdown`).

A family's ``judge`` is a class built once per verification with the run
(:class:`analysis.checks.Run`). The walk reads ``events.jsonl`` once, into
the run's model (:func:`aiperf_mpi.results.logmodel.read_model`), and
gives each event that keeps to the schema to the families that declare it,
in :data:`WALK_ORDER`: to the judge's ``each(event, number)`` first when it
has one (a false answer keeps the event from it), then to its method named
after the event (``epoch(event, number)``; an event a family reads only
through the shared view, :mod:`analysis.verify.view`, its ``through_view``,
has no method); a family that declares :data:`ANY` has ``each`` called for
every event. A judge that defines
``unreadable`` is handed what its methods raise when a number cannot be
computed with (ArithmeticError, ValueError) instead of the verification
ending. After the walk each judge's ``finish()`` gives its rows, in order.
The bundle's rows (its files against the segments of the run's model:
``Run.model``) and the re-evaluation judge after the walk;
``analysis.verify`` runs them (their entries have no judge).

A family's rules may instead be judged apart, one :class:`Rule` a row
(its ``rules``): each rule's class is built and fed as a family's judge is,
at its family's place in the walk, in the order listed.

Adding a rule: its row in its family's entry and the code that checks it,
in a method of the event it reads (or a :class:`Rule` of its own); a new
family: one entry and its class.
A change of what a rule holds is a new :data:`VERIFY_RULES_VERSION`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from aiperf_mpi.results import runlog
from aiperf_mpi.results.logmodel import RunModel, read_model
from aiperf_mpi.results.schema import (
    REQUIRED,
    SCHEMA_VERSION,
    beyond_floats,
    check_event,
    non_finite_numbers,
    non_finite_problems,
)
from analysis.checks import Check, Run
from analysis.verify.best import BestCheck
from analysis.verify.data import DataRules
from analysis.verify.energy import EnergyRule
from analysis.verify.evidence import ConfigurationRule, CountsRule, PhysicsRule, TimesRule
from analysis.verify.fields import FAMILY_ROW_HOLDS, ROW, FieldRules
from analysis.verify.hardware import BoundsRule, InventoryRule
from analysis.verify.mllog import MLLogCheck
from analysis.verify.provenance import Provenance
from analysis.verify.record import (
    EpochsRule,
    GraphFilesRule,
    LineageRule,
    OpsRule,
    RecordsRule,
    SegmentsRule,
)
from analysis.verify.score import ScoreRule, ValidityRules, WindowRule
from analysis.verify.search import RepeatsRule, SpaceRule
from analysis.verify.view import RunView
from analysis.verify.weights import KeptWeights

VERIFY_RULES_VERSION = "2026.12-13"
"""the version of :data:`FAMILIES`: what verify checks, and how (a new one for any change of a row's rule).
2026.12-13: ``segments`` lets a resumed segment change ``hang_margin``, a new run option (``--hang-margin``, the
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
"""a family that reads every event (its ``each`` method)"""
EVENT_NAMES = tuple(REQUIRED)
NUMBER_ERRORS = (ArithmeticError, ValueError)
"""what a judge's ``unreadable`` turns into a problem line"""


@dataclass(frozen=True)
class Row:
    """A row of the verdict: its name and what must hold for it to be ``ok`` (the docs' table)."""

    name: str
    holds: str


@dataclass(frozen=True)
class Rule:
    """One rule (issue 44): the row it fills, what must hold for it, the events it reads (a method named after
    each) and the small class that judges it, built once a verification with the run.  It reads the run's model,
    the shared view (:mod:`analysis.verify.view`) and the evidence tables, never another rule's state."""

    row: Row
    judge: Callable[[Run], object]
    events: tuple[str, ...]
    through_view: tuple[str, ...] = ()
    """those of ``events`` it reads only through the shared view: it has no method for them"""


@dataclass(frozen=True)
class Family:
    """Rules that share what they read: the class that judges them (or, one a row, its ``rules``), the events and
    files it reads, its rows."""

    name: str
    judge: Callable[[Run], object] | None
    rows: tuple[Row, ...] = ()
    events: tuple[str, ...] = ()
    files: tuple[str, ...] = ()
    through_view: tuple[str, ...] = ()
    """those of ``events`` it reads only through the shared view (:mod:`analysis.verify.view`): it has no method
    for them"""
    rules: tuple[Rule, ...] = ()
    """its rules, one a row, each judged apart (then ``judge`` is None, its rows are its rules', and its events
    theirs: in their order unless the entry lists them, as the docs' table shows them)"""

    def __post_init__(self) -> None:
        if self.rules:
            object.__setattr__(self, "rows", tuple(rule.row for rule in self.rules))
            events = tuple(dict.fromkeys(name for rule in self.rules for name in rule.events))
            if self.events and set(self.events) != set(events):
                raise ValueError(f"family {self.name}: its events {self.events} are not its rules' {events}")
            object.__setattr__(self, "events", self.events or events)


FAMILIES = (
    Family("bundle manifest", None, files=("MANIFEST", "every file of the bundle"), rows=(
        Row("bundle manifest",
            "(a bundle only) every file listed in `MANIFEST` with its sha256, and no file that is not listed"),
    )),
    Family("log", None, events=(ANY,), files=(runlog.EVENTS_FILE,), rows=(
        Row("log",
            "every line is one JSON event that keeps to [the schema](events.md), every number in it finite and "
            "within the float range (JSON has no NaN or Infinity, an integer such as 10**400 cannot be computed "
            "with, and the package never writes one); no cut last line"),
    )),
    Family("record", None, events=(ANY, "run_start", "model_proposed", "epoch", "model_done",
                                     "model_failed", "run_stop", "score"),
           files=("graphs/",), rules=(
        Rule(Row("segments",
            "`run_start`s numbered 1, 2, … in time order, `resumed` only after the first; a resume changes no "
            "configuration but `time_limit`, `hardware_changed` and `run_dir` (an option renamed since a segment was "
            "logged counts under its new name: `warmup_epochs` is `search_warmup_epochs`); each segment's one "
            "`run_stop` precedes its `score`; "
            "nothing but the `score` follows a `run_stop`; the last segment is closed and scored"),
             SegmentsRule, events=(ANY, "run_start", "run_stop", "score")),
        Rule(Row("epochs in segments",
            "every epoch follows its task's `model_proposed` in the same segment and group, is numbered 1, 2, … "
            "within its task, and none comes after the task's `model_done`/`model_failed`; a task ends once, and "
            "only a `model_failed` may end a task never proposed (its search found no child)"),
             EpochsRule, events=("model_proposed", "epoch", "model_done", "model_failed")),
        Rule(Row("graph files",
            "each model's graph is where its `model_proposed` says, inside the run directory: a whole line of its"
            " segment's appended file (`graph_file` `graphs/segment-N.jsonl`, `graph_offset`, `graph_bytes`; a "
            "file cut before the line's newline is named), no two models at the same line; or, in a run from "
            "before the appended file, the whole of `graphs/task-N.json`. Its sha256 equals the `graph_sha256` "
            "logged at `model_proposed`, it is the graph its `model_done` records when that carries one (runs "
            "logged before each graph was stored once; since then `model_done` carries none), and its tunable "
            "kernels are its hyper-parameters' `kernel_size`. No child (a proposal with a parent) has the graph "
            "of a proposal the master knew of — one of its segment, or of a model that had ended before it — "
            "since the master answers Duplicate to those; a seed may come twice"),
             GraphFilesRule, events=("model_proposed", "epoch", "model_done")),
        Rule(Row("lineage",
            "each graph file is its graph rebuilt from what its proposal logs ([below](#lineage)): the seed model"
            " (`seed`, which must be the configuration's `seed_model`) or its parent model's stored graph with "
            "the logged morphisms (`morphs`, 1 to 3 as the search chains them, each one the search could make), "
            "tuned to its `kernel_size`; layers, their attributes and edges equal; the parent logged before the "
            "child"),
             LineageRule, events=()),
        Rule(Row("ops recount",
            "each epoch recounted with the package's counter ([counting.md](counting.md)): the task's graph at "
            "its `kernel_size`, the epoch's logged `train_samples` and `validation_samples`, and the global batch"
            " = `batch_size` × the ranks of its group in the segment's `layout`; `ops`, `ops_train`, "
            "`ops_update`, `ops_validation` and `steps` equal as integers"),
             OpsRule, events=("epoch",)),
        Rule(Row("model records",
            "each `model_done` lists exactly its task's epoch events (field by field), its `accuracy` is the best"
            " of them, its `ops.total` their sum, its per-sample counts the recount's, its `hparams` its "
            "proposal's; model ids run 0, 1, 2, …"),
             RecordsRule, events=("model_done", "model_failed")),
    )),
    Family("evidence", None, events=(ANY, "run_start", "system", "layout", "staging", "peak", "monitor",
                                              "model_proposed", "epoch", "model_done", "model_failed", "group_lost",
                                              "run_stop", "score"),
           files=("graphs/ (each graph as the shared view parsed it)",), rules=(
        Rule(Row("times",
            "within a segment event times never go backwards (monitor samples apart: they carry their leader's "
            "sampling time); an epoch ends after it starts, starts after its segment's `run_start` and its task's"
            " `model_proposed`, is logged (`time`) after its `end`, and its phases `data_wait + compute + "
            "evaluation + compile` fit in `end − start`; a group trains one model at a time: no `model_proposed` "
            "on a group whose previous task has not ended, no epoch starting before the group's previous epoch "
            "ended or its previous model's `model_done`/`model_failed`; a `model_done`/`model_failed`/`staging` "
            "is logged after what it reports ended; nothing claims a time after its segment's `run_stop`; a "
            "resumed segment starts after the last time the previous one claims (event times, epoch ends, monitor"
            " samples) and nothing in it claims a time before its `run_start`"),
             TimesRule, events=(ANY, "run_start", "staging", "monitor", "model_proposed", "epoch", "model_done",
                                "model_failed", "group_lost", "run_stop")),
        Rule(Row("physics",
            "no epoch's training rate, `ops_train ÷ (compute + compile)`, exceeds `PEAK_MULTIPLE` = 2.0 × its "
            "group's measured peak (the segment's `peak` event for that group); no `score` exceeds the sum of the"
            " groups' peaks (of the segments so far, the largest); a group without a `peak` event "
            "(`--no-peak-probe`) is *not recorded*"),
             PhysicsRule, events=("run_start", "peak", "epoch", "score")),
        Rule(Row("counts",
            "an epoch's `train_samples` = `steps` × global batch (`batch_size` × its group's ranks), and "
            "`train_samples` and `validation_samples` are the same in every epoch of a model; each epoch is one "
            "whole pass over the splits the data check counted (`run_start`'s `data`): exactly the pipeline's "
            "`(train // ranks) // batch` steps a rank, so never more samples than the train split and never fewer"
            " than a pass, and `validation_samples` equal to the validation split (every rank validates its "
            "share); `correct` is an integer in [0, `validation_samples`] and `val_accuracy` = `correct / "
            "validation_samples` exactly, as the float division gives it (a log without `correct`: accuracy × "
            "validation samples within 1e-9 of a whole number, in [0, 1]); no epoch number above the "
            "configuration's `max_epochs`; each layout group's `horovod_size` is the length of its `ranks`, and "
            "its `peak` was measured by that many ranks; a `run_start` without `data` or epochs without `correct`"
            " are *not recorded*"),
             CountsRule, events=("run_start", "layout", "peak", "model_proposed", "epoch", "model_done",
                                 "model_failed", "group_lost")),
        Rule(Row("configuration",
            "every graph's input node is the configured data set's image (digits and CIFAR-10 32×32×3, ImageNet "
            "`image_size` or 224 ×3, synthetic `image_size` or 32 ×3; hdf5: the data check's, or the first "
            "graph's, in every graph) and its output has its classes (10; ImageNet 1,000); the data check read "
            "the configured data set, and its image shape and classes are those; every segment's data check "
            "counted the same; the precision the `system` event chose (under `--precision auto`) is the "
            "configured one; each `model_proposed` names the `search` and `tuner` that produced it in its "
            "`search` object: the configured `search` (`seed` for a proposal without a parent) and `hpo`, which "
            "the rule `algorithms` judges (proposals without the names are *not recorded*)"),
             ConfigurationRule, events=(ANY, "run_start", "system", "model_proposed")),
    )),
    Family("hardware", None, rules=(
        Rule(Row("inventory",
            "each segment has one `system` and one `layout` event; the master, the relays and the groups of the "
            "`layout` partition the world of the `system` event (its `ranks`, each rank on exactly one of its "
            "`hosts`, each host listed once with its ranks): no rank in two groups, groups numbered 0, 1, …, every "
            "rank on the host the `system` event puts it on; a later segment runs only on kinds of host the first "
            "had (processor, vendor, ISA flags, accelerators: names and counts may change with the allocation), "
            "unless its resume says why (`--hardware-changed REASON`, its `run_start`'s "
            "`config.hardware_changed`, shown as a note): every segment is bounded by its own `system` and probes"),
            InventoryRule, events=("run_start", "system", "layout")),
        Rule(Row("hardware bounds",
            "each group's probe (`peak`) at most what the hardware the `system` event names can compute at the "
            "run's precision, by the versioned table of `aiperf_mpi/results/hardware.py`, which the run does not "
            "write (accelerators: the vendor's dense peak, one a rank at most; CPUs: logical processors × the "
            "vendor's highest clock × the ISA flags' operations a cycle, shared among the host's training ranks); "
            "each epoch's training rate `ops_train ÷ (compute + compile)` and validation rate `ops_validation ÷ "
            "(evaluation + compile)`, and every `score`, at most `FAST_ALGORITHMS` = 1.5 × that (fast convolution "
            "algorithms do fewer multiplications than the analytic count); hardware the table does not know, or a "
            "GPU probe on a host that lists none, is *not recorded* (not verified until the table names it); a "
            "rehearsal's epochs are its stand-in's: each phase no shorter than its operations take at the stated "
            "`rehearse_rate` × the group's ranks (the stand-in waits them out)"),
            BoundsRule, events=("run_start", "system", "layout", "peak", "epoch", "score")),
    )),
    Family("data", None, rules=(
        Rule(Row("data splits",
            "a data set the versioned table of `aiperf_mpi/results/datasets.py` names, which the run does not write "
            "(digits 1,437 / 360 of 10 classes at 32×32×3; synthetic 2,048 / 512 of 10 at `image_size` or 32; "
            "CIFAR-10 50,000 / 10,000 of 10 at 32×32×3; ImageNet's ILSVRC-2012 1,281,167 / 50,000 of 1,000 at "
            "`image_size` or 224), is held to the table, not to its log: the data check's train, validation and "
            "class counts and image shape, the seed's (`model_proposed`'s `seed`) input and classes, and every "
            "epoch one pass over the table's splits — `(train // ranks) // batch` steps a rank, never more samples"
            " than the train split, all of the validation split — so a model's samples are at most its epochs × "
            "the train split. Digits and synthetic are built in: every run of them counts their split. CIFAR-10 "
            "and ImageNet are read from the files a run is given: a run that counted a documented split is held "
            "to it; other counts are a user's own set (a CIFAR-10 subset, no larger than CIFAR-10; an "
            "ImageNet-format set, an *unofficial* run by the rule `dataset`), as `hdf5` always is: its logged "
            "counts are kept, and the row says they are taken from the log; a CIFAR-10 or ImageNet run without a "
            "data check is *not recorded*"),
             DataRules, events=("run_start", "layout", "model_proposed", "epoch"), through_view=("layout",)),
    )),
    Family("search", None, events=("run_start", "peak", "model_proposed", "model_done", "model_failed",
                                   "group_lost", "run_stop"),
           files=("graphs/ (each child's parent graph)",), rules=(
        Rule(Row("search space",
            "the space is recomputed from the configuration and the code, not read from the log: each proposal's "
            "`kernel_size` one the tuner chooses (`KERNEL_SIZES`: 3, 5, 7), its `batch_size` one of its tuner's "
            "(the configured `batch_size` of the warm-up rounds, and `batch_choices`' powers of two from 16 to 512"
            " that fit the configured `device_memory_gb` for the seed model of the data the check read); each "
            "child's `morphs` as many as its strategy chains (`explore`, `random`: one; `gp-ucb`: 1 to 3), each "
            "of the search's kinds (`deeper`, `wider`, `add_skip`, `concat_skip`) at a place the search could "
            "morph in the graph it applies to (`is_candidate`: a skip joins two ReLUs), a `deeper` block at the "
            "proposal's own kernel size; a configuration without `device_memory_gb` and `batch_size` is *not "
            "recorded*"),
             SpaceRule, events=("run_start", "model_proposed", "model_done", "model_failed")),
        Rule(Row("repeated graphs",
            "no two tasks have the same graph (`graph_sha256`) unless the log says why the master accepted it "
            "again: a seed (which the master never refuses) proposed while no trained model had an accuracy to "
            "rank when its group's work was handed out (after the group's previous task ended), or a graph whose "
            "earlier task never ended — discarded at its segment's `run_stop`, lost with its group (`group_lost`)"
            " or open when its segment was killed — proposed in a later segment (a resumed master's history holds"
            " the ended models only); proposals without `graph_sha256` are *not recorded*"),
             RepeatsRule, events=("run_start", "peak", "model_proposed", "model_done", "model_failed", "group_lost",
                                  "run_stop")),
    )),
    Family("score", None, events=(ANY,), files=("score.json",), rules=(
        Rule(Row("score",
            "the score recomputed from the log (`aiperf_mpi/results/score.py`, the run's `score_step`) equals "
            "`score.json` — score, regulated score, active time, operations, best accuracy, counts, validity, "
            "every grid sample and, where the record has one, its `energy` (joules, watts and operations per joule "
            "from the nodes' readings, `aiperf_mpi/results/energy.py`) — and every `score` event of the log, as of "
            "that event"),
             ScoreRule, events=(ANY,)),
        Rule(Row("scored window",
            "each segment the run ended itself (its time limit, every group stopped because no new model fit, "
            "`max models`) counts its whole `time_limit`, one a signal or a kill ended its span as it ran; a "
            "`run_stop`'s `reason` is one the master writes and agrees with the log (no signal when every group "
            "had stopped early, no `max models` without `max_models`); every `run_start`'s configuration has a "
            "positive `time_limit`; `score.json` is scored over no less than the run's window"),
             WindowRule, events=()),
        Rule(Row("rule *name*",
            "each validity rule recomputed and equal to `score.json`'s; the log's evidence agrees with the "
            "configuration: the peak probe ran at the configured precision, and no proposal names a search "
            "strategy other than the configured search's. The rule `dataset` (rules 1.1) needs ImageNet with the "
            "counts of a documented split (`IMAGENET_SPLITS` in `aiperf_mpi/results/rules.py`: ILSVRC-2012's "
            "1,281,167 train / 50,000 validation images of 1,000 classes, the only one so far): any other "
            "ImageNet-format set — the small ones the tests write — verifies as an *unofficial* run whose rule "
            "row names its counts, and the `configuration` row notes it; a log older than the data check is "
            "judged by the data set's name"),
             ValidityRules, events=()),
    )),
    Family("energy", None, rules=(
        Rule(Row("energy",
            "each node's energy readings (the `system` event's `energy`, read at the start line by one rank a node, "
            "and each `monitor` event's `energy`) are counter steps physics allows: the system event's `energy` "
            "names each of its hosts once; each counted counter (Cray's `node` where there is one, else each RAPL "
            "package and its DRAM and each NVML GPU, fixed at the start line) never lower unless it is powercap's "
            "with a range to wrap through (`wraps_at`, constant, above the value), no step's mean power above the "
            "versioned table's bound for its domain and no node's mean below the floor of its domains "
            "(`POWER_BOUND_W`, `POWER_FLOOR_W` in `aiperf_mpi/results/energy.py`, which the run does not write); "
            "a record that is not a reading is named. What an honest meter may log (a stale or stepped clock, a "
            "sample without a counter, readings that stop early) gives no figure, as a log without readings "
            "claims none. That the readings are the meters' is a trusted claim (*energy readings*)"),
             EnergyRule, events=()),
    )),
    Family("provenance", None, rules=(
        Rule(Row("provenance",
            "each `run_start` records `aiperf_mpi` (version), `git_commit` (or `unknown`), `source_sha256`, "
            "`python`, `tensorflow`, `horovod`, `mpi`, consistent with its segment's `system` event; every "
            "segment ran the same source"),
             Provenance, events=("run_start",)),
    )),
    Family("mllog", None, files=("mllog.log",), rules=(
        Rule(Row("mllog.log",
            "read streaming beside the event walk (`analysis/verify/mllog.py`): each epoch event has its "
            "`epoch_start` (time = the epoch's `start`), `epoch_stop` (time = its `end`, `ops`, `train_samples`) "
            "and `eval_accuracy` (`val_accuracy`, `eval_samples` = `validation_samples`), times in whole ms as "
            "the writer rounds them (`int(s × 1000)`; a late line's true time is its `metadata.event_time_ms`); "
            "each segment's `run_start` and `run_stop` lines at the events' times, with their segment and reason;"
            " no mllog epoch without its event, except an `epoch_start` alone for the epoch after its task's last"
            " when the task was discarded at `run_stop`, failed, gave up with no epoch (the time limit) or was "
            "training when its segment was killed. Each segment's description lines (`number_of_nodes`, "
            "`accelerators_per_node`, `seed`, the optimiser's, `aiperf_dataset`, `train_samples`, `eval_samples`, "
            "`aiperf_time_limit`, `aiperf_search_space`, `aiperf_system`: the hardware and data an mlcommons reader "
            "believes) equal what the writer makes of the segment's `run_start`, `system` and `layout` events, one "
            "line of each key at most (a line the file lacks claims nothing; one after the last segment's `run_start` "
            "or `run_stop`, which no segment follows, fails); no line of a key aiperf_mpi never writes, and no cut "
            "last line after a `run_stop` (a segment that stopped wrote whole lines; a killed one may end in a cut "
            "line, noted). MLPerf's power lines (issue 53): a segment whose `system` event has a node with energy "
            "readings has one `power_measurement_start` at that event's time and, when the run stopped it, one "
            "`power_measurement_stop` at its `run_stop`'s; each `monitor` sample whose readings step (the ledger "
            "of `aiperf_mpi/results/energy.py`) has its `power_reading` line, the node's mean watts since its "
            "previous sample at the later reading's time with its `host`, each line's `time_ms`, event type and "
            "metadata the writer's (mlcommons' summarizer integrates by `time_ms`); no power line that the readings "
            "do not make, none before its segment's `run_start` or after its `run_stop` (a killed segment's last "
            "second excepted, as for epochs). A missing file fails (every run writes one)"),
             MLLogCheck, events=("run_start", "system", "layout", "monitor", "epoch", "model_done", "model_failed",
                                 "group_lost", "run_stop")),
    )),
    Family("best", None, files=("best/metadata.json", "best/ops.json", "best/graph.json", "graphs/"), rules=(
        Rule(Row("best/ (exported model)",
            "`best/metadata.json`: its task is the best trained model (ties: the earliest) as of the log's last "
            "`run_stop`; model id, accuracy (the best epoch's), the saved epoch's accuracy, samples and number, "
            "hyper-parameters, epochs, data set, precision and each lineage step (task, model, parent, "
            "description, accuracy, hyper-parameters; each step's parent the previous step's model, the first "
            "without one) are the log's; `ops_per_sample`, `params`, `best/ops.json` and `best/graph.json` equal "
            "the recount of the task's graph file at its kernel size. No `best/` (a run ended by a signal, "
            "synthetic data, `--no-report`; `python -m aiperf_mpi.export --single-copy RUN_DIR` makes it later): "
            "*not present*, noted, not failed. A `best/` an earlier segment exported, left by a resume that ended"
            " by a signal or with `--no-report` (the run says so), describes that segment's best model and fails "
            "this row when a later segment trained a better one: export again. A run that meets every rule of "
            "its score is *valid* only with its `best/`: without it the verdict names the rule `best model` "
            "(a reviewer re-evaluates that model: `--reevaluate`)"),
             BestCheck, events=("run_start", "model_proposed", "model_done", "run_stop")),
    )),
    Family("weights", None, files=("weights/*.npz", "best/model.keras", "best/metadata.json", "graphs/"), rules=(
        Rule(Row("weights files",
            "each `weights/*.npz` a `model_done` names has the sha256 that `model_done` logged (`weights_sha256`, "
            "written by the rank that saved the file) and, read from the arrays' headers without TensorFlow, "
            "exactly the arrays of its graph as trained (the stored graph at its `kernel_size`: conv kernel "
            "`(k, k, in, out)` and bias, dense kernel and bias, batch normalisation's four vectors), layer for "
            "layer; `best/model.keras` has the sha256 `best/metadata.json` records (`model_sha256`), and the "
            "`.npz` it was built from had the one the log records (`weights_sha256`). A file no `model_done` names"
            " is noted; a log or an export from before the sha256 was recorded is *not recorded*. A file larger "
            "than its graph's arrays can need (8 bytes an element, 64 KiB an array, 64 MiB besides) is refused "
            "before it is hashed"),
             KeptWeights, events=("model_proposed", "model_done")),
    )),
    Family("fields", None, rules=(
        Rule(Row(ROW, FAMILY_ROW_HOLDS),
             FieldRules, events=()),
    )),
    Family("side files", None, files=("every other file of the run directory or bundle",), rows=(
        Row("side files",
            "every file no row above reads (the report, serving's record, a resume's set-aside cut lines, anything "
            "added) is named, one note for each reason it is not evidence with what would check it, at most 40 by "
            "name and the rest counted: its figures are the submitter's words, not evidence (a report showing ten "
            "times the score verified: "
            "issue 52). It never fails: the verdict says what it did not judge"),
    )),
    Family("bundle", None, events=("run_start", "system", "layout", "peak"),
           files=("verify.txt", "verify.json", "system.json"), rows=(
        Row("bundle verify.txt/json",
            "(a bundle only) `verify.json`'s `verified`, `valid`, `broken_rules` and each row's verdict, and "
            "`verify.txt`'s verdict line and rows, equal what verify recomputes now (the bundle's own rows apart)"),
        Row("bundle system.json",
            "(a bundle only) each segment's `system`, `layout`, `peak` events and `run_start` provenance, as the "
            "log has them"),
    )),
    Family("re-evaluation", None, files=("weights/task-N.npz or best/model.keras", "the data set"), rows=(
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
WALK_ORDER = ("evidence", "mllog", "best", "score", "record", "provenance", "hardware", "data", "search", "weights",
              "fields", "energy")
"""the order in which the walk gives an event to the families that read it: the side files' readers before the
score and the record, so a file that cannot be read fails in the same reader, with the same line, as before the
registry (a family not named here comes last)"""


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


def handlers(entry: Family | Rule, judge: object) -> dict[str, Callable[[dict, int], None]]:
    """Event name (:data:`ANY` for a name the schema does not know) → what the walk calls for it on ``judge``, the
    judge of a family or of one of its rules (what it reads: ``entry``'s)."""
    each = getattr(judge, "each", None)
    unreadable = getattr(judge, "unreadable", None)
    calls = {}
    for name in (*EVENT_NAMES, ANY):
        if name in entry.events or ANY in entry.events:
            named = name in entry.events and name != ANY and name not in entry.through_view
            call = _call(each, getattr(judge, name) if named else None, unreadable)
            if call is not None:
                calls[name] = call
    return calls


def _call(each: Callable | None, named: Callable | None, unreadable: Callable | None) -> Callable | None:
    if each is None and unreadable is None:
        return named
    if each is None and named is None:
        return None

    def call(event: dict, number: int) -> None:
        if (each is None or each(event, number)) and named is not None:
            named(event, number)

    if unreadable is None:
        return call

    def guarded(event: dict, number: int) -> None:
        try:
            call(event, number)
        except NUMBER_ERRORS as exc:
            unreadable(exc, event, number)

    return guarded


def walk(run: Run, families: tuple[Family, ...] = FAMILIES) -> list[Check]:
    """Every family's rows, the log row first: ``events.jsonl`` read once, each event given to its readers."""
    judged: list[tuple[str, Family | Rule, object]] = []
    """(family, what the judge reads, the judge), in the verdict's order: a family's judge, or each of its rules'"""
    for entry in families:
        if entry.judge is not None:
            run.judges[entry.name] = judge = entry.judge(run)
            judged.append((entry.name, entry, judge))
        for rule in entry.rules:
            run.judges[rule.row.name] = judge = rule.judge(run)
            judged.append((entry.name, rule, judge))
    table: dict[str, list[Callable[[dict, int], None]]] = {name: [] for name in (*EVENT_NAMES, ANY)}
    walk_order = {name: place for place, name in enumerate(WALK_ORDER)}
    for _, reads, judge in sorted(judged, key=lambda each: walk_order.get(each[0], len(WALK_ORDER))):
        for name, call in handlers(reads, judge).items():
            table[name].append(call)
    log, events = Check("log"), 0

    def admit(event: object) -> bool:
        """The log row's rule, asked of every event: one JSON object that keeps to the schema (else no family
        reads it)."""
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

    run.view = view = RunView(run.run_dir)

    def judge(event: dict, model: RunModel) -> None:
        run.model = model  # the model so far: the bundle's rows read its segments, even of a log cut short
        view.see(event, model, events)  # what several rules share, before any of them sees the event
        for call in table.get(event[runlog.EVENT], table[ANY]):
            call(event, events)

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
    rows = [log]
    for _, _, judge in judged:
        rows += judge.finish()
    return rows


def markdown(families: tuple[Family, ...] = FAMILIES) -> str:
    """The rules as Markdown (``docs/verify.md``): each row and what must hold, then what each family reads."""
    lines = [f"verify's rules, version {VERIFY_RULES_VERSION} (`analysis/verify/registry.py`), in the verdict's "
             "order:", "", "| check | what must hold |", "|---|---|"]  # fmt: skip
    lines += [f"| {row.name} | {row.holds} |" for entry in families for row in entry.rows]
    lines += ["", "| family | reads events | reads files | rows |", "|---|---|---|---|"]
    for entry in families:
        named = ", ".join(f"`{name}`" for name in entry.events if name != ANY)
        events = "; by name: ".join(part for part in ("every event" if ANY in entry.events else "", named) if part)
        files = ", ".join(f"`{f}`" if " " not in f else f for f in entry.files) or "–"
        lines.append(f"| {entry.name} | {events or '–'} | {files} | {', '.join(row.name for row in entry.rows)} |")
    return "\n".join(lines) + "\n"

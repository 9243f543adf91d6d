"""The validity rules of a run, as versioned data: what each rule needs and how it is judged.

A run is *valid* (as the AIPerf paper defines it) when every rule here
holds; anything else is an *unofficial* run, reported with the rules it
broke and never refused.  The score (:func:`aiperf_mpi.results.score.score_inputs`)
evaluates them, the verifier recomputes them row by row and the report
tabulates them; all three read this module, so a rule changes in one place
and the change is visible in every ``score.json`` by its
:data:`RULES_VERSION` (in the manner of mlcommons' versioned compliance
rules: a result names the ruleset it was judged by).

A rule sees only what the score has at the end of the log: the first
segment's configuration, the data its check counted (``run_start``'s
``data``) and the lowest validation error reached.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from aiperf_mpi.results.datasets import BUILT_IN, DOCUMENTED_SPLITS
from aiperf_mpi.results.precisions import PRECISIONS, logged_precision

RULES_VERSION = "1.2"
"""bump when a rule is added, removed or judged differently"""
MAX_VALID_ERROR = 0.30
"""the largest final top-1 validation error a valid run may end with"""
VALID_PRECISIONS = tuple(PRECISIONS)
"""FP16 or wider: every precision a run may train at (none narrower is in the table)"""
VALID_SEARCH = "bayesian"
VALID_TUNER = "tpe"
"""the fixed search algorithms: the network-morphism Bayesian search and TPE (also what a log without them ran)"""
IMAGENET_SPLITS: Mapping[str, Mapping[str, int]] = MappingProxyType({
    split.name: MappingProxyType(split.counts()) for split in DOCUMENTED_SPLITS["imagenet"]
})  # fmt: skip
"""the ImageNet splits a valid run trains and validates on, by name (documented variants, from the versioned
table :data:`aiperf_mpi.results.datasets.DOCUMENTED_SPLITS`): ILSVRC-2012's 1,281,167 training and 50,000
validation images of 1,000 classes, as the standard converter writes them.  A variant is one more row there,
and a new :data:`RULES_VERSION`.  Any other split of ImageNet-format data (the small sets the tests write, a
subset) runs and verifies, as an *unofficial* run: the rule ``dataset`` names its counts."""
BUILT_IN_SPLITS: Mapping[str, Mapping[str, int]] = MappingProxyType({
    name: MappingProxyType(split.counts()) for name in BUILT_IN for split in DOCUMENTED_SPLITS[name]
    if not split.resizable
})  # fmt: skip
"""the data sets the package makes at one fixed size (the embedded digits), from the versioned table
:data:`aiperf_mpi.results.datasets.DOCUMENTED_SPLITS`: a log that names one with other counts was relabelled.
The compliance ruleset holds ``mllog.log``'s counts to this and to :data:`IMAGENET_SPLITS` (CIFAR-10 may be read
in part, synthetic at any size: their counts are the log's there, as verify's ``data splits`` row says)."""


@dataclass(frozen=True)
class RuleInputs:
    """What a rule is judged on: the run's configuration (its first ``run_start``) and its final error."""

    config: Mapping
    error: float | None
    """1 − the best validation accuracy reached; None when there is none (synthetic data, no epoch)"""
    data: Mapping | None = None
    """what the data check counted (the first ``run_start``'s ``data``); None in a log older than the field,
    whose ImageNet is judged by its name alone (the verifier says its counts are not recorded)"""


@dataclass(frozen=True)
class Rule:
    """One validity rule: its name, what it needs (in words), the value it reads and its test of that value."""

    name: str
    need: str
    value: Callable[[RuleInputs], object]
    ok: Callable[[object], bool]

    def evaluate(self, inputs: RuleInputs) -> dict:
        """The rule's record in ``score.json``: ``{"ok", "value", "need"}``."""
        value = self.value(inputs)
        return {"ok": bool(self.ok(value)), "value": value, "need": self.need}


def imagenet_split(data: Mapping) -> str | None:
    """The name of the documented ImageNet split (:data:`IMAGENET_SPLITS`) the data check's counts are, or None."""
    counts = {key: data.get(key) for key in ("train", "validation", "classes")}
    return next((name for name, split in IMAGENET_SPLITS.items() if counts == dict(split)), None)


def _dataset(inputs: RuleInputs) -> object:
    """The data set's name; ImageNet whose counted splits are no documented split says so, with its counts."""
    name, data = inputs.config.get("dataset"), inputs.data
    if name != "imagenet" or not isinstance(data, Mapping) or imagenet_split(data) is not None:
        return name
    counts = ", ".join(f"{data.get(key)!s} {key}" for key in ("train", "validation", "classes"))
    return f"imagenet, an undocumented split ({counts})"


def _algorithms(inputs: RuleInputs) -> str:
    return f"{inputs.config.get('search', VALID_SEARCH)}+{inputs.config.get('hpo', VALID_TUNER)}"


def _training(inputs: RuleInputs) -> str:
    """A rehearsal (``--rehearse``) trained nothing: its operations and accuracies are a stand-in's."""
    return "a rehearsal (stand-in arithmetic)" if inputs.config.get("rehearse") else "trained"


RULES: tuple[Rule, ...] = (
    Rule("dataset", f"imagenet, the {' or '.join(IMAGENET_SPLITS)} split", _dataset,
         lambda value: value == "imagenet"),
    Rule("error", f"≤ {MAX_VALID_ERROR}", lambda inputs: inputs.error,
         lambda value: value is not None and value <= MAX_VALID_ERROR),
    Rule("precision", "fp16 or wider", lambda inputs: logged_precision(inputs.config),
         lambda value: value in VALID_PRECISIONS),
    Rule("algorithms", f"{VALID_SEARCH}+{VALID_TUNER}", _algorithms,
         lambda value: value == f"{VALID_SEARCH}+{VALID_TUNER}"),
    Rule("training", "trained (not a rehearsal)", _training, lambda value: value == "trained"),
)  # fmt: skip
"""the rules, in the order every output lists them"""
RULE_NAMES = tuple(rule.name for rule in RULES)


def evaluate_rules(config: Mapping, error: float | None, data: Mapping | None = None) -> dict[str, dict]:
    """Every rule's record, by name, in :data:`RULES` order (the ``rules`` of ``score.json``)."""
    inputs = RuleInputs(config, error, data)
    return {rule.name: rule.evaluate(inputs) for rule in RULES}


def shown_value(value: object) -> str:
    """A rule's value as the verifier and the report print it (an error to four places)."""
    return f"{value:.4f}" if isinstance(value, float) else str(value)

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
segment's configuration and the lowest validation error reached.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from aiperf_mpi.results.precisions import PRECISIONS

RULES_VERSION = "1.0"
"""bump when a rule is added, removed or judged differently"""
MAX_VALID_ERROR = 0.30
"""the largest final top-1 validation error a valid run may end with"""
VALID_PRECISIONS = tuple(PRECISIONS)
"""FP16 or wider: every precision a run may train at (none narrower is in the table)"""
VALID_SEARCH = "bayesian"
VALID_TUNER = "tpe"
"""the fixed search algorithms: the network-morphism Bayesian search and TPE (also what a log without them ran)"""


@dataclass(frozen=True)
class RuleInputs:
    """What a rule is judged on: the run's configuration (its first ``run_start``) and its final error."""

    config: Mapping
    error: float | None
    """1 − the best validation accuracy reached; None when there is none (synthetic data, no epoch)"""


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


def _algorithms(inputs: RuleInputs) -> str:
    return f"{inputs.config.get('search', VALID_SEARCH)}+{inputs.config.get('hpo', VALID_TUNER)}"


RULES: tuple[Rule, ...] = (
    Rule("dataset", "imagenet", lambda inputs: inputs.config.get("dataset"), lambda value: value == "imagenet"),
    Rule("error", f"≤ {MAX_VALID_ERROR}", lambda inputs: inputs.error,
         lambda value: value is not None and value <= MAX_VALID_ERROR),
    Rule("precision", "fp16 or wider", lambda inputs: inputs.config.get("precision", "fp32"),
         lambda value: value in VALID_PRECISIONS),
    Rule("algorithms", f"{VALID_SEARCH}+{VALID_TUNER}", _algorithms,
         lambda value: value == f"{VALID_SEARCH}+{VALID_TUNER}"),
)  # fmt: skip
"""the rules, in the order every output lists them"""
RULE_NAMES = tuple(rule.name for rule in RULES)


def evaluate_rules(config: Mapping, error: float | None) -> dict[str, dict]:
    """Every rule's record, by name, in :data:`RULES` order (the ``rules`` of ``score.json``)."""
    inputs = RuleInputs(config, error)
    return {rule.name: rule.evaluate(inputs) for rule in RULES}


def shown_value(value: object) -> str:
    """A rule's value as the verifier and the report print it (an error to four places)."""
    return f"{value:.4f}" if isinstance(value, float) else str(value)

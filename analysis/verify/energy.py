"""The row ``energy`` (issue 53): the nodes' meter readings held to physics.

The readings are the nodes' own meters as the run logged them: the ``system`` event's ``energy`` (one rank a node
read it at the start line) and each ``monitor`` event's ``energy`` (the node's monitor read it at each sample).
The model streamed them into each node's counters as the walk read the log
(:class:`aiperf_mpi.results.energy.EnergyLedger`, the same code the run's score used); this rule names every
step that is not physics: a counter that went down without a range to wrap through, a step whose mean power is
above the versioned table's bound for its domain (:data:`aiperf_mpi.results.energy.POWER_BOUND_W`), a reading not
after the one before, a record that is not a reading.  That the figures beside the score are the readings' is the
row ``score``'s (the score's ``energy`` record, recomputed and compared where the record has one).  What no file
can show, that the readings are the meters' and not lower ones, is a trusted claim (:mod:`analysis.trusted`).
"""

from __future__ import annotations

from analysis.checks import Check, Run


class EnergyRule:
    """The row ``energy``: every reading a counter step that physics allows."""

    def __init__(self, run: Run) -> None:
        self.run = run

    def finish(self) -> list[Check]:
        check = Check("energy")
        model = self.run.model
        if model is None:
            return [check]
        ledger = model.energy
        check.problems += ledger.problems()
        check.notes += ledger.notes()
        nodes = sum(len(segment.nodes) for segment in ledger.segments)
        counters = sum(len(node.counters) for segment in ledger.segments for node in segment.nodes.values())
        unmeasured = sum(len(segment.unmeasured) for segment in ledger.segments)
        if not nodes and not unmeasured:
            check.summary = "no energy readings in the log: nothing is claimed"
        else:
            check.summary = (f"{counters} counter(s) on {nodes} node-segment(s) held to the power table; "
                             f"{unmeasured} node-segment(s) not measured")  # fmt: skip
        return [check]

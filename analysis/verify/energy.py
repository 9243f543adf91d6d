"""The row ``energy`` (issue 53): the nodes' meter readings held to physics.

The readings are the nodes' own meters as the run logged them: the ``system`` event's ``energy`` (one rank a node
read it at the start line) and each ``monitor`` event's ``energy`` (the node's monitor read it at each sample).
The model streamed them into each node's counters as the walk read the log
(:class:`aiperf_mpi.results.energy.EnergyLedger`, the same code the run's score used); this rule, a plain function
of the run unit (:mod:`analysis.verify.units`), names every step that is not physics: a counter that went down
without a range to wrap through, a step whose mean power is above the versioned table's bound for its domain
(:data:`aiperf_mpi.results.energy.POWER_BOUND_W`), a reading not after the one before, a record that is not a
reading.  That the figures beside the score are the readings' is the row ``score``'s (the score's ``energy``
record, recomputed and compared where the record has one).  What no file can show, that the readings are the
meters' and not lower ones, is a trusted claim (:mod:`analysis.trusted`).
"""

from __future__ import annotations

from analysis.verify.units import END, Findings, RunUnit, note, problem, summary


def energy(run: RunUnit) -> Findings:
    """each node's energy readings (the `system` event's `energy`, read at the start line by one rank a node, and
    each `monitor` event's `energy`) are counter steps physics allows: the system event's `energy` names each of
    its hosts once; each counted counter (Cray's `node` where there is one, else each RAPL package and its DRAM and
    each NVML GPU, fixed at the start line) never lower unless it is powercap's with a range to wrap through
    (`wraps_at`, constant, above the value), no step's mean power above the versioned table's bound for its domain
    and no node's mean below the floor of its domains (`POWER_BOUND_W`, `POWER_FLOOR_W` in
    `aiperf_mpi/results/energy.py`, which the run does not write); a record that is not a reading is named. What an
    honest meter may log (a stale or stepped clock, a sample without a counter, readings that stop early) gives no
    figure, as a log without readings claims none. That the readings are the meters' is a trusted claim (*energy
    readings*)"""
    ledger = getattr(run.model, "energy", None)
    if ledger is None:  # no event was read
        return
    yield from (problem(END, line) for line in ledger.problems())
    yield from (note(END, line) for line in ledger.notes())
    nodes = sum(len(segment.nodes) for segment in ledger.segments)
    counters = sum(len(node.counters) for segment in ledger.segments for node in segment.nodes.values())
    unmeasured = sum(len(segment.unmeasured) for segment in ledger.segments)
    if not nodes and not unmeasured:
        yield summary("no energy readings in the log: nothing is claimed")
    else:
        yield summary(f"{counters} counter(s) on {nodes} node-segment(s) held to the power table; {unmeasured} "
                      "node-segment(s) not measured")  # fmt: skip

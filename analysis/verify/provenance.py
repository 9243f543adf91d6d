"""The family ``provenance``: the code and software stack each segment records (its row:
:data:`analysis.verify.registry.FAMILIES`)."""

from __future__ import annotations

from collections.abc import Mapping

from aiperf_mpi.results import provenance as provenance_module
from aiperf_mpi.results.logmodel import Segment
from analysis.checks import Check, Run, is_hex, same, short


class Provenance:
    """Each segment's provenance (its run_start's), against its system event (its last, as the model keeps it) and
    the first segment's: judged once the segment is whole, at the next run_start or the end of the log."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.check = Check("provenance")
        self.first: Mapping | None = None
        """the first segment's provenance that was recorded"""

    def run_start(self, _: dict, __: int) -> None:
        segments = self.run.model.segment_records  # type: ignore[union-attr]
        if len(segments) > 1:
            self._judge(segments[-2])

    def _judge(self, segment: Segment) -> None:
        check, record, system, name = self.check, segment.logged_provenance, segment.system, f"segment {segment.number}"
        if record is None:
            check.missing.append(f"{name}'s run_start has no provenance (a log older than the field): a "
                                 "submission must record its code and software stack")  # fmt: skip
            return
        absent = [k for k in provenance_module.REQUIRED if record.get(k) is None]
        if absent:
            check.problems.append(f"{name}: provenance lacks {', '.join(absent)}")
        if not is_hex(record.get("source_sha256"), 64):
            check.problems.append(f"{name}: source_sha256 {record.get('source_sha256')!r} is not a sha256")
        commit = record.get("git_commit")
        if commit != provenance_module.UNKNOWN and not is_hex(commit, 40):
            check.problems.append(f"{name}: git_commit {commit!r} is neither a commit nor 'unknown'")
        system = system or {}
        for key in ("python", "tensorflow", "horovod", "mpi", "aiperf_mpi"):
            if key in system and system[key] is not None and not same(system[key], record.get(key)):
                check.problems.append(f"{name}: provenance {key} {short(record.get(key))}, its system event "
                                      f"{short(system[key])}")  # fmt: skip
        if record.get("git_dirty"):
            check.notes.append(f"{name}: the git checkout had local changes (the source hash says which "
                               "code ran)")  # fmt: skip
        if self.first is None:
            self.first = record
        elif record.get("source_sha256") != self.first.get("source_sha256"):
            check.problems.append(f"{name} ran other source code than segment 1 (source_sha256 differs)")

    def finish(self) -> list[Check]:
        check = self.check
        if self.run.model is not None and self.run.model.segment_records:
            self._judge(self.run.model.segment_records[-1])
        first = self.first
        if first is None:
            check.summary = "none recorded"
            return [check]
        commit = first.get("git_commit")
        check.summary = (f"aiperf_mpi {first.get('aiperf_mpi')}, commit {str(commit)[:12]}, source "
                         f"{str(first.get('source_sha256'))[:12]}…, Python {first.get('python')}, "
                         f"TensorFlow {first.get('tensorflow')}, Horovod {first.get('horovod')}, "
                         f"MPI {_mpi_name(first.get('mpi'))}")  # fmt: skip
        mine, _ = provenance_module.source_sha256()
        if mine == first.get("source_sha256"):
            check.notes.append("this verifier runs the same aiperf_mpi source as the run")
        else:
            check.notes.append(f"this verifier runs other aiperf_mpi source ({mine[:12]}…): its counter may "
                               "differ from the run's")  # fmt: skip
        return [check]


def _mpi_name(mpi: object) -> str:
    if isinstance(mpi, Mapping):
        return f"{mpi.get('vendor', '?')} {mpi.get('version', '?')}"
    return str(mpi)

"""The family ``provenance``: the code and software stack each segment records (its row:
:data:`analysis.verify.registry.FAMILIES`), as plain functions of the run's units (:mod:`analysis.verify.units`)."""

from __future__ import annotations

from collections.abc import Mapping

from aiperf_mpi.results import provenance as provenance_module
from analysis.checks import is_hex, same, short
from analysis.verify.units import END, Findings, RunUnit, SegmentUnit, missing, note, problem, summary


def provenance(segment: SegmentUnit) -> Findings:
    """each `run_start` records `aiperf_mpi` (version), `git_commit` (or `unknown`), `source_sha256`, `python`,
    `tensorflow`, `horovod`, `mpi`, consistent with its segment's `system` event; every segment ran the same
    source"""
    record, name = segment.record.logged_provenance, f"segment {segment.record.number}"
    if record is None:
        yield missing(END, f"{name}'s run_start has no provenance (a log older than the field): a submission must "
                           "record its code and software stack")  # fmt: skip
        return
    absent = [k for k in provenance_module.REQUIRED if record.get(k) is None]
    if absent:
        yield problem(END, f"{name}: provenance lacks {', '.join(absent)}")
    if not is_hex(record.get("source_sha256"), 64):
        yield problem(END, f"{name}: source_sha256 {record.get('source_sha256')!r} is not a sha256")
    commit = record.get("git_commit")
    if commit != provenance_module.UNKNOWN and not is_hex(commit, 40):
        yield problem(END, f"{name}: git_commit {commit!r} is neither a commit nor 'unknown'")
    system = segment.record.system or {}
    for key in ("python", "tensorflow", "horovod", "mpi", "aiperf_mpi"):
        if key in system and system[key] is not None and not same(system[key], record.get(key)):
            yield problem(END, f"{name}: provenance {key} {short(record.get(key))}, its system event "
                               f"{short(system[key])}")  # fmt: skip
    if record.get("git_dirty"):
        yield note(END, f"{name}: the git checkout had local changes (the source hash says which code ran)")
    first = _first_recorded(segment.before)
    if first is not None and record.get("source_sha256") != first.get("source_sha256"):
        yield problem(END, f"{name} ran other source code than segment 1 (source_sha256 differs)")


def provenance_recorded(run: RunUnit) -> Findings:
    """(provenance) the first segment's stack, and whether this verifier runs the same source"""
    first = _first_recorded(run.segments)
    if first is None:
        yield summary("none recorded")
        return
    commit = first.get("git_commit")
    yield summary(f"aiperf_mpi {first.get('aiperf_mpi')}, commit {str(commit)[:12]}, source "
                  f"{str(first.get('source_sha256'))[:12]}…, Python {first.get('python')}, "
                  f"TensorFlow {first.get('tensorflow')}, Horovod {first.get('horovod')}, "
                  f"MPI {_mpi_name(first.get('mpi'))}")  # fmt: skip
    mine, _ = provenance_module.source_sha256()
    if mine == first.get("source_sha256"):
        yield note(END, "this verifier runs the same aiperf_mpi source as the run")
    else:
        yield note(END, f"this verifier runs other aiperf_mpi source ({mine[:12]}…): its counter may differ from the "
                        "run's")  # fmt: skip


def _first_recorded(segments) -> Mapping | None:
    """The provenance of the first of ``segments`` that recorded one (None: none did)."""
    return next((s.logged_provenance for s in segments if s.logged_provenance is not None), None)


def _mpi_name(mpi: object) -> str:
    if isinstance(mpi, Mapping):
        return f"{mpi.get('vendor', '?')} {mpi.get('version', '?')}"
    return str(mpi)

"""Forgeries of the hardware a run names, and of what exists once, that verify must refuse (issue 37).

Found by a review done as a forger would (each raised the verified score, ×1.1 to ×16, or turned a rehearsal
into a valid run, and passed before results/hardware.py 2026.12-2).  Each starts from :func:`consistent_run`,
is rewritten with :func:`forge` (every score recomputed by the package's own code) and is judged by ``verify``.
Most fill the scored window with epochs back to back (:func:`_densify`), so the score verify would accept is a
real score.  Three classes stay on trust by design and are docs/verify.md's ("What is taken on trust"): the
logical processors, the precision a run names, and host names (a CPU host listed under two names).
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from aiperf_mpi.results import runlog
from aiperf_mpi.results.hardware import STAND_IN_DEVICE, accelerator_peak, cpu_peak
from analysis import bundle, checks, verify
from tests.support.tarballs import members, write_members
from tests.support.verify_runs import HOST, as_rehearsal, consistent_run, find, forge, sync_record, write_best
from tests.support.verify_runs import resumed_events as _resume

B200_FP16 = 2.25e15
"""the table's dense fp16 peak of one B200"""
CPU_HOST = {**HOST, "accelerators": []}
"""the consistent run's node without its accelerators: 128 logical processors of an AMD EPYC 9575F"""


def _score(run_dir: Path) -> float:
    return json.loads((run_dir / "score.json").read_text())["score"]


def _epochs(events: list[dict]) -> list[dict]:
    return [e for e in events if e["event"] == runlog.EPOCH]


def _peaks(events: list[dict], ops_per_second: float, precision: str | None = None) -> None:
    for peak in (e for e in events if e["event"] == runlog.PEAK):
        peak["ops_per_second"] = ops_per_second
        if precision is not None:
            peak["precision"] = precision


def _densify(events: list[dict], rate: float, limit: float | None = None) -> list[dict]:
    """Every task's epochs back to back at ``rate`` ops/s (training and validation alike) from its proposal to the
    end of the window, copies of its last epoch renumbered; ``max_epochs`` raised; ``limit``: a longer window."""
    config = find(events, runlog.RUN_START)["config"]
    if limit is not None:
        config["time_limit"] = float(limit)
        find(events, runlog.RUN_STOP)["time"] = 1000.0 + limit
        find(events, runlog.SCORE)["time"] = 1000.1 + limit
    stop = 1000.0 + config["time_limit"] - 1.0
    tail = [find(events, runlog.RUN_STOP), find(events, runlog.SCORE)]
    done = {e["task"]: e for e in events if e["event"] == runlog.MODEL_DONE}
    out = [e for e in events if e["event"] not in (runlog.EPOCH, runlog.MODEL_DONE, runlog.RUN_STOP, runlog.SCORE)]
    most = 0
    for task in done:
        proto = [e for e in _epochs(events) if e["task"] == task][-1]
        compute, evaluation = proto["ops_train"] / rate, proto["ops_validation"] / rate
        gap = min(0.002, (compute + evaluation) * 0.002)
        wall = compute + evaluation + gap
        t, number = find(events, runlog.MODEL_PROPOSED, task=task)["time"] + 0.01, 0
        while t + wall + 2 * gap < stop:
            number += 1
            epoch = copy.deepcopy(proto)
            epoch.update(epoch=number, start=t, end=t + wall, time=t + wall + gap / 2, compute=compute,
                         evaluation=evaluation, data_wait=0.0, compile=0.0)  # fmt: skip
            out.append(epoch)
            t += wall + gap
        most = max(most, number)
    last = max(e["time"] for e in out)
    out += [{**copy.deepcopy(done[task]), "time": last + 0.0005 + 0.0001 * task} for task in done]
    out.sort(key=lambda e: e["time"])
    config["max_epochs"] = max(config["max_epochs"], most)
    for task in done:
        sync_record(out, task)
    return out + tail


def _row(run: Path, name: str) -> checks.Check:
    """The verdict's row ``name``."""
    return next(c for c in verify.verify(run).checks if c.name == name)


def _on_host(events: list[dict], host: dict) -> None:
    find(events, runlog.SYSTEM)["hosts"] = [host]


def _cpu_forgery(run: Path, host: dict, precision: str, rate: float) -> float:
    """Both groups on one CPU-only ``host`` at ``precision``, probes at ``rate`` each (what the forged flags or vendor
    would have allowed), epochs back to back at that rate over 3,000 s; the score the forgery claims."""

    def change(events: list[dict]) -> list[dict]:
        find(events, runlog.RUN_START)["config"]["precision"] = precision
        _on_host(events, host)
        _peaks(events, 0.999 * rate, precision)
        return _densify(events, 0.999 * rate, limit=3000)

    forge(run, change)
    return _score(run)


def _one_clock(host: dict, per_cycle: int, clock: float = 5.7e9) -> float:
    """Half the host's processors (one group's share) × ``clock`` × ``per_cycle``: the rate a forged flag claimed."""
    return host["cores"] / 2 * clock * per_cycle


# ---------------------------------------------------------------- class 1: accelerators counted once per group


def test_f1_a_two_b200_host_with_four_training_ranks_is_counted_as_four_b200(run) -> None:
    """2 B200 (4.5e15 fp16 by the table), 2 groups of 2 ranks: each group is bounded by 2 B200; score 8.6e15."""

    def change(events: list[dict]) -> list[dict]:
        _on_host(events, {**HOST, "accelerators": ["NVIDIA B200"] * 2})
        _peaks(events, 2 * B200_FP16)
        return _densify(events, 2 * B200_FP16)

    forge(run, change)
    assert _score(run) > 1.9 * 2 * B200_FP16  # past what the two devices can compute at all
    assert verify.main([str(run)]) == 1


def test_f9_a_mixed_host_counts_every_used_device_at_its_best_devices_peak(run) -> None:
    """1 B200 + 3 V100 (2.625e15 fp16 in all): each 2-rank group is bounded by 2 × B200; score 8.6e15 (× 3.3)."""

    def change(events: list[dict]) -> list[dict]:
        _on_host(events, {**HOST, "accelerators": ["NVIDIA B200"] + ["Tesla V100-SXM2-32GB"] * 3})
        _peaks(events, 2 * B200_FP16)
        return _densify(events, 2 * B200_FP16)

    forge(run, change)
    assert _score(run) > 3 * (B200_FP16 + 3 * 125e12)
    assert verify.main([str(run)]) == 1


# ---------------------------------------------------------------- class 1: the table's names and figures


def test_f20_a_model_number_is_not_read_inside_another() -> None:
    """A case-blind substring read 'NVIDIA RTX A1000' (an Ampere workstation card, ≈ 6.7 TF fp32) as an A100."""
    assert accelerator_peak("NVIDIA RTX A1000", "fp16").ops_per_second is None


def test_f20_an_rtx_a1000_host_scores_as_four_a100s(run) -> None:
    def change(events: list[dict]) -> list[dict]:
        _on_host(events, {**HOST, "accelerators": ["NVIDIA RTX A1000"] * 4})
        _peaks(events, 2 * 312e12)
        return _densify(events, 2 * 312e12)

    forge(run, change)
    assert _score(run) > 1e15  # four RTX A1000 cannot reach a quarter of it
    assert verify.main([str(run)]) == 1


def test_f21_an_nvl_card_is_read_as_the_sxm_part() -> None:
    assert accelerator_peak("NVIDIA H100 NVL", "fp16").ops_per_second <= 835.5e12


def test_f10_an_mi250x_gcd_is_bounded_by_the_whole_packages_peak() -> None:
    assert accelerator_peak("AMD Instinct MI250X", "fp16").ops_per_second <= 383e12 / 2


# ---------------------------------------------------------------- class 1: CPU flags, vendor, cores


def test_f4_an_amd_host_claiming_amx(run) -> None:
    true = cpu_peak(CPU_HOST, "bf16").ops_per_second  # avx512_bf16: 9.3e13
    forged = {**CPU_HOST, "cpu_flags": [*CPU_HOST["cpu_flags"], "amx_bf16"]}
    assert _cpu_forgery(run, forged, "bf16", _one_clock(CPU_HOST, 2048)) > 15 * true
    assert verify.main([str(run)]) == 1


@pytest.mark.parametrize(("flags", "precision", "per_cycle"), [(["sve"], "fp32", 64), (["bf16"], "bf16", 128)])
def test_f5_an_x86_host_claiming_an_arm_flag(run, flags: list[str], precision: str, per_cycle: int) -> None:
    avx2 = {**CPU_HOST, "cpu_flags": ["sse2", "avx", "fma", "avx2"]}
    true = cpu_peak(avx2, precision).ops_per_second
    assert _cpu_forgery(run, {**avx2, "cpu_flags": [*avx2["cpu_flags"], *flags]}, precision,
                        _one_clock(avx2, per_cycle)) > 1.8 * true  # fmt: skip
    assert verify.main([str(run)]) == 1


def test_f5c_an_arm_host_claiming_amx(run) -> None:
    arm = {**CPU_HOST, "cpu": "NVIDIA Grace", "cpu_vendor": "ARM", "cpu_flags": ["asimd", "sve", "bf16"]}
    true = cpu_peak(arm, "bf16").ops_per_second
    forged = {**arm, "cpu_flags": [*arm["cpu_flags"], "amx_bf16"]}
    assert _cpu_forgery(run, forged, "bf16", _one_clock(arm, 2048, 4.5e9)) > 15 * true
    assert verify.main([str(run)]) == 1


def test_f6b_an_amd_epyc_named_genuineintel(run) -> None:
    """Intel's 6.2 GHz ceiling for an AMD EPYC."""
    true = cpu_peak(CPU_HOST, "fp32").ops_per_second
    assert _cpu_forgery(run, {**CPU_HOST, "cpu_vendor": "GenuineIntel"}, "fp32", _one_clock(CPU_HOST, 64, 6.2e9)) \
        > 1.04 * true
    assert verify.main([str(run)]) == 1


# ---------------------------------------------------------------- class 2: a host twice, resumed segments


def _two_cpu_hosts(events: list[dict]) -> None:
    """The one CPU host as two of the same kind, h0 (the master and group 0) and h1 (group 1)."""
    system = find(events, runlog.SYSTEM)
    system["hosts"] = [{**CPU_HOST, "ranks": [0, 1, 2]}, {**CPU_HOST, "host": "h1", "ranks": [3, 4]}]
    system["nodes"] = 2
    layout = find(events, runlog.LAYOUT)
    layout.update(hosts=["h0", "h0", "h0", "h1", "h1"], nodes=[0, 0, 0, 1, 1])
    layout["groups"][1].update(host="h1", node=1)


def _squeezed_resume(run: Path, second_host: Callable[[list[dict]], float]) -> None:
    """A CPU run of two segments (``run``: a digits run, whose epochs fit a CPU); the second's system changed by
    ``second_host`` (which returns each group's bound there), its probes at that bound, its epochs at 1.45 × it."""

    def change(events: list[dict]) -> list[dict]:
        find(events, runlog.RUN_START)["config"]["precision"] = "fp32"
        _on_host(events, CPU_HOST)
        _peaks(events, 1e12, "fp32")

        def second(again: list[dict]) -> None:
            bound = second_host(again)
            _peaks(again, bound)
            for epoch in _epochs(again):
                epoch.update(compute=epoch["ops_train"] / (1.45 * bound), data_wait=0.0,
                             evaluation=epoch["ops_validation"] / (1.45 * bound))  # fmt: skip

        return _resume(events, run, second)

    forge(run, change)


def test_rs1_a_resumed_segment_on_the_same_host_with_eight_times_its_processors(tmp_path) -> None:
    """Segment 2's epochs train at 11.6 × the first segment's host (8 × its processors, × 1.45)."""
    run = consistent_run(tmp_path / "run", dataset="digits")

    def more_cores(again: list[dict]) -> float:
        _on_host(again, {**CPU_HOST, "cores": 1024})
        return cpu_peak({**CPU_HOST, "cores": 1024}, "fp32").ops_per_second / 2

    _squeezed_resume(run, more_cores)
    assert _row(run, "inventory").verdict == checks.MISMATCH  # the hardware's rule, not another that happens to fire


def test_rs2_a_resumed_segment_that_adds_a_second_host_of_the_same_kind(tmp_path) -> None:
    run = consistent_run(tmp_path / "run", dataset="digits")

    def second_host(again: list[dict]) -> float:
        _two_cpu_hosts(again)
        return cpu_peak(CPU_HOST, "fp32").ops_per_second

    _squeezed_resume(run, second_host)
    assert _row(run, "inventory").verdict == checks.MISMATCH


def test_rs3_a_resumed_segment_with_more_accelerators_a_host_is_named(run) -> None:
    def change(events: list[dict]) -> list[dict]:
        return _resume(events, run, lambda again: _on_host(again, {**HOST, "accelerators": ["NVIDIA B200"] * 8}))

    forge(run, change)
    assert verify.main([str(run)]) == 1


def test_rs4_a_resumed_segment_without_its_system_event_is_not_verified(run) -> None:
    def change(events: list[dict]) -> list[dict]:
        return _resume(events, run, lambda again: again.remove(find(again, runlog.SYSTEM)))

    forge(run, change)
    assert verify.main([str(run)]) == 1


# ---------------------------------------------------------------- class 3: the score's bound


def test_s1_fast_algorithms_slack_cannot_reach_the_score(run) -> None:
    """Epochs back to back at 1.45 × the table (each within FAST_ALGORITHMS): the score passes the peaks' sum."""

    def change(events: list[dict]) -> list[dict]:
        _peaks(events, 2 * B200_FP16)
        return _densify(events, 1.45 * 2 * B200_FP16)

    forge(run, change)
    rows = {c.name: c for c in verify.verify(run).checks}
    assert rows["physics"].verdict == checks.MISMATCH


def test_s4_a_probe_whose_one_rank_beats_its_device(run) -> None:
    def change(events: list[dict]) -> None:
        for peak in (e for e in events if e["event"] == runlog.PEAK):
            peak.update(device="GPU:0", matrix_size=8192, seconds=1.0, per_rank=[1.8 * B200_FP16, 0.2 * B200_FP16],
                        ops_per_second=2 * B200_FP16)  # fmt: skip

    forge(run, change)
    assert verify.main([str(run)]) == 1


# ---------------------------------------------------------------- class 4: a rehearsal relabelled


def _rehearsal(events: list[dict]) -> None:
    """The consistent run as a rehearsal writes it: the configuration says so, the probes are the stand-in's."""
    as_rehearsal(events)  # its stated rate: one its epochs keep, as the stand-in's do
    find(events, runlog.RUN_START)["config"].update(rehearse_allreduce=1.0)
    for peak in (e for e in events if e["event"] == runlog.PEAK):
        peak.update(device=STAND_IN_DEVICE, matrix_size=0, seconds=0.0, per_rank=[1e15, 1e15], threads=[])


def test_rh0_a_rehearsal_as_written_is_unofficial(run) -> None:
    forge(run, _rehearsal)
    result = verify.verify(run)
    assert result.ok and not result.valid and "training" in result.broken_rules


@pytest.mark.parametrize("squeeze", [1000.0, 1.01])
def test_rh3_a_rehearsals_clocks_squeezed_are_not_its_stand_ins(run, squeeze) -> None:
    """Issue 45: a rehearsal whose clocks were divided by 1,000 verified ("an unofficial run") at × 1,000 the score:
    its epochs are held to its stand-in's stated rate, which waits each phase out."""

    def change(events: list[dict]) -> None:
        _rehearsal(events)
        for epoch in _epochs(events):
            epoch["compute"] /= squeeze
            epoch["evaluation"] /= squeeze

    forge(run, change)
    row = _row(run, "hardware bounds")
    assert row.verdict == checks.MISMATCH and "not the stand-in's clock" in row.problems[0], row.problems


def _relabelled(events: list[dict]) -> None:
    """The rehearsal with only its configuration's flag turned off: its probes still say ``rehearsal stand-in``."""
    _rehearsal(events)
    find(events, runlog.RUN_START)["config"]["rehearse"] = False


def test_rh1_a_rehearsal_with_only_its_configuration_flag_turned_off(run) -> None:
    forge(run, _relabelled)
    assert verify.main([str(run)]) == 1


def test_rh2_the_relabelled_rehearsal_with_a_best_directory_is_valid(run) -> None:
    forge(run, _relabelled)
    write_best(run)
    result = verify.verify(run)
    assert not (result.ok and result.valid), result.verdict_line()


# ---------------------------------------------------------------- class 5: the bundle


def _padded(run: Path, member: str, pad: int) -> None:
    """``member`` padded with ``pad`` trailing spaces: still valid JSON, and read whole by json."""
    with open(run / member, "ab") as handle:
        handle.write(b" " * pad)


def test_b_a_run_whose_score_json_is_padded_is_refused_unread(run) -> None:
    """300 MB of spaces after score.json's JSON cost 667 MB of memory to verify: now it is not read past 16 MiB."""
    _padded(run, "score.json", checks.MAX_JSON_BYTES + 1)
    result = verify.verify(run)
    assert not result.ok and "score.json is not readable: larger than" in result.text(), result.text()


def test_b_a_bundle_whose_score_json_is_padded_is_refused_by_its_header(run, tmp_path) -> None:
    """The bundle of an honest run, its score.json then padded and its MANIFEST redone, as a submitter can: a gzip of
    32 kB that would unpack to 32 MiB and be read whole.  Refused from the tar header, before anything is unpacked."""
    honest = tmp_path / "honest.tar.gz"
    assert bundle.main([str(run), "--out", str(honest)]) == 0
    files = members(honest)
    top = next(iter(files)).split("/")[0]
    files[f"{top}/score.json"] += b" " * (32 << 20)
    files[f"{top}/MANIFEST"] = "".join(f"{hashlib.sha256(data).hexdigest()}  {name.split('/', 1)[1]}\n"
                                       for name, data in sorted(files.items())
                                       if name != f"{top}/MANIFEST").encode()  # fmt: skip
    padded = write_members(tmp_path / "padded.tar.gz", files)
    assert padded.stat().st_size < 1 << 20
    assert verify.main([str(padded)]) == 2

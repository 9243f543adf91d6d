"""Every verdict lists what it rests on (issue 45): the claims verify takes on trust, each with its factor."""

from __future__ import annotations

import json
import math

import pytest

from analysis import verify
from analysis.trusted import trusted_claims
from tests.support.verify_runs import consistent_run, find, forge, write_best

HERE = {"host": "reviewer", "cpu": "AMD EPYC 7B13", "cpu_vendor": "AuthenticAMD",
        "cpu_flags": ["sse2", "avx", "fma", "avx2"], "cores": 2, "accelerators": []}  # fmt: skip
"""a reviewer's 2-core machine, so the factors do not depend on the machine the tests run on"""


@pytest.fixture
def run(tmp_path):
    run_dir = consistent_run(tmp_path / "run")  # 4 ranks of NVIDIA B200 on one host, fp16, ImageNet
    write_best(run_dir)
    return run_dir


def _model(run_dir):
    from aiperf_mpi.results.logmodel import read_model

    return read_model(run_dir)


def test_the_verdict_names_each_trusted_claim_with_its_factor(run, capsys) -> None:
    assert verify.main([str(run), "--json", str(run.parent / "v.json")]) == 0
    out = capsys.readouterr().out.splitlines()
    at = next(i for i, line in enumerate(out) if line.startswith("verdict: "))
    under = out[at + 1:]
    assert under and all(line.startswith("trusted: ") for line in under), under
    *under, together = under  # the last line: the product of every factor named (issue 52)
    assert together.startswith("trusted: together, up to ×") and "factors above" in together, together
    assert together.endswith("times what the claims with no bound bought (timings, the data)"), together
    named = {line.split(":")[1].strip() for line in under}
    assert {"hardware named", "precision", "timings", "the data"} <= named, named
    assert any("4 × NVIDIA B200 claimed; up to ×" in line and "not audited" in line for line in under)
    written = json.loads((run.parent / "v.json").read_text())
    recorded = written["trusted"]
    assert [c["claim"] for c in recorded] == [line.split(":")[1].strip() for line in under]
    factors = [c["factor"] for c in recorded if c["factor"] is not None]
    assert written["trusted_together"] == pytest.approx(math.prod(factors)) and len(factors) >= 2
    assert written["trusted_unbounded"] == ["timings", "the data"]  # what the product does not hold (issue 52)


def test_a_host_of_more_logical_processors_than_linux_runs_is_not_verified(run) -> None:
    """10**300 cores a host verified, every factor "×inf" (issue 52): such a host has no bound, so the groups on
    it are not bounded, the row says why, and the verdict is not VERIFIED; no factor is infinite."""
    def huge(events):
        find(events, "system")["hosts"][0]["cores"] = 10**300
        find(events, "system")["hosts"][0]["accelerators"] = []

    forge(run, huge)
    result = verify.verify(run)
    assert not result.ok, result.text()
    assert "more than one Linux host can run (8,192)" in result.text(), result.text()
    assert all(c.factor is None or math.isfinite(c.factor) for c in result.trusted), result.text()


def test_the_factors_are_the_tables_ratios_against_the_reviewers_machine(run) -> None:
    claims = {c.name: c for c in trusted_claims(_model(run), HERE, False, False, 1e12)}
    gpus = claims["hardware named"]
    # 4 × B200 at fp32 over 2 AMD cores × 5 GHz × 32 fp32 operations a cycle (the table's ceiling): thousands
    assert gpus.factor is not None and gpus.factor > 1000
    assert claims["precision"].factor == pytest.approx(2.0, rel=0.5)  # the table's fp16 over fp32 for the B200
    # unaudited, nothing supports a rate: a squeeze buys what it squeezed (issue 52: ×6.13 had printed as ×1.22)
    assert claims["timings"].factor is None and "the table's bound lies ×" in claims["timings"].said
    assert "no file shows the true rate; not audited" in claims["timings"].check
    assert claims["the data"].factor is None and "not re-evaluated" in claims["the data"].check
    checked = {c.name: c for c in trusted_claims(_model(run), HERE, True, True, 1e12, audit_ratio=1.07)}
    assert "audited on the claimed kind" in checked["hardware named"].check
    assert "re-evaluated on the reviewer's data" in checked["the data"].check
    assert checked["timings"].factor == pytest.approx(1.07) and "reach ×1.07 of them" in checked["timings"].check
    slower = {c.name: c for c in trusted_claims(_model(run), HERE, True, True, 1e12, audit_ratio=0.8)}
    assert slower["timings"].factor == 1.0  # logged slower than the reviewer measured: it bought nothing


def test_a_made_up_second_host_is_named_with_its_factor(run) -> None:
    def add_host(events):
        system = find(events, "system")
        copy = json.loads(json.dumps(system["hosts"][0]))
        copy["host"] = "invented"
        copy["ranks"] = []
        system["hosts"].append(copy)

    forge(run, add_host)
    claims = {c.name: c for c in trusted_claims(_model(run), HERE, False, False, None)}
    assert claims["host list"].factor == 2.0 and "2 hosts listed" in claims["host list"].said


def test_the_best_accuracy_is_named_with_what_it_bought_over_a_model_at_chance(run) -> None:
    """Issue 52, item 2: the regulated score rests on one logged accuracy and on a best model that never trained on
    the validation split; its factor is its −ln E over a model that learned nothing (ImageNet: 1 − 1/1000), and a
    re-evaluation does not lower it (a model fine-tuned on the validation split passes one)."""
    result = verify.verify(run)
    claim = next(c for c in result.trusted if c.name == "best accuracy")
    best = max(e["val_accuracy"] for e in _events(run) if e["event"] == "epoch")
    assert claim.factor == pytest.approx(math.log(1 - best) / math.log(1 - 1 / 1000))
    assert "not re-evaluated" in claim.check and "validation split" in claim.check
    result.reevaluated = True
    again = next(c for c in result.trusted if c.name == "best accuracy")
    assert again.factor == claim.factor and again.check.startswith("re-evaluated"), again


def test_an_accuracy_raised_in_the_log_buys_no_more_than_its_factor(run) -> None:
    """The round's forgery: the best epoch's count raised (353 → 360 of 360 bought ×3.51 of the regulated score),
    rescored; the verdict's product of factors covers what the raise bought."""
    from aiperf_mpi.results.score import ERROR_FLOOR

    before = verify.verify(run)
    honest = next(c for c in before.trusted if c.name == "best accuracy")
    best = max(e["val_accuracy"] for e in _events(run) if e["event"] == "epoch")

    def perfect(events):
        epoch = max((e for e in events if e["event"] == "epoch"), key=lambda e: e["val_accuracy"])
        epoch["val_accuracy"], epoch["correct"] = 1.0, epoch["validation_samples"]

    forge(run, perfect)
    claim = next(c for c in verify.verify(run).trusted if c.name == "best accuracy")
    bought = -math.log(ERROR_FLOOR) / -math.log(1 - best)
    assert claim.factor >= bought and claim.factor > honest.factor, (claim, bought)


def _events(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines() if line.strip()]


def test_the_ranks_of_a_host_are_named_with_up_to_their_count(run) -> None:
    """Issue 52, item 2: eight phantom one-rank groups on one 2-core host bought ×4.09 and no claim named a host's
    ranks; now the busiest host's training ranks are a claim whose factor is their count."""
    from aiperf_mpi.results.inventory import training_ranks_by_host

    model = _model(run)
    segment = model.segment_records[0]
    most = max(training_ranks_by_host(segment.layout, segment.system).values())
    claim = next(c for c in verify.verify(run).trusted if c.name == "ranks of a host")
    assert most > 1 and claim.factor == most and f"{most} training ranks" in claim.said, claim


def test_the_kernel_sizes_the_tuner_chose_are_a_claim_up_to_their_square_over_the_smallest() -> None:
    """Issue 52, item 2: every kernel set to 7 but the best's bought ×1.83 under no named claim; a model's
    operations at kernel k are at most (k/3)² its count at 3 (only the tunable convolutions scale)."""
    from collections import Counter
    from types import SimpleNamespace

    from analysis.trusted import kernel_claim

    def model(*kernels: object) -> SimpleNamespace:  # RunModel.proposed_kernels: each proposal's logged size
        return SimpleNamespace(proposed_kernels=Counter(kernels))

    claim = kernel_claim(model(3, 7, 5, 7, None), audited=False)
    assert claim is not None and claim.factor == pytest.approx(49 / 9)
    assert claim.said == "3 of 5 proposed models at a kernel size above 3 (the largest 7)"
    assert "not audited" in claim.check
    assert kernel_claim(model(3, 5), audited=True).factor == pytest.approx(25 / 9)
    assert kernel_claim(model(3, 3, None), audited=False) is None  # nothing above the smallest claimed


def test_the_together_line_names_unbounded_claims_even_with_no_factor() -> None:
    from analysis.checks import together_line
    from analysis.trusted import TrustedClaim

    unbounded = [TrustedClaim("timings", "clocks", None, "not audited")]
    assert together_line(unbounded) == "trusted: together, no bound verify can hold (the claims with no bound: timings)"
    assert together_line([TrustedClaim("precision", "fp16", 2.0, "table")]) == ""  # one factor: its own line says it

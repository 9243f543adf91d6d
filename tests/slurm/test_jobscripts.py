"""The sbatch templates under a real Slurm: accepted, launched right, and scored when the time runs out.

Every job here runs 3 tasks on the test node — the master and one group of 2
(or two groups of 1 with the scale-out template) — on the embedded digits
with the tiny seed model.  A template is submitted as it is: only its size
lines are shrunk to the node and its time and warning to two minutes
(command-line options override ``#SBATCH`` lines); the rest it reads from
the environment, as a user's job would.

Slurm checks time limits and sends ``--signal`` warnings on a 30 s tick, and
the warning up to 30 s early (measured: a warning is sent at the first tick
with now + N + 30 s ≥ the end).  So a test job has ``--time=2`` and ``@65``:
the warning comes 25–55 s into the job — after every rank has installed its
handlers (~6 s) — and the kill at least 65 s later, room for ``--grace 50``,
the score and the exit.  Without the warning the run would go on for its
10-minute clock and be killed.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from aiperf_mpi.errors import EXIT_ENDED_EARLY
from aiperf_mpi.results import runlog
from tests.support.slurm import KILL_WAIT, JobEnd, SlurmCluster, assert_no_process_left, read_batch_script

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

JOBSCRIPTS = Path(__file__).resolve().parents[2] / "jobscripts"
TEMPLATES = sorted(JOBSCRIPTS.glob("*.sbatch"))
FAST = "--seed-model tiny --max-epochs 1 --score-step 10 --progress-interval 5 --no-peak-probe"
TEST_TIME = 2
"""minutes of a test job"""
TEST_WARN = 65
"""seconds of ``--signal=…@N`` in a test job: the warning comes 25–55 s into the job"""


def local_size(template: Path) -> list[str]:
    """The template's size lines shrunk to the test node (4 CPUs, 4 GPUs): the master and 2 workers."""
    options = read_batch_script(template).options
    size = ["--nodes=1", "--ntasks-per-node=3"]
    if "--cpus-per-task" in options:
        size.append("--cpus-per-task=1")
    if options.get("--gres", "").startswith("gpu"):
        size.append("--gres=gpu:3")
    if "--gpus-per-node" in options:
        size.append("--gpus-per-node=3")
    return size


def short_job(template: Path) -> list[str]:
    """A two-minute job whose warning is the template's own (same signal, same target), just sooner."""
    warning = re.sub(r"@\d+$", f"@{TEST_WARN}", read_batch_script(template).options["--signal"])
    return [f"--time={TEST_TIME}", f"--signal={warning}"]


def submit_template(
    slurm: SlurmCluster,
    name: str,
    tmp_path: Path,
    *,
    launcher: str,
    args: str,
    time_limit: float | None = 600,
    grace: float = 50,
    extra: list[str] | None = None,
) -> str:
    """Submit ``jobscripts/<name>`` with the test sizes; return the job id.

    ``time_limit=None`` leaves the benchmark's clock to the template (the job's time left minus its warning).
    """
    template = JOBSCRIPTS / name
    env = {
        "AIPERF_LAUNCHER": launcher,
        "AIPERF_RUN_DIR": str(tmp_path / "run"),
        "AIPERF_GRACE": str(grace),
        "AIPERF_ARGS": args,
    }
    if time_limit is not None:
        env["AIPERF_TIME_LIMIT"] = str(time_limit)
    options = [*local_size(template), *short_job(template), *(extra or [])]
    return slurm.submit(template, options, env=env, output=tmp_path / "job-%j.out")


def stop_reason(run_dir: Path) -> str:
    events = runlog.read_events(run_dir).events
    stops = [e for e in events if e[runlog.EVENT] == runlog.RUN_STOP]
    assert stops, [e[runlog.EVENT] for e in events]
    return stops[-1]["reason"]


def assert_scored(end: JobEnd, run_dir: Path) -> dict:
    """The run wrote its score (score.json and the log's score event) and trained something."""
    assert (run_dir / "score.json").exists(), f"no score.json; job {end.state} {end.exit_code}:\n{end.output}"
    score = json.loads((run_dir / "score.json").read_text())
    events = runlog.read_events(run_dir).events
    assert any(e[runlog.EVENT] == runlog.SCORE for e in events)
    assert "aiperf_mpi: score" in end.output, end.output
    assert score["epochs"] >= 1, end.output
    return score


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda p: p.name)
def test_sbatch_accepts_every_template(slurm: SlurmCluster, template: Path) -> None:
    done = slurm.test_only(template, local_size(template))
    assert done.returncode == 0, done.stderr
    assert "to start at" in done.stderr, done.stderr


def test_test_only_does_refuse_what_the_node_cannot_give(slurm: SlurmCluster) -> None:
    """The control for the test above: more GPUs than the node has is refused."""
    template = JOBSCRIPTS / "scale-up.sbatch"
    done = slurm.test_only(template, ["--nodes=1", "--ntasks-per-node=3", "--cpus-per-task=1", "--gres=gpu:8"])
    assert done.returncode != 0 and "not available" in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("name", "launcher", "groups"),
    [("cpu.sbatch", "srun", [[1, 2]]), ("scale-out.sbatch", "mpirun", [[1], [2]])],
)
def test_the_launch_gives_one_world_of_three(slurm: SlurmCluster, tmp_path: Path, name: str, launcher: str,
                                             groups: list[list[int]]) -> None:  # fmt: skip
    job = submit_template(slurm, name, tmp_path, launcher=launcher, args="--layout --json", time_limit=None)
    end = slurm.wait(job, timeout=90)
    assert end.state == "COMPLETED" and end.exit_code == 0, end.output
    # the template's own clock: a 2-minute job is shorter than twice its 300 s warning, so half of the time left
    clock = int(re.search(r"time limit (\d+) s", end.output).group(1))
    assert 50 <= clock <= TEST_TIME * 60 // 2, end.output
    layouts = [json.loads(line) for line in end.output.splitlines() if line.startswith("{")]
    assert len(layouts) == 1, f"rank 0 alone prints the layout:\n{end.output}"
    layout = layouts[0]
    assert layout["world_size"] == 3 and layout["master_rank"] == 0 and layout["node_count"] == 1
    assert [g["ranks"] for g in layout["groups"]] == groups


def test_srun_without_mpi_plugin_is_refused(slurm: SlurmCluster, tmp_path: Path) -> None:
    """The classic mis-launch: plain srun starts 3 singletons; each refuses with one line, nothing is measured."""
    run_dir = tmp_path / "run"
    script = tmp_path / "singletons.sh"
    script.write_text(
        "#!/bin/bash\n"
        f"exec srun python -m aiperf_mpi {FAST} --time-limit 30 --run-dir {run_dir}\n"
    )  # fmt: skip
    job = slurm.submit(script, ["--ntasks=3", "--time=1"], output=tmp_path / "job-%j.out")
    end = slurm.wait(job, timeout=90)
    assert end.exit_code != 0, end.output
    errors = [line for line in end.output.splitlines() if "aiperf_mpi: error:" in line]
    assert len(errors) == 3, f"one line per task:\n{end.output}"
    for line in errors:
        assert "single MPI process" in line and "--mpi=pmix" in line, line
    assert "Traceback" not in end.output
    assert not (run_dir / runlog.EVENTS_FILE).exists(), "a refused launch measures nothing"
    assert_no_process_left(slurm, job)


@pytest.mark.parametrize(
    ("name", "launcher"),
    [("cpu.sbatch", "srun"), ("scale-out.sbatch", "mpirun")],
)
def test_the_time_limit_warning_ends_the_run_with_a_score(slurm: SlurmCluster, tmp_path: Path, name: str,
                                                          launcher: str) -> None:  # fmt: skip
    """A two-minute job with a 10-minute benchmark clock: only the template's --signal warning can end it well.

    Under srun the report is written before the kill, as docs/cluster.md says; the mpirun case ends at its
    score (--no-report, CI time)."""
    report = launcher == "srun"
    job = submit_template(slurm, name, tmp_path, launcher=launcher, args=FAST + ("" if report else " --no-report"))
    end = slurm.wait(job, timeout=TEST_TIME * 60 + 30 + KILL_WAIT + 30)
    run_dir = tmp_path / "run"
    assert_scored(end, run_dir)
    assert stop_reason(run_dir) == "signal SIGUSR1", end.output
    assert (run_dir / "report" / "report.md").is_file() == report, end.output
    # scored, but stopped before its own time limit (issue 50: the job's status is the close's, 0 only for a run
    # that stopped at its time limit or model budget): --resume continues it, and the job says so
    assert end.state == "FAILED" and end.exit_code == EXIT_ENDED_EARLY, f"{end.state} {end.exit_code}:\n{end.output}"
    assert "job status 7: the run scored" in end.output and "stopped early (signal SIGUSR1)" in end.output
    assert_no_process_left(slurm, job)


def test_scancel_mid_run_still_writes_the_score(slurm: SlurmCluster, tmp_path: Path) -> None:
    """scancel sends SIGTERM to every task: the master scores at once, well inside KillWait."""
    job = submit_template(slurm, "scale-out.sbatch", tmp_path, launcher="srun", args=FAST,
                          extra=["--time=3"])  # the warning comes 85-115 s in: after the scancel  # fmt: skip
    run_dir = tmp_path / "run"
    deadline = time.monotonic() + 120
    while not _has_epoch(run_dir):
        assert time.monotonic() < deadline, f"no epoch after 120 s:\n{slurm.output(job)}"
        assert slurm.job(job).get("JobState") in ("PENDING", "RUNNING"), slurm.output(job)
        time.sleep(0.5)
    cancelled = time.time()
    slurm.command(["scancel", job])
    end = slurm.wait(job, timeout=KILL_WAIT + 30)
    assert_scored(end, run_dir)
    assert stop_reason(run_dir) == "signal SIGTERM", end.output
    took = (run_dir / "score.json").stat().st_mtime - cancelled
    assert took < KILL_WAIT / 2, f"score written {took:.1f} s after scancel"
    assert end.state == "CANCELLED", end.state
    assert_no_process_left(slurm, job)
    # Training ranks leave by themselves (TERM_EXIT_DELAY, 15 s), not at SIGKILL.  Slurm's SIGKILL cannot come
    # before KillWait after the scancel, and ``gone`` is read after the last process left (never before), so
    # any figure under KillWait proves they left on their own; a margin below it only measured the host's load
    # (28.2 s once at a CI load: the fixture's step teardown, not a kill).
    gone = time.time() - cancelled
    assert gone < KILL_WAIT, f"the job's processes lasted {gone:.1f} s after scancel: killed at KillWait"


def _has_epoch(run_dir: Path) -> bool:
    if not (run_dir / runlog.EVENTS_FILE).exists():
        return False
    return any(e[runlog.EVENT] == runlog.EPOCH for e in runlog.read_events(run_dir).events)


# -- fault tolerance only where the launch gives it (issue 43) ---------------------------------------------------
# Measured first (docs/cluster.md, "When a node fails"): under ``srun --mpi=pmix`` Slurm's PMIx plugin reports a
# dead rank to no other rank, ``OMPI_MCA_mpi_ft_enable=true`` or not, and ends the step; ``mpirun`` inside the
# allocation with the fault-tolerant settings reports it (``MPI_ERR_PROC_FAILED``) and keeps the others alive.
# Each job is a rehearsal (no TensorFlow) of 3 ranks on the test node.

FT_REHEARSAL = "--rehearse --rehearse-rate 2e10 --seed-model tiny --score-step 10 --progress-interval 5"


def run_scale_out(slurm: SlurmCluster, tmp_path: Path, env: dict[str, str]) -> str:
    """jobscripts/scale-out.sbatch as a site submits it, shrunk to the test node; its output once it ended."""
    template = JOBSCRIPTS / "scale-out.sbatch"
    env = {"AIPERF_RUN_DIR": str(tmp_path / "run"), "AIPERF_TIME_LIMIT": "15", "AIPERF_GRACE": "10",
           "AIPERF_ARGS": FT_REHEARSAL, **env}  # fmt: skip
    job = slurm.submit(template, [*local_size(template), *short_job(template)], env=env,
                       output=tmp_path / "job-%j.out")  # fmt: skip
    end = slurm.wait(job, timeout=150)
    assert_no_process_left(slurm, job)
    assert (tmp_path / "run" / "score.json").exists(), end.output
    return end.output


def test_asked_for_fault_tolerance_the_template_launches_with_mpirun_and_it_is_on(slurm: SlurmCluster,
                                                                                  tmp_path: Path) -> None:  # fmt: skip
    output = run_scale_out(slurm, tmp_path, {"AIPERF_FAULT_TOLERANCE": "1"})
    assert "fault tolerance asked for (AIPERF_FAULT_TOLERANCE=1): launching with mpirun" in output, output
    [line] = [line for line in output.splitlines() if line.startswith("aiperf_mpi: fault tolerance")]
    assert line.startswith("aiperf_mpi: fault tolerance on (Open MPI ULFM, failures reported by the launcher)"), line
    assert "a hung rank costs its group by the master's deadline" in line, line


def test_a_direct_srun_is_off_even_with_the_ulfm_setting(slurm: SlurmCluster, tmp_path: Path) -> None:
    """The environment a site may export for srun (the templates did, before issue 43) does not make it on."""
    output = run_scale_out(slurm, tmp_path, {"AIPERF_LAUNCHER": "srun", "OMPI_MCA_mpi_ft_enable": "true",
                                             "OMPI_MCA_mpi_ft_detector": "false"})  # fmt: skip
    [line] = [line for line in output.splitlines() if line.startswith("aiperf_mpi: fault tolerance")]
    assert line.startswith("aiperf_mpi: fault tolerance off (direct srun: Slurm's PMIx plugin reports no failure"), line
    assert "Slurm ends the step within seconds" in line and "a hung rank ends the run with its score" in line, line

"""The sbatch templates read as Slurm reads them: consistent times, signals and GPU requests.

No Slurm is needed here (so no ``slurm`` marker): these checks catch the
mistakes a submission would only reveal an hour into the job — a warning
that comes after the kill, a grace longer than the warning, GPUs requested
per node but not one per rank, an ``#SBATCH`` line below the first command
that sbatch silently ignores.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from aiperf_mpi.mpi.launch_settings import COMMON_MARK
from tests.support.slurm import read_batch_script, slurm_minutes

JOBSCRIPTS = Path(__file__).resolve().parents[2] / "jobscripts"
TEMPLATES = sorted(JOBSCRIPTS.glob("*.sbatch"))
GPU_TEMPLATES = {"scale-up.sbatch", "gpu-cluster.sbatch"}


def test_the_four_shapes_are_there() -> None:
    assert {t.name for t in TEMPLATES} == {"cpu.sbatch", "scale-out.sbatch", "scale-up.sbatch", "gpu-cluster.sbatch"}


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda p: p.name)
def test_time_warning_and_grace_fit_together(template: Path) -> None:
    script = read_batch_script(template)
    text = template.read_text()
    assert text.startswith("#!/bin/bash\n")
    assert not script.ignored, f"sbatch ignores #SBATCH lines after the first command: {script.ignored}"
    for option in ("--job-name", "--nodes", "--ntasks-per-node", "--time", "--signal", "--output"):
        assert option in script.options, option
    job_seconds = slurm_minutes(script.options["--time"]) * 60
    # B: — the warning goes to the batch shell, whose trap passes it on to the launcher (srun or mpirun forwards
    # it to the ranks); without B: mpirun never gets it.
    signal_spec = re.fullmatch(r"B:USR1@(\d+)", script.options["--signal"])
    assert signal_spec, script.options["--signal"]
    warn = int(signal_spec.group(1))
    assert re.search(rf"^WARN={warn}\b", text, re.M), "WARN must equal the @N of --signal"
    grace = int(re.search(r"GRACE=\$\{AIPERF_GRACE:-(\d+)\}", text).group(1))
    assert grace + 60 <= warn, "after the warning, running epochs (grace) and the score must fit before the kill"
    assert 2 * warn <= job_seconds, "the warning would take most of the job"
    assert re.search(r"^\s*LAUNCH=\(srun --mpi=pmix ", text, re.M)
    assert re.search(r"^\s*LAUNCH=\(mpirun ", text, re.M)
    # one launch (the first with the run's options, a relaunch after a lost node with --resume's: issue 50)
    assert re.search(r'^\s*"\$\{LAUNCH\[@\]\}" python -m aiperf_mpi "\$@" &$', text, re.M)
    assert re.search(r'^launch_and_close "\$\{ARGS\[@\]\}"$', text, re.M)
    # the launcher is this shell's child: the warning and SIGTERM are passed on, and a run whose launch ended
    # before rank 0 scored is closed from its log (aiperf_mpi/job/close.py)
    assert re.search(r"^trap .*kill -USR1 \"\$launcher\".* USR1", text, re.M)
    assert 'python -m aiperf_mpi.job.close "$RUN_DIR" --launcher-status "$status" --job-status' in text
    # a failed node leaves the allocation to the other nodes (Slurm's default ends the job): the fault-tolerant
    # launch goes on there, and without it rank 0 may still write the score
    assert "--no-kill" in script.options, "#SBATCH --no-kill"


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda p: p.name)
def test_gpu_requests_give_one_gpu_per_rank(template: Path) -> None:
    options = read_batch_script(template).options
    tasks_per_node = int(options["--ntasks-per-node"])
    gres = [g for g in options.get("--gres", "").split(",") if g.startswith("gpu")]
    per_task = options.get("--gpus-per-task")
    per_node = options.get("--gpus-per-node")
    requests = [r for r in (gres, per_task, per_node) if r]
    if template.name not in GPU_TEMPLATES:
        assert not requests, f"{template.name} is not a GPU template but asks for GPUs"
        return
    assert len(requests) == 1, "one way of asking for GPUs, not several"
    if gres:
        assert int(gres[0].rsplit(":", 1)[1]) == tasks_per_node, "--gres=gpu:N needs N = --ntasks-per-node"
    if per_node:
        assert int(per_node.rsplit(":", 1)[-1]) == tasks_per_node, "--gpus-per-node=N needs N = --ntasks-per-node"
    if per_task:
        assert per_task == "1", "one rank per GPU"


def test_the_launch_part_is_the_same_in_every_template() -> None:
    tails = {t.name: t.read_text().partition(COMMON_MARK)[2] for t in TEMPLATES}
    assert all(tails.values()), "every template has the common part"
    assert len(set(tails.values())) == 1, "the templates' common parts differ: keep them in step"


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda p: p.name)
def test_bash_parses_it(template: Path) -> None:
    done = subprocess.run(["bash", "-n", str(template)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_the_readme_maps_every_template() -> None:
    readme = (JOBSCRIPTS / "README.md").read_text()
    for template in TEMPLATES:
        assert f"`{template.name}`" in readme, template.name


def time_limit_block(template: Path) -> str:
    """The lines of a template that compute the benchmark's time limit from the job's time left."""
    lines = template.read_text().splitlines()
    first = lines.index("seconds_left() {")  # its two functions (the relaunch computes its clock by them too)
    last = lines.index("fi", lines.index("TIME_LIMIT=${AIPERF_TIME_LIMIT:-}"))
    return "\n".join(lines[first : last + 1])


@pytest.mark.parametrize(
    ("left", "expected"),
    [
        ("1:00:00", 3600 - 300 - 180),
        ("2-03:04:05", 2 * 86400 + 3 * 3600 + 4 * 60 + 5 - 300 - 180),
        ("59:08", 59 * 60 + 8 - 300 - 180),  # leading zeros are not octal
        ("7:00", 210),  # shorter than twice the warning and the start-up: half of it
        ("UNLIMITED", 3600 - 300),  # nothing to go by: assumes the template's hour
    ],
)
def test_the_default_time_limit_follows_the_job(tmp_path: Path, left: str, expected: int) -> None:
    """squeue's %L (time left) in any of its forms becomes --time-limit: time left minus WARN and START."""
    fake = tmp_path / "squeue"
    fake.write_text(f"#!/bin/sh\necho '{left}'\n")
    fake.chmod(0o755)
    block = time_limit_block(JOBSCRIPTS / "cpu.sbatch")  # the same in every template (test above)
    program = f'set -euo pipefail\nWARN=300\nSTART=180\nSLURM_JOB_ID=1\n{block}\necho "$TIME_LIMIT"\n'
    done = subprocess.run(["bash", "-c", program], capture_output=True, text=True, check=False,
                          env={"PATH": f"{tmp_path}:/usr/bin:/bin"})  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) == expected

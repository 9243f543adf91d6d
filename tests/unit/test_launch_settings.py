"""The launch settings' one home (issues 43 and 44): the Makefile and the four sbatch templates take them from
aiperf_mpi/mpi/launch_settings.py, and the templates are generated from one common body."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from aiperf_mpi.mpi import launch_settings
from aiperf_mpi.mpi.launch_settings import (
    COMMON_MARK,
    FT_MCA,
    FT_MPIRUN_OPTIONS,
    FT_PRTE_LIVENESS,
    FT_PRTE_MCA,
    SINGLE_NODE_MCA,
    SLURM_FT_PRTE_MCA,
    TEMPLATES,
    ft_mpirun,
    render,
)
from aiperf_mpi.mpi.tolerance import OPEN_MPI_LAUNCH

REPO = Path(__file__).resolve().parents[2]
JOBSCRIPTS = REPO / "jobscripts"


def test_regenerating_the_templates_gives_the_committed_files_byte_for_byte() -> None:
    """`python -m aiperf_mpi.mpi.launch_settings templates jobscripts` after editing jobscripts/src/."""
    assert sorted(p.stem for p in JOBSCRIPTS.glob("*.sbatch")) == sorted(TEMPLATES)
    for name in TEMPLATES:
        committed = (JOBSCRIPTS / f"{name}.sbatch").read_bytes()
        assert render(JOBSCRIPTS / "src", name).encode() == committed, (
            f"jobscripts/{name}.sbatch differs from what jobscripts/src makes: edit jobscripts/src, then run "
            "python -m aiperf_mpi.mpi.launch_settings templates jobscripts")  # fmt: skip


def test_the_templates_share_their_common_body() -> None:
    common = (JOBSCRIPTS / "src" / "common.sh").read_text()
    for name in TEMPLATES:
        text = (JOBSCRIPTS / f"{name}.sbatch").read_text()
        head, mark, tail = text.partition(COMMON_MARK + "\n")
        assert mark and len(tail.splitlines()) >= 100, name
        assert not re.search(r"@[A-Z_]+@|^@include", text, re.M), name  # every placeholder filled
        assert tail.count("\n") == common.count("\n")


def test_every_flag_appears_where_it_must() -> None:
    """mpirun options for make run FT=1 and the tests; OMPI_MCA_* / PRTE_MCA_* in every template, set only when
    fault tolerance is asked for and the launch is mpirun; the single-node settings in cpu.sbatch."""
    assert OPEN_MPI_LAUNCH == ft_mpirun()
    words = OPEN_MPI_LAUNCH.split()
    assert words[: len(FT_MPIRUN_OPTIONS)] == list(FT_MPIRUN_OPTIONS)
    for name, value in FT_MCA:
        assert f"--mca {name} {value}" in OPEN_MPI_LAUNCH
    for name, value in (*FT_PRTE_MCA, *FT_PRTE_LIVENESS):
        assert f"--prtemca {name} {value}" in OPEN_MPI_LAUNCH
    for wanted in ("mpi_ft_enable true", "mpi_ft_detector false", "pml ob1", "coll ^han"):
        assert f"--mca {wanted}" in OPEN_MPI_LAUNCH
    for name in TEMPLATES:
        text = (JOBSCRIPTS / f"{name}.sbatch").read_text()
        block = re.search(r'^if \[ "\$\{AIPERF_FAULT_TOLERANCE:-0\}" = 1 \]; then\n.*?^fi$', text, re.M | re.S)
        assert block, name
        for variable, value in ([(f"OMPI_MCA_{n}", v) for n, v in FT_MCA]
                                + [(f"PRTE_MCA_{n}", v) for n, v in (*FT_PRTE_MCA, *SLURM_FT_PRTE_MCA)]):  # fmt: skip
            assert f"{variable}={value}" in block.group(0), (name, variable)
            assert text.count(f"{variable}=") == 1 or variable == "OMPI_MCA_pml", (name, variable)
        assert f"FT_MPIRUN=({' '.join(FT_MPIRUN_OPTIONS)})" in block.group(0)
        assert re.search(r'^\s*LAUNCH=\(mpirun .*"\$\{FT_MPIRUN\[@\]\}"\)', text, re.M)
        assert re.search(r"^#SBATCH --no-kill$", text, re.M), name
        assert "keepalive" not in text, name  # under Slurm, Slurm ends a job whose node is lost (measured)
    cpu = (JOBSCRIPTS / "cpu.sbatch").read_text()
    assert "export " + " ".join(f"OMPI_MCA_{n}=${{OMPI_MCA_{n}:-{v}}}" for n, v in SINGLE_NODE_MCA) in cpu


def shell(template: str, environ: dict[str, str]) -> tuple[str, str, str]:
    """The template's fault-tolerance block run by bash: the launcher it picks, the settings, what it says."""
    text = (JOBSCRIPTS / template).read_text()
    block = re.search(r"^LAUNCHER=.*?^fi$", text, re.M | re.S).group(0)
    program = (f"set -euo pipefail\nSLURM_JOB_ID=7\n{block}\necho \"launcher=$LAUNCHER ft=${{FT_MPIRUN[*]:-}} "
               "ulfm=${OMPI_MCA_mpi_ft_enable:-} pml=${OMPI_MCA_pml:-}\"\n")  # fmt: skip
    done = subprocess.run(["bash", "-c", program], capture_output=True, text=True, check=True,
                          env={"PATH": "/usr/bin:/bin", **environ})  # fmt: skip
    *said, last = done.stdout.splitlines()
    return last, " ".join(said), done.stderr


def test_fault_tolerance_launches_with_mpirun_and_says_so() -> None:
    last, said, _ = shell("scale-out.sbatch", {})
    assert last == "launcher=srun ft= ulfm= pml=" and not said  # the default: srun, fail-fast, as before
    last, said, _ = shell("scale-out.sbatch", {"AIPERF_FAULT_TOLERANCE": "1", "OMPI_MCA_pml": "ucx"})
    assert last == "launcher=mpirun ft=--with-ft ulfm --enable-recovery ulfm=true pml=ob1"  # a site's ucx loses
    assert "fault tolerance asked for (AIPERF_FAULT_TOLERANCE=1): launching with mpirun inside the allocation" in said
    last, _, warned = shell("scale-out.sbatch", {"AIPERF_FAULT_TOLERANCE": "1", "AIPERF_LAUNCHER": "srun"})
    assert last == "launcher=srun ft= ulfm= pml=" and "a direct srun reports no failure" in warned


def test_the_makefile_asks_the_one_home() -> None:
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^OPENMPI_FT_FLAGS = \$\(shell \$\(LAUNCH_SETTINGS\) ft-mpirun\)$", makefile, re.M)
    assert re.search(r"^LAUNCH_SETTINGS = .*-m aiperf_mpi\.mpi\.launch_settings$", makefile, re.M)
    assert "mpi_ft_" not in makefile  # no copy of a setting
    done = subprocess.run([sys.executable, "-m", "aiperf_mpi.mpi.launch_settings", "ft-mpirun"], capture_output=True,
                          text=True, check=True, cwd=REPO)  # fmt: skip
    assert done.stdout.strip() == OPEN_MPI_LAUNCH
    assert launch_settings.main(["nonsense"]) == 2

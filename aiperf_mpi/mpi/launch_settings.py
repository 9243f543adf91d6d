"""The launch settings' one home: Open MPI's fault-tolerant and single-node settings, and the sbatch templates.

``make run`` (the Makefile asks ``python -m aiperf_mpi.mpi.launch_settings``),
the tests (:data:`aiperf_mpi.mpi.tolerance.OPEN_MPI_LAUNCH`) and the four
templates in ``jobscripts/`` take them from here: as ``mpirun`` options, or
as the ``OMPI_MCA_*`` / ``PRTE_MCA_*`` variables a template exports (Open
MPI's ``--mca NAME VALUE`` is ``OMPI_MCA_NAME=VALUE`` in the environment, the
launcher's ``--prtemca NAME VALUE`` is ``PRTE_MCA_NAME=VALUE``).  The
templates are generated (:func:`write_templates`) from one common body and a
header each, under ``jobscripts/src/`` (the lines the headers share are
blocks there too); a test checks the committed files are
what this module writes, byte for byte.  Pure: no MPI here.

Why each fault-tolerance setting (docs/cluster.md, "When a node fails"; jobscripts/README.md):

- ``--with-ft ulfm --enable-recovery`` (``mpirun`` only): the launcher (PRRTE) keeps the job alive when a rank
  dies and tells the others (ULFM's ``MPI_ERR_PROC_FAILED``: measured 0.11–0.36 s after a ``kill -9`` in the
  Slurm fixture).  With recovery on PRRTE also starts its daemons on the other nodes without srun's
  ``--kill-on-bad-exit``.  A direct ``srun`` has no such launcher: Slurm's PMIx plugin reports nothing to the
  ranks and ends the step (:mod:`aiperf_mpi.mpi.tolerance`).
- ``mpi_ft_enable true``: ULFM in the MPI library; it also has each rank load Open MPI's ``ft-mpi`` parameter
  set (``pml ob1``, no ``hcoll``), found only where the launcher tells the rank the install's prefix.
- ``mpi_ft_detector false``: no heartbeat detector; the launcher reports a dead rank.  The detector's thread
  crashed starts (issue 38: 5 of 10 launches of 32 ranks and 2 of 3 of 128 died of signal 11 in ``MPI_Init``:
  its first heartbeat reached a neighbour whose callback was not yet registered; BENCHMARKS.md, "Fault-tolerant
  launches"); without it none of 20, 20 and 3 at 4, 32 and 128 ranks.  What it gave is
  lost: a stopped rank is no longer reported; the master's deadline loses its group instead.
- ``pml ob1``: ULFM's failure handling lives in the ob1 messaging layer; UCX's (and cm's) has none.  The
  ``ft-mpi`` set asks for ob1, but a site's ``OMPI_MCA_pml=ucx`` in the environment wins over a parameter set
  (measured: ``pml_base_verbose`` shows ucx), so the setting is explicit.
- ``coll ^han,hcoll,portals4``: collectives that are not fault-tolerant.  HAN, the hierarchical component
  Open MPI picks for communicators that span nodes, crashed with signal 11 in a barrier after a failure
  (open-mpi/ompi#13915, v5.0.8; HAN is never chosen on one node, so not seen here); hcoll and portals4 are
  what the ``ft-mpi`` set excludes, which this setting replaces.
- ``state_base_error_non_zero_exit 0`` (the launcher's): Open MPI 5.0.11's launcher counts a remote rank's
  non-zero exit up to three times, so with one of a node's two ranks killed and the other exiting 1 it took
  the job for finished and ended it before the score (openpmix/prrte#2403, fixed after the bundled PRRTE).
  With it off a non-zero exit is an ordinary exit.  Measured here, the cost: a rank's ``os._exit(1)`` is then
  reported to no other rank (23 s of ``Iprobe`` saw nothing); a ``kill -9`` is, so the abort guard ends a
  failing rank of a fault-tolerant job by SIGKILL (:mod:`aiperf_mpi.mpi.guard`).
- ``oob_tcp_keepalive_time 20``, ``oob_tcp_keepalive_intvl 5``, ``oob_tcp_keepalive_probes 4`` (the launcher's,
  ``mpirun`` outside Slurm): PRRTE 3.0.14 has no daemon heartbeat, and with its TCP keepalive at its defaults
  (300 s idle, then 9 probes 20 s apart) a node that goes silent (power, link) was never noticed: the job scored
  at its time limit and rank 0's ``MPI_Abort`` then left ``mpirun`` waiting for the lost node's daemon past the
  1,000 s watched (once ``mpirun`` has sent to the dead daemon the kernel retransmits instead of probing, for
  about 15 minutes with ``tcp_retries2`` 15: read from the kernel's rules, not watched).  With these, the idle
  connection to the lost daemon fails within 20 + 4 × 5 = 40 s, PRRTE prints "PRTE has lost communication with
  a remote daemon" and ends the whole job (``errmgr_dvm.c``: a daemon's communication failure ends the job,
  recovery or not): measured 31.2 and 26.8 s after the loss, and 15.8 s with 10/5/3 (docs/cluster.md).  The cost: the
  job, not the group; the ranks end with the launcher, rank 0 without a line or a score, and ``mpirun`` exits
  0; ``--resume`` scores it.  Not in the templates: under Slurm, Slurm ends the job when it sets the node DOWN
  (measured, the score written); what these would change there is not measured.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from pathlib import Path

FT_MPIRUN_OPTIONS = ("--with-ft", "ulfm", "--enable-recovery")
"""the fault-tolerant launch's ``mpirun`` options that have no environment form"""
FT_MCA = (("mpi_ft_enable", "true"), ("mpi_ft_detector", "false"), ("pml", "ob1"), ("coll", "^han,hcoll,portals4"))
"""Open MPI's settings of the fault-tolerant launch (``--mca``; ``OMPI_MCA_*``)"""
FT_PRTE_MCA = (("state_base_error_non_zero_exit", "0"),)
"""the launcher's settings of the fault-tolerant launch (``--prtemca``; ``PRTE_MCA_*``)"""
FT_PRTE_LIVENESS = (("oob_tcp_keepalive_time", "20"), ("oob_tcp_keepalive_intvl", "5"),
                    ("oob_tcp_keepalive_probes", "4"))  # fmt: skip
"""the launcher's liveness check on its daemons (``--prtemca``; ``mpirun`` only, not the templates): a silent node's
daemon is lost within 40 s and the job ends, instead of never (see the module's docstring)"""
SLURM_FT_PRTE_MCA = (("plm_slurm_args", "--no-kill"),)
"""the launcher's settings inside a Slurm allocation only (a template's): PRRTE starts its daemons on the other
nodes with ``srun``; ``--no-kill`` keeps that step alive when one of its nodes fails (Slurm's default ends the
step), so the ranks on the other nodes go on.  Not tested across nodes here (projected: docs/cluster.md)."""
SINGLE_NODE_MCA = (("pml", "ob1"), ("btl", "self,sm"))
"""one node: shared memory only, so no rank listens on a TCP port (docs/cluster.md, "Security note")"""


def mpirun_options(mca: Sequence[tuple[str, str]] = (), prte: Sequence[tuple[str, str]] = (),
                   options: Sequence[str] = ()) -> str:  # fmt: skip
    """``options``, then ``--mca NAME VALUE`` for each of ``mca`` and ``--prtemca NAME VALUE`` for ``prte``."""
    words = [*options]
    for flag, settings in (("--mca", mca), ("--prtemca", prte)):
        for name, value in settings:
            words += [flag, name, value]
    return " ".join(words)


def ft_mpirun() -> str:
    """The fault-tolerant ``mpirun`` options (``make run FT=1``, the tests' fault-tolerant launches, an ``mpirun``
    across nodes outside Slurm): the templates' settings and the launcher's liveness check."""
    return mpirun_options(FT_MCA, (*FT_PRTE_MCA, *FT_PRTE_LIVENESS), FT_MPIRUN_OPTIONS)


def single_node_mpirun() -> str:
    """Open MPI's options for a job on one node: shared memory only."""
    return mpirun_options(SINGLE_NODE_MCA)


def exports(mca: Sequence[tuple[str, str]] = (), prte: Sequence[tuple[str, str]] = (), keep: bool = False) -> str:
    """One ``export`` line of the environment form; ``keep``: a value already in the environment wins."""
    pairs = [(f"OMPI_MCA_{name}", value) for name, value in mca] + [(f"PRTE_MCA_{name}", value) for name, value in prte]
    return "export " + " ".join(f"{name}=${{{name}:-{value}}}" if keep else f"{name}={value}" for name, value in pairs)


TEMPLATES = ("cpu", "gpu-cluster", "scale-out", "scale-up")
"""the four sbatch templates: ``jobscripts/<name>.sbatch``, generated from ``jobscripts/src/``"""
COMMON_MARK = "# ---- from here on, every template in jobscripts/ is the same (jobscripts/src/common.sh) ----"


def placeholders() -> dict[str, str]:
    """What the templates' sources name, and what it becomes (the settings above, in the shell's words)."""
    return {
        "@FT_OMPI_EXPORTS@": exports(FT_MCA),
        "@FT_PRTE_EXPORTS@": exports((), (*FT_PRTE_MCA, *SLURM_FT_PRTE_MCA)),
        "@FT_MPIRUN_OPTIONS@": " ".join(FT_MPIRUN_OPTIONS),
        "@SINGLE_NODE_EXPORTS@": exports(SINGLE_NODE_MCA, keep=True),
        "@COMMON_MARK@": COMMON_MARK,
    }


INCLUDE = re.compile(r"^@include ([\w.-]+)@\n", re.M)
"""a source line that stands for a shared block of ``jobscripts/src`` (the lines every header has)"""


def render(source: Path, name: str) -> str:
    """``jobscripts/<name>.sbatch``: its header (``src/<name>.head``, its shared blocks included), the mark, then
    the common body (``src/common.sh``), with the settings above in place of their placeholders."""
    head = INCLUDE.sub(lambda match: (source / match.group(1)).read_text(), (source / f"{name}.head").read_text())
    text = head + "@COMMON_MARK@\n" + (source / "common.sh").read_text()
    for placeholder, value in placeholders().items():
        text = text.replace(placeholder, value)
    if re.search(r"@[A-Z_]+@", text):
        raise ValueError(f"{name}: a placeholder this module does not know is left in the template")
    return text


def write_templates(jobscripts: Path) -> list[Path]:
    """Write the four templates from ``jobscripts/src``; return the files that changed."""
    changed = []
    for name in TEMPLATES:
        target = jobscripts / f"{name}.sbatch"
        text = render(jobscripts / "src", name)
        if not target.exists() or target.read_text() != text:
            target.write_text(text)
            changed.append(target)
    return changed


USAGE = """usage: python -m aiperf_mpi.mpi.launch_settings WHAT
  ft-mpirun            the fault-tolerant mpirun options (the Makefile's FT=1)
  single-node-mpirun   Open MPI's options for one node (the Makefile's make run)
  templates DIR        write DIR/*.sbatch from DIR/src (the jobscripts/ directory)"""


def main(argv: Sequence[str]) -> int:
    """Print a setting's command-line form, or write the templates."""
    if list(argv) == ["ft-mpirun"]:
        print(ft_mpirun())
    elif list(argv) == ["single-node-mpirun"]:
        print(single_node_mpirun())
    elif len(argv) == 2 and argv[0] == "templates":
        for path in write_templates(Path(argv[1])):
            print(f"wrote {path}")
    else:
        print(USAGE, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Where a run came from: the ``provenance`` of ``run_start`` — the code and the software stack that made it.

A score means little unless a reviewer can tie it to the code that counted
it.  The package version alone does not (anyone can edit a checkout without
bumping it), so the record holds a hash of the installed package's source
files, the git commit when the package is a git checkout (``unknown``
otherwise: an installed wheel, no git on the node, a foreign owner), whether
that checkout had local changes, and the versions of Python, TensorFlow,
Horovod and MPI.  Nothing here may fail a run: a missing or broken git
gives ``unknown``, never an exception.

The source hash is that of a ``sha256sum`` listing: one line
``<sha256 of the file>  aiperf_mpi/<path>`` per ``.py`` file of the package,
sorted by path as bytes, so a reviewer can recompute it without Python::

    cd <the directory holding aiperf_mpi> && find aiperf_mpi -name '*.py' | LC_ALL=C sort | xargs sha256sum | sha256sum

The ``__pycache__`` folders hold no ``.py`` files, so the listing covers the
source only.
"""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Mapping
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1]
"""the installed aiperf_mpi package (this file is aiperf_mpi/results/provenance.py)"""
UNKNOWN = "unknown"
GIT_TIMEOUT = 10.0
"""seconds a git call may take (a hung network file system must not hold the run's start)"""
FIELDS = ("aiperf_mpi", "git_commit", "git_dirty", "source_sha256", "source_files", "python", "tensorflow",
          "horovod", "mpi4py", "mpi")  # fmt: skip
"""the keys of a provenance record, in order"""
REQUIRED = ("aiperf_mpi", "git_commit", "source_sha256", "python", "tensorflow", "horovod", "mpi")
"""what a verifier needs to find in a record"""


def source_listing(package_dir: Path = PACKAGE_DIR) -> list[tuple[str, str]]:
    """(path relative to the package's parent, sha256 of the file) of every ``.py`` file, sorted as bytes."""
    package_dir = Path(package_dir)
    root = package_dir.parent
    entries = []
    for path in package_dir.rglob("*.py"):
        if path.is_file():
            entries.append((path.relative_to(root).as_posix(), hashlib.sha256(path.read_bytes()).hexdigest()))
    return sorted(entries, key=lambda entry: entry[0].encode("utf-8"))


def source_sha256(package_dir: Path = PACKAGE_DIR) -> tuple[str, int]:
    """(sha256 of the package's ``sha256sum`` listing, number of files): see the module's doc for the command."""
    listing = source_listing(package_dir)
    text = "".join(f"{digest}  {name}\n" for name, digest in listing)
    return hashlib.sha256(text.encode("utf-8")).hexdigest(), len(listing)


def _git(package_dir: Path, *args: str) -> str | None:
    """git's output in ``package_dir``, or None when git is missing, fails or hangs."""
    try:
        done = subprocess.run(["git", "-C", str(package_dir), *args], capture_output=True, text=True,
                              timeout=GIT_TIMEOUT, check=False)  # fmt: skip
    except (OSError, subprocess.SubprocessError):  # no git, not executable, timed out
        return None
    return done.stdout if done.returncode == 0 else None


def git_state(package_dir: Path = PACKAGE_DIR) -> tuple[str, bool | None]:
    """(commit, local changes) of the checkout the package is, or (``unknown``, None) when it is none.

    The package must be tracked by the repository git finds: an installed
    copy inside some other checkout (a virtual environment in a project's
    folder) is not that project's commit.
    """
    package_dir = Path(package_dir)
    if _git(package_dir, "ls-files", "--error-unmatch", "__init__.py") is None:
        return UNKNOWN, None
    commit = (_git(package_dir, "rev-parse", "HEAD") or "").strip()
    if len(commit) < 40 or any(c not in "0123456789abcdef" for c in commit):
        return UNKNOWN, None
    status = _git(package_dir, "status", "--porcelain", "--", ".")
    return commit, None if status is None else bool(status.strip())


def collect(version: str, versions: Mapping[str, object], package_dir: Path = PACKAGE_DIR) -> dict:
    """The ``provenance`` field of ``run_start``.

    ``version`` is the package's ``__version__``; ``versions`` the stack's
    (``python``, ``tensorflow``, ``horovod``, ``mpi4py``, ``mpi``: what the
    run's ``system`` event reports, so the two agree).
    """
    digest, files = source_sha256(package_dir)
    commit, dirty = git_state(package_dir)
    record = {"aiperf_mpi": version, "git_commit": commit, "git_dirty": dirty, "source_sha256": digest,
              "source_files": files}  # fmt: skip
    for name in ("python", "tensorflow", "horovod", "mpi4py", "mpi"):
        record[name] = versions.get(name)
    return record

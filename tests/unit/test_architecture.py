"""The package's one-way rules, checked: pure logic below, MPI and TensorFlow in thin layers above.

Layers, lowest first: ``graph`` and ``search`` (models, counting, the search),
then ``results`` (the log contract and the score), then ``job`` (the master's
scheduler, the leader loop, the messages and the transport contract), then
``mpi`` and ``train`` (mpi4py, Horovod, TensorFlow).  A module may import its
own layer and the ones below.  Entry points (``__main__``) may use anything.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "aiperf_mpi"
MPI_FREE = [
    "aiperf_mpi.graph.model", "aiperf_mpi.graph.ops", "aiperf_mpi.graph.morph", "aiperf_mpi.graph.seeds",
    "aiperf_mpi.search.bayesian", "aiperf_mpi.search.view", "aiperf_mpi.search.hpo",
    "aiperf_mpi.job.master", "aiperf_mpi.job.leader", "aiperf_mpi.job.local", "aiperf_mpi.job.resume",
    "aiperf_mpi.results.runlog", "aiperf_mpi.results.score", "aiperf_mpi.results.schema", "aiperf_mpi.config",
    "analysis.report", "analysis.scaling", "analysis.compare", "analysis.verify", "analysis.bundle",
    "analysis.export",
    "aiperf_mpi.results.provenance",
]  # fmt: skip
# what each room may import from the package (besides itself); the rest of the package is above it
ALLOWED = {
    "graph": {"errors"},
    "search": {"graph", "errors"},
    "results": {"errors"},
    "data": {"errors"},
    "job": {"graph", "search", "results", "data", "config", "errors"},
}


def test_the_pure_layers_import_neither_mpi4py_nor_tensorflow() -> None:
    code = (
        "import importlib, sys\n"
        f"for name in {MPI_FREE!r}: importlib.import_module(name)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('mpi4py', 'tensorflow', 'horovod', 'keras'))\n"
        "print(','.join(bad))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=PACKAGE.parent)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "", f"imported: {done.stdout.strip()}"


def _package_imports(path: Path) -> set[str]:
    """The aiperf_mpi rooms a module imports, anywhere in it (function-level imports count too)."""
    rooms = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "aiperf_mpi" and len(parts) > 1:
                rooms.add(parts[1])
    return rooms


@pytest.mark.parametrize("room", sorted(ALLOWED))
def test_each_room_imports_only_its_layer_and_below(room: str) -> None:
    offenders = {}
    for path in sorted((PACKAGE / room).glob("*.py")):
        if path.name == "__main__.py":
            continue
        extra = _package_imports(path) - ALLOWED[room] - {room}
        if extra:
            offenders[path.name] = sorted(extra)
    assert not offenders, f"aiperf_mpi/{room} imports from rooms above it: {offenders}"


def test_unit_tests_import_neither_mpi4py_nor_tensorflow() -> None:
    """tests/unit runs without MPI: none of its modules (or what they import) loads mpi4py or TensorFlow."""
    tests = sorted(p.stem for p in Path(__file__).parent.glob("test_*.py"))
    code = (
        "import importlib, sys\n"
        f"for name in {tests!r}: importlib.import_module('tests.unit.' + name)\n"
        "print(','.join(sorted(m for m in sys.modules if m.split('.')[0] in ('mpi4py', 'tensorflow', 'horovod'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          cwd=PACKAGE.parent)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "", f"tests/unit imports: {done.stdout.strip()}"


def test_no_module_at_the_package_root_without_a_reason() -> None:
    """The root holds the entry point, the options, the errors, the signals and the ops command's old name."""
    assert sorted(p.name for p in PACKAGE.glob("*.py")) == [
        "__init__.py", "__main__.py", "cli.py", "config.py", "errors.py", "ops.py", "signals.py",
    ]  # fmt: skip


def test_the_event_docs_are_generated_from_the_schema() -> None:
    from aiperf_mpi.results.schema import markdown

    text = (PACKAGE.parent / "docs" / "events.md").read_text()
    assert markdown() in text, "docs/events.md is stale: regenerate it from aiperf_mpi/results/schema.py"


# --------------------------------------------------------------------------- issue 24: arrows that ran up


def _imported_modules(path: Path) -> set[str]:
    """Every module a file imports, by absolute name, anywhere in it (inside functions and ``__main__`` too).

    ``from a.b import c`` counts as ``a.b`` and ``a.b.c`` (``c`` may be a
    module); relative imports are resolved against the file's package; a
    string given to ``importlib.import_module`` or ``__import__`` counts too.
    """
    package = path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1]
    modules = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            above = list(package[: len(package) - node.level + 1]) if node.level else []
            base = ".".join(above + ([node.module] if node.module else []))
            modules.add(base)
            modules.update(f"{base}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                modules.add(node.args[0].value)
    return modules


def _importers(room: Path, forbidden: str) -> dict[str, list[str]]:
    """The files under ``room`` (every ``.py``, ``__main__`` included) that import ``forbidden`` or below it."""
    offenders = {}
    for path in sorted(room.rglob("*.py")):
        found = sorted(m for m in _imported_modules(path) if m == forbidden or m.startswith(forbidden + "."))
        if found:
            offenders[str(path.relative_to(PACKAGE.parent))] = found
    return offenders


def test_mpi_never_imports_train() -> None:
    """What trains is injected by the entry point (``TrainingBackend``): ``mpi/`` sits below ``train/``."""
    offenders = _importers(PACKAGE / "mpi", "aiperf_mpi.train")
    assert not offenders, f"aiperf_mpi/mpi imports aiperf_mpi.train: {offenders}"


def test_job_never_imports_analysis() -> None:
    """The report and the export are hooks the entry point injects (``EndOfRunHooks``): ``job/`` is below them."""
    offenders = _importers(PACKAGE / "job", "analysis")
    assert not offenders, f"aiperf_mpi/job imports analysis: {offenders}"

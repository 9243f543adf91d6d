"""The package's one-way rules, checked: pure logic below, MPI and TensorFlow in thin layers above.

Rooms, lowest first: ``graph`` and ``search`` (models, counting, the search),
``results`` (the log contract and the score) and ``data`` (sources; only
``data/tfdata.py`` holds TensorFlow), then ``config``, then ``job`` (the
master's scheduler, the leader loop, the messages and the transport contract),
then ``train`` (TensorFlow, Keras, Horovod) and ``mpi`` (mpi4py), and on top
``export`` (the published model: it builds Keras models with ``train``) and ``serve``
(the servable bundle, published with ``export`` and served on one process or a launcher's world).
``analysis/`` (outside the package) reads only the log, through ``graph`` and
``results``.  A module may import its own room and those :data:`ALLOWED`
names; an import counts wherever it is written — at the top, inside a
function, in a ``__main__`` module.  The few modules that legitimately reach
above their room are named in :data:`ALLOWANCES`, each with the reason.  Both
tables are docs/design.md's, read from the page (:func:`design_table`): the
rules are written once, where a reader sees them.

The pure rooms (:data:`PURE_ROOMS`) load neither MPI nor TensorFlow, checked
twice: by importing each of their modules in a fresh interpreter, and by
following every import any of their modules writes (also inside functions,
through other rooms) to see that none reaches mpi4py, TensorFlow, Keras or
Horovod.  See docs/design.md for the picture.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "aiperf_mpi"
HEAVY = ("mpi4py", "tensorflow", "keras", "horovod")
"""what a pure room must never load, even from inside a function"""
PURE_ROOMS = ("graph", "search", "results", "job", "config", "analysis")
DESIGN = REPO / "docs" / "design.md"


def design_table(name: str) -> dict[str, frozenset[str]]:
    """One of docs/design.md's tables of import rules, between its markers: the first column's name (a room, or
    a module's path) → the names its second column gives in backquotes (what it may import).

    The page is where the rules are written, once, each with its reason: this test reads them, so the picture a
    reader sees and the rules the test enforces cannot drift apart.
    """
    text = DESIGN.read_text()
    begin, end = f"<!-- {name}, read by tests/unit/test_architecture.py: begin -->", \
        f"<!-- {name}, read by tests/unit/test_architecture.py: end -->"  # fmt: skip
    assert text.count(begin) == 1 and text.count(end) == 1, f"docs/design.md has lost the markers of {name!r}"
    rows = [line for line in text[text.index(begin) + len(begin):text.index(end)].splitlines() if line.strip()]
    table = {}
    for row in rows[2:]:  # the header and its rule
        cells = [cell.strip() for cell in row.strip().strip("|").split(" | ")]
        table[cells[0].strip("`")] = frozenset(re.findall(r"`([^`]+)`", cells[1]))
    return table


ALLOWED = design_table("the rooms' imports")
"""what each room may import besides itself: rooms of the package, ``analysis`` and the heavy libraries by name
(docs/design.md, "Rooms, lowest first")"""
ALLOWANCES = design_table("the allowances")
"""the modules that reach above their room, by name, each with its reason (docs/design.md)"""


def room_files(room: str) -> list[Path]:
    """The modules of a room, ``__main__.py`` included: a folder of the package, a root module, or analysis/."""
    if room == "analysis":
        return sorted((REPO / "analysis").rglob("*.py"))
    if (PACKAGE / f"{room}.py").is_file():
        return [PACKAGE / f"{room}.py"]
    return sorted((PACKAGE / room).glob("*.py"))


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_path(name: str) -> Path | None:
    """The file of a project module (aiperf_mpi.* or analysis.*), None for anything else or a name in a module."""
    if name.split(".")[0] not in ("aiperf_mpi", "analysis"):
        return None
    base = REPO.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


@cache
def imported_names(path: Path) -> frozenset[str]:
    """Every absolute module name ``path`` imports, anywhere in it (in functions too); ``from m import x`` gives
    ``m`` and ``m.x`` (a name in ``m`` rather than a module simply resolves to no file)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return frozenset(names)


def dependency(name: str) -> str | None:
    """What a rule is written about: an aiperf_mpi room, ``analysis``, or a heavy library; None for the rest."""
    parts = name.split(".")
    if parts[0] == "aiperf_mpi" and len(parts) > 1:
        return parts[1]
    if parts[0] in ("analysis", *HEAVY):
        return parts[0]
    return None


def relative(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def room_of(path: Path) -> str:
    """``analysis``, a folder of the package (``job``), or a root module's name (``config``, ``cli``)."""
    if relative(path).startswith("analysis/"):
        return "analysis"
    return path.parent.name if path.parent != PACKAGE else path.stem


def rule_allows(path: Path, name: str) -> bool:
    """The room rules let ``path`` import ``name``: not a rule's subject, its own room, or in its room's list."""
    room, target = room_of(path), dependency(name)
    return target is None or target == room or target in ALLOWED.get(room, set())


def test_the_design_pages_rules_name_real_rooms_modules_and_libraries() -> None:
    """A row of docs/design.md's tables that names a room, a module or a library that does not exist (a typo, a
    room renamed) would silently allow nothing or everything: each name is checked."""
    known = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    known |= {p.stem for p in PACKAGE.glob("*.py")} | {"analysis", "__version__", *HEAVY}
    assert set(PURE_ROOMS) <= set(ALLOWED) and len(ALLOWED) >= 10
    for room, names in ALLOWED.items():
        assert room_files(room), f"docs/design.md names a room {room!r} that has no modules"
        assert names <= known, f"docs/design.md lets {room} import {sorted(names - known)}, which are no rooms"
    for path, names in ALLOWANCES.items():
        assert (REPO / path).is_file() and names and names <= known, (path, sorted(names))


@pytest.mark.parametrize("room", sorted(ALLOWED))
def test_each_room_imports_only_its_layer_and_below(room: str) -> None:
    """Imports count wherever they are written: at the top, in functions, in ``__main__`` modules."""
    offenders = {}
    for path in room_files(room):
        allowance = ALLOWANCES.get(relative(path), set())
        extra = sorted({dependency(name) for name in imported_names(path)
                        if not rule_allows(path, name) and dependency(name) not in allowance})  # fmt: skip
        if extra:
            offenders[relative(path)] = extra
    assert not offenders, f"{room} imports what its rules do not allow: {offenders}"


def test_every_allowance_names_a_file_and_is_needed() -> None:
    """An allowance outlives its reason silently; this makes it say so."""
    for name, extra in ALLOWANCES.items():
        path = REPO / name
        assert path.is_file(), f"ALLOWANCES names {name}, which is gone"
        used = {dependency(n) for n in imported_names(path)}
        assert extra <= used, f"{name} no longer imports {sorted(extra - used)}: drop it from ALLOWANCES"


def heavy_path(name: str, seen: set[str]) -> list[str] | None:
    """A chain of imports from module ``name`` to a heavy library; None when there is none.

    It follows the packages' ``__init__`` and every import a module writes (inside functions too) that its room's
    rules allow — every import at all of a module whose room has no rules — but not an allowance's: those are
    the documented exceptions, each saying why it loads nothing heavy (an entry point importing only in main()).
    """
    if name.split(".")[0] in HEAVY:
        return [name]
    path = module_path(name)
    if path is None or name in seen:
        return None
    seen.add(name)
    parents = [".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)]
    for imported in [*parents, *sorted(imported_names(path))]:
        if (imported in parents or dependency(imported) in HEAVY or room_of(path) not in ALLOWED
                or rule_allows(path, imported)):
            chain = heavy_path(imported, seen)
            if chain:
                return [name, *chain]
    return None


@pytest.mark.parametrize("room", PURE_ROOMS)
def test_no_import_in_a_pure_room_reaches_mpi_or_tensorflow(room: str) -> None:
    """By reading the code: every import any module of the room writes, followed through the modules it names."""
    chains = {}
    for path in room_files(room):
        chain = heavy_path(module_name(path), set())
        if chain:
            chains[relative(path)] = " → ".join(chain)
    assert not chains, f"{room} reaches a heavy library: {chains}"


def test_the_pure_rooms_import_neither_mpi4py_nor_tensorflow() -> None:
    """By running it: importing every module of the pure rooms (and the export room's package) loads none of them.

    ``import aiperf_mpi.export`` stays light too (TensorFlow only when it builds the model), so its unit tests
    and the one-line refusals of ``python -m aiperf_mpi.export`` need no TensorFlow.
    """
    names = [module_name(path) for room in PURE_ROOMS for path in room_files(room) if path.name != "__main__.py"]
    names.append("aiperf_mpi.export")
    code = (
        "import importlib, sys\n"
        f"for name in {names!r}: importlib.import_module(name)\n"
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})\n"
        "print(','.join(bad))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=REPO)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "", f"imported: {done.stdout.strip()}"


def test_tests_import_no_other_test_module_nor_benchmarks() -> None:
    """Shared fixtures live in tests/support; benchmarks may import them, tests never import benchmarks."""
    offenders = {}
    for path in sorted((REPO / "tests").rglob("*.py")):
        bad = sorted(name for name in imported_names(path) if name.split(".")[0] == "benchmarks"
                     or (name.startswith("tests.") and name.split(".")[1] != "support"))  # fmt: skip
        if bad:
            offenders[relative(path)] = bad
    assert not offenders, f"move these into tests/support: {offenders}"


def test_unit_tests_import_neither_mpi4py_nor_tensorflow() -> None:
    """tests/unit runs without MPI: none of its modules (or what they import) loads mpi4py or TensorFlow."""
    tests = sorted(p.stem for p in Path(__file__).parent.glob("test_*.py"))
    code = (
        "import importlib, sys\n"
        f"for name in {tests!r}: importlib.import_module('tests.unit.' + name)\n"
        "print(','.join(sorted(m for m in sys.modules if m.split('.')[0] in ('mpi4py', 'tensorflow', 'horovod'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          cwd=REPO)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "", f"tests/unit imports: {done.stdout.strip()}"


def test_no_module_at_the_package_root_without_a_reason() -> None:
    """The root holds the entry point, the options, the errors, the signals and the ops command's old name."""
    assert sorted(p.name for p in PACKAGE.glob("*.py")) == [
        "__init__.py", "__main__.py", "cli.py", "config.py", "errors.py", "ops.py", "signals.py",
    ]  # fmt: skip


def test_the_event_docs_are_generated_from_the_schema() -> None:
    from aiperf_mpi.results.schema import markdown

    text = (REPO / "docs" / "events.md").read_text()
    assert markdown() in text, "docs/events.md is stale: regenerate it from aiperf_mpi/results/schema.py"


def test_the_verify_docs_list_the_rules_from_the_registry() -> None:
    """docs/verify.md's table of checks is the registry's own listing, between its markers, and nothing else."""
    from analysis.verify.registry import markdown

    text = (REPO / "docs" / "verify.md").read_text()
    marker = "<!-- generated from analysis/verify/registry.py: "
    begin, end = marker + "begin -->\n", marker + "end -->"
    assert text.count(begin) == 1 and text.count(end) == 1, "docs/verify.md has lost its generated section's markers"
    generated = text[text.index(begin) + len(begin):text.index(end)]
    assert generated == markdown(), "docs/verify.md is stale: regenerate its rules from analysis/verify/registry.py"


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


def test_the_design_names_every_role_a_rank_can_take() -> None:
    """docs/design.md describes the role split (mpi/run.py's ``rank_role``): a role added there is named here too."""
    tree = ast.parse((PACKAGE / "mpi" / "run.py").read_text())
    roles = sorted(node.name for node in tree.body if isinstance(node, ast.ClassDef) and node.name.endswith("Role"))
    design = (REPO / "docs" / "design.md").read_text()
    assert len(roles) >= 3 and all(f"`{role}`" in design for role in roles), (roles, "docs/design.md")


# --------------------------------------------------------------------------- issue 36: the verifier's modules


def _analysis_import_graph() -> dict[str, set[str]]:
    """analysis module → the analysis modules it imports, anywhere in it (in functions, under TYPE_CHECKING), by
    their names under ``analysis`` (``verify`` is the package ``analysis/verify/``, ``verify.registry`` a module
    of it)."""
    graph = {}
    for path in sorted((REPO / "analysis").rglob("*.py")):
        if path == REPO / "analysis" / "__init__.py":
            continue
        targets = {module_path(name) for name in _imported_modules(path)}
        graph[module_name(path).removeprefix("analysis.")] = {
            module_name(t).removeprefix("analysis.") for t in targets
            if t is not None and REPO / "analysis" in t.parents and t != REPO / "analysis" / "__init__.py"}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle of ``graph`` (its modules in order, the first again at the end), or [] when it has none."""
    state: dict[str, str] = {}

    def visit(node: str, trail: list[str]) -> list[str]:
        state[node] = "open"
        for target in sorted(graph.get(node, ())):
            if state.get(target) == "open":
                return [*trail[trail.index(target):], target]
            if target not in state:
                found = visit(target, [*trail, target])
                if found:
                    return found
        state[node] = "done"
        return []

    for node in sorted(graph):
        if node not in state:
            found = visit(node, [node])
            if found:
                return found
    return []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []


def test_the_analysis_modules_import_each_other_in_no_circle() -> None:
    """The verifier's modules (the package analysis/verify/: its families, registry and command; their types,
    analysis/checks.py) and the rest of analysis/ import one another one way: the shared types sit below the rule
    families, the registry above them, the command on top; no module imports one that imports it back."""
    graph = _analysis_import_graph()
    assert {"verify", "verify.registry", "verify.evidence", "verify.mllog", "verify.lineage", "checks"} <= set(graph)
    assert not _cycle(graph), f"analysis/ modules import each other in a circle: {' → '.join(_cycle(graph))}"


# --------------------------------------------------------------------------- issue 36: one reading of the log

LOG_READERS = frozenset({"EventStream", "read_events", "parse_line"})
"""what turns the event log's lines into events (``results/runlog.py``, ``results/logmodel.py``): only ``results/``
names them; every other reader takes the run's model (``results.logmodel.read_model``)"""
LOG_FILE_NAMES = ("EVENTS_FILE", "events.jsonl")
OPENERS = frozenset({"open", "read_text", "read_bytes", "readlines", "read"})


def _names_the_log(node: ast.AST) -> bool:
    return any((isinstance(n, ast.Constant) and isinstance(n.value, str) and "events.jsonl" in n.value)
               or (isinstance(n, ast.Name) and n.id in LOG_FILE_NAMES)
               or (isinstance(n, ast.Attribute) and n.attr in LOG_FILE_NAMES) for n in ast.walk(node))  # fmt: skip


def log_line_reads(path: Path) -> list[str]:
    """Where ``path`` parses the event log's lines itself: it names one of :data:`LOG_READERS` (a use, an import
    or an attribute), or a call that opens or reads a file names the log (``EVENTS_FILE`` or ``"events.jsonl"``
    in its arguments or in what it is called on: ``(run_dir / "events.jsonl").open()``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = []
        if isinstance(node, ast.Name):
            names = [node.id]
        elif isinstance(node, ast.Attribute):
            names = [node.attr]
        elif isinstance(node, ast.ImportFrom):
            names = [alias.name for alias in node.names]
        found += [f"line {node.lineno}: {name}" for name in names if name in LOG_READERS]
        if isinstance(node, ast.Call):
            called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            receiver = [node.func.value] if isinstance(node.func, ast.Attribute) else []
            if called in OPENERS and any(_names_the_log(part) for part in [*receiver, *node.args,
                                                                          *(k.value for k in node.keywords)]):
                found.append(f"line {node.lineno}: {called}() of the event log")
    return found


def _log_reading_modules() -> list[Path]:
    """Every module of the package outside ``results/``, and of ``analysis/``."""
    package = [p for p in sorted(PACKAGE.rglob("*.py")) if (PACKAGE / "results") not in p.parents]
    return package + sorted((REPO / "analysis").rglob("*.py"))


def test_only_results_parses_the_event_log() -> None:
    """The log is read once, into the run's model (``results/logmodel.py``): nobody else parses its lines.

    So a new field or event is taught to one reader, and what a log older than a field means is said once.
    """
    offenders = {}
    for path in _log_reading_modules():
        found = log_line_reads(path)
        if found:
            offenders[relative(path)] = found
    assert not offenders, f"these read events.jsonl's lines themselves (use results.logmodel.read_model): {offenders}"


def test_the_log_reader_rule_finds_a_module_that_reads_the_lines_itself(tmp_path) -> None:
    sample = tmp_path / "reader.py"
    sample.write_text("from aiperf_mpi.results.runlog import EventStream\n"
                      "lines = (run_dir / 'events.jsonl').open()\n")  # fmt: skip
    assert sorted(log_line_reads(sample)) == ["line 1: EventStream", "line 2: open() of the event log"]

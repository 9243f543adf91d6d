"""Every link of the project's Markdown pages resolves, anchor included; BENCHMARKS.md's table cites the latest runs.

Pages point at each other's sections by anchor (BENCHMARKS.md's table at its sections, the docs at
BENCHMARKS.md's areas and the lab notes): a renamed heading breaks them silently on GitHub. And the table's
figures are copied by hand from the blocks ``make bench`` rewrites, so a bench run that nobody carried into
the table would leave it stating an old figure as current.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.markdown import anchor, anchors, figure_table, links, stale_rows

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", ROOT / "BENCHMARKS.md", ROOT / "jobscripts" / "README.md",
                *(ROOT / "docs").glob("*.md")])
EXTERNAL = ("http://", "https://", "mailto:")


def broken_links(page: Path) -> list[str]:
    """``line: target (why)`` for each link of ``page`` whose file or anchor does not exist."""
    broken = []
    for line, target in links(page.read_text()):
        if target.startswith(EXTERNAL):
            continue
        path, _, fragment = target.partition("#")
        destination = (page.parent / path).resolve() if path else page
        if not destination.exists():
            broken.append(f"{line}: {target} (no such file)")
        elif fragment and destination.suffix == ".md" and fragment not in anchors(destination.read_text()):
            broken.append(f"{line}: {target} (no heading with that anchor)")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_link_of_the_page_resolves_to_a_file_and_a_heading(page: Path) -> None:
    assert broken_links(page) == []


def test_a_link_to_a_missing_anchor_or_file_is_found(tmp_path: Path) -> None:
    """The check itself can fail: a wrong anchor, a missing file; code is not read as a link."""
    (tmp_path / "other.md").write_text("# Other page\n\n## The master at 65,536 groups\n")
    page = tmp_path / "page.md"
    page.write_text("# Page\n\n[ok](other.md#the-master-at-65536-groups) [self](#page) [bad](other.md#the-master)\n"
                    "[gone](missing.md) `[code](nowhere.md)`\n\n```\n[fenced](nowhere.md)\n```\n")
    assert broken_links(page) == ["3: other.md#the-master (no heading with that anchor)",
                                  "4: missing.md (no such file)"]


@pytest.mark.parametrize(("heading", "expected"), [
    ("The master at 65,536 groups", "the-master-at-65536-groups"),
    ("Verify's cost", "verifys-cost"),
    ("Trainer against Keras model.fit, compiled alike (ResNet-50 32×32, batch 64)",
     "trainer-against-keras-modelfit-compiled-alike-resnet-50-3232-batch-64"),
    ("`make run` on MPICH", "make-run-on-mpich"),
    ("ResNet-50 32² — 2026-12-01", "resnet-50-32--2026-12-01"),
])
def test_anchors_are_githubs(heading: str, expected: str) -> None:
    assert anchor(heading) == expected


def test_a_repeated_heading_gets_a_numbered_anchor() -> None:
    assert anchors("# A\n## Notes\n## Notes\n## Notes\n") == {"a", "notes", "notes-1", "notes-2"}


def test_the_current_figures_table_opens_benchmarks_md_and_names_its_machine_date_command_and_section() -> None:
    text = (ROOT / "BENCHMARKS.md").read_text()
    rows = figure_table(text)
    assert len(rows) >= 30
    assert text.index("## Current figures") < text.index("\n## ", text.index("## Current figures") + 1)
    for row in rows:
        assert row.section.startswith("["), row
        if row.figure.startswith("not measured yet"):
            continue
        assert row.machine.startswith(("AMD EPYC", "**Intel Xeon**")), row
        assert row.date[:4] == "2026" and row.reproduce, row


def test_each_row_a_bench_made_cites_that_bench_s_latest_run() -> None:
    """After ``make bench`` the rows whose figure it rewrote must be brought up to date with it."""
    assert stale_rows((ROOT / "BENCHMARKS.md").read_text()) == []


def test_a_bench_run_not_carried_into_the_table_is_found() -> None:
    page = ("# B\n\n## Current figures\n\n| measure | current figure | machine | date | reproduce | section |\n"
            "|---|---|---|---|---|---|\n| **An area** | | | | | |\n"
            "| x | 1 s | AMD EPYC, 2 cores | 2026-12-01 04:32 | `python -m benchmarks x` | [x](#x) |\n\n## X\n\n"
            "<!-- bench:x -->\n### x\n\nCommand: `make bench`; 2026-12-05 00:10 UTC; AMD EPYC.\n<!-- /bench:x -->\n")
    assert [(row.measure, date) for row, date in stale_rows(page)] == [("x", "2026-12-05 00:10")]
    assert stale_rows(page.replace("2026-12-01 04:32", "2026-12-05 00:10")) == []

"""The little of Markdown the project's pages use: headings' anchors, links, and BENCHMARKS.md's table.

Pure text functions, no Markdown library: the pages use ATX headings, inline links and pipe tables only.
``tests/unit/test_markdown_links.py`` checks with them that every link of the pages resolves, anchor
included, and that the current-figures table of BENCHMARKS.md cites each bench's latest run;
``benchmarks/__main__.py`` (``make bench``) names with them the table rows that a fresh run made stale.
"""

from __future__ import annotations

import re
import unicodedata
from typing import NamedTuple

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
INLINE_CODE = re.compile(r"`+[^`]*`+")
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
BENCH_BLOCK = re.compile(r"<!-- bench:([\w-]+) -->(.*?)<!-- /bench:\1 -->", re.S)
BENCH_DATE = re.compile(r"Command: .*?; (\d{4}-\d\d-\d\d \d\d:\d\d) UTC;")
BENCH_COMMAND = re.compile(r"^`python -m benchmarks ([\w-]+)`$")
TABLE_HEADING = "Current figures"
"""the section of BENCHMARKS.md whose table gives the current figure of each measure"""


class Link(NamedTuple):
    line: int
    target: str


class TableRow(NamedTuple):
    measure: str
    figure: str
    machine: str
    date: str
    reproduce: str
    section: str


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of every line outside fenced code blocks: a ``#`` or a ``[x](y)`` in code is code."""
    lines, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append((number, line))
    return lines


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading's text: lower case; every character but letters, marks, decimal digits,
    ``_``, ``-`` and spaces dropped (so ``²``, ``×``, ``,`` and backticks go); spaces become hyphens."""
    kept = (c for c in heading.strip().lower()
            if c in "-_ " or unicodedata.category(c)[0] in "LM" or unicodedata.category(c) == "Nd")
    return "".join(kept).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading's anchor, a repeated one numbered as GitHub does (``name``, ``name-1``, ``name-2``)."""
    seen: dict[str, int] = {}
    found = set()
    for _, line in prose_lines(text):
        match = HEADING.match(line)
        if not match:
            continue
        base = anchor(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(text: str) -> list[Link]:
    """Every inline link's target outside code (fenced blocks and inline code spans)."""
    return [Link(number, match.group(1)) for number, line in prose_lines(text)
            for match in LINK.finditer(INLINE_CODE.sub("", line))]


def _cells(line: str) -> list[str]:
    """A pipe table row's cells, stripped; a ``|`` inside inline code is not a cell border."""
    spans = list(INLINE_CODE.finditer(line))
    cells, start = [], 1
    for index, char in enumerate(line):
        if char == "|" and 0 < index and not any(span.start() < index < span.end() for span in spans):
            cells.append(line[start:index].strip())
            start = index + 1
    return cells


def figure_table(text: str) -> list[TableRow]:
    """The rows of BENCHMARKS.md's current-figures table that give a figure (not the areas' title rows)."""
    rows, inside = [], False
    for _, line in prose_lines(text):
        match = HEADING.match(line)
        if match:
            inside = match.group(2) == TABLE_HEADING
            continue
        if not (inside and line.startswith("|")):
            continue
        cells = _cells(line)
        if len(cells) == len(TableRow._fields) and cells[0] != "measure" and not set(cells[0]) <= set("-:"):
            if any(cells[1:]):
                rows.append(TableRow(*cells))
    return rows


def bench_dates(text: str) -> dict[str, str | None]:
    """Each ``make bench`` block's name and the date its run finished (None where no run has written it)."""
    dates: dict[str, str | None] = {}
    for match in BENCH_BLOCK.finditer(text):
        date = BENCH_DATE.search(match.group(2))
        dates[match.group(1)] = date.group(1) if date else None
    return dates


def stale_rows(text: str) -> list[tuple[TableRow, str | None]]:
    """Table rows whose figure a bench made (``python -m benchmarks NAME`` as their way to reproduce it) and whose
    date is not that bench's latest run, with the block's date (None: no block, or a block never run)."""
    dates = bench_dates(text)
    stale = []
    for row in figure_table(text):
        match = BENCH_COMMAND.match(row.reproduce)
        if match and dates.get(match.group(1)) != row.date:
            stale.append((row, dates.get(match.group(1))))
    return stale

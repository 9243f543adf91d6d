"""Run the benchmarks and rewrite their blocks of BENCHMARKS.md.

Usage: ``python -m benchmarks [NAME ...]`` (default: all).  ``make bench``
runs it.  Each bench's block (``<!-- bench:NAME -->`` … ``<!-- /bench:NAME -->``)
sits in the section of its area, under a ``###`` heading, and is replaced in
place.  The current-figures table that opens the page is written by hand from
those blocks: a run names the table rows it made stale, and
``tests/unit/test_markdown_links.py`` fails until their dates are the run's.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import os
import re
import sys
from pathlib import Path

from benchmarks.common import machine
from tests.support.markdown import stale_rows

BENCHMARKS = {
    "opcount": "Operation counter: 1,000-layer graph",
    "search": "Architecture search: proposal latency against history size",
    "trainer": "Trainer against Keras model.fit, compiled alike (ResNet-50 32×32, batch 64)",
    "xla": "XLA against tf.function on CPU: training efficiency per shape",
    "threads": "TensorFlow's threads, ranks, batch and precision on CPU: training efficiency",
    "prepare": "A new model's first step, and preparing the next model while one trains (CPU)",
    "layers": "ResNet-50's convolutions, stage by stage, against the matmul peak (CPU, fp32)",
    "profile": "Where a ResNet-50 training step's time goes on CPU, by TensorFlow op type (fp32)",
    "master": "The master against simulated groups",
    "report": "The run report on a 10,000-model, 500,000-epoch log",
    "verify": "The verifier on 1,000, 10,000 and 100,000 models: seconds per model, linearity, peak RSS",
    "close": "The close of a killed run's log at 10,000 and 100,000 models, against the templates' bound",
    "ft_start": "Fault-tolerant launches that fail to start or to end, at 4, 32 and 128 ranks",
    "memory": "Memory per rank of a rehearsal, by seed model and role",
}
FILE = Path(__file__).resolve().parents[1] / "BENCHMARKS.md"
HEADER = """# Benchmarks

Figures measured by `make bench` (`python -m benchmarks [NAME ...]`); each
block is rewritten by the run that measured it and names the machine (its
CPU as /proc/cpuinfo names it, its cores, and the load average as the
benchmark began), the date and the command.
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("names", nargs="*", choices=[*BENCHMARKS, []], help="benchmarks to run (default: all)")
    options = parser.parse_args(argv)
    names = options.names or list(BENCHMARKS)
    text = FILE.read_text() if FILE.exists() else HEADER
    for name in names:
        print(f"== {name}: {BENCHMARKS[name]}", flush=True)
        load = "load average at the start {:.1f} / {:.1f} / {:.1f} (1 / 5 / 15 min)".format(*os.getloadavg())
        body = importlib.import_module(f"benchmarks.{name}").run()
        print(body, flush=True)
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
        section = (
            f"<!-- bench:{name} -->\n### {BENCHMARKS[name]}\n\n"
            f"Command: `make bench` (or `.venv/bin/python -m benchmarks {name}`); {stamp}; {machine()}; {load}.\n\n"
            f"{body}\n<!-- /bench:{name} -->"
        )
        pattern = re.compile(rf"<!-- bench:{name} -->.*?<!-- /bench:{name} -->", re.S)
        if pattern.search(text):
            start, end = pattern.search(text).span()
            text = text[:start] + section + text[end:]
        else:
            text = f"{text.rstrip()}\n\n{section}\n"
    FILE.write_text(text)
    print(f"wrote {FILE}")
    for row, date in stale_rows(text):
        print(f"  the table of current figures: bring \"{row.measure}\" ({row.date}) up to the run of {date}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

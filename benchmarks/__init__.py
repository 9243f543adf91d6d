"""``make bench``: measured figures, written into BENCHMARKS.md with their command.

Each benchmark returns a Markdown section; :mod:`benchmarks.__main__` replaces
that section of BENCHMARKS.md (between ``<!-- bench:NAME -->`` markers) so the
file always holds the latest run of each benchmark, with the machine and the
command that produced it.
"""

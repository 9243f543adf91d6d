"""Rank 0's transport and the relays receive from any rank one way, written once (aiperf_mpi/mpi/receive.py).

The receive itself runs under MPI (tests/mpi/test_protocol.py, with and
without relays); here, without MPI, the source is held to having one such
loop: a second probe-on-any-source-then-receive written anywhere else in the
package would be a second copy to keep in step (its back-off, its buffer).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "aiperf_mpi"


def test_only_the_receiver_probes_every_rank_and_sizes_a_buffer() -> None:
    receiving = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            arguments = [*node.args, *(k.value for k in node.keywords if k.arg == "source")]
            any_source = any("ANY_SOURCE" in ast.unparse(a) for a in arguments[:1])
            if (node.func.attr in ("Iprobe", "iprobe", "Improbe", "improbe") and any_source) \
                    or node.func.attr == "Get_count":  # fmt: skip
                receiving.add(path.relative_to(PACKAGE).as_posix())
    assert receiving == {"mpi/receive.py"}, f"a receive from any rank outside mpi/receive.py: {sorted(receiving)}"

"""``python -m aiperf_mpi.graph``: print the analytic operation count of a model.

Per layer: name, type, output shape, parameters, forward and backward
operations per sample; then totals, per training step for ``--batch`` and,
with ``--train-samples``/``--val-samples``, per epoch.  ``--json`` prints the
same as one JSON object for other tools.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from aiperf_mpi.errors import positive_int
from aiperf_mpi.graph.model import GraphError, from_json, with_kernel_size
from aiperf_mpi.graph.ops import count_ops, epoch_ops
from aiperf_mpi.graph.seeds import SEED_MODELS, seed_model


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m aiperf_mpi.graph",
        description="Analytic operation count of a model (a multiply-accumulate is 2 operations).",
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--model", choices=sorted(SEED_MODELS), default="resnet50", help="a seed model (default resnet50)"
    )
    source.add_argument("--graph", type=Path, metavar="FILE", help="a graph JSON file (as written in a run directory)")
    parser.add_argument("--image-size", type=positive_int, default=224, help="input height and width (seed models)")
    parser.add_argument("--channels", type=positive_int, default=3, help="input channels (seed models)")
    parser.add_argument("--classes", type=positive_int, default=1000, help="output classes (seed models)")
    parser.add_argument(
        "--kernel-size", type=positive_int, help="apply a tuned kernel size to the tunable convolutions"
    )
    parser.add_argument(
        "--batch", type=positive_int, default=256, help="global batch of one training step (default 256)"
    )
    parser.add_argument("--train-samples", type=int, default=0, help="training samples per epoch, for the epoch total")
    parser.add_argument("--val-samples", type=int, default=0, help="validation samples per epoch, for the epoch total")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    return parser


def _human(value: float) -> str:
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3f} {unit}"
    return f"{value:.0f}"


def main(argv: Sequence[str] | None = None) -> int:
    options = build_parser().parse_args(argv)
    try:
        if options.graph is not None:
            try:
                graph = from_json(options.graph.read_text())
            except OSError as exc:
                raise GraphError(f"cannot read {options.graph}: {exc.strerror}") from None
        else:
            graph = seed_model(options.model, options.image_size, options.channels, options.classes)
        if options.kernel_size is not None:
            graph = with_kernel_size(graph, options.kernel_size)
        model = count_ops(graph)
    except GraphError as exc:
        print(f"aiperf_mpi.ops: error: {exc}", file=sys.stderr)
        return 2
    if options.train_samples < 0 or options.val_samples < 0:
        print("aiperf_mpi.ops: error: sample counts must be ≥ 0", file=sys.stderr)
        return 2
    epoch = epoch_ops(model, options.train_samples, options.val_samples, options.batch)
    step = model.train_step(options.batch)

    if options.json:
        data = model.to_dict()
        data.update(
            {
                "model": graph.graph.get("name"),
                "batch": options.batch,
                "train_step": step,
                "epoch": {**epoch.__dict__, "total": epoch.total},
            }
        )
        print(json.dumps(data))
        return 0

    header = f"{'layer':<22} {'type':<8} {'output':<16} {'params':>11} {'forward':>15} {'backward':>15}"
    print(header)
    print("-" * len(header))
    for layer in model.layers:
        shape = "×".join(str(d) for d in layer.output_shape)
        print(
            f"{layer.name:<22} {layer.type:<8} {shape:<16} {layer.params:>11,} "
            f"{layer.forward_eval:>15,} {layer.backward:>15,}"
        )
    print("-" * len(header))
    print(f"model                 {graph.graph.get('name')} ({len(model.layers)} layers)")
    print(f"parameters            {model.params:,} ({model.trainable_params:,} trainable)")
    print(f"multiply-accumulates  {model.macs:,} per sample (conv + dense forward, {_human(model.macs)}MAC)")
    print(f"forward (inference)   {model.forward_eval:,} ops per sample ({_human(model.forward_eval)}op)")
    print(f"forward (training)    {model.forward_train:,} ops per sample")
    print(
        f"backward              {model.backward:,} ops per sample ({model.backward / model.forward_eval:.3f}× forward)"
    )
    print(f"update (SGD+momentum) {model.update:,} ops per step")
    print(f"training step         {step:,} ops at batch {options.batch} ({_human(step)}op)")
    if options.train_samples or options.val_samples:
        print(
            f"epoch                 {epoch.total:,} ops ({options.train_samples:,} train samples in {epoch.steps:,} "
            f"steps, {options.val_samples:,} validation samples; {_human(epoch.total)}op)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

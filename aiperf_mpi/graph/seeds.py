"""Seed architectures the search starts from.

:func:`resnet50` is ResNet-50 *v1* as published (He et al., 2015, table 1):
the stride of a down-sampling block sits in its first 1×1 convolution (v1.5
moves it to the 3×3, and costs ~4.1 G multiply-accumulates instead of ~3.86 G),
convolutions have no bias (batch normalisation follows each of them), and
projection shortcuts are 1×1 convolutions with BN.  The 7×7/2 stem and the
3×3/2 max-pool use 'same' padding, which gives the paper's 112×112 and 56×56
maps at 224×224 with the same arithmetic as the explicit zero padding.
"""

from __future__ import annotations

from collections.abc import Callable

import networkx as nx

from aiperf_mpi.graph.model import GraphBuilder, GraphError

# (blocks, bottleneck width) per stage; output width is 4 × bottleneck width
RESNET50_STAGES = ((3, 64), (4, 128), (6, 256), (3, 512))


def _bottleneck(b: GraphBuilder, x: str, width: int, stride: int, project: bool, prefix: str) -> str:
    """conv1×1(stride) → conv3×3 → conv1×1(×4), plus identity or projection shortcut."""
    out = 4 * width
    y = b.relu(b.bn(b.conv(x, width, 1, stride, name=f"{prefix}_conv1"), name=f"{prefix}_bn1"), name=f"{prefix}_relu1")
    y = b.relu(
        b.bn(b.conv(y, width, 3, 1, tunable=True, name=f"{prefix}_conv2"), name=f"{prefix}_bn2"), name=f"{prefix}_relu2"
    )
    y = b.bn(b.conv(y, out, 1, 1, name=f"{prefix}_conv3"), name=f"{prefix}_bn3")
    if project:
        shortcut = b.bn(b.conv(x, out, 1, stride, name=f"{prefix}_proj"), name=f"{prefix}_proj_bn")
    else:
        shortcut = x
    return b.relu(b.add([shortcut, y], name=f"{prefix}_add"), name=f"{prefix}_out")


def resnet50(image_size: int = 224, channels: int = 3, classes: int = 1000) -> nx.DiGraph:
    """ResNet-50 v1 for ``image_size``² × ``channels`` inputs and ``classes`` outputs."""
    _check_sizes(image_size, channels, classes, minimum_image=32)
    b = GraphBuilder(image_size, image_size, channels, name="resnet50")
    x = b.relu(b.bn(b.conv(b.input, 64, 7, 2, name="stem_conv"), name="stem_bn"), name="stem_relu")
    x = b.maxpool(x, 3, 2, padding="same", name="stem_pool")
    for stage, (blocks, width) in enumerate(RESNET50_STAGES, start=2):
        for block in range(blocks):
            stride = 2 if block == 0 and stage > 2 else 1
            x = _bottleneck(b, x, width, stride, project=block == 0, prefix=f"s{stage}b{block + 1}")
    x = b.gap(x, name="gap")
    x = b.dense(x, classes, name="fc")
    b.softmax(x, name="softmax")
    return b.build()


def tiny_resnet(image_size: int = 32, channels: int = 3, classes: int = 10, width: int = 16) -> nx.DiGraph:
    """A small residual network for fast tests: stem, one identity block, one down-sampling block.

    Its BN layers use a fast moving average (momentum 0.5): it trains for a
    few dozen steps per epoch on small data, and with 0.9 the inference-mode
    statistics lagged the weights so much that validation accuracy swung
    between 20 % and 80 % from epoch to epoch on ``digits`` (measured).
    """
    _check_sizes(image_size, channels, classes, minimum_image=4)
    b = GraphBuilder(image_size, image_size, channels, name="tiny_resnet", bn_momentum=0.5)
    x = b.relu(b.bn(b.conv(b.input, width, 3, name="stem_conv"), name="stem_bn"), name="stem_relu")
    y = b.relu(b.bn(b.conv(x, width, 3, tunable=True, name="b1_conv1"), name="b1_bn1"), name="b1_relu1")
    y = b.bn(b.conv(y, width, 3, tunable=True, name="b1_conv2"), name="b1_bn2")
    x = b.relu(b.add([x, y], name="b1_add"), name="b1_out")
    y = b.relu(b.bn(b.conv(x, 2 * width, 3, 2, tunable=True, name="b2_conv1"), name="b2_bn1"), name="b2_relu1")
    y = b.bn(b.conv(y, 2 * width, 3, tunable=True, name="b2_conv2"), name="b2_bn2")
    shortcut = b.bn(b.conv(x, 2 * width, 1, 2, name="b2_proj"), name="b2_proj_bn")
    x = b.relu(b.add([shortcut, y], name="b2_add"), name="b2_out")
    x = b.gap(x, name="gap")
    x = b.dense(x, classes, name="fc")
    b.softmax(x, name="softmax")
    return b.build()


SEED_MODELS: dict[str, Callable[..., nx.DiGraph]] = {"resnet50": resnet50, "tiny": tiny_resnet}


def seed_model(name: str, image_size: int, channels: int, classes: int) -> nx.DiGraph:
    """Look a seed up by name (``resnet50``, ``tiny``)."""
    try:
        builder = SEED_MODELS[name]
    except KeyError:
        raise GraphError(f"unknown seed model {name!r} (known: {', '.join(SEED_MODELS)})") from None
    return builder(image_size=image_size, channels=channels, classes=classes)


def _check_sizes(image_size: int, channels: int, classes: int, minimum_image: int) -> None:
    for label, value, low in (
        ("image size", image_size, minimum_image),
        ("channels", channels, 1),
        ("classes", classes, 2),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise GraphError(f"{label} must be an integer ≥ {low}, got {value!r}")

"""Mixed precision on the CPU: the fp16 loss scaling the trainer uses, and the device prefetch of its pipeline."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.tf


def _step(optimizer, variable, gradient: float) -> None:
    optimizer.apply([np.array([gradient], dtype=np.float32)], [variable])


def test_fp16_scales_the_loss_dynamically_and_skips_a_step_whose_gradients_overflow() -> None:
    import keras

    from aiperf_mpi.train.trainer import make_optimizer

    optimizer = make_optimizer("fp16", 0.1, 0.0)
    assert isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
    variable = keras.Variable(np.array([1.0], dtype=np.float32))
    optimizer.build([variable])
    scale = float(optimizer.dynamic_scale.numpy())
    assert scale == 2.0**15
    assert float(optimizer.scale_loss(keras.ops.convert_to_tensor(2.0))) == 2.0 * scale

    _step(optimizer, variable, 1.0 * scale)  # the scaled gradient of 1.0: unscaled, one SGD step of 0.1
    assert float(variable.numpy()[0]) == pytest.approx(0.9)
    _step(optimizer, variable, float("inf"))  # an overflow: no update, the scale halves
    assert float(variable.numpy()[0]) == pytest.approx(0.9)
    assert float(optimizer.dynamic_scale.numpy()) == scale / 2


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_fp32_and_bf16_train_without_loss_scaling(precision: str) -> None:
    import keras

    from aiperf_mpi.train.trainer import make_optimizer

    optimizer = make_optimizer(precision, 0.1, 0.9)
    assert isinstance(optimizer, keras.optimizers.SGD)
    assert not isinstance(optimizer, keras.optimizers.LossScaleOptimizer)


def test_prefetching_to_the_device_gives_the_same_batches() -> None:
    from aiperf_mpi.data.sources import open_source
    from aiperf_mpi.train.pipeline import Shard

    source = open_source("digits", "")
    plain = list(Shard(source, 0, 1).train(32, seed=3, epoch=1))
    onto = list(Shard(source, 0, 1, device="/CPU:0").train(32, seed=3, epoch=1))
    assert len(plain) == len(onto) == Shard(source, 0, 1).steps(32)
    for (x0, y0), (x1, y1) in zip(plain, onto, strict=True):
        assert np.array_equal(x0.numpy(), x1.numpy()) and np.array_equal(y0.numpy(), y1.numpy())
    assert "CPU:0" in onto[0][0].device

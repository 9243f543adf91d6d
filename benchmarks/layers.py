"""ResNet-50's convolutions, stage by stage, against the same process's matmul peak (CPU, fp32).

Why the whole model stays below the efficiency goals of issue 13 (32² ≥ 0.50,
224² ≥ 0.70 of the peak): each row times one convolution of a ResNet-50 stage
(forward and both backward products, counted as the benchmark counts them:
3 × 2·K²·Cin·Cout·Ho·Wo per sample, padding included) in its own
``tf.function``, and one BatchNorm + ReLU (training mode, forward and
backward), a layer the count gives almost no operations but the step must
still run.  A ratio above 1 means oneDNN's kernel (Winograd for 3×3, or a
better GEMM blocking than the probe's square product) does fewer
multiplications than the analytic count.
"""

from __future__ import annotations

import time

import keras
import tensorflow as tf

from aiperf_mpi.train.peak import measure_peak

SECONDS = 2.0
CONVS = (  # (image size, stage, batch, spatial size, Cin, Cout, kernel)
    (32, 2, 64, 8, 64, 64, 3), (32, 3, 64, 4, 128, 128, 3), (32, 4, 64, 2, 256, 256, 3),
    (32, 5, 64, 1, 512, 512, 3), (32, 4, 64, 2, 1024, 256, 1),
    (224, 2, 32, 56, 64, 64, 3), (224, 4, 32, 14, 256, 256, 3), (224, 4, 32, 14, 1024, 256, 1),
)  # fmt: skip
NORMS = ((32, 64, 8, 256), (224, 32, 14, 1024))
"""(image size, batch, spatial size, channels) of a BatchNorm + ReLU"""


def _rate(step, argument) -> float:
    """Calls of ``step`` per second, after two that trace and warm up."""
    float(step(argument))
    float(step(argument))
    calls, started = 0, time.perf_counter()
    while time.perf_counter() - started < SECONDS:
        float(step(argument))
        calls += 1
    return calls / (time.perf_counter() - started)


def _conv(batch: int, size: int, cin: int, cout: int, kernel: int) -> float:
    x = tf.random.uniform((batch, size, size, cin))
    w = tf.Variable(tf.random.uniform((kernel, kernel, cin, cout)) * 0.01)

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(tf.nn.conv2d(x, w, 1, "SAME"))
        grad_x, grad_w = tape.gradient(loss, [x, w])
        return grad_x[0, 0, 0, 0] + grad_w[0, 0, 0, 0]

    ops = 3 * 2 * kernel * kernel * cin * cout * size * size * batch
    return ops * _rate(step, x)


def _norm(batch: int, size: int, channels: int) -> float:
    x = tf.random.uniform((batch, size, size, channels))
    norm = keras.layers.BatchNormalization()
    norm.build(x.shape)

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(tf.nn.relu(norm(x, training=True)))
        return tape.gradient(loss, x)[0, 0, 0, 0]

    return 1.0 / _rate(step, x)


def run() -> str:
    peak = measure_peak("fp32", 3.0)["ops_per_second"]
    lines = ["| image | stage | layer (per sample: H×W×Cin → Cout) | batch | G ops/s | ratio to peak |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    for image, stage, batch, size, cin, cout, kernel in CONVS:
        rate = _conv(batch, size, cin, cout, kernel)
        lines.append(f"| {image}² | {stage} | {kernel}×{kernel} conv, {size}×{size}×{cin} → {cout} | {batch} | "
                     f"{rate / 1e9:.1f} | {rate / peak:.2f} |")  # fmt: skip
    lines += ["", "| image | BatchNorm + ReLU (training), H×W×C | batch | ms per step, forward and backward |",
              "|---|---|---|---|"]  # fmt: skip
    for image, batch, size, channels in NORMS:
        lines.append(f"| {image}² | {size}×{size}×{channels} | {batch} | {_norm(batch, size, channels) * 1e3:.2f} |")
    lines += ["", f"Peak (fp32 matmul probe, same process, TensorFlow's default threads): {peak / 1e9:.1f} G ops/s."]
    return "\n".join(lines)

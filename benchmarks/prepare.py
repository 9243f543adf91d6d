"""What a new model costs before it trains, and whether a CPU node can prepare the next one while training.

ResNet-50 at 32×32×3, batch 32, fp32, one process with TensorFlow's default
threads (the whole machine), synthetic tensors.  Two measurements:

* **First step of a new model** (trace + graph optimisation + one step),
  with the optimizer's slots created lazily inside the first step (as the
  trainer did) against built beforehand (as it does now: created inside,
  they make ``tf.function`` trace the step twice).  :data:`ROUNDS` fresh
  models each, in turns.
* **Preparing the next model while the current one trains** (issue 13:
  "on CPU-only nodes, measure and decide"): a thread builds and traces a new
  model and runs its first step while the main thread keeps training the
  current one; the time both took together against the same work done one
  after the other (steps at the rate measured alone, then the preparation
  alone).  A saving near zero or below means the preparation only takes the
  training's cores.
"""

from __future__ import annotations

import statistics
import threading
import time

import tensorflow as tf

from benchmarks.resnet_step import resnet50_step

BATCH = 32
ROUNDS = 3
SMALL_SAVING = 0.25
"""below this share of the preparation hidden, overlapping is not worth a second thread on a CPU node"""


def _new_model(prebuild: bool):
    """A fresh model's training step, after its first call; (step, seconds of the first call, traces)."""
    step, x, y = resnet50_step(32, BATCH, prebuild)
    started = time.perf_counter()
    float(step(x, y))
    return step, time.perf_counter() - started, step.experimental_get_tracing_count()


def run() -> str:
    x, y = tf.random.uniform((BATCH, 32, 32, 3)), tf.zeros((BATCH,), tf.int32)
    first: dict[bool, list[float]] = {False: [], True: []}
    traces: dict[bool, int] = {}
    for _ in range(ROUNDS):
        for prebuild in (False, True):
            _, seconds, count = _new_model(prebuild)
            first[prebuild].append(seconds)
            traces[prebuild] = count
    current, _, _ = _new_model(True)
    for _ in range(3):
        float(current(x, y))
    overlap_rows = []
    for round_ in range(ROUNDS):
        started = time.perf_counter()
        _new_model(True)
        prepare_alone = time.perf_counter() - started
        started, steps = time.perf_counter(), 0
        while time.perf_counter() - started < max(prepare_alone, 2.0):
            float(current(x, y))
            steps += 1
        step_alone = (time.perf_counter() - started) / steps
        done = threading.Event()
        thread = threading.Thread(target=lambda done=done: (_new_model(True), done.set()))
        started, steps = time.perf_counter(), 0
        thread.start()
        while not done.is_set():
            float(current(x, y))
            steps += 1
        together = time.perf_counter() - started
        thread.join()
        serial = steps * step_alone + prepare_alone
        overlap_rows.append((round_ + 1, prepare_alone, step_alone, steps, together, serial))
    lines = [
        "| optimizer slots | traces of the step | first step of a new model (median, min–max) |",
        "|---|---|---|",
    ]
    for prebuild, label in ((False, "created in the first step (before)"), (True, "built before it (now)")):
        times = first[prebuild]
        lines.append(f"| {label} | {traces[prebuild]} | {statistics.median(times):.2f} s "
                     f"({min(times):.2f}–{max(times):.2f}) |")  # fmt: skip
    saving = statistics.median(first[False]) - statistics.median(first[True])
    lines += [
        "",
        f"Building the slots first saves {saving:.2f} s per new model (median of {ROUNDS} in turns).",
        "",
        "| round | preparing alone | a training step alone | both at once: steps, seconds | the same one after the "
        "other | saved |",
        "|---|---|---|---|---|---|",
    ]
    for number, prepare_alone, step_alone, steps, together, serial in overlap_rows:
        lines.append(f"| {number} | {prepare_alone:.2f} s | {step_alone:.3f} s | {steps}, {together:.2f} s | "
                     f"{serial:.2f} s | {serial - together:+.2f} s |")  # fmt: skip
    saved = statistics.median(r[5] - r[4] for r in overlap_rows)
    preparation = statistics.median(r[1] for r in overlap_rows)
    share = saved / preparation
    verdict = ("hides little of it" if share < SMALL_SAVING else "hides a real part of it")
    lines += [
        "",
        f"Preparing the next model beside the training saves {saved:+.2f} s (median) of a {preparation:.2f} s "
        f"preparation ({share:.0%}): it {verdict} in one process that has the node to itself. In a group the "
        "preparation would run on the leader alone, and a slowed leader holds every rank at the next all-reduce, "
        "so the saving there is at most this and can turn into a loss.",
    ]
    return "\n".join(lines)

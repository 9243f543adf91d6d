"""TensorFlow's threads, ranks per node, batch size and precision of CPU training, as ratios to the peak.

The default thread pools of a training rank (``aiperf_mpi/train/threads.py``)
stand on this table: re-run it when TensorFlow, Horovod, the trainer or the
machine changes.  Contenders are separate processes — thread pools are fixed
once TensorFlow starts — launched as ``mpirun -n K python -m
benchmarks.threads_worker`` (1 rank, or a Horovod group of 2 on this node's
cores, as ``make run``'s training ranks; ``--bind-to none`` and
``mpi_yield_when_idle`` as there), under the bench's outer deadline.  Each
trains ResNet-50 32² on synthetic data with the project's ``GroupTrainer``
(``tf.function`` path, fp32 unless said).

To compare like with like on a shared machine, the contenders take turns,
one epoch at a time: they start and trace together (not measured), then each
round gives every contender one epoch while the others are stopped
(``SIGSTOP``: an idle Horovod group keeps negotiating and spinning in MPI,
which would eat into the one being measured), and a contender's figure is the
median of its epochs.  Besides the time, every rank's CPU seconds are
counted, and the machine's busy time during the epoch less the contender's
own says how much other people's work took meanwhile: while it is not zero,
contenders with more threads take more of the CPU from it, and the figures
per CPU-second are the fairer comparison.  The peak is the project's own
matmul probe (``train/peak.py``, one process, TensorFlow's default threads)
run by the bench between rounds, fp32 and bf16 alternately; ratios divide by
the median fp32 probe.

Phase 1: threads and ranks at batch 64 per rank, and bf16 on one rank;
phase 2: batch per rank (16…512, the tuner's range) on a group of 2 with the
project's default threads.  Before them, a oneDNN verbose probe names the
kernels TensorFlow runs for fp32 and bf16 matmul and convolution and times one
convolution's training step in NHWC against NCHW, and an idle Horovod group
of 2 shows what its background thread costs.  About 7–10 minutes on 2 cores.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EPOCHS = int(os.environ.get("AIPERF_BENCH_THREADS_EPOCHS", "6"))
"""epochs per contender: the first traces, the rest are measured"""
SAMPLES = 256
"""training samples per rank per epoch, at least one batch"""
TURN_TIMEOUT = 400.0
"""seconds one contender may take for one epoch (its first includes start-up and tracing)"""
DEADLINE = 1800.0
"""the whole bench's outer limit: every contender still running then is killed"""
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}


@dataclass
class Contender:
    label: str
    ranks: int
    intra: int = 0
    inter: int = 0
    batch: int = 64
    precision: str = "fp32"
    env: dict = field(default_factory=dict)
    name: str = ""
    process: subprocess.Popen | None = None
    pids: list[int] = field(default_factory=list)
    epochs: list[dict] = field(default_factory=list)

    @property
    def threads(self) -> str:
        def one(value: int) -> str:
            return str(value) if value else "default"

        return f"{one(self.intra)} / {one(self.inter)}"

    def rates(self) -> list[float]:
        """Operations per second of each measured epoch (training steps, rank 0's clock)."""
        return [e["ops"] / e["seconds"] for e in self.epochs[1:]]

    def images(self) -> list[float]:
        return [e["samples"] / e["seconds"] for e in self.epochs[1:]]

    def per_cpu(self) -> list[float]:
        """Operations per CPU-second of the contender's ranks, whole epochs (all threads, spinning included)."""
        return [e["ops"] / sum(e["cpu"]) for e in self.epochs[1:]]

    def cores(self) -> list[float]:
        """Cores the contender kept busy during its epochs."""
        return [sum(e["cpu"]) / e["wall"] for e in self.epochs[1:]]

    def others(self) -> list[float]:
        """Cores other processes of the machine kept busy during the contender's epochs."""
        return [e["others"] for e in self.epochs[1:]]


def _mpirun(ranks: int) -> list[str]:
    launcher = [str(Path(sys.executable).with_name("mpirun")), "--mca", "pml", "ob1", "--mca", "btl", "self,sm",
                "--oversubscribe", "--bind-to", "none", "--mca", "mpi_yield_when_idle", "1",
                "-n", str(ranks)]  # fmt: skip
    wrapper = ROOT / "jobscripts" / "loopback-only"
    return [str(wrapper), *launcher] if wrapper.exists() else launcher


class Phase:
    """Contenders started together, then trained in turns, epoch by epoch, the others stopped meanwhile."""

    def __init__(self, contenders: list[Contender], turns: Path, deadline: float, peaks: dict) -> None:
        self.contenders, self.turns, self.deadline, self.peaks = contenders, turns, deadline, peaks

    def _wait(self, contender: Contender, paths: list[Path], what: str) -> None:
        limit = min(self.deadline, time.monotonic() + TURN_TIMEOUT)
        while not all(p.exists() for p in paths):
            if contender.process.poll() is not None:
                raise RuntimeError(f"{contender.label} ended (status {contender.process.returncode}) before {what}:\n"
                                   f"{self._log(contender)}")  # fmt: skip
            if time.monotonic() > limit:
                raise RuntimeError(f"{contender.label}: no {what} in time:\n{self._log(contender)}")
            time.sleep(0.01)

    def _log(self, contender: Contender) -> str:
        path = self.turns / f"{contender.name}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-30:]) if path.exists() else ""

    def _start(self, contender: Contender) -> None:
        command = [*_mpirun(contender.ranks), sys.executable, "-m", "benchmarks.threads_worker", "train",
                   str(self.turns), contender.name, "--intra", str(contender.intra), "--inter", str(contender.inter),
                   "--batch", str(contender.batch), "--samples", str(SAMPLES), "--epochs", str(EPOCHS),
                   "--precision", contender.precision]  # fmt: skip
        if contender.env:
            command[command.index("-n"):command.index("-n")] = [a for k in contender.env for a in ("-x", k)]
        with open(self.turns / f"{contender.name}.log", "w") as log:  # the child keeps its own descriptor
            env = {**os.environ, **MPI_ENV, **contender.env}
            contender.process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                                 start_new_session=True)  # fmt: skip

    def _waiting(self, contender: Contender, turn: str) -> None:
        """Wait until every rank waits for ``turn``; learn their pids."""
        paths = [self.turns / f"{contender.name}.{r}.{turn}.wait" for r in range(contender.ranks)]
        self._wait(contender, paths, f"every rank ready for turn {turn}")
        while not all(p.read_text() for p in paths):  # written, not yet filled
            time.sleep(0.01)
        contender.pids = [int(p.read_text()) for p in paths]

    def _signal(self, contender: Contender, signum: int) -> None:
        for pid in contender.pids:
            os.kill(pid, signum)

    def _probe(self) -> None:
        from aiperf_mpi.train.peak import measure_peak

        for precision in ("fp32", "bf16") if len(self.peaks["fp32"]) % 2 == 0 else ("bf16", "fp32"):
            self.peaks[precision].append(measure_peak(precision, 2.0)["ops_per_second"])

    def run(self) -> None:
        try:
            for contender in self.contenders:  # start-up and tracing together: none of it is measured
                self._start(contender)
            for contender in self.contenders:
                self._waiting(contender, "1")
                (self.turns / f"{contender.name}.1.go").touch()
            for contender in self.contenders:
                self._wait(contender, [self.turns / f"{contender.name}.1.done"], "epoch 1")
                contender.epochs.append(json.loads((self.turns / f"{contender.name}.1.done").read_text()))
                self._waiting(contender, "2" if EPOCHS > 1 else "exit")
                self._signal(contender, signal.SIGSTOP)
            for epoch in range(2, EPOCHS + 1):  # measured: one contender at a time, in turns
                self._probe()
                shift = epoch % len(self.contenders)
                for contender in self.contenders[shift:] + self.contenders[:shift]:
                    done = self.turns / f"{contender.name}.{epoch}.done"
                    self._signal(contender, signal.SIGCONT)
                    busy, started = _busy(), time.perf_counter()
                    (self.turns / f"{contender.name}.{epoch}.go").touch()
                    self._wait(contender, [done], f"epoch {epoch}")
                    elapsed, busy = time.perf_counter() - started, _busy() - busy
                    result = json.loads(done.read_text())
                    result["others"] = max(0.0, (busy - sum(result["cpu"])) / elapsed)
                    contender.epochs.append(result)
                    self._waiting(contender, str(epoch + 1) if epoch < EPOCHS else "exit")
                    self._signal(contender, signal.SIGSTOP)
            self._probe()
            for contender in self.contenders:
                self._signal(contender, signal.SIGCONT)
                (self.turns / f"{contender.name}.exit.go").touch()
            for contender in self.contenders:
                contender.process.wait(timeout=max(1.0, min(120.0, self.deadline - time.monotonic())))
        finally:
            for contender in self.contenders:
                if contender.process is not None and contender.process.poll() is None:
                    for pid in contender.pids:
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(pid, signal.SIGKILL)
                    os.killpg(contender.process.pid, signal.SIGKILL)
                    contender.process.wait()


def _busy() -> float:
    """CPU seconds the whole machine has spent busy since boot (``/proc/stat``: all but idle and iowait)."""
    with open("/proc/stat") as handle:
        fields = [int(x) for x in handle.readline().split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def _onednn(turns: Path) -> tuple[dict, dict]:
    """oneDNN's implementation per primitive and precision, and the NHWC/NCHW convolution times."""
    out = turns / "onednn.json"
    done = subprocess.run([sys.executable, "-m", "benchmarks.threads_worker", "onednn", str(out)], cwd=ROOT,
                          env={**os.environ, "ONEDNN_VERBOSE": "1", "TF_CPP_MIN_LOG_LEVEL": "2"},
                          capture_output=True, text=True, timeout=300, check=True)  # fmt: skip
    section, kernels, isa = "", {}, ""
    for line in done.stdout.splitlines():  # oneDNN writes its verbose lines on stdout, between our markers
        if line.startswith("== "):
            section = line[3:].strip()
            continue
        fields = line.split(",")
        if line.startswith("onednn_verbose,info,cpu,isa:"):
            isa = line.split("isa:", 1)[1]
        if len(fields) > 6 and fields[1] == "primitive" and fields[2] == "exec" and fields[4] != "reorder":
            primitive = "matmul" if fields[4] in ("gemm_api", "matmul") else f"{fields[4]} {fields[6]}"
            kernels.setdefault(section, {}).setdefault(primitive, fields[5] or fields[4])
    return {"isa": isa, "kernels": kernels}, json.loads(out.read_text())["layouts"]


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _row(contender: Contender, peak: float, reference: Contender | None) -> str:
    images, rate, per_cpu = contender.images(), _median(contender.rates()), _median(contender.per_cpu())
    versus = per_cpu_versus = ""
    if reference is not None:
        versus = f"{rate / _median(reference.rates()):.2f}"
        per_cpu_versus = f"{per_cpu / _median(reference.per_cpu()):.2f}"
    return (f"| {contender.label} | {contender.ranks} | {contender.threads} | {contender.batch} | "
            f"{_median(images):.0f} ({min(images):.0f}–{max(images):.0f}) | {rate / 1e9:.1f} | {rate / peak:.3f} | "
            f"{versus} | {per_cpu / 1e9:.1f} | {per_cpu_versus} | {_median(contender.cores()):.2f} | "
            f"{_median(contender.others()):.1f} |")  # fmt: skip


def _idle(turns: Path, cycle: str | None) -> list[float]:
    """Cores each rank of an idle Horovod group of 2 burns (``HOROVOD_CYCLE_TIME=cycle`` when given)."""
    out = turns / f"idle-{cycle}.json"
    env = {**os.environ, **MPI_ENV, **({"HOROVOD_CYCLE_TIME": cycle} if cycle else {})}
    command = _mpirun(2)
    if cycle:
        command[command.index("-n"):command.index("-n")] = ["-x", "HOROVOD_CYCLE_TIME"]
    subprocess.run([*command, sys.executable, "-m", "benchmarks.threads_worker", "idle", str(out)], cwd=ROOT,
                   env=env, capture_output=True, timeout=300, check=True)  # fmt: skip
    return json.loads(out.read_text())["cores"]


def run() -> str:
    from aiperf_mpi.train.threads import choose_threads

    cores = sorted(os.sched_getaffinity(0))
    default = choose_threads(cores, [cores], {})  # a group of 2 on this node's cores, as make run trains
    single = choose_threads(cores, [], {})
    deadline = time.monotonic() + DEADLINE
    peaks: dict[str, list[float]] = {"fp32": [], "bf16": []}
    turns = Path(tempfile.mkdtemp(prefix="aiperf-threads-"))
    n = len(cores)
    phase1 = [
        Contender(f"1 rank, TensorFlow's default = project default ({single.intra} / {single.inter})", 1),
        Contender("1 rank, inter-op 1", 1, n, 1),
        Contender("1 rank, one core", 1, 1, 1),
        Contender("1 rank, bf16", 1, precision="bf16"),
        Contender("2 ranks, TensorFlow's default", 2),
        Contender("2 ranks, project default", 2, default.intra, default.inter),
        Contender(f"2 ranks, intra-op {default.intra}, inter-op {n}", 2, default.intra, n),
        Contender(f"2 ranks, intra-op {n}, inter-op 1", 2, n, 1),
    ]  # fmt: skip
    phase2 = [Contender(f"2 ranks, batch {b}", 2, default.intra, default.inter, batch=b)
              for b in (16, 32, 64, 256, 512)]  # fmt: skip
    for index, contender in enumerate(phase1 + phase2):
        contender.name = f"c{index}"
    try:
        onednn, layouts = _onednn(turns)
        idle = {cycle: _idle(turns, cycle) for cycle in (None, "5")}
        Phase(phase1, turns, deadline, peaks).run()
        Phase(phase2, turns, deadline, peaks).run()
    finally:
        shutil.rmtree(turns, ignore_errors=True)
    return _report(phase1, phase2, peaks, onednn, layouts, idle, default, single)


def _report(phase1, phase2, peaks, onednn, layouts, idle, default, single) -> str:
    peak = _median(peaks["fp32"])
    head = ["| contender | ranks | intra / inter-op threads per rank | batch per rank | images/s, median (min–max) | "
            "G ops/s | ratio to peak | vs reference | G ops per CPU-second | per CPU-second, vs reference | "
            "cores it used | cores others used meanwhile |", "|---" * 12 + "|"]  # fmt: skip
    references = {1: phase1[0], 2: phase1[4]}
    table1 = list(head)
    for contender in phase1:
        reference = references[contender.ranks]
        table1.append(_row(contender, peak, None if contender is reference else reference))
    table2 = list(head)
    for contender in phase2:
        table2.append(_row(contender, peak, None if contender is phase2[2] else phase2[2]))
    fp32 = [c for c in phase1 if c.precision == "fp32"]
    best = {ranks: max((c for c in fp32 if c.ranks == ranks), key=lambda c: _median(c.rates())) for ranks in (1, 2)}
    best_batch = max(phase2, key=lambda c: _median(c.rates()))
    kernel_rows = ["| probe | primitive (prop kind) | oneDNN implementation |", "|---|---|---|"]
    for section in ("probe float32", "probe bfloat16", "layout NHWC", "layout NCHW"):
        for primitive, impl in onednn["kernels"].get(section, {}).items():
            kernel_rows.append(f"| {section} | {primitive} | `{impl}` |")
    layout = ", ".join(f"{k} {v * 1e3:.1f} ms" if isinstance(v, float) else f"{k}: {v}" for k, v in layouts.items())
    p32, p16 = peaks["fp32"], peaks["bf16"]
    idle_text = "; ".join(f"HOROVOD_CYCLE_TIME={cycle or 'unset (1 ms)'}: " + " + ".join(f"{c:.2f}" for c in cores)
                          + " cores" for cycle, cores in idle.items())  # fmt: skip
    return "\n".join([
        f"Peak: the fp32 matmul probe (`measure_peak`, one process, TensorFlow's default threads), {len(p32)} "
        f"probes between rounds: median {peak / 1e9:.1f} G ops/s (min {min(p32) / 1e9:.1f}, max "
        f"{max(p32) / 1e9:.1f}); every ratio divides by the median. Each contender: {EPOCHS - 1} measured epochs "
        f"(after one that traces), in turns with the others (stopped meanwhile), {SAMPLES} samples per rank per "
        "epoch (at least one batch). Images/s and operations are the whole group's, over rank 0's step time; CPU "
        "seconds are every thread of every rank over whole epochs; \"cores others used\" is the machine's busy "
        "time during the contender's epochs less the contender's own (other people's work on this shared machine). "
        "Groups of 2 run with `mpi_yield_when_idle` on, as Open MPI sets it when oversubscribed (`make run`).",
        "",
        "**Threads and ranks** (ResNet-50 32², fp32 unless said, synthetic data; reference: TensorFlow's default "
        "with as many ranks):",
        "",
        *table1,
        "",
        f"Project default on this node: intra-op {default.intra}, inter-op {default.inter} per rank for 2 training "
        f"ranks; intra-op {single.intra}, inter-op {single.inter} for 1 (`aiperf_mpi/train/threads.py`). Best "
        f"with 1 rank: {best[1].label}, {_median(best[1].rates()) / peak:.3f} of peak; with 2 ranks: {best[2].label}, "
        f"{_median(best[2].rates()) / peak:.3f}; 2 ranks ÷ 1 rank: "
        f"{_median(best[2].rates()) / _median(best[1].rates()):.2f}× in time, "
        f"{_median(best[2].per_cpu()) / _median(best[1].per_cpu()):.2f}× per CPU-second.",
        "",
        f"**Horovod idle** (a group of 2 that trains nothing, {idle_text} per rank): its background thread "
        "negotiates with the other rank every cycle and spins in MPI until the other arrives.",
        "",
        f"**Batch per rank** (2 ranks, project default threads {default.intra} / {default.inter}, fp32; reference: "
        "batch 64):",
        "",
        *table2,
        "",
        f"Fastest batch here: {best_batch.batch} per rank.",
        "",
        f"**bf16 in the peak probe** ({len(p16)} probes, interleaved with the fp32 ones): median "
        f"{_median(p16) / 1e9:.1f} G ops/s, {_median(p16) / peak:.2f}× fp32.",
        "",
        f"**oneDNN's kernels** (`ONEDNN_VERBOSE=1`; the CPU ISA as oneDNN reports it: "
        f"{onednn['isa'] or 'not reported'}): a 1024² matmul, and one 3×3 convolution (64×8×8×256 → 256) "
        "forward and both backward passes:",
        "",
        *kernel_rows,
        "",
        f"**Data layout**: one training step of that convolution (fp32), median of 9: {layout}. Keras builds the "
        "model channels_last (NHWC).",
    ])  # fmt: skip

"""MLPerf-style ``:::MLLOG`` lines, written with the ``mlperf-logging`` package.

The package keeps one global logger; it is pointed at a dedicated Python
logger that writes only to ``RUN_DIR/mllog.log`` (not to the console), from
the master alone.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from mlperf_logging import mllog
from mlperf_logging.mllog import constants

MLLOG_FILE = "mllog.log"
CUT_FILE = MLLOG_FILE + ".cut-{segment}"


def repair_tail(run_dir: Path, segment: int) -> int:
    """Before a resumed segment appends: set a cut last line aside, as the event log's repair does.

    A kill mid-write can leave ``mllog.log`` without its last newline; the
    next segment's first line would be glued onto it, and a reader of
    ``:::MLLOG`` lines would refuse both.  The bytes after the last newline
    go to ``mllog.log.cut-SEGMENT`` (fsync'd) and the file is ended there.
    Returns the number of bytes set aside (0: nothing to do).
    """
    path = Path(run_dir) / MLLOG_FILE
    if not path.is_file():
        return 0
    with open(path, "r+b") as handle:
        size = handle.seek(0, 2)
        start = max(0, size - 65536)
        handle.seek(start)
        tail = handle.read()
        if not tail or tail.endswith(b"\n"):
            return 0
        newline = tail.rfind(b"\n")
        keep = start + newline + 1 if newline >= 0 else (0 if start == 0 else size)
        if keep == size:  # a last line longer than we read: leave it (an MLLOG line is short)
            return 0
        side = Path(run_dir) / CUT_FILE.format(segment=segment)
        with open(side, "wb") as cut:
            cut.write(tail[keep - start :])
            cut.flush()
            os.fsync(cut.fileno())
        handle.truncate(keep)
        handle.flush()
        os.fsync(handle.fileno())
        return size - keep


class MLLogWriter:
    """The master's MLLOG writer."""

    def __init__(self, run_dir: Path) -> None:
        logger = logging.getLogger("aiperf_mpi.mllog")
        logger.propagate = False
        logger.setLevel(logging.INFO)
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
            handler.close()
        self._handler = logging.FileHandler(Path(run_dir) / MLLOG_FILE, encoding="utf-8")
        logger.addHandler(self._handler)
        mllog.config(logger=logger, default_stack_offset=2)
        self.logger = mllog.get_mllogger()

    def run_start(self, config: dict, system: dict, segment: int) -> None:
        self.logger.event(key=constants.SUBMISSION_BENCHMARK, value="aiperf_mpi")
        self.logger.event(key="number_of_nodes", value=system["nodes"])
        self.logger.event(key="accelerators_per_node", value=system["accelerators_per_node"])
        self.logger.event(key=constants.SEED, value=config["seed"])
        self.logger.event(key=constants.GLOBAL_BATCH_SIZE, value=config["batch_size"],
                          metadata={"per": "rank, warm-up rounds; tuned afterwards"})  # fmt: skip
        self.logger.start(key=constants.RUN_START, metadata={"segment": segment})

    def epoch(self, task: int, epoch: dict) -> None:
        meta = {"task": task, "epoch_num": epoch["epoch"]}
        self.logger.start(key=constants.EPOCH_START, time_ms=int(epoch["start"] * 1000), metadata=meta)
        self.logger.end(key=constants.EPOCH_STOP, time_ms=int(epoch["end"] * 1000),
                        metadata={**meta, "ops": epoch["ops"]})  # fmt: skip
        self.logger.event(key=constants.EVAL_ACCURACY, value=epoch["val_accuracy"], metadata=meta)

    def staging(self, seconds: float, nbytes: int, host: str) -> None:
        self.logger.event(key="staging_time", value=seconds, metadata={"bytes": nbytes, "host": host})

    def run_stop(self, reason: str) -> None:
        self.logger.end(key=constants.RUN_STOP, metadata={"status": "success", "reason": reason})
        self._handler.flush()

    def close(self) -> None:
        self._handler.close()

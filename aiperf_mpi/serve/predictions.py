"""The predictions file a serving run writes, in input order: ``.npz`` (arrays) or ``.csv`` (one row per input).

``.npz``: ``index``, ``probabilities`` (float32, N × classes), ``classes`` (their argmax), ``member_classes``
(each member's argmax, K × N) and ``labels`` when the input has them.  ``.csv``: ``index, class, p0 … pC-1[,
label]``, probabilities written with 9 significant digits (a float32 reads back exactly).
"""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import numpy as np


def predictions_digest(probabilities: np.ndarray, classes: np.ndarray) -> str:
    """sha256 of the predictions' values (float32 probabilities, then int64 classes): the file's content, whatever
    its container (a zip's timestamps differ between two writes of the same arrays)."""
    digest = hashlib.sha256(np.ascontiguousarray(probabilities, dtype=np.float32).tobytes())
    digest.update(np.ascontiguousarray(classes, dtype=np.int64).tobytes())
    return digest.hexdigest()


def write_predictions(path: Path, probabilities: np.ndarray, labels: np.ndarray | None, members: np.ndarray) -> None:
    """``.npz``: index, probabilities, classes, member_classes (and labels); ``.csv``: one row per input."""
    classes = probabilities.argmax(axis=1).astype(np.int64)
    index = np.arange(len(probabilities), dtype=np.int64)
    if path.suffix == ".npz":
        arrays = {"index": index, "probabilities": probabilities, "classes": classes, "member_classes": members}
        np.savez(path, **arrays, **({"labels": labels} if labels is not None else {}))
        return
    text = io.StringIO()
    header = [
        "index",
        "class",
        *(f"p{c}" for c in range(probabilities.shape[1])),
        *(("label",) if labels is not None else ()),
    ]
    text.write(",".join(header) + "\n")
    for row in range(len(probabilities)):
        cells = [str(row), str(classes[row]), *(f"{p:.9g}" for p in probabilities[row].tolist())]
        if labels is not None:
            cells.append(str(int(labels[row])))
        text.write(",".join(cells) + "\n")
    path.write_text(text.getvalue(), encoding="utf-8")


def read_predictions(path: Path) -> dict:
    """A predictions file back as arrays (``probabilities`` float32, ``classes``, ``labels`` or None)."""
    if path.suffix == ".npz":
        with np.load(path) as data:
            return {
                "probabilities": data["probabilities"],
                "classes": data["classes"],
                "labels": data["labels"] if "labels" in data else None,
            }
    rows = path.read_text(encoding="utf-8").splitlines()
    header = rows[0].split(",")
    cells = [row.split(",") for row in rows[1:]]
    columns = [i for i, name in enumerate(header) if name.startswith("p")]
    probabilities = np.array([[float(row[i]) for i in columns] for row in cells], dtype=np.float32)
    classes = np.array([int(row[1]) for row in cells], dtype=np.int64)
    labels = np.array([int(row[-1]) for row in cells], dtype=np.int64) if header[-1] == "label" else None
    return {"probabilities": probabilities.reshape(len(cells), len(columns)), "classes": classes, "labels": labels}

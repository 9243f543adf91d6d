"""A bundle's files as a dict, and back: what tests that forge or inspect a ``.tar.gz`` bundle share.

Test modules may not import each other; the verify, side-file and forgery tests each read a bundle's
members and write changed ones back, so the two steps live here.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Mapping
from pathlib import Path


def members(archive: Path) -> dict[str, bytes]:
    """``{name: content}`` of the archive's regular files (directories and links left out)."""
    with tarfile.open(archive) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


def write_members(out: Path, files: Mapping[str, bytes]) -> Path:
    """A gzipped tar of ``files`` (name to content, in that order), as a forger would repack a bundle."""
    with tarfile.open(out, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out

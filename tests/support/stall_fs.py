"""A pass-through FUSE file system whose fsync blocks on command: rank 0's file system hanging, for real.

``python -m tests.support.stall_fs ROOT MOUNT FLAG [ONLY]`` mounts ``ROOT`` at ``MOUNT`` (in the foreground: the
test owns the process).  Every operation passes through to ``ROOT``; ``fsync`` (and ``fdatasync``) waits for as
long as the file ``FLAG`` exists (only for paths that contain ``ONLY``, when it is given: a stall aimed at one
file, the graphs file say, while the log's fsync goes on), as a write to a failed parallel file system or a dead
NFS server does: the caller sits in the kernel, in the system call, not in any code of the benchmark's.  Needs
fusepy (the test extra) and libfuse 2 (Debian's ``libfuse2``), and the right to mount (root, or ``/dev/fuse`` with
fusermount).
"""

from __future__ import annotations

import errno
import os
import sys
import time
from pathlib import Path

from fuse import FUSE, FuseOSError, Operations

POLL = 0.1
"""seconds between two looks at the flag while an fsync is held"""


class StallingPassthrough(Operations):
    """``root``'s files, as they are; an fsync waits while ``flag`` exists."""

    def __init__(self, root: str, flag: str, only: str = "") -> None:
        self.root, self.flag, self.only = root, flag, only

    def _real(self, path: str) -> str:
        return os.path.join(self.root, path.lstrip("/"))

    def __call__(self, op, path, *args):
        try:
            return super().__call__(op, path, *args)
        except OSError as exc:  # the kernel hears the real file's error
            raise FuseOSError(exc.errno or errno.EIO) from None

    def access(self, path, mode):
        if not os.access(self._real(path), mode):
            raise FuseOSError(errno.EACCES)

    def getattr(self, path, fh=None):
        st = os.lstat(self._real(path))
        return {key: getattr(st, key) for key in ("st_atime", "st_ctime", "st_gid", "st_mode", "st_mtime",
                                                  "st_nlink", "st_size", "st_uid")}  # fmt: skip

    def readdir(self, path, fh):
        return [".", "..", *os.listdir(self._real(path))]

    def statfs(self, path):
        st = os.statvfs(self._real(path))
        return {key: getattr(st, key) for key in ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail",
                                                  "f_ffree", "f_files", "f_flag", "f_frsize", "f_namemax")}  # fmt: skip

    def chmod(self, path, mode):
        os.chmod(self._real(path), mode)

    def chown(self, path, uid, gid):
        os.chown(self._real(path), uid, gid)

    def mkdir(self, path, mode):
        os.mkdir(self._real(path), mode)

    def rmdir(self, path):
        os.rmdir(self._real(path))

    def unlink(self, path):
        os.unlink(self._real(path))

    def rename(self, old, new):
        os.rename(self._real(old), self._real(new))

    def utimens(self, path, times=None):
        os.utime(self._real(path), times)

    def readlink(self, path):
        return os.readlink(self._real(path))

    def symlink(self, name, target):
        os.symlink(target, self._real(name))

    def open(self, path, flags):
        return os.open(self._real(path), flags)

    def create(self, path, mode, fi=None):
        return os.open(self._real(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)

    def read(self, path, size, offset, fh):
        return os.pread(fh, size, offset)

    def write(self, path, data, offset, fh):
        return os.pwrite(fh, data, offset)

    def truncate(self, path, length, fh=None):
        with open(self._real(path), "r+b") as handle:
            handle.truncate(length)

    def flush(self, path, fh):
        return 0

    def release(self, path, fh):
        os.close(fh)

    def fsync(self, path, datasync, fh):
        while self.only in path and os.path.exists(self.flag):  # the hung file system: the caller waits in its call
            time.sleep(POLL)
        os.fsync(fh)

    def fsyncdir(self, path, datasync, fh):
        return 0


def main(argv: list[str]) -> None:
    root, mount, flag, *only = argv
    Path(mount).mkdir(parents=True, exist_ok=True)
    # multithreaded: a held fsync must not stop the other calls (the benchmark's reads and writes go on)
    FUSE(StallingPassthrough(root, flag, *only), mount, foreground=True, nothreads=False, allow_other=True)


if __name__ == "__main__":
    main(sys.argv[1:])

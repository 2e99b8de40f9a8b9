"""Files that may come from anyone, opened once and checked on the open file.

:func:`open_regular` opens a file without blocking (and, when asked, without following a last link),
and checks *the open file*: a regular file of at most ``cap`` bytes. A FIFO, a device or a file swapped
in after the check is never read, because the check and the read use the same descriptor. The
checkpoints (:mod:`~pondernet_tutorial.checkpointing`), the model files and the tables of the run
machinery are all read through it. This module imports neither PyTorch nor Lightning.
"""

from __future__ import annotations

import errno
import os
import stat

MAX_READ_BYTES = 64 * 2**20  # metadata.json, study.json, locks: a few kB; a bigger file is damaged


class DamagedFileError(OSError):
    """A file the package reads is not a regular file of bounded size (a FIFO, a device such as
    ``/dev/zero``, a folder, a file too big): one line that names it."""

    def __str__(self) -> str:
        return self.strerror or super().__str__()


class CheckpointError(RuntimeError):
    """A model file or checkpoint is missing, damaged, names code that is not registered, or does not
    fit the model that its folder records or that the caller asks for: one line."""


def open_regular(path: str | os.PathLike, cap: int = MAX_READ_BYTES, follow_links: bool = True):
    """``path`` open for binary reading if it is a regular file (a link to one is followed, unless
    ``follow_links`` is false: then a link fails to open) of at most ``cap`` bytes; a FIFO, a device, a
    folder or a bigger file raises :class:`DamagedFileError` at once (the open never blocks:
    ``O_NONBLOCK``). The check is made on the open file, so the file cannot be swapped between the check
    and the read."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)
    fd = os.open(path, flags if follow_links else flags | getattr(os, "O_NOFOLLOW", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise DamagedFileError(errno.EINVAL, f"{path} is not a regular file")
        if info.st_size > cap:
            raise DamagedFileError(errno.EFBIG, f"{path} holds {info.st_size:,} bytes, more than {cap:,}")
        return os.fdopen(os.dup(fd), "rb")
    finally:
        os.close(fd)

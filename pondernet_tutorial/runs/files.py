"""Files written whole, and one process at a time per run folder.

Every file that a run or a study writes (``metadata.json``, ``history.csv``, ``model.safetensors``, the
evaluation tables, the study tables) goes through :func:`atomic_file`: it is written to a temporary
name in the same folder, flushed to the disk (``fsync``) and only then moved onto its name with
``os.replace``, which is atomic. A process killed or a disk that fills up in the middle of a write
leaves the old file (or none), never a partial one; the temporary file is removed when the write
fails, and one left by a killed process is removed by the next write of the same file. Its folder is
reached from the output folder without following a link and held open while the file is written and
renamed (:func:`open_inside`), so a folder swapped for a link meanwhile is refused, never written
through; every removal goes the same way (:func:`remove_inside`).

:func:`folder_lock` lets one process at a time train or evaluate into a run folder: an operating-system
lock (:mod:`filelock`) on the file ``<folder>.lock`` beside the folder, which the system releases when
its process ends, however it ends. This module imports neither PyTorch nor pandas.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import shutil
import stat
import sys
from pathlib import Path

from filelock import FileLock, Timeout

from ..untrusted import DamagedFileError
from .processes import is_rank_zero, pid_alive

TEMP_SUFFIX = ".tmp"


# The errors that mean the disk or the permissions refuse a write, not a fault of the package
WRITE_ERRNOS = frozenset(
    getattr(errno, name)
    for name in ("ENOSPC", "EDQUOT", "EFBIG", "EACCES", "EPERM", "EROFS")
    if hasattr(errno, name)
)


class WriteFailedError(OSError):
    """A file could not be written (a full disk, no permission, a read-only disk): one line that names
    the file and the free space on its disk."""

    def __str__(self) -> str:
        return self.strerror


def _free_space(path: Path) -> str:
    for folder in [path, *path.parents]:
        try:
            return f"{shutil.disk_usage(folder).free / 2**20:,.1f} MiB free"
        except OSError:
            continue
    return "free space unknown"


def write_failed(
    error: OSError, path: str | os.PathLike | None = None, whole: bool = True
) -> WriteFailedError:
    """``error`` (one of :data:`WRITE_ERRNOS`) as a one-line :class:`WriteFailedError` naming the file
    (``path``, else the error's own file name) and the free space on its disk. ``whole``: the write went
    through :func:`atomic_file`, so nothing was left half-written (else the file was not necessarily
    being written: "could not use")."""
    where = Path(os.fsdecode(path if path is not None else error.filename or "."))
    reason = error.strerror or os.strerror(error.errno) if error.errno else str(error)
    if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        advice = "choose a folder you can write to (--output-dir), or change its permissions"
    else:
        advice = "free some space, or choose a folder on another disk (--output-dir), then run again"
    what = f"could not write {where}" if whole else f"could not use {where}"
    kept = "nothing was left half-written; " if whole else ""
    return WriteFailedError(error.errno, f"{what} ({reason}; {_free_space(where)}): {kept}{advice}.")


def is_write_refusal(error: BaseException) -> bool:
    """Whether ``error`` is the disk's or the permissions' refusal of a write (see :data:`WRITE_ERRNOS`)."""
    return isinstance(error, OSError) and error.errno in WRITE_ERRNOS


# the system opens, stats, renames and removes a name inside a folder held open (POSIX): a run's writes
# and removals then go through its folder's descriptor; elsewhere (Windows) by path, after check_inside
HELD_FOLDERS = (
    {os.open, os.stat, os.unlink, os.rename, os.mkdir} <= os.supports_dir_fd
    and os.listdir in os.supports_fd
    and hasattr(os, "O_NOFOLLOW")
)


def _temp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}{TEMP_SUFFIX}")


def _left_by_the_gone(name: str, prefix: str = ".") -> bool:
    """Whether ``name`` is a temporary file of a whole write (its name starting with ``prefix``) whose
    process is gone: killed mid-write."""
    if not (name.startswith(prefix) and name.endswith(TEMP_SUFFIX)):
        return False
    pid = name[: -len(TEMP_SUFFIX)].rsplit(".", 1)[-1].split("-", 1)[0]
    return pid.isdigit() and not pid_alive(int(pid))


def _remove_gone(parent: Path, folder: int | None, prefix: str) -> None:
    """Remove the temporary files in ``parent`` (held open as ``folder``, where it is) whose names start
    with ``prefix`` and whose processes are gone (:func:`_left_by_the_gone`)."""
    for name in os.listdir(parent if folder is None else folder):
        if _left_by_the_gone(name, prefix):
            with contextlib.suppress(OSError):
                os.unlink(name if folder is not None else parent / name, dir_fd=folder)


def _remove_stale_temps(path: Path, folder: int | None = None) -> None:
    """Remove temporary files of ``path`` left by processes that are gone (killed mid-write); ``folder``:
    a descriptor of its folder, where the names are looked up."""
    _remove_gone(path.parent, folder, f".{path.name}.")


def remove_stale_temps(folder: Path, inside) -> None:
    """Remove the temporary files in ``folder`` (reached from the output folder ``inside`` without
    following a link) that processes now gone left mid-write, of any file: those of a file that is
    never written again (an earlier sitting's metrics.csv) would stay otherwise."""
    if not HELD_FOLDERS:  # (Windows) by path, after the path's check
        check_inside(folder, inside)
        _remove_gone(Path(folder), None, ".")
        return
    fd = open_inside(folder, inside)
    try:
        _remove_gone(Path(folder), fd, ".")
    finally:
        os.close(fd)


def _fsync_folder(folder: Path) -> None:
    """Make the rename itself durable (POSIX; a no-op where folders cannot be opened)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike, mode: str = "w", inside=None, **open_options):
    """A file object open on a temporary name beside ``path``; moved onto ``path`` when the block ends
    without error, removed when it raises. ``inside``: the output folder that ``path`` lies in; its
    folder is then reached from there one folder at a time without following a link (and made where
    missing), and the file is created and renamed in that very folder: a folder on the way swapped for
    a link is refused, never written through (:func:`open_inside`).

    Example::

        with atomic_file(run_dir / "metadata.json", inside=output_dir) as f:
            f.write(text)
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_file writes a whole file: mode 'w' or 'wb', got {mode!r}.")
    path = Path(path)
    if inside is not None and not HELD_FOLDERS:
        check_inside(path.parent, inside)  # the best a system without descriptors of folders allows
    folder = open_inside(path.parent, inside, make=True) if inside is not None and HELD_FOLDERS else None
    # with a folder's descriptor, every name below is looked up in that folder, never through a path
    name, temp = (path.name, _temp_name(path).name) if folder is not None else (path, _temp_name(path))
    try:
        try:
            info = os.stat(name, dir_fd=folder, follow_symlinks=False)
        except FileNotFoundError:
            info = None
        if info is not None and not (stat.S_ISLNK(info.st_mode) or stat.S_ISREG(info.st_mode)):
            # a device (/dev/null) or a FIFO: the rename below would replace it with a file
            raise FileExistsError(
                errno.EEXIST, f"{path} is not a regular file, and is never replaced by one", str(path)
            )
        try:
            if folder is None:
                path.parent.mkdir(parents=True, exist_ok=True)
            _remove_stale_temps(path, folder)
            # O_EXCL: a fresh file of our own; 0o666 lets the umask decide the permissions, as open() does
            flags = (
                os.O_WRONLY
                | os.O_CREAT
                | os.O_EXCL
                | getattr(os, "O_BINARY", 0)
                | getattr(os, "O_NOFOLLOW", 0)
            )
            fd = os.open(temp, flags, 0o666, dir_fd=folder)
        except OSError as error:
            if is_write_refusal(error):
                raise write_failed(error, path) from None
            raise
        if mode == "w":
            open_options.setdefault("encoding", "utf-8")
            open_options.setdefault("newline", "")  # the text is written as given (csv writes its own ends)
        try:
            with open(fd, mode, **open_options) as handle:
                yield handle
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temp, name, src_dir_fd=folder, dst_dir_fd=folder)
        except BaseException as error:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=folder)
            refusal = _write_refusal(error)
            if refusal is not None:
                raise write_failed(refusal, path) from None
            raise
        if folder is None:
            _fsync_folder(path.parent)
        else:
            with contextlib.suppress(OSError):
                os.fsync(folder)
    finally:
        if folder is not None:
            os.close(folder)


def _write_refusal(error: BaseException) -> OSError | None:
    """The disk's refusal behind ``error``, if there is one: the error itself, or the one that a writer
    (PyTorch's, pandas') wrapped into its own exception."""
    seen = 0
    while error is not None and seen < 8:
        if is_write_refusal(error):
            return error
        error, seen = error.__cause__ or error.__context__, seen + 1
    return None


def write_text(path: str | os.PathLike, text: str, inside=None) -> Path:
    """Write ``text`` to ``path`` whole (UTF-8); ``inside``: as for :func:`atomic_file`."""
    with atomic_file(path, "w", inside) as handle:
        handle.write(text)
    return Path(path)


def write_json(path: str | os.PathLike, data, inside=None) -> Path:
    """Write ``data`` as indented JSON, whole; ``inside``: as for :func:`atomic_file`."""
    return write_text(path, json.dumps(data, indent=2) + "\n", inside)


def write_csv(path: str | os.PathLike, frame, inside=None, **to_csv_options) -> Path:
    """Write a pandas ``DataFrame`` as CSV, whole; gzip-compressed when ``path`` ends with ``.gz``;
    ``inside``: as for :func:`atomic_file`."""
    path = Path(path)
    if path.suffix == ".gz":
        # the gzip header names the final file, not the temporary one
        to_csv_options.setdefault("compression", {"method": "gzip", "filename": path.name})
    with atomic_file(path, "wb", inside) as handle:
        frame.to_csv(handle, **to_csv_options)
    return path


class FolderLockedError(FileExistsError):
    """Another process holds the folder's lock: one line."""


def _lock_path(folder: Path) -> Path:
    return folder.with_name(folder.name + ".lock")


def _damaged(lock: Path, why: str) -> DamagedFileError:
    return DamagedFileError(
        errno.EINVAL,
        f"the lock {lock} is damaged ({why}): remove it if no process uses this folder, then run again.",
    )


def _check_lock_file(lock: Path) -> None:
    """A lock file that is there must be a regular file: a link, a folder or a FIFO is damaged."""
    try:
        info = os.lstat(lock)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(info.st_mode):
        raise _damaged(lock, "not a regular file")


_HELD: dict[Path, FileLock] = {}  # the locks this process holds (each is reentrant)


def check_unlocked(folder: str | os.PathLike, doing: str = "working in it") -> None:
    """Raise :class:`FolderLockedError` if another process holds ``folder``'s lock; creates nothing
    (a check before the arguments are checked and any folder is made)."""
    folder = Path(folder)
    lock = _lock_path(folder)
    if not is_rank_zero() or lock.absolute() in _HELD or not os.path.lexists(lock):
        return
    with folder_lock(folder, wait=False, doing=doing):  # checks the lock file first
        pass


@contextlib.contextmanager
def folder_lock(folder: str | os.PathLike, wait: bool = True, doing: str = "working in it"):
    """Hold ``<folder>.lock`` for the block: one process at a time in ``folder``. The empty lock file
    stays beside the folder; one that is a link, a folder or a FIFO is refused as damaged.

    Args:
        wait: wait for another process's lock to be released (saying so in one line), or raise
            :class:`FolderLockedError` at once.
        doing: what the holder does, for the messages (``"training it"``).

    The lock is reentrant within a process. In a multi-process (DDP) run only rank 0 takes it: the
    other ranks join rank 0's training.
    """
    folder = Path(folder)
    lock = _lock_path(folder)
    key = lock.absolute()
    if not is_rank_zero():
        yield
        return
    held = _HELD.get(key)
    if held is None:
        lock.parent.mkdir(parents=True, exist_ok=True)
        _check_lock_file(lock)
        held = FileLock(lock)
        try:
            try:
                held.acquire(timeout=0)
            except Timeout:
                if not wait:
                    raise FolderLockedError(
                        f"{folder} is in use: another process is {doing} (lock {lock.name}); run again when "
                        "it has finished."
                    ) from None
                print(f"== waiting for {folder}: another process is {doing}", file=sys.stderr, flush=True)
                held.acquire()
        except FolderLockedError:
            raise
        except OSError as error:  # a link put in its place meanwhile (O_NOFOLLOW), a folder, no permission
            if is_write_refusal(error):
                raise write_failed(error, lock, whole=False) from None
            raise _damaged(lock, error.strerror or str(error)) from None
        _HELD[key] = held
    else:
        held.acquire()
    try:
        yield
    finally:
        held.release()
        if not held.is_locked:
            del _HELD[key]


def plain(value):
    """``value`` as JSON gives it back (tuples become lists), so that saved and requested values compare equal."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def check_inside(run_dir: Path, output_dir, what: str = "run folder") -> None:
    """Refuse a run folder (or a study's, ``what``), or a folder on its way, that is a symbolic link, a
    file, or that resolves outside ``output_dir``: training and the studies lock, delete and rewrite
    it."""
    base = Path(output_dir).expanduser()
    relative = Path(os.path.relpath(Path(run_dir).expanduser().absolute(), base.absolute()))
    here = base
    for part in relative.parts:
        here = here / part
        if part == ".." or here.is_symlink():
            raise FileExistsError(
                f"the {what} {run_dir} is a symbolic link or lies outside {output_dir} ({here}): "
                "remove it, or choose another --output-dir."
            )
        if here.exists() and not here.is_dir():
            raise FileExistsError(
                f"the {what} {run_dir} needs a folder where the file {here} is: move the file away, "
                "or choose another --output-dir."
            )
    if base.resolve() not in Path(run_dir).expanduser().resolve().parents:
        raise FileExistsError(
            f"the {what} {run_dir} resolves outside {output_dir}: choose another --output-dir."
        )


def open_inside(folder: Path, output_dir, make: bool = False) -> int:
    """A descriptor of ``folder``, reached from ``output_dir`` one folder at a time without following a
    link (each folder made where missing, with ``make``): a folder on the way swapped for a link after
    :func:`check_inside` is refused in one line, never followed out of the output folder."""
    base, folder = Path(output_dir).expanduser(), Path(folder).expanduser()
    relative = Path(os.path.relpath(folder.absolute(), base.absolute()))
    if relative.parts[:1] == ("..",):  # named by its real path (Lightning's), the output folder by a link
        relative = Path(os.path.relpath(folder.resolve(), base.resolve()))
    parts = [p for p in relative.parts if p != "."]
    if ".." in parts:
        raise FileExistsError(
            f"{folder} lies outside {output_dir}, or a folder on its way became a link: nothing was written "
            "or deleted through it; check what changed the output folder, or choose another --output-dir."
        )
    nofollow = getattr(os, "O_NOFOLLOW", 0)
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)
    if make:
        base.mkdir(parents=True, exist_ok=True)
    fd = os.open(base, flags)  # the output folder itself, as given
    try:
        for part in parts:
            try:
                below = os.open(part, flags | nofollow, dir_fd=fd)
            except FileNotFoundError:
                if not make:
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, dir_fd=fd)
                below = os.open(part, flags | nofollow, dir_fd=fd)
            fd, above = below, fd
            os.close(above)
    except OSError as error:  # ELOOP: a link where a folder was; ENOTDIR: a file
        os.close(fd)
        if error.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        raise FileExistsError(
            f"{folder} or a folder on its way became a link or a file while the run was prepared or "
            "trained: nothing was written or deleted through it; check what changed the output folder, "
            "or choose another --output-dir."
        ) from None
    return fd


def remove_inside(path: Path, output_dir, missing_ok: bool = False) -> None:
    """Remove the folder (``shutil.rmtree``, which never follows a link inside it) or the file ``path``,
    reached from ``output_dir`` without following a link (:func:`open_inside`): ``path`` itself, or a
    folder on its way, swapped for a link after :func:`check_inside` is refused, not followed out of the
    output folder. A folder nested too deep for rmtree (it recurses once per level) is one line that
    says to remove it by hand."""
    path = Path(path)
    if path.parent.absolute() != Path(output_dir).expanduser().absolute():
        check_inside(path.parent, output_dir)
    try:
        if not HELD_FOLDERS:
            if path.is_symlink() or not path.is_dir():
                path.unlink(missing_ok=missing_ok)
            else:
                shutil.rmtree(path)
            return
        try:
            fd = open_inside(path.parent, output_dir)
        except FileNotFoundError:
            if missing_ok:
                return
            raise
        try:
            try:
                info = os.stat(path.name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                if missing_ok:
                    return
                raise
            if stat.S_ISLNK(info.st_mode):
                raise FileExistsError(
                    f"{path} became a link while the run was prepared or trained: nothing was deleted; "
                    "check what changed the output folder, or choose another --output-dir."
                )
            if stat.S_ISDIR(info.st_mode):
                _rmtree_in(path.name, fd)
            else:
                os.unlink(path.name, dir_fd=fd)
        finally:
            os.close(fd)
    except RecursionError:
        raise FileExistsError(
            f"{path} holds folders nested too deep to delete: remove it by hand, or choose another output folder."
        ) from None


def _rmtree_in(name: str, folder: int) -> None:
    """Remove the folder ``name`` of the folder held open as ``folder``, and all in it, never following
    a link: ``shutil.rmtree(dir_fd=...)``, or on Python 3.10 (whose rmtree takes no dir_fd) the same
    walk by descriptors."""
    if sys.version_info >= (3, 11):
        shutil.rmtree(name, dir_fd=folder)
        return
    fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=folder)
    try:
        for entry in os.scandir(fd):
            if entry.is_dir(follow_symlinks=False):
                _rmtree_in(entry.name, fd)
            else:
                os.unlink(entry.name, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=folder)

"""Fault injection for ``test_faults.py``: a process dies, or its disk fills up, at the moment it starts
writing a chosen file, whatever code writes it.

An audit hook (:func:`sys.addaudithook`) sees every file the process opens. When it opens the chosen
file (or a temporary file of it, ``.<name>.*``) for writing, the hook lowers the process's file-size
limit to 0 (``RLIMIT_FSIZE``): the file is created (or truncated) as usual, and its first byte then
either kills the process on the spot with SIGXFSZ (``kill``: no ``finally``, no ``atexit``, as with
SIGKILL) or fails with ``OSError`` (``full``: SIGXFSZ ignored, every later write fails too, as on a full
disk). ``log`` records the process id and path of every file opened for writing.

``torch.save`` to a path writes through C++, which the hook does not see: :func:`install` routes it
through Python's ``open`` (same bytes, same file).

In a subprocess, ``tests/runs/fault_harness/sitecustomize.py`` installs it from the environment
(``PONDERNET_FAULT_MODE``, ``PONDERNET_FAULT_NAME``, ``PONDERNET_FAULT_UNDER``, ``PONDERNET_FAULT_LOG``), so
that the processes Lightning starts get it too.
"""

from __future__ import annotations

import functools
import os
import resource
import signal
import sys

MODES = ("kill", "full", "log")
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def _opened_for_writing(args) -> str | None:
    path, mode, flags = (list(args) + [None, None, None])[:3]
    if isinstance(path, int) or path is None:
        return None
    path = os.fsdecode(path)
    if isinstance(mode, str) and any(c in mode for c in "wax+"):
        return path
    if mode is None and isinstance(flags, int) and flags & WRITE_FLAGS:
        return path
    return None


def _route_torch_save() -> None:
    import torch

    real = torch.save

    @functools.wraps(real)
    def save(obj, f, *args, **kwargs):
        if isinstance(f, (str, os.PathLike)):
            with open(f, "wb") as handle:
                return real(obj, handle, *args, **kwargs)
        return real(obj, f, *args, **kwargs)

    torch.save = save


def install(mode: str, name: str = "", under: str = "", log: str | None = None) -> None:
    """Arm the fault in this process (see the module's docstring)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # SIGXFSZ would dump core otherwise
    # Python ignores SIGXFSZ (a write past the limit then fails with EFBIG): kill restores its default
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL if mode == "kill" else signal.SIG_IGN)
    state = {"busy": False, "held": False}

    def hook(event, args):
        if event != "open" or state["busy"]:
            return
        path = _opened_for_writing(args)
        if path is None or state["held"]:  # a name in a held folder: os.open's wrapper saw it whole
            return
        if mode == "log":
            if os.path.abspath(path) == os.path.abspath(log):
                return
            state["busy"] = True
            try:
                with open(log, "a") as handle:
                    handle.write(f"{os.getpid()} {os.path.abspath(path)}\n")
            finally:
                state["busy"] = False
            return
        arm(os.path.abspath(path))

    def arm(path: str) -> None:
        base, folder = os.path.basename(path), os.path.dirname(path)
        if (base == name or base.startswith(f".{name}.")) and under in folder:
            resource.setrlimit(resource.RLIMIT_FSIZE, (0, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    sys.addaudithook(hook)
    _route_torch_save()
    _see_folder_descriptors(arm, mode == "log" and log, state)


def _see_folder_descriptors(arm, log, state) -> None:
    """The package writes a run's files by name in a folder it holds open (``os.open(name,
    dir_fd=folder)``); the audit event names the file alone, so ``os.open`` is wrapped to see the
    folder too (its path, from ``/proc/self/fd``)."""
    real = os.open

    @functools.wraps(real)
    def open_(path, flags, mode=0o777, *, dir_fd=None):
        if dir_fd is not None and not isinstance(path, int) and flags & WRITE_FLAGS:
            full = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), os.fsdecode(path))
            if log:
                with open(log, "a") as handle:
                    handle.write(f"{os.getpid()} {full}\n")
            else:
                arm(full)
            state["held"] = True  # the audit hook, which sees the name alone, leaves it
            try:
                return real(path, flags, mode, dir_fd=dir_fd)
            finally:
                state["held"] = False
        return real(path, flags, mode, dir_fd=dir_fd)

    os.open = open_


def install_from_environment() -> None:
    mode = os.environ.get("PONDERNET_FAULT_MODE")
    if mode:
        install(
            mode,
            os.environ.get("PONDERNET_FAULT_NAME", ""),
            os.environ.get("PONDERNET_FAULT_UNDER", ""),
            os.environ.get("PONDERNET_FAULT_LOG"),
        )

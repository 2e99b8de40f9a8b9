"""The processes of a run: which one is rank 0, and children that end with their parent.

A multi-process (DDP) run on one machine is one process per device: Lightning starts the others (the
same command again, with ``LOCAL_RANK`` set, or ``ddp_spawn``'s workers), and ``reproduce --jobs``
starts its workers. Only rank 0 prints and writes files. A child must not outlive its parent: killed,
the parent could not stop them, and a child waiting for rank 0 would wait for half an hour (the
process group's timeout) holding its memory. :func:`end_with_parent` ties a child to its parent
(Linux: the kernel's parent-death signal; elsewhere a thread that watches the parent).
This module imports neither PyTorch nor Lightning.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

PARENT_VARIABLE = "PONDERNET_PARENT_PID"  # the process whose children must end with it
RANK_VARIABLES = ("RANK", "LOCAL_RANK", "NODE_RANK", "SLURM_PROCID")
CONSOLE_SCRIPT = "pondernet-tutorial"  # pyproject.toml's [project.scripts]


def command_name() -> str:
    """The command line as the user typed it, for messages: ``pondernet-tutorial`` when this process is
    the console script, else ``python -m pondernet_tutorial``."""
    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    if os.path.splitext(name)[0] == CONSOLE_SCRIPT:  # (pondernet-tutorial.exe on Windows)
        return CONSOLE_SCRIPT
    return "python -m pondernet_tutorial"


def is_rank_zero() -> bool:
    """True unless this process is another rank than 0 of a multi-process run (from the environment
    that Lightning, torchrun or SLURM set)."""
    return all(os.environ.get(name, "0") in ("0", "") for name in RANK_VARIABLES)


def mark_parent() -> None:
    """Record this process as the parent of the children it is about to start (they inherit it)."""
    os.environ[PARENT_VARIABLE] = str(os.getpid())


def _set_parent_death_signal() -> bool:
    """Linux: the kernel sends this process SIGKILL when its parent ends."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        return libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _watch(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(1)  # the parent has ended: nobody waits for this process's work


def pid_alive(pid: int) -> bool:
    """True if process ``pid`` runs on this host."""
    if pid <= 0:
        return False
    try:  # a zombie (Z, X) has ended; only its exit status remains
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False
    except OSError:
        pass
    try:  # no /proc (macOS, Windows): signal 0 checks that the process exists
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        pass
    return True


def end_with_parent(parent: int | None = None) -> None:
    """End this process when its parent ``parent`` ends.

    Without ``parent``: in another rank than 0 of a multi-process run, the parent recorded by
    :func:`mark_parent`; elsewhere (a plain ``train``) nothing happens. A record inherited by a process
    that is not that parent's child (a stale one) is ignored; a parent that has already ended ends
    this process at once.
    """
    if parent is None:
        if is_rank_zero():
            return
        recorded = os.environ.get(PARENT_VARIABLE, "")
        if not recorded.isdigit():
            return
        parent = int(recorded)
        if os.getppid() != parent and pid_alive(parent):
            return  # not that process's child: the record was inherited from further up
    if parent == os.getpid():
        return
    if os.getppid() != parent:  # it ended before we could tie ourselves to it
        os._exit(1)
    if not _set_parent_death_signal():
        threading.Thread(target=_watch, args=(parent,), daemon=True, name="end-with-parent").start()
    if os.getppid() != parent:  # it ended while we did
        os._exit(1)


class Interrupted(KeyboardInterrupt):
    """A stop by a signal (SIGINT, SIGTERM or SIGHUP): never a success. A ``KeyboardInterrupt``, so that a
    caller's ``except KeyboardInterrupt`` sees it; ``exit_code`` is the shell's ``128 + signal``."""

    def __init__(self, signum: int = signal.SIGINT):
        super().__init__(int(signum))
        self.signum = int(signum)

    @property
    def name(self) -> str:
        try:
            return signal.Signals(self.signum).name
        except ValueError:
            return f"signal {self.signum}"

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    def __str__(self) -> str:
        return f"interrupted by {self.name}"


STOP_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)
_received: list[int] = []  # the stop signals this process received, in order


def _raise_interrupted(signum, frame):
    _received.append(signum)
    raise Interrupted(signum)


@contextmanager
def stop_on_signals():
    """Inside: SIGINT, SIGTERM and SIGHUP raise :class:`Interrupted`, so that ``finally`` blocks run
    (locks are released, nothing half-written stays) and the stop is reported as a failure.

    Lightning turns a KeyboardInterrupt into ``sys.exit(1)`` and SIGTERM into a ``SystemExit`` without a
    code (exit status 0: a success); both are turned back into :class:`Interrupted` here. Outside the
    main thread, and for a signal that the caller ignores (``nohup``), nothing changes.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    for number in STOP_SIGNALS:
        handler = signal.getsignal(number)
        if handler is signal.SIG_IGN:
            continue
        previous[number] = handler
        signal.signal(number, _raise_interrupted)
    mark = len(_received)
    try:
        yield
    except SystemExit as error:
        received = _received[mark:]
        if received:
            raise Interrupted(received[0]) from None
        if type(error).__name__ == "SIGTERMException":  # Lightning's, if its own handler ran alone
            raise Interrupted(signal.SIGTERM) from None
        raise
    except KeyboardInterrupt as error:
        if isinstance(error, Interrupted):
            raise
        received = _received[mark:]
        raise Interrupted(received[0] if received else signal.SIGINT) from None
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def check_jobs(jobs: int) -> int:
    """Runs trained at once: at least 1, at most the machine's cores (each run is a process of its own,
    with its own copy of the data and the model: more processes than cores only queue for them)."""
    cores = os.cpu_count() or 1
    if not isinstance(jobs, int) or not 1 <= jobs <= cores:
        raise ValueError(f"--jobs must lie in [1, {cores}] (the cores of this machine), got {jobs!r}.")
    return jobs


def rebuilt(cls: type, args: tuple, state: dict) -> BaseException:
    """An error of ``cls`` as it was raised in another process (:meth:`PicklableError.__reduce__`)."""
    error = cls.__new__(cls)
    BaseException.__init__(error, *args)
    error.__dict__.update(state)
    return error


class PicklableError:
    """A mixin for an error whose constructor takes other arguments than its message: a worker of
    ``reproduce --jobs`` sends the error to its parent by pickling, which rebuilds it from ``args``
    (the message alone) and would fail in the constructor, breaking the pool instead of reporting it."""

    def __reduce__(self):
        return rebuilt, (type(self), self.args, self.__dict__)

"""Files that may come from anyone: every read of one is bounded before it is made.

:func:`open_regular` opens a file without blocking (and, when asked, without following a last link),
and checks *the open file*: a regular file of at most ``cap`` bytes. A FIFO, a device or a file swapped
in after the check is never read, because the check and the read use the same descriptor. The reads
of run folders and shipped files are made here: a file's bytes (:func:`read_regular`: model files),
a JSON record (:func:`read_json`: ``metadata.json``, ``study.json``) and a table
(:func:`read_table`, bounded after decompression too); checkpoints open through :func:`open_regular`
(:mod:`~pondernet_tutorial.checkpointing`). This module imports neither PyTorch nor Lightning.
"""

from __future__ import annotations

import errno
import io
import json
import os
import stat
from pathlib import Path

MAX_READ_BYTES = 64 * 2**20  # metadata.json, study.json, locks: a few kB; a bigger file is damaged


# The answers of a read that are verdicts on the file: it is not there (a missing file or folder), or it
# is not a file the package wrote (DamagedFileError). Any other OSError (no permission, an I/O error of a
# disk or a network file system) says nothing of the file: it is raised as it is, never taken for a
# damaged file, which the run machinery would then delete and make again.
NOT_THERE = (FileNotFoundError, NotADirectoryError)


def printable(text: str) -> str:
    """``text`` without the characters a terminal would act on (a file's names are quoted in errors)."""
    return "".join(c if c.isprintable() else "?" for c in text)


def shown(text, limit: int = 80) -> str:
    """``text`` (a name or a value from an untrusted file, or a message that quotes one) as it is shown:
    on one line, with ``?`` for each character a terminal would act on, and at most ``limit`` characters
    (a name in a file may be megabytes long)."""
    text = " ".join(str(text).split())
    return printable(text if len(text) <= limit else f"{text[: limit - 4]}...{text[-1]}")


class DamagedFileError(OSError):
    """A file the package reads is not a regular file of bounded size (a FIFO, a device such as
    ``/dev/zero``, a folder, a file too big): one line that names it."""

    def __str__(self) -> str:
        return self.strerror or super().__str__()


class ReadRefusedError(PermissionError):
    """The permissions refuse to open a file for reading: the machine's answer, not a verdict on the
    file (nothing is deleted for it), and no refused write (no other folder helps)."""


class CheckpointError(RuntimeError):
    """A model file or checkpoint is missing, damaged, names code that is not registered, or does not
    fit the model that its folder records or that the caller asks for: one line."""


def is_out_of_memory(error: BaseException) -> bool:
    """Whether ``error`` is the allocator's refusal: a ``MemoryError``, or a ``RuntimeError`` that says
    so (CUDA's and MPS's out-of-memory errors, PyTorch's failed allocations)."""
    text = str(error).lower()
    return isinstance(error, MemoryError) or (
        isinstance(error, RuntimeError)
        and any(word in text for word in ("alloc", "out of memory", "not enough memory"))
    )


# what a failure of the device says of itself (CUDA's, its driver's, cuDNN's, cuBLAS's, NCCL's, Triton's,
# ROCm's and XPU's errors, an ECC error, a device-side assert): RuntimeErrors, as a damaged checkpoint's
# are. The checkpoint's own names (its weights', its callbacks') are checked before Lightning restores it,
# so that none of them reaches an error's text here
DEVICE_FAILURES = (
    "cuda",
    "cudnn",
    "cublas",
    "nccl",
    "triton",
    "ecc error",
    "device-side assert",
    "hip error",
    "xpu",
)


def is_device_failure(error: BaseException) -> bool:
    """Whether ``error`` is the accelerator's failure (``torch.AcceleratorError`` where PyTorch has it,
    else a ``RuntimeError`` that says so, :data:`DEVICE_FAILURES`), not a verdict on a file."""
    accelerator = type(error).__name__ == "AcceleratorError"  # PyTorch >= 2.8; not imported here
    text = str(error).lower()
    return accelerator or (isinstance(error, RuntimeError) and any(word in text for word in DEVICE_FAILURES))


def says_nothing_of_files(error: BaseException) -> bool:
    """Whether ``error`` is the machine's (out of memory, a failure of the device, an I/O error, no
    permission) rather than a verdict on the files being read (:class:`DamagedFileError`,
    :class:`CheckpointError`, which may quote the file's own names)."""
    if isinstance(error, (DamagedFileError, CheckpointError)):
        return False
    return is_out_of_memory(error) or is_device_failure(error) or isinstance(error, OSError)


def open_regular(path: str | os.PathLike, cap: int = MAX_READ_BYTES, follow_links: bool = True):
    """``path`` open for binary reading if it is a regular file (a link to one is followed, unless
    ``follow_links`` is false: then a link fails to open) of at most ``cap`` bytes; a FIFO, a device, a
    folder or a bigger file raises :class:`DamagedFileError` at once (the open never blocks:
    ``O_NONBLOCK``). The check is made on the open file, so the file cannot be swapped between the check
    and the read."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags if follow_links else flags | getattr(os, "O_NOFOLLOW", 0))
    except PermissionError as error:
        raise ReadRefusedError(error.errno, error.strerror, error.filename) from None
    except OSError as error:
        if follow_links or error.errno != errno.ELOOP:
            raise
        raise DamagedFileError(
            errno.ELOOP, f"{path} is a symbolic link, which is not followed here"
        ) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise DamagedFileError(errno.EINVAL, f"{path} is not a regular file")
        if info.st_size > cap:
            raise DamagedFileError(errno.EFBIG, f"{path} holds {info.st_size:,} bytes, more than {cap:,}")
        return os.fdopen(os.dup(fd), "rb")
    finally:
        os.close(fd)


# tables (history.csv, the evaluation and study tables, per_sample.csv.gz): the largest shipped one holds
# 4.5 MB gzipped, 17 MB of text; a table 4 times bigger is not one the package wrote. pandas holds a table
# in about 8 times its text at worst (one-letter cells): at most about half a gigabyte, read in seconds
MAX_TABLE_BYTES = 64 * 2**20
# several runs' tables read together (a notebook's per-sample tables, a study's tables): every shipped
# per-sample table together holds 178 MB of text
MAX_TABLES_BYTES = 4 * MAX_TABLE_BYTES


class TableBudget:
    """The bytes of text that several :func:`read_table` calls may take together (its ``budget``): many
    run folders may each hold a table as big as one may be (a gzip bomb of 80 kB, hard-linked into each)."""

    def __init__(self, total: int | None = None):
        self.total = self.left = MAX_TABLES_BYTES if total is None else total


def read_regular(path: str | os.PathLike, cap: int = MAX_READ_BYTES, follow_links: bool = True) -> bytes:
    """The bytes of ``path`` if it is a regular file (see :func:`open_regular`) of at most ``cap`` bytes:
    nothing blocks, nothing is read without bound."""
    with open_regular(path, cap, follow_links) as file:
        data = file.read(cap + 1)
    if len(data) > cap:
        raise DamagedFileError(errno.EFBIG, f"{path} holds more than {cap:,} bytes")
    return data


def damaged_table(path, why: str) -> DamagedFileError:
    """A table that cannot be read, in one line that says what to do."""
    return DamagedFileError(
        errno.EINVAL,
        f"{path} is not a readable table ({why}): make it again with the command that wrote it "
        "(`reproduce --reevaluate` for a run's tables)",
    )


MAX_COLUMNS = 1_000  # the package's tables have at most a few dozen; pandas spends kilobytes on each


MAX_QUOTES = 2_000_000  # quote characters in a table: the package's hold none, or two per quoted cell


class _Capped:
    """A binary reader of a table, which raises :class:`DamagedFileError` at its first read when the
    table holds more than ``cap`` bytes (a gzip bomb: it is inflated a megabyte at a time, never past
    the bound), a NUL byte, which no text table holds (a sparse or zeroed file reads as a table of
    none), more than :data:`MAX_QUOTES` quotes, or a row of more than :data:`MAX_COLUMNS` columns, the
    header or any other (a megabyte of commas takes gigabytes in pandas: a row longer than the header
    becomes an index of one level per extra field). A row is what pandas reads as one
    (:func:`_rows`): a newline or a comma inside a quoted field does not end it."""

    def __init__(self, raw, cap: int, path, whole_lines: bool = False, budget: TableBudget | None = None):
        self.raw, self.cap, self.path, self.whole_lines, self.buffer = raw, cap, path, whole_lines, None
        self.budget, self.size = budget, 0

    def _load(self):
        if self.buffer is None:
            chunks, count = [], 0
            cap = self.cap if self.budget is None else min(self.cap, self.budget.left)
            while chunk := self.raw.read(min(2**20, cap + 1 - count)):
                chunks.append(chunk)
                count += len(chunk)
                if count > self.cap:
                    raise DamagedFileError(
                        errno.EFBIG, f"{self.path} holds more than {self.cap:,} bytes of table"
                    )
                if count > cap:
                    raise DamagedFileError(
                        errno.EFBIG,
                        f"the tables read with {self.path} hold more than {self.budget.total:,} bytes together",
                    )
            data = b"".join(chunks)
            self.size = len(data)
            if self.whole_lines:  # a table still being appended to: its last line may be cut short
                data = data[: data.rfind(b"\n") + 1]
            if b"\0" in data:
                raise damaged_table(self.path, "it holds NUL bytes, not text")
            header, widest = _rows(data, self.path)
            first_line = data.find(b"\n")
            if header >= MAX_COLUMNS or (len(data) if first_line < 0 else first_line) >= 256 * MAX_COLUMNS:
                raise damaged_table(self.path, f"its header is longer than {MAX_COLUMNS:,} columns")
            if widest >= MAX_COLUMNS:
                raise damaged_table(self.path, f"a row of it is longer than {MAX_COLUMNS:,} columns")
            self.buffer = io.BytesIO(data)
        return self.buffer

    def read(self, size: int = -1) -> bytes:
        return self._load().read(size)

    def readline(self, size: int = -1) -> bytes:
        return self._load().readline(size)

    def readable(self) -> bool:
        return True

    def __iter__(self):
        return iter(self.readline, b"")


def _rows(data: bytes, path) -> tuple[int, int]:
    """The commas that separate fields in the first row of ``data`` (the header) and in its widest row,
    by pandas' rule of quotes: a quote opens a quoted field only at the start of a field, ``""`` inside
    one is a quote, and any other quote there closes it; a quote elsewhere is a character. Read a
    megabyte at a time, so that the arrays stay small whatever the table."""
    import numpy as np

    chunk = 2**20
    pieces = [
        (start, np.frombuffer(data, np.uint8, min(chunk, len(data) - start), start))
        for start in range(0, len(data), chunk)
    ]
    if sum(int(np.count_nonzero(codes == ord('"'))) for _, codes in pieces) > MAX_QUOTES:  # before the list
        raise damaged_table(path, f"it holds more than {MAX_QUOTES:,} quotes")
    quotes = [q for start, codes in pieces for q in (np.flatnonzero(codes == ord('"')) + start).tolist()]
    spans, opened, i = [], None, 0  # the quoted fields: [first byte, last byte + 1)
    while i < len(quotes):
        q = quotes[i]
        if opened is None:
            if q == 0 or data[q - 1] in b",\n\r":
                opened = q
        elif i + 1 < len(quotes) and quotes[i + 1] == q + 1:
            i += 1  # a doubled quote: a quote inside the field
        else:
            spans.append((opened, q + 1))
            opened = None
        i += 1
    if opened is not None:  # a quote never closed: the rest of the table is one field
        spans.append((opened, len(data)))
    header, widest, row, first = None, 0, 0, 0  # row: the separators of the row read so far
    for start, codes in pieces:
        quoted = np.zeros(len(codes), bool)
        while first < len(spans) and spans[first][1] <= start:
            first += 1
        for low, high in spans[first:]:
            if low >= start + len(codes):
                break
            quoted[max(low - start, 0) : high - start] = True
        separators = np.cumsum((codes == ord(",")) & ~quoted)
        ends = np.flatnonzero((codes == ord("\n")) & ~quoted)
        if len(ends):
            rows = np.diff(separators[ends], prepend=0)
            rows[0] += row
            header = int(rows[0]) if header is None else header
            widest = max(widest, int(rows.max()))
            row = int(separators[-1] - separators[ends[-1]])
        else:
            row += int(separators[-1])
    return (row if header is None else header), max(widest, row)


def read_table(
    path: str | os.PathLike,
    cap: int = MAX_TABLE_BYTES,
    numeric: tuple[str, ...] = (),
    follow_links: bool = True,
    required: tuple[str, ...] = (),
    whole_lines: bool = False,
    steps: tuple[str, ...] = (),
    budget: TableBudget | None = None,
    **read_csv_options,
):
    """A CSV table (gzip-compressed when ``path`` ends with ``.gz``) as a pandas ``DataFrame``, read only
    if it is a regular file of at most ``cap`` bytes, compressed and uncompressed, of text (no NUL byte)
    with at least one column; ``numeric``: the columns that must hold numbers where the table has them;
    ``required``: the columns it must have; ``steps``: the columns that must hold halting steps, whole
    numbers from 1 to :data:`~pondernet_tutorial.halting.MAX_STEPS` (a reader sizes arrays by them);
    ``follow_links=False``: a table in a results folder, which a link must not lead out of; ``whole_lines``: only the lines that end in a newline, of a table that
    may still be being appended to (no whole line: an empty table); ``budget``: what this read may
    take of the bytes of several (:class:`TableBudget`).

    Raises:
        FileNotFoundError: no such file.
        DamagedFileError: not a regular file, too big, or not a readable table (one line).
    """
    import gzip
    import zlib

    import pandas as pd

    path = Path(path)
    with open_regular(path, cap, follow_links) as file:
        raw = gzip.GzipFile(fileobj=file, mode="rb") if path.suffix == ".gz" else file
        capped = _Capped(raw, cap, path, whole_lines, budget)
        try:
            table = pd.read_csv(capped, **read_csv_options)
            if budget is not None:
                budget.left -= capped.size
        except DamagedFileError:
            raise
        except pd.errors.EmptyDataError as error:  # no line at all (whole_lines: none finished)
            if not whole_lines:
                raise damaged_table(path, " ".join(str(error).split())[:200]) from None
            table = pd.DataFrame()
        except OSError as error:
            if error.errno is not None:
                raise  # the system's error (an I/O error): says nothing of the table
            # a damaged gzip header (BadGzipFile), pandas' own errors: no errno
            raise damaged_table(path, " ".join(str(error).split())[:200]) from None
        except (ValueError, EOFError, zlib.error, pd.errors.ParserError) as error:
            # a UnicodeDecodeError and an empty file's EmptyDataError are ValueErrors; a damaged deflate
            # stream is a zlib.error, a damaged gzip header a BadGzipFile (an OSError)
            raise damaged_table(path, " ".join(str(error).split())[:200]) from None
    missing = [column for column in required if column not in table]
    if missing:
        raise damaged_table(
            path, f"it lacks the column{'s' if len(missing) > 1 else ''} {', '.join(missing)}"
        )
    for column in numeric:
        if column in table and not pd.api.types.is_numeric_dtype(table[column]):
            text = next((v for v in table[column] if isinstance(v, str)), None)
            if text is not None:  # (an empty table's columns hold no text)
                raise damaged_table(path, f"its column {column} holds {text[:40]!r}, not numbers")
    if steps:
        from .halting import MAX_STEPS

        for column in (c for c in steps if c in table):
            values = pd.to_numeric(table[column], errors="coerce")
            bad = values[~((values % 1 == 0) & (values >= 1) & (values <= MAX_STEPS))]
            if len(bad):
                raise damaged_table(
                    path,
                    f"its column {column} holds {str(table[column][bad.index[0]])[:40]!r}, not a step from 1 to {MAX_STEPS:,}",
                )
    return table


MAX_DEPTH = 32  # lists and dictionaries nested deeper than this are no record of this package's


def nested_deeper_than(value, limit: int = MAX_DEPTH) -> bool:
    """Whether lists and dictionaries nest more than ``limit`` deep in ``value``, found without
    recursion: the code that then walks the value (comparing, copying) recurses once per level."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (list, tuple, dict)):
            if depth > limit:
                return True
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))
    return False


def read_json(path: str | os.PathLike, follow_links: bool = True) -> dict | None:
    """The JSON object in ``path``; ``None`` if the file is missing, empty, damaged, not a regular file
    (or, without ``follow_links``, a link), too big, or nested more than :data:`MAX_DEPTH` deep. Any
    other error of the read (no permission, an I/O error) is raised: it says nothing of the record."""
    try:
        data = json.loads(read_regular(path, follow_links=follow_links).decode("utf-8"))
    # JSONDecodeError and UnicodeDecodeError are ValueErrors
    except (*NOT_THERE, DamagedFileError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) and not nested_deeper_than(data) else None

"""Where the commands' outputs go: never over an input, into pipes and devices as streams,
into regular files whole.

Every file a command writes (`analyze --html`, `check --junit`, `annotate -o`) and its
standard output go through here, so one set of rules holds:

* a path that is one of the inputs (the same file by st_dev and st_ino, following symbolic
  links: also a hard link, or a member of a file set or directory given as the capture) is
  refused before anything is written;
* `-` (standard output), a FIFO or a character device is written as a stream: opened as it
  is, never created, truncated, replaced or renamed (a FIFO waits for its reader, as the
  shell's `>` does);
* a regular file or a new path is written to a temporary file in the same directory that
  replaces it only when complete, with the old file's permissions (a reader never sees
  half a report, a failed write leaves the old file as it was). A symbolic link to a
  regular file (or to nothing yet) stays a link: the file it points to is replaced;
* anything else (a directory, a socket, a block device) is refused.

A refusal, or a path that cannot be opened, is `OutputRefused` (a usage error); a write that
fails once the output is open is `WriteFailed`, except that a closed standard output stays
`BrokenPipeError`, the quiet exit of `| head`.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import BinaryIO

from .errors import OutputRefused, WriteFailed, printable

STDOUT = "standard output"  # the name of `-` in messages


class Output:
    """An open output: `write(bytes)`; a failed write raises WriteFailed naming it."""

    def __init__(self, file: BinaryIO, name: str, what: str) -> None:
        self._file = file
        self.name = name
        self.what = what

    def write(self, data: bytes) -> int:
        try:
            return self._file.write(data)
        except OSError as e:
            raise self._failed(e) from None

    def _finish(self, close: bool) -> None:
        try:
            self._file.close() if close else self._file.flush()
        except OSError as e:
            raise self._failed(e) from None

    def _failed(self, e: OSError) -> OSError | WriteFailed:
        """A closed standard output stays BrokenPipeError (the quiet exit of `| head`); any
        other failure, a FIFO's reader gone included, is the output's WriteFailed."""
        if isinstance(e, BrokenPipeError) and self.name == STDOUT:
            return e
        return WriteFailed(self.name, e, self.what)


def refuse_inputs(path: str, inputs: Iterable[str], what: str = "") -> None:
    """OutputRefused if `path` (or, for `-`, standard output) is one of `inputs`; inputs that
    are not files here (`-`, URLs, missing) are no file the output could be."""
    st = _stat(path, what)
    if st is None:
        return
    for p in inputs:
        if p == "-":
            continue
        try:
            s = os.stat(p)
        except (OSError, ValueError):
            continue
        if os.path.samestat(s, st):
            same = "" if os.path.abspath(p) == os.path.abspath(path) else f" ({printable(p)})"
            raise OutputRefused(f"{_shown(path)}: is an input{same}: refusing to write "
                                f"{what or 'the output'} over it")


def refuse_report_file(path: str, option: str, what: str, inputs: Iterable[str]) -> None:
    """OutputRefused, before any analysis, for a file option's `path` that is one of the
    inputs, or `-`: standard output carries the command's own report."""
    if path == "-":
        raise OutputRefused(f"{option} -: standard output carries the report; give a file "
                            "name for " + what)
    refuse_inputs(path, inputs, what)


@contextmanager
def open_output(path: str, what: str = "", inputs: Iterable[str] = ()) -> Iterator[Output]:
    """`path` open for writing as the rules above say; `what` names the output in messages
    ("the HTML report"), `inputs` are the files the command reads."""
    inputs = list(inputs)
    refuse_inputs(path, inputs, what)
    if path == "-":
        sys.stdout.flush()
        out = Output(sys.stdout.buffer, STDOUT, what)
        yield out
        out._finish(close=False)
        return
    st = _stat(path, what)
    if st is not None and (stat.S_ISFIFO(st.st_mode) or stat.S_ISCHR(st.st_mode)):
        with _stream(path, what) as out:
            yield out
        return
    if st is not None and not stat.S_ISREG(st.st_mode):
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise _cannot(path, what, f"it is {kind}")
    with _replace(path, st, what) as out:
        yield out


def write_output(path: str, text: str, what: str = "", inputs: Iterable[str] = ()) -> None:
    """Write `text` (UTF-8) to `path` through `open_output`."""
    with open_output(path, what, inputs) as out:
        out.write(text.encode("utf-8"))


@contextmanager
def to_stdout() -> Iterator[None]:
    """Run the body's writes to standard output and flush them: a failure (not a closed
    pipe) raises WriteFailed. The body only renders and writes: every OSError in it is the
    output's."""
    try:
        yield
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as e:
        raise WriteFailed(STDOUT, e) from None


def is_stdout(path: str) -> bool:
    """Whether `path` is standard output (`-`, or the same file, e.g. /dev/stdout): where
    it is, a command's messages go to standard error instead."""
    try:
        return path == "-" or os.path.samestat(os.stat(path), os.fstat(sys.stdout.fileno()))
    except (AttributeError, OSError, ValueError):
        return False


def discard_stdout() -> None:
    """Point file descriptor 1 at /dev/null, so that output still buffered for a standard
    output that failed goes nowhere instead of failing again at exit."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return  # not a file descriptor (a test runner's buffer)
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, fd)
    finally:
        os.close(null)


def _shown(path: str) -> str:
    return STDOUT if path == "-" else printable(path)


def _cannot(path: str, what: str, problem: str | OSError) -> OutputRefused:
    """The refusal of `path` for `problem` (an OSError: its message)."""
    if isinstance(problem, OSError):
        problem = problem.strerror or str(problem)
    return OutputRefused(f"{_shown(path)}: cannot write{' ' + what if what else ''}: {problem}")


def _stat(path: str, what: str) -> os.stat_result | None:
    """The file `path` is (links followed; `-`: standard output), None for a new path."""
    try:
        return os.fstat(sys.stdout.fileno()) if path == "-" else os.stat(path)
    except FileNotFoundError:
        return None
    except (AttributeError, ValueError):  # standard output that is no file descriptor
        return None
    except OSError as e:
        if path == "-":
            return None
        raise _cannot(path, what, e) from None


@contextmanager
def _stream(path: str, what: str) -> Iterator[Output]:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    except OSError as e:
        raise _cannot(path, what, e) from None
    mode = os.fstat(fd).st_mode
    if not (stat.S_ISFIFO(mode) or stat.S_ISCHR(mode)):  # replaced since it was looked at
        os.close(fd)
        raise _cannot(path, what, "it changed while being opened")
    with _closing(Output(os.fdopen(fd, "wb"), path, what)) as out:
        yield out


@contextmanager
def _closing(out: Output) -> Iterator[Output]:
    """`out`, closed after the body: a failed close is WriteFailed, unless the body failed
    first (its error is the one to report)."""
    try:
        yield out
    except BaseException:
        try:
            out._finish(close=True)
        except (OSError, WriteFailed):
            pass
        raise
    out._finish(close=True)


@contextmanager
def _replace(path: str, st: os.stat_result | None, what: str) -> Iterator[Output]:
    target = path
    if os.path.islink(path):  # the link stays; the file it points to is replaced
        target = os.path.realpath(path)
        found = _stat(target, what)
        if st is not None and (found is None or not os.path.samestat(st, found)):
            raise _cannot(path, what, "the file it links to has no name to replace")
    tmp, fd = _temporary(target, path, what)
    try:
        if st is not None:  # the replaced file's permissions (and owner, where allowed)
            os.fchmod(fd, stat.S_IMODE(st.st_mode))
            try:
                os.fchown(fd, st.st_uid, st.st_gid)
            except OSError:
                pass
        file, fd = os.fdopen(fd, "wb"), -1
        with _closing(Output(file, path, what)) as out:
            yield out
        try:
            os.replace(tmp, target)
        except OSError as e:
            raise WriteFailed(path, e, what) from None
    except BaseException:
        if fd >= 0:
            os.close(fd)
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _temporary(target: str, path: str, what: str) -> tuple[str, int]:
    """A new file next to `target`, created with the umask's permissions."""
    head, tail = os.path.split(target)
    for _ in range(100):
        tmp = os.path.join(head, f".{tail}.{os.urandom(4).hex()}.tmp")
        try:
            return tmp, os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
        except FileExistsError:
            continue
        except OSError as e:
            raise _cannot(path, what, e) from None
    raise _cannot(path, what, "no free temporary name next to it")

"""Capture a command's TCP traffic with tcpdump, so the gate can check it afterwards.

tcpdump runs with `--immediate-mode -U` (every packet is written as it arrives, nothing
waits in the ring buffer), is waited for until it reports "listening on" before the command
starts, and is stopped with SIGINT after the command ends so the file is complete. Capture
needs root or CAP_NET_RAW; when it is not permitted, or tcpdump is missing, the error says
so in one line instead of leaving an empty file behind.

tcpdump runs as root (`-Z root`), so it never opens the output itself: nagleprobe opens it
(refusing a symbolic link or anything but a regular file, without following a link put
there meanwhile) and tcpdump writes to that descriptor (`-w -`). The filter is passed after
`--`, so it is only ever read as a filter expression, never as an option.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import stat
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Sequence

from .errors import ExitStatus, printable

DEFAULT_SNAPLEN = 256  # headers are all nagleprobe needs; IPv6 extension headers fit too
DEFAULT_LINGER_S = 0.2  # after the command: time for its last FIN/ACKs to reach the file
READY_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 5.0
TCPDUMP_ENV = "NAGLEPROBE_TCPDUMP"  # path of the tcpdump to use (default: found on PATH)
_SBIN = ("/usr/sbin/tcpdump", "/usr/bin/tcpdump", "/sbin/tcpdump", "/usr/local/sbin/tcpdump")
_STATS = re.compile(r"(\d+) packets? (captured|received by filter|dropped by kernel)")


class RecordError(Exception):
    """Capture could not be done; `status` is the exit status the CLI ends with."""

    def __init__(self, message: str, status: ExitStatus = ExitStatus.CANNOT_CAPTURE) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class CaptureStats:
    """What tcpdump said about the capture when it stopped (None if it did not say)."""

    captured: int | None = None
    received: int | None = None
    dropped: int | None = None


@dataclass
class RecordResult:
    """The command's exit status, the interface its traffic was captured on and the file
    it was written to."""

    returncode: int
    path: str
    stats: CaptureStats = field(default_factory=CaptureStats)
    interface: str = "lo"

    def summary(self) -> str:
        """What was recorded, in one line for people."""
        s = self.stats
        return (f"recorded {s.captured if s.captured is not None else '?'} packets on "
                f"{self.interface} to {self.path}"
                + (f" ({s.dropped} dropped by the kernel)" if s.dropped else "")
                + f"; command exited with {self.returncode}")


def find_tcpdump(explicit: str | None = None) -> str:
    """The tcpdump to run: `explicit`, $NAGLEPROBE_TCPDUMP, PATH, then the usual sbin dirs."""
    wanted = explicit or os.environ.get(TCPDUMP_ENV)
    if wanted:
        found = shutil.which(wanted)
        if not found:
            raise RecordError(f"tcpdump not found at {wanted}")
        return found
    found = shutil.which("tcpdump") or next((p for p in _SBIN if os.access(p, os.X_OK)), None)
    if not found:
        raise RecordError("tcpdump not found: install it (e.g. apt-get install tcpdump) to "
                          "capture traffic")
    return found


def bpf_filter(ports: Sequence[int] = ()) -> str:
    """The capture filter: TCP, on the given ports if any."""
    if not ports:
        return "tcp"
    return "tcp and (" + " or ".join(f"port {int(p)}" for p in ports) + ")"


class Capture:
    """A running tcpdump writing one interface's TCP traffic to a file.

    Use as a context manager, or `start()` / `stop()`. `start()` returns once tcpdump is
    listening, and raises RecordError when it cannot capture.
    """

    def __init__(self, output: str | os.PathLike[str], interface: str = "lo",
                 ports: Sequence[int] = (), bpf: str | None = None,
                 snaplen: int = DEFAULT_SNAPLEN, tcpdump: str | None = None) -> None:
        self.output = str(output)
        self.interface = interface
        self.filter = bpf if bpf else bpf_filter(ports)
        self.snaplen = snaplen
        self.tcpdump = tcpdump
        self.stats = CaptureStats()
        self._proc: subprocess.Popen[str] | None = None
        self._err: list[str] = []
        self._ready = threading.Event()
        self._reader: threading.Thread | None = None

    def command(self) -> list[str]:
        """tcpdump's arguments: it writes the capture to its standard output (the output
        file opened by `start`), and the filter comes after `--`."""
        cmd = [find_tcpdump(self.tcpdump), "--immediate-mode", "-U", "-n", "-s",
               str(self.snaplen), "-i", self.interface, "-w", "-"]
        if os.geteuid() == 0:
            cmd[1:1] = ["-Z", "root"]  # Debian's tcpdump would drop to user tcpdump first
        return cmd + ["--", self.filter]

    def _open_output(self) -> tuple[int, bool]:
        """Open (create or truncate) the output for writing without following a symbolic
        link: (descriptor, whether it was created). RecordError for a link, a directory, a
        device or FIFO, or a path that cannot be written."""
        shown = printable(self.output)
        parent = Path(self.output).resolve().parent
        if not parent.is_dir():
            raise RecordError(f"cannot write {shown}: directory {printable(str(parent))} "
                              "does not exist")
        try:
            st = os.lstat(self.output)
        except FileNotFoundError:
            st = None
        except OSError as e:
            raise RecordError(f"cannot write {shown}: {e.strerror or e}") from None
        if st is not None and stat.S_ISLNK(st.st_mode):
            raise RecordError(f"refusing to write {shown}: it is a symbolic link (tcpdump "
                              "runs as root; remove it or choose another output)")
        if st is not None and not stat.S_ISREG(st.st_mode):
            raise RecordError(f"refusing to write {shown}: it is not a regular file")
        flags = (os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
                 | (os.O_EXCL if st is None else 0))
        try:
            fd = os.open(self.output, flags, 0o644)
        except OSError as e:  # ELOOP: a link put there meanwhile; EEXIST: a file was
            raise RecordError(f"cannot write {shown}: {e.strerror or e}") from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise RecordError(f"refusing to write {shown}: it is not a regular file")
            os.set_blocking(fd, True)
            os.ftruncate(fd, 0)
        except BaseException:
            os.close(fd)
            raise
        return fd, st is None

    def start(self, timeout: float = READY_TIMEOUT_S) -> None:
        cmd = self.command()
        fd, created = self._open_output()
        try:
            self._launch(cmd, fd, timeout)
        except RecordError:
            if created:  # no empty file left behind
                try:
                    if os.path.samestat(os.fstat(fd), os.lstat(self.output)):
                        os.unlink(self.output)
                except OSError:
                    pass
            raise
        finally:
            os.close(fd)  # tcpdump has its own copy

    def start_pipe(self, timeout: float = READY_TIMEOUT_S) -> BinaryIO:
        """Start tcpdump writing to a pipe instead of the output file (`watch -i`): the
        pipe's read end, once tcpdump is listening. RecordError as for `start`."""
        cmd = self.command()
        r, w = os.pipe()
        try:
            self._launch(cmd, w, timeout)
        except BaseException:
            os.close(r)
            raise
        finally:
            os.close(w)  # tcpdump has its own copy
        return os.fdopen(r, "rb", buffering=0)

    def _launch(self, cmd: list[str], fd: int, timeout: float) -> None:
        """Run tcpdump writing to descriptor `fd`; return once it is listening."""
        try:
            self._proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=fd,
                stderr=subprocess.PIPE, text=True, errors="replace",
                start_new_session=True,  # a Ctrl-C for the command must not stop it
                preexec_fn=_die_with_parent)
        except OSError as e:
            raise RecordError(f"cannot run {cmd[0]}: {e.strerror or e}") from None
        self._reader = threading.Thread(target=self._read_stderr, daemon=True)
        self._reader.start()
        ready = self._ready.wait(timeout)
        if self._proc.poll() is not None or not ready or not self._listening():
            self._terminate()
            raise RecordError(self._failure(ready))

    def stop(self, linger: float = DEFAULT_LINGER_S) -> CaptureStats:
        """Let the last packets arrive, stop tcpdump with SIGINT and wait for the file."""
        if self._proc is None:
            return self.stats
        if self._proc.poll() is None:
            time.sleep(linger)
        self._terminate()
        text = "".join(self._err)
        for n, what in _STATS.findall(text):
            setattr(self.stats, {"captured": "captured", "received by filter": "received",
                                 "dropped by kernel": "dropped"}[what], int(n))
        return self.stats

    def __enter__(self) -> Capture:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ internals
    def _read_stderr(self) -> None:
        assert self._proc is not None and self._proc.stderr is not None
        for line in self._proc.stderr:
            self._err.append(line)
            if "listening on" in line:
                self._ready.set()
        self._ready.set()  # EOF: tcpdump exited

    def _listening(self) -> bool:
        return any("listening on" in line for line in self._err)

    def _terminate(self) -> None:
        p = self._proc
        if p is None:
            return
        for sig, wait in ((signal.SIGINT, STOP_TIMEOUT_S), (signal.SIGTERM, 2.0),
                          (signal.SIGKILL, 2.0)):
            if p.poll() is not None:
                break
            p.send_signal(sig)
            try:
                p.wait(wait)
            except subprocess.TimeoutExpired:
                continue
        if self._reader is not None:
            self._reader.join(2.0)

    def _failure(self, ready: bool) -> str:
        said = printable(" ".join(line.strip() for line in self._err if line.strip())
                         or "no message")
        low = said.lower()
        if not ready:
            return f"tcpdump did not start listening on {self.interface} within the timeout " \
                   f"({said})"
        if self.output in said and "permission denied" in low:
            return f"cannot write {self.output}: permission denied ({said})"
        if any(k in low for k in ("permission", "not permitted", "capabilit")):
            fix = ("this root lacks CAP_NET_RAW (a container without it?)"
                   if os.geteuid() == 0 else
                   f"running as uid {os.geteuid()}, not root: run as root or give tcpdump "
                   f"CAP_NET_RAW and CAP_NET_ADMIN")
            return f"capture not permitted on interface {self.interface}: {fix} ({said})"
        if "no such device" in low or "doesn't exist" in low:
            return f"no interface {self.interface} to capture on ({said})"
        if "syntax error" in low or "can't parse filter" in low:
            return f"bad capture filter {printable(repr(self.filter))} ({said})"
        return f"tcpdump failed on interface {self.interface} ({said})"


def record(command: Sequence[str], output: str | os.PathLike[str], interface: str = "lo",
           ports: Sequence[int] = (), bpf: str | None = None, snaplen: int = DEFAULT_SNAPLEN,
           linger: float = DEFAULT_LINGER_S, tcpdump: str | None = None) -> RecordResult:
    """Run `command` while tcpdump writes its TCP traffic on `interface` to `output`.

    Returns the command's exit status (128 + N when a signal N ended it). Raises RecordError
    when capture is not possible (the command is then not run) or the command cannot start.
    """
    if not command:
        raise RecordError("no command to run", ExitStatus.USAGE)
    cap = Capture(output, interface, ports, bpf, snaplen, tcpdump)
    cap.start()
    try:
        proc = subprocess.run(list(command))
        code = proc.returncode if proc.returncode >= 0 else 128 - proc.returncode
    except FileNotFoundError:
        cap.stop(0)
        raise RecordError(f"{command[0]}: command not found",
                          ExitStatus.COMMAND_NOT_FOUND) from None
    except PermissionError:
        cap.stop(0)
        raise RecordError(f"{command[0]}: permission denied (not executable)",
                          ExitStatus.COMMAND_NOT_FOUND) from None
    except BaseException:
        cap.stop(0)
        raise
    return RecordResult(code, str(output), cap.stop(linger), interface)


def _die_with_parent() -> None:
    """In the child: get SIGTERM if nagleprobe dies, so no tcpdump outlives a killed job.

    Linux only (prctl PR_SET_PDEATHSIG); elsewhere a no-op. Note the signal follows the
    *thread* that started tcpdump, so captures are started from long-lived threads.
    """
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass

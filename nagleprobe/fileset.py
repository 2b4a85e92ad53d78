"""File sets: several captures (rotated by `tcpdump -G`/`-C`, split by `editcap -c`, one per
interface) read as one capture.

`SetReader` merges the records of all files by time, streaming: it holds one chunk of each
file whose time range is under way and hands on, at each step, every record up to the
watermark (the earliest "last time read" among those files: no file can still bring an
earlier record). Files are opened when the watermark reaches their first record, so a
rotated set costs the memory of one file. Records keep their frame number in their own file;
in the merged stream the file's index sits above it (`FILE_SHIFT`), so frame numbers stay
unique and `file_frames` turns them back into (file, Wireshark frame number).

An unreadable file is skipped with a warning naming it (with `strict`: an error), the rest
is analysed; a set with no readable file is unreadable.
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
import numpy as np

from .columns import Columns
from .errors import CaptureError, TargetError, printable
from .findfiles import Finder
from .read import URL_TIMEOUT_S, CaptureInfo, CaptureReader, RecordBatch, url_scheme
from .weirds import Weird
from .humanize import counted

FILE_SHIFT = 40  # frame numbers of a set: file index << FILE_SHIFT | frame in that file
FRAME_MASK = (1 << FILE_SHIFT) - 1
# what a capture file is called, also as `tcpdump -C` numbers them (cap.pcap1, cap.pcap2)
CAPTURE_SUFFIXES = (".pcap", ".pcapng", ".cap", ".pcap.gz", ".pcapng.gz", ".cap.gz")
_CAPTURE_NAME = re.compile(r"\.(pcap|pcapng|cap)\d*(\.gz)?$", re.IGNORECASE)


def is_capture_name(name: str) -> bool:
    """Whether a file found in a directory is taken as a capture (by its name)."""
    return _CAPTURE_NAME.search(name) is not None


@dataclass(frozen=True)
class Target:
    """A capture to read, or a command-line argument that named none (with the problem)."""

    path: str
    problem: str | None = None


class Targets(list):
    """The targets of a command line (a list of `Target`), and `notes`: what was left out
    of them and why (a file reached by a second name, a directory gone while searched),
    for the command to print."""

    def __init__(self, targets: Iterable[Target] = (), notes: list[str] | None = None
                 ) -> None:
        super().__init__(targets)
        self.notes = list(notes or [])


def expand_targets(args: Iterable[str]) -> Targets:
    """Files, directories (searched recursively for capture files), glob patterns (expanded
    here too: Windows shells and quoted patterns leave them to us) and URLs (object-store
    patterns listed with fsspec), each file once (by device and inode: see
    `nagleprobe.findfiles`, which never follows a symbolic link into a loop).

    An argument that matches nothing, or a directory that cannot be listed, stays a target
    with its problem, so the caller reports it instead of silently reading less. A dangling
    symbolic link is a target: reading it says so.
    """
    out = Targets()
    finder = Finder()
    urls: set[str] = set()

    def add(paths: list[str]) -> None:
        out.extend(Target(p) for p in finder.once(paths))

    for arg in args:
        if arg == "-" or url_scheme(arg) and not os.path.exists(arg):
            found, problem = _url_glob(arg) if _is_url_pattern(arg) else ([arg], None)
            if not found:
                out.append(Target(arg, problem or "no object matches this pattern"))
            out.extend(Target(p) for p in found if p not in urls)
            urls.update(found)
        elif os.path.isdir(arg):
            problems = len(finder.problems)
            found = finder.directory(arg, is_capture_name)
            if not found and len(finder.problems) == problems:
                out.append(Target(arg, f"no capture files ({', '.join(CAPTURE_SUFFIXES)}, "
                                       "also numbered as tcpdump -C writes them) in this "
                                       "directory"))
            add(found)
        elif glob.has_magic(arg) and not os.path.lexists(arg):
            found = finder.glob(arg)
            if not found and not ("*" in arg or "?" in arg):
                add([arg])  # "[" alone is as likely a file name: the reader says "missing"
            elif not found:
                out.append(Target(arg, "no file matches this pattern"))
            add(found)
        else:
            add([arg])  # a file; or missing, a dangling link: the reader says so
    out.extend(Target(d, problem) for d, problem in finder.problems)
    out.notes += finder.notes
    return out


def _is_url_pattern(arg: str) -> bool:
    """An object-store pattern, listed here (http(s) has no listing: read as it is)."""
    return glob.has_magic(arg) and url_scheme(arg) not in ("http", "https")


def capture_paths(args: Iterable[str], notes: list[str] | None = None) -> list[str]:
    """The capture files `args` name (see `expand_targets`), in order: what `analyze` and the
    command line read; `notes`, when given, receives what finding them left out and why.
    TargetError for an argument that names none, or for standard input (-) among other
    files."""
    paths = []
    targets = expand_targets(args)
    if notes is not None:
        notes += targets.notes
    for t in targets:
        if t.problem:
            raise TargetError(t.path, t.problem)
        paths.append(t.path)
    if "-" in paths and len(paths) > 1:
        raise TargetError("-", "standard input cannot be part of a file set")
    return paths


def _url_glob(pattern: str) -> tuple[list[str], str | None]:
    """The URLs an object-store pattern (s3://bucket/2024-*/*.pcap.gz) matches, or the
    problem listing them."""
    try:
        from fsspec.core import url_to_fs

        fs, path = url_to_fs(pattern)
        return sorted(fs.unstrip_protocol(p) for p in fs.glob(path)
                      if is_capture_name(p)), None
    except ImportError as e:
        return [], f"listing needs fsspec and its backend: pip install 'nagleprobe[remote]' ({e})"
    except Exception as e:
        return [], f"cannot list: {type(e).__name__}: {e}"


def file_frames(frame: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(index of the file in the set, frame number in that file) of merged frame numbers."""
    frame = np.asarray(frame, dtype=np.int64)
    return frame >> FILE_SHIFT, frame & FRAME_MASK


def _slice(b: RecordBatch, a: int, z: int, file_index: int) -> RecordBatch:
    """Records a..z of a batch, their frame numbers tagged with their file."""
    return RecordBatch(data=b.data, offset=b.offset[a:z], caplen=b.caplen[a:z],
                       wirelen=b.wirelen[a:z], ts_ns=b.ts_ns[a:z], linktype=b.linktype[a:z],
                       frame=b.frame[a:z] + (file_index << FILE_SHIFT), start=None,
                       tunnels=b.tunnels)


class _Member:
    """One file of a set while it is read: its reader, the current batch and how far it has
    been handed on."""

    def __init__(self, index: int, path: str, first_ns: int) -> None:
        self.index, self.path, self.first_ns = index, path, first_ns
        self.reader: CaptureReader | None = None
        self.batches: Iterator[RecordBatch] | None = None
        self.batch: RecordBatch | None = None
        self.reach = np.zeros(0, dtype=np.int64)  # running maximum of the batch's times
        self.pos = 0
        self.done = False
        self.info: CaptureInfo | None = None
        self.error: str | None = None

    @property
    def last_ns(self) -> int:
        """The latest time read from this file so far (all later records are at or after it,
        for a file in time order)."""
        return int(self.reach[-1])


def set_name(paths: list[str]) -> str:
    """How a file set is named (in reports, errors and the JSON's capture path): its first
    file, and how many more ("a.pcap (+1 file)")."""
    return paths[0] if len(paths) == 1 else f"{paths[0]} (+{counted(len(paths) - 1, 'file')})"


class SetReader:
    """Several captures read as one: iterate to get lists of `RecordBatch` slices (one per
    file with records up to the watermark), all records of a list before any of the next;
    `info` (complete after iteration) sums the files up, `files` describes each."""

    def __init__(self, paths: list[str], chunk_bytes: int = 32 << 20, strict: bool = False,
                 url_timeout: float = URL_TIMEOUT_S) -> None:
        if not paths:
            raise ValueError("a file set needs at least one file")
        self.strict = strict
        self.url_timeout = url_timeout
        self.chunk_bytes = chunk_bytes
        self.path = set_name(paths)
        self.info = CaptureInfo(path=self.path)
        self.records = 0  # records handed on so far
        members, errors = [], []
        for i, p in enumerate(paths):
            try:
                first = _first_ns(p, strict, url_timeout)
            except CaptureError as e:
                if strict or len(paths) == 1:
                    raise
                errors.append((p, e))
                continue
            members.append((first if first is not None else np.iinfo(np.int64).max, i, p))
        if not members:
            raise errors[0][1]
        members.sort()  # by first record's time, then as given
        self._members = [_Member(j, p, t) for j, (t, _, p) in enumerate(members)]
        self._errors = errors
        self.paths = [m.path for m in self._members]

    # ------------------------------------------------------------------ iteration
    def __iter__(self) -> Iterator[list[RecordBatch]]:
        waiting = list(self._members)  # not yet opened, by first time
        active: list[_Member] = []
        while waiting or active:
            if not active:
                self._open(waiting.pop(0), active)
                continue
            mark = min(m.last_ns for m in active)
            if waiting and waiting[0].first_ns <= mark:  # may hold records before the mark
                self._open(waiting.pop(0), active)
                continue
            group = []
            for m in active:  # hand on each file's records up to the mark
                b = m.batch
                z = int(np.searchsorted(m.reach, mark, side="right"))
                if z > m.pos:
                    group.append(_slice(b, m.pos, z, m.index))
                    m.pos = z
            self.records += sum(len(g) for g in group)
            if group:
                yield group
            del group
            for m in [m for m in active if m.pos >= len(m.batch)]:
                self._advance(m)
                if m.done:
                    active.remove(m)
        self._sum_up()

    def _open(self, m: _Member, active: list[_Member]) -> None:
        try:
            m.reader = CaptureReader(m.path, chunk_bytes=self.chunk_bytes, strict=self.strict,
                                     url_timeout=self.url_timeout)
        except CaptureError as e:  # it could be peeked at, but not opened again
            self._failed(m, e)
            return
        m.info = m.reader.info
        m.info.tunnels = self.info.tunnels  # one numbering of tunnels for the whole set
        m.batches = iter(m.reader)
        self._advance(m)
        if not m.done:
            active.append(m)

    def _advance(self, m: _Member) -> None:
        """The next non-empty batch of a file, or done."""
        m.batch = None
        try:
            for b in m.batches:
                if len(b):
                    m.batch, m.pos = b, 0
                    m.reach = np.maximum.accumulate(b.ts_ns)
                    return
        except CaptureError as e:
            self._failed(m, e)
            return
        m.done = True

    def _failed(self, m: _Member, e: CaptureError) -> None:
        if self.strict:
            raise e
        m.done, m.batch, m.error = True, None, e.problem if e.where is None else \
            f"{e.problem} ({e.where})"
        self._errors.append((m.path, e))

    def _sum_up(self) -> None:
        """`info` of the whole set from its files'."""
        info = self.info
        formats, types = [], []
        for m in self._members:
            if m.info is None:
                continue
            fmt = m.info.format + (" (gzip)" if m.info.compressed else "")
            if fmt not in formats:
                formats.append(fmt)
            types += [t for t in m.info.link_types if t not in types]
            info.packets += m.info.packets
            info.warnings += [w.retold(f"{printable(m.path)}: {w}") for w in m.info.warnings]
            for k, v in m.info.skipped.items():
                info.skipped[k] = info.skipped.get(k, 0) + v
            if m.info.time_step_ns is not None:  # the set's: its coarsest file's
                info.time_step_ns = max(info.time_step_ns or 0, m.info.time_step_ns)
        kinds = {f.removesuffix(" (gzip)") for f in formats}
        info.format = "mixed" if len(kinds) > 1 else (kinds.pop() if kinds else "")
        info.compressed = any(m.info is not None and m.info.compressed for m in self._members)
        info.link_types = types
        for path, e in self._errors:
            info.warnings.append(Weird("file-left-out",
                                       f"{printable(str(e))}: file left out, the rest analysed"))

    @property
    def files(self) -> list[dict]:
        """Per file, in set order (by first record time): path, format, gzip, packets, and
        the error that left it out (None when read)."""
        out = []
        for m in self._members:
            i = m.info
            out.append({"path": m.path, "format": i.format if i else None,
                        "compressed": bool(i.compressed) if i else None,
                        "packets": i.packets if i else 0, "error": m.error})
        for path, e in self._errors:
            if not any(m.path == path for m in self._members):
                out.append({"path": path, "format": None, "compressed": None, "packets": 0,
                            "error": e.problem if e.where is None else
                            f"{e.problem} ({e.where})"})
        return out

    def input_progress(self) -> tuple[int, int | None]:
        """(bytes read so far, total size) over all files, for progress displays."""
        done, total = 0, 0
        for m in self._members:
            try:
                size = os.path.getsize(m.path)
            except OSError:
                return done, None
            total += size
            if m.done:
                done += size
            elif m.reader is not None:
                done += m.reader.input_progress()[0]
        return done, total


def _first_ns(path: str, strict: bool, url_timeout: float) -> int | None:
    """The time of a file's first record (None if it has none): opens and reads a little."""
    reader = CaptureReader(path, chunk_bytes=1 << 16, strict=strict, url_timeout=url_timeout)
    try:
        for b in reader:
            if len(b):
                return int(b.ts_ns.min())
        return None
    finally:
        reader.close()


def merge_columns(parts: list[Columns]) -> Columns:
    """Decoded columns of one step's slices as one table in time order (ties: by file, then
    frame)."""
    parts = [p for p in parts if len(p["frame"])] or parts[:1]
    if len(parts) == 1:
        return parts[0]
    cols = Columns.concat(parts)
    return cols.take(np.lexsort((cols["frame"], cols["ts_ns"])))

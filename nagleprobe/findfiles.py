"""Finding capture files on disk for a command line: directory walks and glob patterns that
never follow a symbolic link into a loop, and give each file once.

Python's recursive glob follows symbolic links to directories without remembering where it
has been: a link to a parent keeps it walking for minutes, a link to its own directory makes
it match each file once per level of links the kernel allows (41 times). Here

* each walk lists a directory at most once, known by its identity (device, inode), real
  directories before the links to them, so a file keeps its own name where it can;
* each file is taken once per command line, by the same identity, whatever names lead to
  it (a link, a hard link, a directory given twice); the names left out are noted;
* a symbolic link whose target is missing (or a loop of links) is taken as a file: reading
  it names the problem, so it is never lost without a word;
* a directory that disappears while walked is noted, one that cannot be listed (permission)
  is a problem of its own: the rest is walked either way.
"""

from __future__ import annotations

import errno
import fnmatch
import glob
import os
import stat
from collections.abc import Callable, Iterator

from .errors import printable

Identity = tuple[int, int]  # (st_dev, st_ino)
_SEPS = os.sep + (os.altsep or "")


class Finder:
    """The files of one command line, each once: `directory` and `glob` list candidates,
    `once` keeps those not taken yet. `notes` says what was left out and why (duplicate
    names, directories gone while walked); `problems` are (directory, problem) pairs for
    directories that could not be listed."""

    def __init__(self) -> None:
        self._taken: dict[Identity, str] = {}
        self._names: set[str] = set()
        self.notes: list[str] = []
        self.problems: list[tuple[str, str]] = []

    # ------------------------------------------------------------------ each file once
    def once(self, paths: list[str]) -> list[str]:
        """`paths` (in their order) less those naming a file already taken, under this name
        or another (noted). Real files claim their identity before symbolic links to them.
        A path that cannot be examined (missing, a dangling link) is kept: reading it says
        why it cannot be read."""
        claim = sorted(paths, key=lambda p: (os.path.islink(p), p))
        kept = {p for p in claim if self._take(p)}
        return [p for p in paths if p in kept]

    def _take(self, path: str) -> bool:
        if path in self._names:
            return False  # the same name twice: nothing to say
        self._names.add(path)
        try:
            st = os.stat(path)
        except OSError:
            return True
        first = self._taken.setdefault((st.st_dev, st.st_ino), path)
        if first == path:
            return True
        self.notes.append(f"{printable(path)}: the same file as {printable(first)} "
                          "(same device and inode): read once")
        return False

    # ------------------------------------------------------------------ listing
    def directory(self, top: str, wanted: Callable[[str], bool]) -> list[str]:
        """The files under directory `top` (hidden ones too, symbolic links to directories
        followed) whose name is `wanted`, sorted."""
        return sorted(os.path.join(d, e.name) for d, entries in self._tree(top, hidden=True)
                      for e in entries
                      if wanted(e.name) and _is_file(e, os.path.join(d, e.name)))

    def glob(self, pattern: str) -> list[str]:
        """The files `pattern` matches, sorted: the syntax of `glob.glob(pattern,
        recursive=True)` (`**` any directories, hidden names only for a pattern starting
        with a dot), each directory listed once per `**`."""
        drive, rest = os.path.splitdrive(pattern)
        if not rest or rest[-1] in _SEPS:  # a pattern for directories: no file matches it
            return []
        root = drive + rest[0] if rest[0] in _SEPS else drive
        parts = [p for p in _split(rest) if p]
        parts = [p for i, p in enumerate(parts) if not (p == "**" and parts[i - 1:i] == ["**"])]
        bases = [root]
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            if part == "**":
                walked = list(self._trees(bases, hidden=False))
                bases = ([os.path.join(d, e.name) for d, entries in walked for e in entries
                          if not _hidden(e.name) and _is_file(e, os.path.join(d, e.name))]
                         if last else [d for d, _ in walked])
            elif glob.has_magic(part):
                bases = [os.path.join(b, name) for b in bases
                         for name, is_dir in self._matches(b, part) if is_dir != last]
            else:
                bases = [p for b in bases if _kind(p := os.path.join(b, part)) == (
                    "file" if last else "dir")]
        return sorted(bases)

    def _matches(self, base: str, part: str) -> Iterator[tuple[str, bool]]:
        """(name, is a directory) of the entries of `base` matching the pattern `part`;
        directories, regular files and dangling links only."""
        entries = self._list(base or os.curdir)
        names = {e.name: e for e in entries}
        hidden_ok = _hidden(part)
        for name in fnmatch.filter(names, part):
            if hidden_ok or not _hidden(name):
                e = names[name]
                if _is_dir(e):
                    yield name, True
                elif _is_file(e, os.path.join(base, name)):
                    yield name, False

    def _trees(self, bases: list[str], hidden: bool) -> Iterator[tuple[str, list[os.DirEntry]]]:
        """`_tree` of each base, sharing the directories listed: each listed once."""
        seen: set[Identity] = set()
        for b in bases:
            yield from self._tree(b, hidden, seen)

    def _tree(self, top: str, hidden: bool, seen: set[Identity] | None = None
              ) -> Iterator[tuple[str, list[os.DirEntry]]]:
        """(directory, its entries) for `top` and every directory below it, each once by
        identity: real directories first, then those reached only through symbolic links
        (so a link to a parent or to itself is never walked again)."""
        seen = set() if seen is None else seen
        real, linked = [top], []
        while real or linked:
            d = real.pop() if real else linked.pop(0)
            try:
                st = os.stat(d or os.curdir)
            except OSError as e:
                self._unlisted(d, e)
                continue
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            entries = self._list(d or os.curdir)
            yield d, entries
            subdirs = sorted((e for e in entries if (hidden or not _hidden(e.name))
                              and _is_dir(e)), key=lambda e: e.name, reverse=True)
            real += [os.path.join(d, e.name) for e in subdirs if not e.is_symlink()]
            linked += [os.path.join(d, e.name) for e in reversed(subdirs) if e.is_symlink()]

    def _list(self, d: str) -> list[os.DirEntry]:
        try:
            with os.scandir(d) as it:
                return list(it)
        except OSError as e:
            self._unlisted(d, e)
            return []

    def _unlisted(self, d: str, e: OSError) -> None:
        if e.errno in (errno.ENOENT, errno.ENOTDIR):  # gone while walked: nothing to read
            self.notes.append(f"{printable(d)}: directory gone while it was searched")
        elif not any(p == d for p, _ in self.problems):
            self.problems.append((d, f"cannot list this directory: {e.strerror or e} (the "
                                     "capture files in it are not read)"))


def _split(path: str) -> list[str]:
    for sep in _SEPS[1:]:
        path = path.replace(sep, os.sep)
    return path.split(os.sep)


def _hidden(name: str) -> bool:
    return name.startswith(".")


def _is_dir(e: os.DirEntry) -> bool:
    try:
        return e.is_dir()
    except OSError:
        return False


def _is_file(e: os.DirEntry, path: str) -> bool:
    """A regular file (through links), or a dangling link (taken, so its reading names
    it); not a directory, FIFO, socket or device."""
    try:
        if e.is_file():
            return True
        if not e.is_symlink() or e.is_dir():
            return False
    except OSError:
        return False
    return _kind(path) == "file"


def _kind(path: str) -> str | None:
    """"dir", "file" (a regular file, or a symbolic link that leads nowhere: missing
    target, loop), or None (missing, or something else)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return "file" if os.path.islink(path) else None
    return "dir" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode) else None

"""findfiles: the capture files a command line names, found by directory walks and glob
patterns that never follow a symbolic link into a loop and give each file once (by device
and inode); nothing left out without a word."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from nagleprobe import analyze
from nagleprobe.check import Budget, run_check
from nagleprobe.cli import main
from nagleprobe.errors import ExitStatus
from nagleprobe.fileset import expand_targets, is_capture_name
from nagleprobe.findfiles import Finder

ROOT = Path(__file__).resolve().parent.parent
SPLIT = ROOT / "samples" / "echo_split_lo.pcap"  # 107 packets, 19 stalls
PROXY = ROOT / "samples" / "proxy_any.pcap"


@pytest.fixture
def looped(tmp_path: Path) -> Path:
    """g/sub/x.pcap, with g/sub/up -> .. and g/self -> . (two loops of links)."""
    g = tmp_path / "g"
    (g / "sub").mkdir(parents=True)
    shutil.copy(SPLIT, g / "sub" / "x.pcap")
    (g / "sub" / "up").symlink_to("..")
    (g / "self").symlink_to(".")
    return g


def nagleprobe(*args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "nagleprobe", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


# ------------------------------------------------------------------ loops of links
def test_a_glob_through_a_loop_of_links_ends_and_reads_the_file_once(looped):
    """Python's recursive glob walks g/sub/up/sub/up/... for minutes, and matches x.pcap
    once per level of g/self/self/...: 41 files merged for one."""
    r = nagleprobe("analyze", "g/**/*.pcap", cwd=looped.parent, timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("g/sub/x.pcap: pcap, EN10MB, 107 packets, 107 TCP;")
    assert "files" not in r.stdout.splitlines()[0] and r.stderr == ""


@pytest.mark.parametrize("arg", ["g", "g/**/*.pcap", "g/**", "g/*/*.pcap", "g/self/**/*"])
def test_walks_and_globs_through_loops_find_each_file_once(looped, arg, monkeypatch):
    monkeypatch.chdir(looped.parent)
    targets = expand_targets([arg])
    assert [t.path for t in targets] == ["g/sub/x.pcap" if not arg.startswith("g/self")
                                         else "g/self/sub/x.pcap"]
    assert targets.notes == []


def test_a_file_reached_by_two_names_is_read_once_with_a_note(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    caps = tmp_path / "caps"
    caps.mkdir()
    shutil.copy(SPLIT, caps / "cap-1.pcap")
    (caps / "latest.pcap").symlink_to("cap-1.pcap")
    (caps / "a-link.pcap").symlink_to("cap-1.pcap")  # sorted first: the real name still wins
    os.link(caps / "cap-1.pcap", tmp_path / "hard.pcap")
    targets = expand_targets(["caps", "hard.pcap", "caps/cap-1.pcap"])
    assert [t.path for t in targets] == ["caps/cap-1.pcap"]
    assert targets.notes == [
        f"caps/{n}: the same file as caps/cap-1.pcap (same device and inode): read once"
        for n in ("a-link.pcap", "latest.pcap")] + [
        "hard.pcap: the same file as caps/cap-1.pcap (same device and inode): read once"]
    r = nagleprobe("analyze", "caps", "hard.pcap", cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.startswith("caps/cap-1.pcap: pcap, EN10MB, 107 ")
    assert r.stderr.splitlines() == [f"nagleprobe: note: {n}" for n in targets.notes]


# ------------------------------------------------------------------ what cannot be read
def test_a_dangling_link_in_a_directory_is_named_by_check_and_the_rest_checked(tmp_path):
    caps = tmp_path / "caps"
    caps.mkdir()
    shutil.copy(SPLIT, caps / "a.pcap")
    (caps / "b.pcap").symlink_to("gone.pcap")
    run = run_check(expand_targets([str(caps)]), Budget(max_stalls=100), jobs=1)
    assert [(v.path, v.status) for v in run.verdicts] == [
        (str(caps / "a.pcap"), ExitStatus.OK), (str(caps / "b.pcap"), ExitStatus.BAD_CAPTURE)]
    assert run.verdicts[1].error == (f"{caps / 'b.pcap'}: dangling symbolic link: its target "
                                     "gone.pcap does not exist")
    r = nagleprobe("check", "--max-stalls", "100", "--no-config", "caps", cwd=tmp_path)
    assert r.returncode == ExitStatus.BAD_CAPTURE, r.stdout + r.stderr
    assert "caps/b.pcap: dangling symbolic link" in r.stdout and "Traceback" not in r.stderr


def test_a_dangling_link_in_a_set_is_left_out_with_a_warning(tmp_path):
    shutil.copy(SPLIT, tmp_path / "a.pcap")
    (tmp_path / "b.pcap").symlink_to(tmp_path / "nowhere" / "b.pcap")
    report = analyze([t.path for t in expand_targets([str(tmp_path)])])
    assert report.capture["packets"] == 107
    assert report.capture["warnings"] == [
        f"{tmp_path / 'b.pcap'}: dangling symbolic link: its target "
        f"{tmp_path / 'nowhere' / 'b.pcap'} does not exist: file left out, the rest analysed"]


def test_a_file_gone_between_listing_and_reading_is_that_file_s_error_only(tmp_path):
    for n, src in (("a.pcap", SPLIT), ("b.pcap", PROXY), ("c.pcap", SPLIT)):
        shutil.copy(src, tmp_path / n)
    targets = expand_targets([str(tmp_path)])
    (tmp_path / "b.pcap").unlink()
    run = run_check(targets, Budget(max_stalls=1000), jobs=1)
    assert [v.status for v in run.verdicts] == [ExitStatus.OK, ExitStatus.BAD_CAPTURE,
                                                ExitStatus.OK]
    assert run.verdicts[1].error == f"{tmp_path / 'b.pcap'}: no such file"
    assert run.status == ExitStatus.BAD_CAPTURE


def test_a_directory_gone_while_walked_is_noted_and_the_rest_found(tmp_path, monkeypatch):
    """`check` of a directory being emptied: a subdirectory listed by its parent is gone
    when its own turn comes (removed here at that moment)."""
    for d in ("a", "b", "c"):
        (tmp_path / d).mkdir()
        shutil.copy(SPLIT, tmp_path / d / "x.pcap")
    real_scandir = os.scandir

    def emptied(path):  # noqa: ANN001, ANN202
        if isinstance(path, str) and Path(path) == tmp_path / "b":
            monkeypatch.setattr(os, "scandir", real_scandir)  # (rmtree lists too)
            shutil.rmtree(path)
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", emptied)
    targets = expand_targets([str(tmp_path)])
    assert [t.path for t in targets] == [str(tmp_path / d / "x.pcap") for d in ("a", "c")]
    assert targets.notes == [f"{tmp_path / 'b'}: directory gone while it was searched"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root lists any directory")
def test_a_directory_that_cannot_be_listed_is_a_problem_of_its_own(tmp_path):
    (tmp_path / "open").mkdir()
    shutil.copy(SPLIT, tmp_path / "open" / "x.pcap")
    shut = tmp_path / "shut"
    shut.mkdir()
    shut.chmod(0)
    try:
        targets = expand_targets([str(tmp_path)])
    finally:
        shut.chmod(0o755)
    assert [(t.path, t.problem) for t in targets] == [
        (str(tmp_path / "open" / "x.pcap"), None),
        (str(shut), "cannot list this directory: Permission denied (the capture files in it "
                    "are not read)")]


# ------------------------------------------------------------------ ordinary trees
PATTERNS = ["t/**/*.pcap", "t/**", "t/*/*.pcap", "t/**/.*.pcap", "t/.*/*.pcap", "**/*.pcap",
            "t/a/**/b/**/*.pcap*", "t/?/*.pcap", "t/[ad]/*", "t/d/[[]x].pcap", "t/*.pcap",
            "t/**/c/*.pcap", "t/**/**/*.pcap", "t/nope/**/*.pcap"]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_without_links_a_pattern_matches_the_files_python_s_glob_does(tmp_path, monkeypatch,
                                                                       pattern):
    """Hidden names only for a pattern starting with a dot, `**` for any directories,
    character classes; FIFOs and directories are no files (Python's glob gives a file
    once per `**` it can match through: once here)."""
    monkeypatch.chdir(tmp_path)
    for d in ("t/a/b/c", "t/.hid/x", "t/d"):
        Path(d).mkdir(parents=True)
    for f in ("t/1.pcap", "t/a/2.pcap", "t/a/b/3.pcapng", "t/a/b/c/4.pcap", "t/.hid/5.pcap",
              "t/.hid/x/6.pcap", "t/.7.pcap", "t/d/8.cap", "t/a/.9.pcap", "t/d/n.txt",
              "t/d/[x].pcap"):
        Path(f).write_bytes(b"")
    os.mkfifo("t/d/fifo.pcap")
    want = sorted({p for p in glob.glob(pattern, recursive=True) if os.path.isfile(p)})
    assert Finder().glob(pattern) == want
    assert Finder().glob(str(tmp_path / pattern)) == [str(tmp_path / p) for p in want]


def test_a_directory_walk_takes_every_capture_name_hidden_ones_too(tmp_path):
    for f in ("1.pcap", ".h/2.pcap", "d/3.pcap12", "d/notes.txt", "d/e/4.pcapng.gz"):
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f).write_bytes(b"")
    assert Finder().directory(str(tmp_path), is_capture_name) == [
        str(tmp_path / f) for f in (".h/2.pcap", "1.pcap", "d/3.pcap12", "d/e/4.pcapng.gz")]


def test_a_link_to_a_directory_elsewhere_is_walked(tmp_path):
    (tmp_path / "store").mkdir()
    shutil.copy(SPLIT, tmp_path / "store" / "x.pcap")
    (tmp_path / "caps").mkdir()
    (tmp_path / "caps" / "today").symlink_to(tmp_path / "store")
    assert [t.path for t in expand_targets([str(tmp_path / "caps")])] == [
        str(tmp_path / "caps" / "today" / "x.pcap")]
    assert [t.path for t in expand_targets([str(tmp_path / "caps" / "**" / "*.pcap")])] == [
        str(tmp_path / "caps" / "today" / "x.pcap")]

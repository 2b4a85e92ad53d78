"""workers: batches judged in threads, their results taken in the order they were handed in;
freed memory given back to the system."""

from __future__ import annotations

import platform
import threading
import time

import pytest

from nagleprobe import workers
from nagleprobe.workers import Workers


def test_freed_memory_is_handed_back_to_the_system_on_glibc():
    if platform.libc_ver()[0] != "glibc":
        pytest.skip("malloc_trim is glibc's")
    assert workers._malloc_trim is not None
    workers.release_free_memory()  # and calling it is harmless


def test_without_threads_a_job_runs_at_once_in_the_calling_thread():
    w: Workers[str] = Workers(0)
    assert w.run(lambda: threading.current_thread().name) == [threading.current_thread().name]
    assert not w.waiting and w.results(all=True) == []


def test_results_come_in_the_order_the_jobs_were_handed_in_whatever_finishes_first():
    w: Workers[int] = Workers(2)
    got = []
    for i, delay in enumerate([0.2, 0.0, 0.1, 0.0]):
        got += w.run(lambda i=i, delay=delay: time.sleep(delay) or i)
    got += w.results(all=True)
    w.close()
    assert got == [0, 1, 2, 3]


def test_at_most_twice_the_threads_jobs_are_in_flight():
    w: Workers[int] = Workers(1)
    release = threading.Event()
    w.run(lambda: release.wait() and 0)
    w.run(lambda: 1)
    assert not w.waiting
    release.set()
    got = w.run(lambda: 2)  # the third waits for the oldest (and takes those done after it)
    assert got[:1] == [0]
    assert got + w.results(all=True) == [0, 1, 2]
    w.close()


def test_an_error_in_a_job_is_raised_to_the_caller_when_its_result_is_taken():
    w: Workers[int] = Workers(1)

    def broken() -> int:
        raise ValueError("broke")

    with pytest.raises(ValueError, match="broke"):
        w.run(broken)  # raised here if done by then,
        w.results(all=True)  # else here
    w.close()

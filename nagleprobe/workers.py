"""Threads that judge batches while the calling thread reads on, and giving freed memory back.

The batches of a stream are independent, so on a machine with several cores they are judged
in worker threads (numpy lets go of the GIL for its array work, so the threads really run at
once); their results are taken in the order the batches were handed on.
"""

from __future__ import annotations

import ctypes
import os
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Generic, TypeVar

T = TypeVar("T")

def _libc_trim():
    try:
        return ctypes.CDLL(None).malloc_trim  # glibc
    except (AttributeError, OSError, TypeError):  # other C libraries, Windows
        return None


_malloc_trim = _libc_trim()
TRIM_EVERY = 16
TRIM_ROWS = 1 << 20  # joined stall columns this long give their copies back at once
# the flows' and endpoints' columns from this long on give their parts back at once (a trim
# costs page faults; shorter columns are not worth it)
TRIM_JOIN_ROWS = 1 << 18


def release_free_memory() -> None:
    """Give the heap's free pages back to the system. glibc keeps the memory of freed numpy
    arrays and tables in its heaps (one per thread), so without this the process's RSS
    keeps the high-water mark of every batch. It costs the page faults of memory used
    again, so the stream does it only every TRIM_EVERY hand-ons (benchmarks/RESULTS.md)."""
    if _malloc_trim is not None:
        _malloc_trim(0)


def default_workers() -> int:
    """Threads to analyse batches in: one per core (up to 4), none on a single core."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return min(cores or 1, 4) if (cores or 1) > 1 else 0



class Workers(Generic[T]):
    """Jobs run in `count` threads (none: each run at once in the calling thread), their
    results taken oldest first; at most 2 * count in flight (bounds their memory)."""

    def __init__(self, count: int) -> None:
        self._pool = ThreadPoolExecutor(count, "nagleprobe-analyse") if count > 0 else None
        self._running: deque[Future] = deque()  # oldest first
        self._max_running = 2 * count

    @property
    def waiting(self) -> bool:
        """Threads are waiting for work (every job handed to them is done)."""
        return self._pool is not None and all(job.done() for job in self._running)

    def run(self, job: Callable[[], T]) -> list[T]:
        """Run `job` (in a thread when there are threads); the results of the jobs done by
        now, oldest first (waiting for the oldest when too many are in flight)."""
        if self._pool is None:
            return [job()]
        self._running.append(self._pool.submit(job))
        return self.results(wait=len(self._running) > self._max_running)

    def results(self, wait: bool = False, all: bool = False) -> list[T]:
        """The results of the jobs done, in the order they were handed in (waiting for the
        oldest if `wait`, for every one if `all`)."""
        out = []
        while self._running and (wait or all or self._running[0].done()):
            out.append(self._running.popleft().result())
            wait = False
        return out

    def close(self) -> None:
        """Stop the threads (jobs not yet begun are dropped)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)

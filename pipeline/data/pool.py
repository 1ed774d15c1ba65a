"""The data stages' process pool: tasks' results in task order, a few tasks a worker in flight.

Taking results in order is what makes a stage's output the same for any number of workers;
bounding the tasks in flight is what keeps its memory flat however many tasks there are.
A worker's exception is raised in the parent as the worker raised it; a worker that dies
fails the stage with a message that says so. On any exception (Ctrl-C too) the workers are
stopped at once, so the stage's atomic output is dropped without waiting for them.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

from pipeline.errors import UserError

T = TypeVar("T")
R = TypeVar("R")

IN_FLIGHT = 2  # tasks a worker: one running, one queued, so that no worker waits on the parent


def cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS has one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def resolve_workers(workers: int) -> int:
    """data.workers, 0 meaning every core this process may run on."""
    return workers or cores()


@contextlib.contextmanager
def ordered_results(
    fn: Callable[[T], R],
    tasks: Iterable[T],
    workers: int,
    init: Callable[..., None],
    initargs: tuple[Any, ...],
    stage: str,
) -> Iterator[Iterator[R]]:
    """fn(task) for each task, in order: in this process for workers <= 1, else from a pool.

    `init(*initargs)` sets up each worker (or this process) before its first task.
    """
    if workers <= 1:
        init(*initargs)
        yield map(fn, tasks)
        return
    pool = ProcessPoolExecutor(workers, initializer=_start_worker, initargs=(init, initargs))
    pending: deque[Future[R]] = deque()

    def results() -> Iterator[R]:
        for task in tasks:
            pending.append(pool.submit(fn, task))
            if len(pending) >= IN_FLIGHT * workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()

    try:
        yield results()
    except BaseException as e:  # a worker's error or Ctrl-C: stop the others now, not after their tasks
        for process in list((getattr(pool, "_processes", None) or {}).values()):  # no public way (< 3.14)
            process.terminate()
        if isinstance(e, BrokenProcessPool):
            raise UserError(
                f"a {stage} worker died ({e}); out of memory? set data.workers lower, or 1"
            ) from e
        raise
    finally:
        for future in pending:
            future.cancel()
        pool.shutdown(wait=True, cancel_futures=True)


def _start_worker(init: Callable[..., None], initargs: tuple[Any, ...]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle: it stops the pool
    init(*initargs)

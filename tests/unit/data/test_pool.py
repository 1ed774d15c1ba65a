from __future__ import annotations

import multiprocessing
import os
import time

import pytest

from pipeline.data import pool
from pipeline.errors import UserError

_OFFSET = 0  # set by _init, in each worker or in this process


def _init(offset: int) -> None:
    global _OFFSET
    _OFFSET = offset


def _slow_for_small(i: int) -> tuple[int, int]:
    time.sleep(0.002 * (i % 5 == 0))  # some tasks finish after later ones
    return i + _OFFSET, os.getpid()


def _fail_at_seven(i: int) -> int:
    if i == 7:
        raise ValueError(f"task {i} is bad")
    return i


def _die_at_three(i: int) -> int:
    if i == 3:
        os._exit(1)
    return i


@pytest.mark.parametrize("workers", [1, 3])
def test_results_come_in_task_order_from_initialised_workers(workers: int) -> None:
    with pool.ordered_results(_slow_for_small, range(40), workers, _init, (100,), "test") as results:
        got = list(results)
    assert [value for value, _ in got] == list(range(100, 140))
    pids = {pid for _, pid in got}
    assert pids == {os.getpid()} if workers == 1 else os.getpid() not in pids
    assert not multiprocessing.active_children()


def test_tasks_are_drawn_as_results_are_taken_not_all_at_once() -> None:
    drawn = []

    def tasks():
        for i in range(100):
            drawn.append(i)
            yield i

    with pool.ordered_results(_fail_at_seven, tasks(), 2, _init, (0,), "test") as results:
        assert next(results) == 0
        assert len(drawn) <= pool.IN_FLIGHT * 2 + 1  # memory is a few tasks, however many there are
        with pytest.raises(ValueError, match="task 7 is bad"):  # a worker's error, as it raised it
            list(results)
    assert not multiprocessing.active_children()


def test_a_worker_that_dies_fails_with_a_message_not_a_hang() -> None:
    with pytest.raises(UserError, match=r"a test worker died .*set data.workers lower"):
        with pool.ordered_results(_die_at_three, range(20), 2, _init, (0,), "test") as results:
            list(results)
    assert not multiprocessing.active_children()


def test_an_error_in_the_parent_stops_the_workers_at_once() -> None:
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        with pool.ordered_results(time.sleep, [0, 30, 30, 30], 2, _init, (0,), "test") as results:
            next(results)
            raise KeyboardInterrupt
    assert time.monotonic() - started < 10, "waited for the workers' tasks"
    assert not multiprocessing.active_children()


def test_zero_workers_means_every_core_this_process_may_use(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 3, 5}, raising=False)
    assert pool.resolve_workers(0) == pool.cores() == 3  # not os.cpu_count(): a CPU-limited job
    assert pool.resolve_workers(2) == 2

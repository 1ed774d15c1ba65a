"""The dynamic batcher: concurrent requests decoded in shared calls, each answered with its own."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from pipeline.serving.batcher import Batcher


def upper(lines: list[str], key: object) -> list[str]:
    return [f"{key}:{line.upper()}" for line in lines]


def test_concurrent_requests_share_decode_calls_and_get_their_own_answers() -> None:
    calls: list[list[str]] = []
    started, release = threading.Event(), threading.Event()

    def decode(lines: list[str], key: object) -> list[str]:
        calls.append(lines)
        started.set()
        release.wait(5)  # the first call holds the worker while the others queue up
        return upper(lines, key)

    batcher = Batcher(decode, max_wait_s=0.05, max_lines=1000)
    requests = [[f"r{i} a", f"r{i} b"] for i in range(8)]
    with ThreadPoolExecutor(8) as pool:
        first = pool.submit(batcher, requests[0], 1)
        assert started.wait(5)
        rest = [pool.submit(batcher, r, 1) for r in requests[1:]]
        release.set()
        answers = [first.result(5)] + [f.result(5) for f in rest]
    assert answers == [upper(r, 1) for r in requests]
    assert len(calls) < len(requests)  # the seven that waited were batched
    assert sum(map(len, calls)) == 2 * len(requests)


def test_requests_batch_only_with_equal_settings() -> None:
    keys: list[tuple[object, int]] = []

    def decode(lines: list[str], key: object) -> list[str]:
        keys.append((key, len(lines)))
        return upper(lines, key)

    batcher = Batcher(decode, max_wait_s=0.2, max_lines=1000)
    with ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(batcher, [f"x{i}"], i % 2) for i in range(4)]
        assert [f.result(5) for f in futures] == [[f"{i % 2}:X{i}"] for i in range(4)]
    assert {k for k, _ in keys} == {0, 1}


def test_a_failing_request_fails_alone_and_the_worker_lives_on() -> None:
    def decode(lines: list[str], key: object) -> list[str]:
        if "bad" in lines:
            raise ValueError("bad line")
        return upper(lines, key)

    batcher = Batcher(decode, max_wait_s=0.1, max_lines=1000)
    with ThreadPoolExecutor(3) as pool:
        good = [pool.submit(batcher, ["a"], 0), pool.submit(batcher, ["b"], 0)]
        bad = pool.submit(batcher, ["bad"], 0)
        assert [f.result(5) for f in good] == [["0:A"], ["0:B"]]
        with pytest.raises(ValueError, match="bad line"):
            bad.result(5)
    assert batcher(["c"], 0) == ["0:C"]


def test_a_call_takes_at_most_max_lines_past_the_first_request() -> None:
    sizes: list[int] = []
    started, release = threading.Event(), threading.Event()

    def decode(lines: list[str], key: object) -> list[str]:
        sizes.append(len(lines))
        started.set()
        release.wait(5)
        return upper(lines, key)

    batcher = Batcher(decode, max_wait_s=0.05, max_lines=4)
    with ThreadPoolExecutor(9) as pool:
        first = pool.submit(batcher, ["w"], 0)
        assert started.wait(5)
        rest = [pool.submit(batcher, ["a", "b"], 0) for _ in range(8)]
        release.set()
        assert first.result(5) == ["0:W"] and all(f.result(5) == ["0:A", "0:B"] for f in rest)
    assert max(sizes[1:]) <= 4 and sum(sizes) == 17


def test_an_empty_request_needs_no_call() -> None:
    batcher = Batcher(upper, max_wait_s=0.0, max_lines=1)
    assert batcher([], 0) == [] and batcher.calls == 0


def test_on_idle_runs_once_no_request_has_come_for_idle_s() -> None:
    idle: list[int] = []
    done = threading.Event()

    def on_idle() -> None:
        idle.append(batcher.calls)
        done.set()

    batcher: Batcher[str] = Batcher(upper, max_wait_s=0.0, max_lines=1, on_idle=on_idle, idle_s=0.3)
    for line in "abcd":  # one after another, each within idle_s of the answer before: a steady load
        assert batcher([line], 0) == [f"0:{line.upper()}"]
    assert idle == []
    assert done.wait(5)
    assert idle == [4]  # once, after the last
    done.clear()
    assert not done.wait(0.6)  # and not again while nothing happens


def test_a_failing_on_idle_does_not_stop_the_worker() -> None:
    failed = threading.Event()

    def broken() -> None:
        failed.set()
        raise OSError("no")

    batcher = Batcher(upper, max_wait_s=0.0, max_lines=10, on_idle=broken, idle_s=0.0)
    assert batcher(["a"], 0) == ["0:A"]
    assert failed.wait(5)
    assert batcher(["b"], 0) == ["0:B"]

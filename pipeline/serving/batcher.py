"""Requests that arrive together, decoded together: the served model's dynamic batcher.

MLflow's scoring server runs each request's `predict` in a thread of its own, so concurrent
clients reach the model at once; decoded apart, they share the cores badly and batch nothing.
`Batcher` queues them instead: one worker thread takes what has arrived within `max_wait_s` of
the first waiting request (up to `max_lines` sentences), groups it by search settings and
decodes each group in one call. A sentence's translation does not depend on its batch (see
`Translator.translate_corpus`), so each request gets what it would get alone. A group whose
call fails is decoded again one request at a time, so one request's failure is its own.
`on_idle` runs in the worker once no request has come for `idle_s` after its last answer.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

R = TypeVar("R")


@dataclass
class _Request(Generic[R]):
    lines: list[str]
    key: Hashable  # the search settings: requests batch together only with equal keys
    done: threading.Event = field(default_factory=threading.Event)
    result: list[R] | None = None
    error: Exception | None = None


class Batcher(Generic[R]):
    """`batcher(lines, key)` -> `decode(lines, key)`, with other callers' lines of the same key
    decoded in the same call; `decode` returns one result per line."""

    def __init__(
        self,
        decode: Callable[[list[str], Hashable], list[R]],
        max_wait_s: float,
        max_lines: int,
        on_idle: Callable[[], object] | None = None,
        idle_s: float = 1.0,
    ) -> None:
        self._decode = decode
        self._on_idle = on_idle
        self.idle_s = idle_s
        self._busy = False  # answered since on_idle last ran
        self.max_wait_s = max_wait_s
        self.max_lines = max_lines
        self._queue: queue.SimpleQueue[_Request[R]] = queue.SimpleQueue()
        self._worker: threading.Thread | None = None
        self._start = threading.Lock()
        self.calls = 0  # decode calls made: fewer than requests when requests were batched

    def __call__(self, lines: list[str], key: Hashable) -> list[R]:
        if not lines:
            return []
        self._ensure_worker()
        request: _Request[R] = _Request(list(lines), key)
        self._queue.put(request)
        request.done.wait()
        if request.error is not None:
            raise request.error
        assert request.result is not None
        return request.result

    def _ensure_worker(self) -> None:
        # Started on first use, not at load: a loaded model that never predicts holds no thread.
        with self._start:
            if self._worker is None:
                self._worker = threading.Thread(target=self._run, name="batcher", daemon=True)
                self._worker.start()

    def _run(self) -> None:
        while True:
            groups: dict[Hashable, list[_Request[R]]] = {}
            for request in self._gather():
                groups.setdefault(request.key, []).append(request)
            for key, group in groups.items():
                self._serve(key, group)
            self._busy = True

    def _next(self) -> _Request[R]:
        """The next request to come; if none comes within idle_s of the last answer, on_idle runs
        first (once: under a steady load it never does)."""
        if self._on_idle is not None and self._busy:
            try:
                return self._queue.get(timeout=self.idle_s)
            except queue.Empty:
                self._busy = False
                try:
                    self._on_idle()
                except Exception:  # noqa: BLE001 - housekeeping: the worker must live on
                    pass
        return self._queue.get()

    def _gather(self) -> list[_Request[R]]:
        """The first waiting request and those that arrive within max_wait_s of it, up to max_lines."""
        batch = [self._next()]
        n_lines = len(batch[0].lines)
        deadline = time.monotonic() + self.max_wait_s
        while n_lines < self.max_lines:
            try:
                request = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            batch.append(request)
            n_lines += len(request.lines)
        return batch

    def _serve(self, key: Hashable, group: list[_Request[R]]) -> None:
        lines = [line for request in group for line in request.lines]
        try:
            self.calls += 1
            results = self._decode(lines, key)
        except Exception as e:  # noqa: BLE001 - re-raised in the caller; the worker must live on
            if len(group) > 1:  # whose fault: each request alone
                for request in group:
                    self._serve(key, [request])
                return
            group[0].error = e
            group[0].done.set()
            return
        start = 0
        for request in group:
            request.result = results[start : start + len(request.lines)]
            start += len(request.lines)
            request.done.set()

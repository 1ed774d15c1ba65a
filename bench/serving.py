"""Serving under load, shared by bench/serve_load.py and bench/gpu_check.py: a local MLflow model
served by `mlflow models serve` on loopback, concurrent clients checked against offline decoding, a
client that hangs up mid-request and a bad-load client. What is measured, and how:
bench/serve_load.py's docstring.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from bench.common import row
from pipeline.decoding.translator import one_line
from pipeline.errors import UserError

TASK = "serve"
# The bad requests of the bad-load client: (what, body, a word its 4xx message must hold).
LIMIT_LINES, LIMIT_CHARS = 10_000, 100_000


def bad_requests() -> list[tuple[str, bytes, str]]:
    return [
        ("malformed JSON", b'{"inputs": ["unterminated', "json"),
        ("empty body", b"", "json"),
        # MLflow's schema check answers this one itself: "... the provided value only has 0 inputs"
        ("no sentences", json.dumps({"inputs": []}).encode(), "0 inputs"),
        # (`{"inputs": [1, true]}` is not among them: MLflow's schema check turns such scalars into
        # the strings "1" and "True" before the model sees the request, and they are translated.)
        (
            "wrong-typed column",
            json.dumps({"dataframe_split": {"columns": ["text"], "data": [[1], [2]]}}).encode(),
            "expected strings",
        ),
        (
            "wrong-typed param",
            json.dumps({"inputs": ["ein hund"], "params": {"beam": "five"}}).encode(),
            "beam",
        ),
        (
            "10,000 sentences",
            json.dumps({"inputs": ["ein hund"] * LIMIT_LINES}).encode(),
            "max_request_lines",
        ),
        ("100,000 characters", json.dumps({"inputs": ["x" * LIMIT_CHARS]}).encode(), "max_line_chars"),
    ]


# --- the server ----------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def save_pyfunc(model_dir: Path, out: Path, backend: str, example: Sequence[str]) -> Path:
    """The model as the score stage logs it (model_spec), saved as a local MLflow model directory."""
    import mlflow

    from pipeline.decoding import pyfunc

    spec = pyfunc.model_spec(model_dir, list(example), backend=backend)
    mlflow.pyfunc.save_model(path=str(out), **spec)
    return out


@contextlib.contextmanager
def served(model: Path, port: int, limit_s: float = 180.0) -> Iterator[subprocess.Popen]:
    """`mlflow models serve` of a local MLflow model on 127.0.0.1:port, until /ping answers; stopped after."""
    bin_dir = Path(sys.executable).parent  # serve execs `uvicorn` from PATH, as in an activated venv
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    args = [str(bin_dir / "mlflow"), "models", "serve", "-m", str(model), "--env-manager", "local"]
    args += ["--host", "127.0.0.1", "--port", str(port)]
    log = tempfile.TemporaryFile()
    server = subprocess.Popen(args, env=env, stdout=log, stderr=log, start_new_session=True)
    try:
        deadline = time.monotonic() + limit_s
        while True:
            if server.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                tail = log.read().decode(errors="replace")[-2000:]
                raise UserError(f"`mlflow models serve` did not come up on port {port}:\n{tail}")
            try:
                status, _ = request(port, b"", path="/ping", method="GET", timeout=2)
                if status == 200:
                    break
            except OSError:
                pass
            time.sleep(0.5)
        yield server
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=5)
        log.close()


def rss_mb(pid: int) -> float:
    """Resident memory of the process and all its children, MiB."""
    import psutil

    root = psutil.Process(pid)
    total = 0
    for proc in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess):
            total += proc.memory_info().rss
    return total / 2**20


def rss_at_rest(pid: int) -> float:
    """rss_mb once the served model has been idle past its release_memory_after_ms, when it hands
    freed heap back: what it holds between loads, so that the growth is what a load leaves behind."""
    from pipeline.decoding import pyfunc

    time.sleep(pyfunc.SERVING["release_memory_after_ms"] / 1000 + 1.0)
    return rss_mb(pid)


def request(
    port: int, body: bytes, *, path: str = "/invocations", method: str = "POST", timeout: float = 120
) -> tuple[int, Any]:
    """One HTTP request on its own connection; -> (status, the JSON answer or the raw text)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=body or None, headers={"Content-Type": "application/json"})
        answer = conn.getresponse()
        raw = answer.read()
    finally:
        conn.close()
    try:
        return answer.status, json.loads(raw)
    except ValueError:
        return answer.status, raw.decode(errors="replace")


def disconnect_mid_request(port: int, lines: Sequence[str]) -> None:
    """Send a whole request, then close the socket without reading the answer."""
    body = json.dumps({"inputs": list(lines)}).encode()
    head = (
        f"POST /invocations HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(head + body)


# --- the load ------------------------------------------------------------------------


@dataclass
class Load:
    latencies: list[float] = field(default_factory=list)
    sent: int = 0  # sentences sent
    answered: int = 0  # sentences in complete answers
    differ: int = 0  # of those, translations other than the offline one
    errors: list[str] = field(default_factory=list)
    bad: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)


def client(port: int, chunks: list[list[str]], expected: dict[str, str], deadline: float, load: Load) -> None:
    for lines in chunks:
        if time.monotonic() > deadline:
            return
        with load.lock:
            load.sent += len(lines)
        began = time.perf_counter()
        try:
            status, answer = request(port, json.dumps({"inputs": lines}).encode())
        except OSError as e:
            with load.lock:
                load.errors.append(f"{type(e).__name__}: {e}")
            continue
        took = time.perf_counter() - began
        problem = None
        predictions = answer.get("predictions") if isinstance(answer, dict) else None
        if status != 200:
            problem = f"HTTP {status}: {str(answer)[:200]}"
        elif not isinstance(predictions, list) or len(predictions) != len(lines):
            problem = f"not one translation per line: {str(answer)[:200]}"
        elif not all(isinstance(t, str) for t in predictions):
            problem = f"not a translation per line: {str(answer)[:200]}"
        with load.lock:
            load.latencies.append(took)
            if problem:
                load.errors.append(problem)
                continue
            load.answered += len(lines)
            assert predictions is not None
            load.differ += sum(t != expected[x] for t, x in zip(predictions, lines, strict=True))


def bad_client(port: int, deadline: float, load: Load) -> None:
    """Each kind of bad request once, one after another, while the good clients run (a mix, not a
    flood: each 10,000-sentence body costs the server its parsing before the refusal)."""
    for what, body, word in bad_requests():
        if time.monotonic() > deadline:  # each kind is sent even if the good clients are done
            return
        try:
            status, answer = request(port, body, timeout=60)
            message = answer.get("message", "") if isinstance(answer, dict) else str(answer)
        except OSError as e:
            status, message = 0, f"{type(e).__name__}: {e}"
        refused = 400 <= status < 500 and word in message.lower()
        with load.lock:
            load.bad.append({"request": what, "status": status, "refused": refused, "message": message[:300]})


def chunks_of(sentences: Sequence[str], clients: int, requests: int, lines: int) -> list[list[list[str]]]:
    """Per client its requests of `lines` sentences; distinct sentences per client where there are enough."""
    need = clients * requests * lines
    pool = [sentences[i % len(sentences)] for i in range(need)]
    per = requests * lines
    return [
        [pool[c * per + r * lines : c * per + (r + 1) * lines] for r in range(requests)]
        for c in range(clients)
    ]


# --- the benchmark -------------------------------------------------------------------


def rounds_of(chunks: list[list[list[str]]]) -> list[list[str]]:
    """The load's rounds: every client's r-th request together, what the batcher gets when they arrive
    at once (the clients wait for each answer before the next request)."""
    return [[s for client in chunks for s in client[r]] for r in range(max(map(len, chunks), default=0))]


@dataclass(frozen=True)
class Offline:
    expected: dict[str, str]  # sentence -> its translation, as the server answers (one line)
    rate: float  # sentences/s, all in one call
    rounds_rate: float  # sentences/s, one call a round (rounds_of): the most a served round can do


def offline(model_dir: Path, backend: str, sentences: list[str], rounds: list[list[str]]) -> Offline:
    """The translations of `sentences` and sentences/s, by the pyfunc model in this process, in one call
    and in `rounds`' calls."""
    from pipeline.decoding import pyfunc

    model = pyfunc.TranslatorModel()
    context = SimpleNamespace(artifacts={pyfunc.ARTIFACT: str(model_dir)}, model_config={"backend": backend})
    model.load_context(context)
    translator = model.translator
    translator.translate(sentences[: min(16, len(sentences))])  # warm-up
    began = time.perf_counter()
    out = translator.translate(sentences)
    rate = len(sentences) / (time.perf_counter() - began)
    began = time.perf_counter()
    for batch in rounds:
        translator.translate(batch)
    rounds_rate = sum(map(len, rounds)) / (time.perf_counter() - began)
    return Offline({s: one_line(t) for s, t in zip(sentences, out, strict=True)}, rate, rounds_rate)


@dataclass(frozen=True)
class Shape:
    """The load: clients, each sending `requests` requests of `lines` sentences, within `time_limit` s."""

    clients: int
    requests: int
    lines: int
    bad: bool = True
    time_limit: float = 600.0


def run_load(
    model_dir: Path, sentences: list[str], backend: str, shape: Shape, say=print
) -> tuple[list[dict], dict[str, Any]]:
    """Offline, then served under `shape`'s load: -> (bench rows, details for the JSON)."""
    chunks = chunks_of(sentences, shape.clients, shape.requests, shape.lines)
    unique = sorted({s for c in chunks for r in c for s in r})
    alone = offline(model_dir, backend, unique, rounds_of(chunks))
    say(
        f"offline: {len(unique)} sentences, {alone.rate:.1f} sentences/s in one call, "
        f"{alone.rounds_rate:.1f} in the load's rounds ({backend})"
    )
    with tempfile.TemporaryDirectory(prefix="serve-load-") as tmp:
        pyfunc_dir = save_pyfunc(model_dir, Path(tmp) / "pyfunc", backend, unique[:2])
        port = free_port()
        with served(pyfunc_dir, port) as server:
            warm_up(port, chunks)
            disconnect_mid_request(port, unique[: 4 * shape.lines])
            rss_before = rss_at_rest(server.pid)
            load = drive(port, chunks, alone.expected, shape)
            rss_after = rss_at_rest(server.pid)
    return (
        rows_of(load, backend, alone, rss_after - rss_before, shape.bad),
        {
            "clients": shape.clients,
            "requests_per_client": shape.requests,
            "lines_per_request": shape.lines,
            "unsent_sentences": shape.clients * shape.requests * shape.lines - load.sent,  # the time limit's
            "errors": load.errors[:10],
            "bad": load.bad[: len(bad_requests())],
            "bad_sent": len(load.bad),
            "rss_mb": {"before": round(rss_before, 1), "after": round(rss_after, 1)},
            "seconds": round(load.seconds, 2),
        },
    )


def warm_up(port: int, chunks: list[list[list[str]]]) -> None:
    """Every client's first request at once, answered before the load: the server's batches reach
    their working size (and memory) here, so RSS growth over the load is what the load adds."""
    answers: list[int] = []
    body = lambda c: json.dumps({"inputs": c[0]}).encode()
    threads = [threading.Thread(target=lambda c=c: answers.append(request(port, body(c))[0])) for c in chunks]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if any(status != 200 for status in answers):
        raise UserError(f"the server answered its warm-up requests with HTTP {sorted(set(answers))}")


def drive(port: int, chunks: list[list[list[str]]], expected: dict[str, str], shape: Shape) -> Load:
    """The clients (and the bad-load client) at once, until the good ones are done or time is up."""
    load = Load()
    deadline = time.monotonic() + shape.time_limit
    threads = [threading.Thread(target=client, args=(port, c, expected, deadline, load)) for c in chunks]
    bad = threading.Thread(target=bad_client, args=(port, deadline, load)) if shape.bad else None
    began = time.perf_counter()
    for t in [*threads, *([bad] if bad else [])]:
        t.start()
    for t in threads:
        t.join()
    load.seconds = time.perf_counter() - began
    if bad:
        bad.join()
    return load


def rows_of(load: Load, backend: str, alone: Offline, rss_growth: float, bad: bool) -> list[dict]:
    served_rate = load.answered / load.seconds if load.seconds else 0.0
    lat = sorted(load.latencies)
    p50 = statistics.median(lat) if lat else float("nan")
    p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))] if lat else float("nan")
    system = f"mlflow-serve-{backend}"
    values = {
        "throughput_ratio_to_offline": (served_rate / alone.rate, 3),
        # the ratio's two parts: a round's batch against all at once, and the server against its rounds
        "offline_rounds_ratio_to_offline": (alone.rounds_rate / alone.rate, 3),
        "throughput_ratio_to_offline_rounds": (served_rate / alone.rounds_rate, 3),
        "sentences_per_s": (served_rate, 2),
        "offline_sentences_per_s": (alone.rate, 2),
        "offline_rounds_sentences_per_s": (alone.rounds_rate, 2),
        "p50_s": (p50, 3),
        "p99_s": (p99, 3),
        "errors": (len(load.errors), 0),
        "differs_from_offline": (load.differ, 0),
        "rss_growth_mb": (rss_growth, 1),
    }
    if bad:
        values["bad_not_refused"] = (sum(not b["refused"] for b in load.bad), 0)
    return [row(system, TASK, "fp32", metric, v, digits=d) for metric, (v, d) in values.items()]

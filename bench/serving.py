"""Serving under load, the machinery of bench/serve_load.py (and free_port, of the tests too): a
local MLflow model served by `mlflow models serve` on loopback, concurrent clients checked against
offline decoding, a client that hangs up mid-request and a bad-load client. What is measured, and
how: bench/README.md.
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

    from pipeline.serving import pyfunc

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
    from pipeline.serving import pyfunc

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


def offline_translator(model_dir: Path, backend: str) -> Any:
    """The translator the pyfunc model decodes with, loaded in this process as the server loads it."""
    from pipeline.serving import pyfunc

    model = pyfunc.TranslatorModel()
    context = SimpleNamespace(artifacts={pyfunc.ARTIFACT: str(model_dir)}, model_config={"backend": backend})
    model.load_context(context)
    return model.translator


def offline(translator: Any, sentences: list[str], rounds: list[list[str]]) -> Offline:
    """The translations of `sentences` and sentences/s, in one call and in `rounds`' calls."""
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
    time_limit: float = 600.0  # a load's
    loads: int = 1  # the load this many times, each after its own offline timing


def run_load(
    model_dir: Path, sentences: list[str], backend: str, shape: Shape, say=print
) -> tuple[list[dict], dict[str, Any]]:
    """Offline, then served under `shape`'s load, `shape.loads` times in turn on one server: -> (bench
    rows, details for the JSON)."""
    chunks = chunks_of(sentences, shape.clients, shape.requests, shape.lines)
    unique = sorted({s for c in chunks for r in c for s in r})
    translator = offline_translator(model_dir, backend)
    runs: list[tuple[Offline, Load]] = []
    with tempfile.TemporaryDirectory(prefix="serve-load-") as tmp:
        pyfunc_dir = save_pyfunc(model_dir, Path(tmp) / "pyfunc", backend, unique[:2])
        port = free_port()
        with served(pyfunc_dir, port) as server:
            warm_up(port, chunks)
            disconnect_mid_request(port, unique[: 4 * shape.lines])
            rss_before = rss_at_rest(server.pid)
            for _ in range(shape.loads):
                alone = offline(translator, unique, rounds_of(chunks))
                load = drive(port, chunks, alone.expected, shape)
                runs.append((alone, load))
                say(
                    f"load {len(runs)}: offline {alone.rate:.1f} sentences/s in one call, "
                    f"{alone.rounds_rate:.1f} in the load's rounds ({backend}); served "
                    f"{served_rate(load):.1f}, {served_rate(load) / alone.rate:.3f} of offline"
                )
            rss_after = rss_at_rest(server.pid)
    loads = [load for _, load in runs]
    return (
        rows_of(runs, backend, rss_after - rss_before, shape.bad),
        {
            "clients": shape.clients,
            "requests_per_client": shape.requests,
            "lines_per_request": shape.lines,
            "loads": [load_detail(alone, load) for alone, load in runs],
            # the time limit's, over all loads
            "unsent_sentences": shape.loads * shape.clients * shape.requests * shape.lines
            - sum(load.sent for load in loads),
            "errors": [e for load in loads for e in load.errors][:10],
            "bad": loads[0].bad[: len(bad_requests())],
            "bad_sent": sum(len(load.bad) for load in loads),
            "rss_mb": {"before": round(rss_before, 1), "after": round(rss_after, 1)},
            "seconds": round(sum(load.seconds for load in loads), 2),
        },
    )


def load_detail(alone: Offline, load: Load) -> dict[str, float]:
    """One load's own figures, for the JSON: how much the loads of a run differ."""
    lat = sorted(load.latencies)
    return {
        "throughput_ratio_to_offline": round(served_rate(load) / alone.rate, 3),
        "sentences_per_s": round(served_rate(load), 2),
        "offline_sentences_per_s": round(alone.rate, 2),
        "offline_rounds_sentences_per_s": round(alone.rounds_rate, 2),
        "p50_s": round(statistics.median(lat), 3) if lat else float("nan"),
        "max_s": round(lat[-1], 3) if lat else float("nan"),
    }


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


def served_rate(load: Load) -> float:
    return load.answered / load.seconds if load.seconds else 0.0


def rows_of(runs: list[tuple[Offline, Load]], backend: str, rss_growth: float, bad: bool) -> list[dict]:
    """The bench rows of one or more loads: speeds and their ratios are the loads' medians (each load
    against its own offline timing), p50 and p99 are over every load's latencies together, counts are
    totals."""
    median = lambda f: statistics.median(f(alone, load) for alone, load in runs)
    lat = sorted(t for _, load in runs for t in load.latencies)
    p50 = statistics.median(lat) if lat else float("nan")
    p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))] if lat else float("nan")
    total = lambda f: sum(f(load) for _, load in runs)
    system = f"mlflow-serve-{backend}"
    values = {
        "throughput_ratio_to_offline": (median(lambda a, ld: served_rate(ld) / a.rate), 3),
        # the ratio's two parts: a round's batch against all at once, and the server against its rounds
        "offline_rounds_ratio_to_offline": (median(lambda a, ld: a.rounds_rate / a.rate), 3),
        "throughput_ratio_to_offline_rounds": (median(lambda a, ld: served_rate(ld) / a.rounds_rate), 3),
        "sentences_per_s": (median(lambda a, ld: served_rate(ld)), 2),
        "offline_sentences_per_s": (median(lambda a, ld: a.rate), 2),
        "offline_rounds_sentences_per_s": (median(lambda a, ld: a.rounds_rate), 2),
        "p50_s": (p50, 3),
        "p99_s": (p99, 3),
        "errors": (total(lambda ld: len(ld.errors)), 0),
        "differs_from_offline": (total(lambda ld: ld.differ), 0),
        "rss_growth_mb": (rss_growth, 1),
    }
    if bad:
        values["bad_not_refused"] = (total(lambda ld: sum(not b["refused"] for b in ld.bad)), 0)
    return [row(system, TASK, "fp32", metric, v, digits=d) for metric, (v, d) in values.items()]

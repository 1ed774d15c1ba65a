"""The served model under load: `mlflow models serve` on loopback, N concurrent clients, against
the same model decoding the same sentences offline.

    python -m bench.serve_load --model data/model \\
        --split-file data/clean/test/multi30k-test_2016_flickr.src \\
        --clients 8 --requests 8 --lines 8 --bad --out reports/bench.json --md reports/bench.md

Not a test: it measures, in one run, on one machine and with one model and backend:

1. offline: the model as the server loads it (pipeline.decoding.pyfunc.TranslatorModel, same
   backend, same decode settings) translating every sentence of the load in one call, as the
   `translate` command does (its batching and workers), after a warm-up; sentences/s. The model
   is then freed, so that the server has the machine to itself.
2. served: the model saved as an MLflow pyfunc model (the score stage's model_spec, the
   `--backend`'s model_config) and served by `mlflow models serve --env-manager local` on a free
   loopback port. After a warm-up request, --clients threads each send --requests requests of
   --lines consecutive sentences (distinct sentences per client), each waiting for its answer
   before the next; the whole is bounded by --time-limit. Throughput is the sentences answered
   over the wall time from the first request to the last answer; latency is per request. An
   answer that is not HTTP 200 or not one translation (a string) per line counts as an error;
   `differs_from_offline` counts the answered sentences whose translation is not the offline
   one. That is not an error by itself: the server decodes a sentence in other batches (of other
   shapes) than the offline call, and float32 products of other shapes may round differently,
   which flips near-ties of an untrained model's scores; on a trained model it should be about 0.
3. bad load (--bad): one more client, at the same time, sends malformed JSON, an empty body, an
   empty list, wrong-typed input, 10,000 sentences and a 100,000-character sentence in turn; each
   must be answered 4xx with a message that names the problem (`bad_not_refused` counts those
   that were not), while the other clients' answers stay correct.
4. a client that disconnects mid-request (it sends a request and closes its socket without
   reading the answer) before the load: the load's answers show the batcher did not stall.

The server's resident memory (the process and its children, psutil) is read after the warm-up
and after the load. Rows {"task": "serve", "system": "mlflow-serve-<backend>", "precision",
"metric", "value"}: throughput_ratio_to_offline, sentences_per_s, offline_sentences_per_s, p50_s,
p99_s, errors, bad_not_refused, rss_growth_mb, merged into --out; the section between SERVE_START
and SERVE_END of --md is regenerated. Never run it beside a training: both want every core.
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

import click

from bench.common import machine_info, merge_rows, row, write_section
from pipeline.errors import UserError
from pipeline.files import read_lines, write_json
from pipeline.reporting.tables import markdown_table

SERVE_START, SERVE_END = "<!-- serve:start -->", "<!-- serve:end -->"
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


def bad_client(port: int, deadline: float, stop: threading.Event, load: Load) -> None:
    """Bad requests in turn until the good clients are done (each kind at least once)."""
    sent = 0
    kinds = bad_requests()
    while sent < len(kinds) or not (stop.is_set() or time.monotonic() > deadline):
        what, body, word = kinds[sent % len(kinds)]
        try:
            status, answer = request(port, body, timeout=60)
            message = answer.get("message", "") if isinstance(answer, dict) else str(answer)
        except OSError as e:
            status, message = 0, f"{type(e).__name__}: {e}"
        refused = 400 <= status < 500 and word in message.lower()
        with load.lock:
            load.bad.append({"request": what, "status": status, "refused": refused, "message": message[:300]})
        sent += 1


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


def offline(model_dir: Path, backend: str, sentences: list[str]) -> tuple[dict[str, str], float]:
    """The translations of `sentences` and sentences/s, by the pyfunc model in this process."""
    from pipeline.decoding import pyfunc

    model = pyfunc.TranslatorModel()
    context = SimpleNamespace(artifacts={pyfunc.ARTIFACT: str(model_dir)}, model_config={"backend": backend})
    model.load_context(context)
    translator = model.translator
    translator.translate(sentences[: min(16, len(sentences))])  # warm-up
    began = time.perf_counter()
    out = translator.translate(sentences)
    rate = len(sentences) / (time.perf_counter() - began)
    return {s: " ".join(t.split()) for s, t in zip(sentences, out, strict=True)}, rate


def run_load(
    model_dir: Path,
    sentences: list[str],
    *,
    backend: str,
    clients: int,
    requests: int,
    lines: int,
    bad: bool,
    time_limit: float,
    say=print,
) -> tuple[list[dict], dict[str, Any]]:
    chunks = chunks_of(sentences, clients, requests, lines)
    unique = sorted({s for c in chunks for r in c for s in r})
    expected, offline_rate = offline(model_dir, backend, unique)
    say(f"offline: {len(unique)} sentences, {offline_rate:.1f} sentences/s ({backend})")
    load = Load()
    with tempfile.TemporaryDirectory(prefix="serve-load-") as tmp:
        pyfunc_dir = save_pyfunc(model_dir, Path(tmp) / "pyfunc", backend, unique[:2])
        port = free_port()
        with served(pyfunc_dir, port) as server:
            status, _ = request(port, json.dumps({"inputs": unique[:lines]}).encode())  # warm-up
            if status != 200:
                raise UserError(f"the server answered its warm-up request with HTTP {status}")
            disconnect_mid_request(port, unique[: 4 * lines])
            rss_before = rss_mb(server.pid)
            deadline = time.monotonic() + time_limit
            stop = threading.Event()
            threads = [
                threading.Thread(target=client, args=(port, c, expected, deadline, load)) for c in chunks
            ]
            bad_thread = (
                threading.Thread(target=bad_client, args=(port, deadline, stop, load)) if bad else None
            )
            began = time.perf_counter()
            for t in [*threads, *([bad_thread] if bad_thread else [])]:
                t.start()
            for t in threads:
                t.join()
            load.seconds = time.perf_counter() - began
            stop.set()
            if bad_thread:
                bad_thread.join()
            rss_after = rss_mb(server.pid)
    sent = clients * requests * lines
    served_rate = load.answered / load.seconds if load.seconds else 0.0
    lat = sorted(load.latencies)
    p50 = statistics.median(lat) if lat else float("nan")
    p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))] if lat else float("nan")
    errors = len(load.errors)
    system = f"mlflow-serve-{backend}"
    rows = [
        row(system, TASK, "fp32", "throughput_ratio_to_offline", served_rate / offline_rate, digits=3),
        row(system, TASK, "fp32", "sentences_per_s", served_rate, digits=2),
        row(system, TASK, "fp32", "offline_sentences_per_s", offline_rate, digits=2),
        row(system, TASK, "fp32", "p50_s", p50, digits=3),
        row(system, TASK, "fp32", "p99_s", p99, digits=3),
        row(system, TASK, "fp32", "errors", errors, digits=0),
        row(system, TASK, "fp32", "differs_from_offline", load.differ, digits=0),
        row(system, TASK, "fp32", "rss_growth_mb", rss_after - rss_before, digits=1),
    ]
    if bad:
        refused = sum(b["refused"] for b in load.bad)
        rows.append(row(system, TASK, "fp32", "bad_not_refused", len(load.bad) - refused, digits=0))
    detail = {
        "clients": clients,
        "requests_per_client": requests,
        "lines_per_request": lines,
        "unsent_sentences": sent - load.sent,  # left when --time-limit ran out
        "errors": load.errors[:10],
        "bad": load.bad[: len(bad_requests())],
        "bad_sent": len(load.bad),
        "rss_mb": {"before": round(rss_before, 1), "after": round(rss_after, 1)},
        "seconds": round(load.seconds, 2),
    }
    return rows, detail


def section(rows: list[dict], detail: dict[str, Any], info: dict[str, str]) -> str:
    value = {(r["system"], r["metric"]): r["value"] for r in rows if r.get("task") == TASK}
    systems = sorted({s for s, _ in value})
    metrics = [
        "throughput_ratio_to_offline",
        "sentences_per_s",
        "offline_sentences_per_s",
        "p50_s",
        "p99_s",
        "errors",
        "differs_from_offline",
        "bad_not_refused",
        "rss_growth_mb",
    ]
    table = markdown_table(
        ["system", *metrics],
        [[s, *(str(value.get((s, m), "–")) for m in metrics)] for s in systems],
    )
    bad = detail.get("bad", [])
    bad_lines = [f"- {b['request']}: HTTP {b['status']}, {b['message'][:120]!r}" for b in bad]
    return "\n".join(
        [
            SERVE_START,
            "## Serving under load (`bench/serve_load.py`)",
            "",
            f"`mlflow models serve` on loopback, {detail['clients']} concurrent clients each sending "
            f"{detail['requests_per_client']} requests of {detail['lines_per_request']} real test "
            "sentences (beam of the model's decode settings), against the same model translating the "
            "same sentences offline in one call. Errors: answers not 200 or not one translation per line; "
            "differs_from_offline: answered sentences translated otherwise than offline. "
            "The bad-load client's requests (all answered 4xx naming the problem "
            "unless bad_not_refused says otherwise):",
            "",
            table,
            "",
            *bad_lines,
            "",
            "Machine: " + ", ".join(f"{k} {v}" for k, v in info.items()) + ".",
            SERVE_END,
        ]
    )


@click.command()
@click.option(
    "--model", "model_dir", type=click.Path(exists=True, file_okay=False, path_type=Path), required=True
)
@click.option(
    "--split-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    required=True,
    help="Source sentences, one per line (a test set's .src).",
)
@click.option("--backend", type=click.Choice(["torch", "ctranslate2"]), default="torch", show_default=True)
@click.option("--clients", type=click.IntRange(1, 64), default=8, show_default=True)
@click.option("--requests", type=click.IntRange(1, 1000), default=8, show_default=True)
@click.option("--lines", type=click.IntRange(1, 256), default=8, show_default=True)
@click.option("--bad/--no-bad", default=True, show_default=True, help="Mix a bad-load client in.")
@click.option("--time-limit", type=click.FloatRange(1, 3600), default=600, show_default=True)
@click.option("--out", type=click.Path(path_type=Path), default=None, help="Merge the rows into this JSON.")
@click.option("--md", type=click.Path(path_type=Path), default=None, help="Regenerate this file's section.")
def main(
    model_dir: Path,
    split_file: Path,
    backend: str,
    clients: int,
    requests: int,
    lines: int,
    bad: bool,
    time_limit: float,
    out: Path | None,
    md: Path | None,
) -> None:
    """Serve a model directory under load and compare with offline decoding."""
    import torch

    sentences = [s for s in read_lines(split_file) if s.strip()]
    if not sentences:
        raise click.BadParameter(f"{split_file} holds no sentences", param_hint="--split-file")
    try:
        rows, detail = run_load(
            model_dir,
            sentences,
            backend=backend,
            clients=clients,
            requests=requests,
            lines=lines,
            bad=bad,
            time_limit=time_limit,
            say=lambda m: click.echo(m, err=True),
        )
    except UserError as e:
        raise click.ClickException(str(e)) from None
    info = machine_info("torch threads", torch.get_num_threads())
    for r in rows:
        click.echo(f"{r['system']:24s} {r['metric']:28s} {r['value']}")
    if out is not None:
        write_json(out, merge_rows(out, rows))
        write_json(out.with_name(out.stem + "_serve_detail.json"), detail | {"machine": info})
    if md is not None:
        write_section(md, SERVE_START, SERVE_END, section(rows, detail, info))


if __name__ == "__main__":
    main()

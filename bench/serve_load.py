"""The served model under load: `mlflow models serve` on loopback, N concurrent clients, against
the same model decoding the same sentences offline.

    python -m bench.serve_load --model data/model \\
        --split-file data/clean/test/multi30k-test_2016_flickr.src \\
        --clients 8 --requests 8 --lines 8 --loads 5 --out reports/bench.json --md reports/bench.md

Offline first (the model as the server loads it, every sentence in one call, then in the load's
rounds), then --loads loads on one server: --clients threads each sending --requests requests of
--lines sentences, with (--bad) a client sending malformed requests that must be refused 4xx, and a
client that hangs up mid-request before the load. Throughput against offline, p50/p99 latency,
errors, answers that differ from offline, and the server's resident memory growth at rest. Rows
{"task": "serve", ...} merge into --out; the section between SERVE_START and SERVE_END of --md is
regenerated. bench/README.md says how each figure is taken. Never beside a training.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from bench.common import markers, merge_rows, write_section
from bench.serving import TASK, Shape, run_load
from pipeline.errors import UserError
from pipeline.files import read_lines, write_json
from pipeline.machine import machine_info
from pipeline.reporting.tables import markdown_table

SERVE_START, SERVE_END = markers("serve")
SERVER_ENV = ("MALLOC_ARENA_MAX", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


COLUMNS = (  # the section's table, in this order
    "throughput_ratio_to_offline",
    "offline_rounds_ratio_to_offline",
    "throughput_ratio_to_offline_rounds",
    "sentences_per_s",
    "offline_sentences_per_s",
    "offline_rounds_sentences_per_s",
    "p50_s",
    "p99_s",
    "errors",
    "differs_from_offline",
    "bad_not_refused",
    "rss_growth_mb",
)


def section(rows: list[dict], detail: dict[str, Any], info: dict[str, str]) -> str:
    value = {(r["system"], r["metric"]): r["value"] for r in rows if r.get("task") == TASK}
    systems = sorted({s for s, _ in value})
    table = markdown_table(
        ["system", *COLUMNS],
        [[s, *(str(value.get((s, m), "–")) for m in COLUMNS)] for s in systems],
    )
    bad = detail.get("bad", [])
    per_load = detail.get("loads", [])
    bad_lines = [f"- {b['request']}: HTTP {b['status']}, {b['message'][:120]!r}" for b in bad]
    return "\n".join(
        [
            SERVE_START,
            "## Serving under load (`bench/serve_load.py`)",
            "",
            f"`mlflow models serve` on loopback, {detail['clients']} concurrent clients each sending "
            f"{detail['requests_per_client']} requests of {detail['lines_per_request']} real test "
            "sentences (beam of the model's decode settings), against the same model translating the "
            "same sentences offline in one call (and in the load's rounds, one call each: every "
            "client's r-th request together, as the batcher gets them). "
            f"The load ran {len(per_load)} times on one server, each after its own offline timing: "
            "speeds and ratios are the loads' medians, p50 and p99 over all their requests "
            "together, counts are totals, RSS growth is from before the first load to after the last. "
            "Errors: answers not 200 or not "
            "one translation per line; "
            "differs_from_offline: answered sentences translated otherwise than offline. "
            "The bad-load client's requests (all answered 4xx naming the problem "
            "unless bad_not_refused says otherwise):",
            "",
            table,
            "",
            "Each load's throughput_ratio_to_offline: "
            + ", ".join(str(p["throughput_ratio_to_offline"]) for p in per_load)
            + "; its slowest answer, s: "
            + ", ".join(str(p["max_s"]) for p in per_load)
            + ".",
            "",
            *bad_lines,
            "",
            "Server environment: "
            + (
                ", ".join(f"{k}={v}" for k, v in detail.get("server_env", {}).items())
                or "as inherited, none set"
            )
            + ". Machine: "
            + ", ".join(f"{k} {v}" for k, v in info.items())
            + ".",
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
@click.option(
    "--time-limit", type=click.FloatRange(1, 3600), default=600, show_default=True, help="Per load."
)
@click.option(
    "--loads", type=click.IntRange(1, 100), default=5, show_default=True, help="Times the load is run."
)
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
    loads: int,
    out: Path | None,
    md: Path | None,
) -> None:
    """Serve a model directory under load and compare with offline decoding."""
    import torch

    sentences = [s for s in read_lines(split_file) if s.strip()]
    if not sentences:
        raise click.BadParameter(f"{split_file} holds no sentences", param_hint="--split-file")
    try:
        shape = Shape(clients, requests, lines, bad, time_limit, loads)
        rows, detail = run_load(model_dir, sentences, backend, shape, say=lambda m: click.echo(m, err=True))
    except UserError as e:
        raise click.ClickException(str(e)) from None
    info = machine_info("torch threads", torch.get_num_threads())
    # The server inherits this environment; these change its speed and memory (docs/mlflow.md).
    detail["server_env"] = {k: os.environ[k] for k in SERVER_ENV if k in os.environ}
    for r in rows:
        click.echo(f"{r['system']:24s} {r['metric']:28s} {r['value']}")
    if out is not None:
        write_json(out, merge_rows(out, rows))
        write_json(out.with_name(out.stem + "_serve_detail.json"), detail | {"machine": info})
    if md is not None:
        write_section(md, SERVE_START, SERVE_END, section(rows, detail, info))


if __name__ == "__main__":
    main()

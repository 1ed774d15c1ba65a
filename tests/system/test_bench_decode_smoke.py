"""bench/decode_speed.py on a tiny model: every installed system runs, rows and report have the right shape."""

import json
from pathlib import Path

import torch

from bench import decode_speed as D

OTHER = {
    "system": "ours",
    "task": "train_synthetic_8x8",
    "precision": "fp32",
    "metric": "tokens_per_s",
    "value": 1.0,
}


def test_decode_smoke_rows_and_report(tmp_path: Path) -> None:
    out, md = tmp_path / "bench.json", tmp_path / "bench.md"
    out.write_text(json.dumps([OTHER]))
    md.write_text("# Benchmarks\n\n<!-- train:start -->\nkept\n<!-- train:end -->\n")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        rows = D.benchmark(D.Setup(8, 4, 4, 1, smoke=True), systems=D.available_systems(), out=out, md=md)
    finally:
        torch.set_num_threads(threads)
    assert all(set(r) == {"system", "task", "precision", "metric", "value", "smoke"} for r in rows)
    assert len(rows) == len(D.available_systems()) * len(D.TASKS) * 2 and all(r["value"] > 0 for r in rows)
    saved = json.loads(out.read_text())
    assert OTHER in saved and len(saved) == len(rows) + 1
    text = md.read_text()
    assert "<!-- train:start -->\nkept\n<!-- train:end -->" in text and "SMOKE RUN" in text
    assert text.count(D.DECODE_START) == 1 and "ours / uncached" in text

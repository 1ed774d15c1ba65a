"""bench/train_speed.py's --smoke mode: every part runs, and its rows and report have the right shape."""

import json
from pathlib import Path

from bench import train_speed
from tests.helpers import REPO

OTHER = {
    "system": "pytorch-kv-cache",
    "task": "decode_greedy",
    "precision": "fp32",
    "metric": "sentences_per_s",
    "value": 1.0,
}


def test_smoke_rows_and_report(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    train_speed.write_corpus(bin_dir, 500, vocab=300, seed=1)  # a tiny corpus for the real-batch part
    out_json, out_md = tmp_path / "bench.json", tmp_path / "bench.md"
    out_json.write_text(json.dumps([OTHER]))
    out_md.write_text("# Benchmarks\n\n<!-- decode:start -->\nkept\n<!-- decode:end -->\n")

    rows = train_speed.benchmark(
        smoke=True,
        params_file=REPO / "params.yaml",
        bin_dir=bin_dir,
        out_json=out_json,
        out_md=out_md,
        say=lambda _: None,
    )

    assert all(set(r) == {"system", "task", "precision", "metric", "value", "smoke"} for r in rows)
    assert all(r["smoke"] is True and isinstance(r["value"], float) for r in rows)
    speed = {
        (r["system"], r["precision"]): r["value"]
        for r in rows
        if r["task"] == "train_synthetic_8x8" and r["metric"] == "tokens_per_s"
    }
    systems = train_speed.available_systems()
    assert set(speed) == {(s, p) for s in systems for p in ("fp32", "bf16")}
    assert all(v > 0 for v in speed.values())
    ratios = {r["precision"]: r["value"] for r in rows if r["metric"] == "ratio_vs_faster_peer"}
    for p in ("fp32", "bf16"):
        faster = max(v for (s, q), v in speed.items() if q == p and s != "ours")
        assert abs(ratios[p] - speed["ours", p] / faster) < 0.02 * ratios[p] + 1e-3
    spread = {
        (r["precision"], r["metric"]): r["value"] for r in rows if r["metric"].startswith("round_ratio")
    }
    for p in ("fp32", "bf16"):
        # Ours beats every round's faster peer by at least the lowest round's ratio, so the ratio of
        # medians cannot fall below it.
        assert 0 < spread[p, "round_ratio_min"] <= spread[p, "round_ratio_max"]
        assert ratios[p] >= spread[p, "round_ratio_min"] - 1e-3

    real = {(r["precision"], r["metric"]): r["value"] for r in rows if r["task"] == "train_real_batches"}
    assert real["fp32", "tokens_per_s"] > 0 and real["bf16", "tokens_per_s"] > 0
    assert 0 <= real["-", "padding_fraction_tgt"] < 1 and real["-", "batches"] == 2

    memory = {(r["task"], r["metric"]): r["value"] for r in rows if r["system"] == "data-path"}
    for pairs, scale in ((2_000, 1), (20_000, 1), (20_000, 4)):
        task = train_speed.memory_task(pairs, scale)
        assert memory[task, "index_mb"] == round(2 * (pairs + 1) * 8 / 2**20, 3)  # int64 offsets, both sides
        assert memory[task, "peak_rss_mb"] >= memory[task, "after_load_rss_mb"] > 0
        assert memory[task, "heap_peak_mb"] >= memory[task, "heap_after_load_mb"] > 0
        assert 0 < memory[task, "batches"] <= 100
    # 4x the tokens, the same sentences: the heap does not grow with the tokens.
    assert memory["data_memory_20000_x4", "tokens"] > 3 * memory["data_memory_20000", "tokens"]
    assert memory["data_memory_20000_x4", "heap_peak_mb"] <= 1.1 * memory["data_memory_20000", "heap_peak_mb"]

    saved = json.loads(out_json.read_text())
    assert OTHER in saved and len(saved) == len(rows) + 1  # another benchmark's row is kept
    md = out_md.read_text()
    assert "<!-- decode:start -->\nkept\n<!-- decode:end -->" in md
    assert md.count("<!-- train:start -->") == 1 and md.count("<!-- train:end -->") == 1
    assert "SMOKE RUN" in md and "ours / faster peer" in md and "single rounds, lowest-highest" in md

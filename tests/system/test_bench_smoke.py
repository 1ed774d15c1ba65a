"""bench/train_speed.py's --smoke mode: every part runs, and its rows and report have the right shape.

One smoke run per module (the `smoke` fixture); each test checks one claim about it, so a failing
test's name says what broke.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from bench import train_speed
from bench.training import available_systems
from tests.support.models import make_text_corpus
from tests.support.repo import REPO

PRECISIONS = ("fp32", "bf16")
MEMORY_CORPORA = ((2_000, 1), (20_000, 1), (20_000, 4))  # (pairs, sentence length scale) of the smoke run
OTHER = {
    "system": "pytorch-kv-cache",
    "task": "decode_greedy",
    "precision": "fp32",
    "metric": "sentences_per_s",
    "value": 1.0,
}
DECODE_SECTION = "<!-- decode:start -->\nkept\n<!-- decode:end -->"


@dataclass(frozen=True)
class Smoke:
    rows: list[dict]  # what benchmark() returned
    saved: list[dict]  # the JSON file afterwards
    report: str  # the Markdown file afterwards


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> Smoke:
    """One smoke run, into files that already hold another benchmark's row and section."""
    root = tmp_path_factory.mktemp("bench")
    bin_dir = root / "bin"
    train_speed.write_corpus(bin_dir, 500, vocab=300, seed=1)  # a tiny corpus for the real-batch part
    out_json, out_md = root / "bench.json", root / "bench.md"
    out_json.write_text(json.dumps([OTHER]))
    out_md.write_text(f"# Benchmarks\n\n{DECODE_SECTION}\n")
    rows = train_speed.benchmark(
        smoke=True,
        params_file=REPO / "params.yaml",
        bin_dir=bin_dir,
        out_json=out_json,
        out_md=out_md,
        say=lambda _: None,
    )
    return Smoke(rows, json.loads(out_json.read_text()), out_md.read_text())


def speeds(rows: list[dict]) -> dict[tuple[str, str], float]:
    """(system, precision) -> target tokens/s on the synthetic batch."""
    return {
        (r["system"], r["precision"]): r["value"]
        for r in rows
        if r["task"] == "train_synthetic_8x8" and r["metric"] == "tokens_per_s"
    }


def ours(rows: list[dict], metric: str) -> dict[str, float]:
    """precision -> ours' value of `metric` (ratio_vs_faster_peer, round_ratio_min, ...)."""
    return {r["precision"]: r["value"] for r in rows if r["system"] == "ours" and r["metric"] == metric}


def memory(rows: list[dict]) -> dict[tuple[str, str], float]:
    """(task, metric) -> value of the data-path memory rows."""
    return {(r["task"], r["metric"]): r["value"] for r in rows if r["system"] == "data-path"}


# --- the rows ---------------------------------------------------------------------------


def test_every_row_has_the_fields_a_result_needs_and_is_marked_smoke(smoke: Smoke) -> None:
    assert smoke.rows
    assert all(set(r) == {"system", "task", "precision", "metric", "value", "smoke"} for r in smoke.rows)
    assert all(r["smoke"] is True and isinstance(r["value"], float) for r in smoke.rows)


def test_every_system_has_a_positive_rate_at_each_precision(smoke: Smoke) -> None:
    speed = speeds(smoke.rows)
    systems = available_systems()
    assert set(speed) == {(s, p) for s in systems for p in PRECISIONS}
    assert all(v > 0 for v in speed.values()), speed


def test_ratio_is_ours_over_the_faster_peer(smoke: Smoke) -> None:
    speed, ratios = speeds(smoke.rows), ours(smoke.rows, "ratio_vs_faster_peer")
    for p in PRECISIONS:
        faster = max(v for (s, q), v in speed.items() if q == p and s != "ours")
        assert abs(ratios[p] - speed["ours", p] / faster) < 0.02 * ratios[p] + 1e-3, p


def test_ratio_is_no_lower_than_the_lowest_round(smoke: Smoke) -> None:
    ratios = ours(smoke.rows, "ratio_vs_faster_peer")
    low, high = ours(smoke.rows, "round_ratio_min"), ours(smoke.rows, "round_ratio_max")
    for p in PRECISIONS:
        assert 0 < low[p] <= high[p], p
        # Ours beats every round's faster peer by at least the lowest round's ratio, so the ratio of
        # medians cannot fall below it.
        assert ratios[p] >= low[p] - 1e-3, p


def test_real_batches_have_a_rate_and_their_padding(smoke: Smoke) -> None:
    real = {
        (r["precision"], r["metric"]): r["value"] for r in smoke.rows if r["task"] == "train_real_batches"
    }
    assert real["fp32", "tokens_per_s"] > 0 and real["bf16", "tokens_per_s"] > 0
    assert 0 <= real["-", "padding_fraction_tgt"] < 1 and real["-", "batches"] == 2


def test_memory_index_is_two_int64_offsets_a_pair(smoke: Smoke) -> None:
    measured = memory(smoke.rows)
    for pairs, scale in MEMORY_CORPORA:
        task = train_speed.memory_task(pairs, scale)
        assert measured[task, "index_mb"] == round(2 * (pairs + 1) * 8 / 2**20, 3)  # both sides


def test_memory_peaks_are_at_least_what_loading_left_and_batches_were_made(smoke: Smoke) -> None:
    measured = memory(smoke.rows)
    for pairs, scale in MEMORY_CORPORA:
        task = train_speed.memory_task(pairs, scale)
        assert measured[task, "peak_rss_mb"] >= measured[task, "after_load_rss_mb"] > 0, task
        # offsets and ids are mapped, not loaded: loading holds the int32 lengths (and, for a moment,
        # one side's int64 differences), a few bytes a pair, whatever the tokens
        after_load = measured[task, "heap_after_load_mb"]
        assert measured[task, "heap_peak_mb"] >= after_load and after_load <= 24 * pairs / 2**20 + 0.01, task
        assert 0 < measured[task, "batches"] <= 100, task


def test_memory_heap_does_not_grow_with_the_tokens(smoke: Smoke) -> None:
    measured = memory(smoke.rows)
    # 4x the tokens, the same sentences: the heap does not grow with the tokens.
    assert measured["data_memory_20000_x4", "tokens"] > 3 * measured["data_memory_20000", "tokens"]
    assert (
        measured["data_memory_20000_x4", "heap_peak_mb"]
        <= 1.1 * measured["data_memory_20000", "heap_peak_mb"]
    )


# --- the files --------------------------------------------------------------------------


def test_json_file_has_the_rows_and_keeps_another_benchmarks(smoke: Smoke) -> None:
    assert OTHER in smoke.saved
    assert len(smoke.saved) == len(smoke.rows) + 1
    assert all(r in smoke.saved for r in smoke.rows)


def test_report_keeps_another_benchmarks_section(smoke: Smoke) -> None:
    assert DECODE_SECTION in smoke.report


def test_report_has_one_training_section_marked_as_a_smoke_run(smoke: Smoke) -> None:
    assert smoke.report.count("<!-- train:start -->") == 1 and smoke.report.count("<!-- train:end -->") == 1
    assert "## Training speed (CPU) — SMOKE RUN, tiny sizes, not a measurement" in smoke.report


def test_report_has_the_training_table_a_row_per_system(smoke: Smoke) -> None:
    lines = smoke.report.splitlines()
    assert "| system | fp32 | bf16 |" in lines
    for system in available_systems():
        assert any(line.startswith(f"| {system} | ") for line in lines), system


def test_report_has_the_ratio_and_its_spread_over_rounds(smoke: Smoke) -> None:
    lines = smoke.report.splitlines()
    assert "| ours / faster peer | fp32 | bf16 | needed |" in lines
    assert any(
        line.startswith("| ratio | ") and line.endswith(f" | >= {train_speed.BAR}x |") for line in lines
    )
    assert any(line.startswith("| single rounds, lowest-highest | ") for line in lines)


def test_report_has_the_real_batch_table_a_row_per_precision(smoke: Smoke) -> None:
    lines = smoke.report.splitlines()
    header = "| precision | real tok/s (non-pad) | real padded tok/s | synthetic tok/s | real / synthetic |"
    assert header in lines
    assert all(any(line.startswith(f"| {p} | ") for line in lines) for p in PRECISIONS)


def test_report_has_the_memory_table_a_row_per_corpus(smoke: Smoke) -> None:
    lines = smoke.report.splitlines()
    assert any(
        line.startswith("| pairs | tokens (both sides) | index (.idx, both sides) |") for line in lines
    )
    assert sum(line.startswith(("| 2,000 | ", "| 20,000 | ")) for line in lines) == len(MEMORY_CORPORA)


def test_the_subword_sampling_rows_compare_sampling_off_and_on_for_each_precision(tmp_path):
    corpus = make_text_corpus(tmp_path, n_train=1000, n_val=8)  # a few batches of 2,048 tokens
    assert corpus.clean_dir is not None
    rows = train_speed.benchmark(
        smoke=True,
        params_file=REPO / "params.yaml",
        bin_dir=corpus.bin_dir,
        sampled_from=(corpus.bpe_dir, corpus.clean_dir),
        out_md=tmp_path / "bench.md",
        memory_check=False,
        say=lambda _: None,
    )
    by_task = {(r["task"], r["precision"], r["metric"]): r["value"] for r in rows}
    for precision in PRECISIONS:
        for task in (train_speed.SAMPLING_OFF, train_speed.SAMPLING_ON):
            assert by_task[(task, precision, "tokens_per_s")] > 0
    assert by_task[(train_speed.SAMPLER, "-", "sentences_per_s")] > 0
    assert by_task[(train_speed.SAMPLER, "-", "bpe_dropout_alpha")] == 0.1  # params.yaml: sampling off
    report = (tmp_path / "bench.md").read_text()
    assert "Subword sampling (bpe_dropout, alpha 0.1)" in report
    assert "| precision | sampling off | sampling on |" in report


def test_utilization_is_each_systems_flops_over_the_measured_peak(smoke: Smoke) -> None:
    get = {(r["system"], r["precision"], r["metric"]): r["value"] for r in smoke.rows}
    speed = speeds(smoke.rows)
    for precision in PRECISIONS:
        peak = get[(train_speed.PEAK, precision, "gemm_peak_tflops")] * 1e12
        per_token = get[(train_speed.PEAK, precision, "model_mflop_per_target_token")] * 1e6
        assert peak > 0 and per_token > 0
        for system in {s for s, p in speed if p == precision}:
            mfu = get[(system, precision, "mfu_of_measured_peak")]
            assert mfu == pytest.approx(speed[(system, precision)] * per_token / peak, rel=0.05, abs=1e-3)
    assert "Model FLOP utilization" in smoke.report and "torch.matmul peak, TFLOP/s" in smoke.report

"""bench/decode_speed.py on a tiny model: every installed system runs; rows and report have the right shape.

One smoke run per module (the `smoke` fixture); each test checks one claim about it, so a failing
test's name says what broke.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
import torch

from bench import decode_speed as D
from bench.decoding import TASKS, Setup

SETUP = Setup(8, 4, 4, 1, smoke=True)  # 8 sentences in batches of 4, 4 decoding steps, 1 round
METRICS = ("sentences_per_s", "tokens_per_s")
OTHER = {
    "system": "ours",
    "task": "train_synthetic_8x8",
    "precision": "fp32",
    "metric": "tokens_per_s",
    "value": 1.0,
}
TRAIN_SECTION = "<!-- train:start -->\nkept\n<!-- train:end -->"


@dataclass(frozen=True)
class Smoke:
    rows: list[dict]  # what benchmark() returned
    saved: list[dict]  # the JSON file afterwards
    report: str  # the Markdown file afterwards


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> Smoke:
    """One smoke run of every installed system, into files that hold another benchmark's row and section."""
    root = tmp_path_factory.mktemp("bench")
    out, md = root / "bench.json", root / "bench.md"
    out.write_text(json.dumps([OTHER]))
    md.write_text(f"# Benchmarks\n\n{TRAIN_SECTION}\n")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        rows = D.benchmark(SETUP, systems=D.available_systems(), out=out, md=md)
    finally:
        torch.set_num_threads(threads)
    return Smoke(rows, json.loads(out.read_text()), md.read_text())


def measured(rows: list[dict], metric: str) -> dict[tuple[str, str, str], float]:
    """(system, precision, task) -> value of `metric`."""
    return {(r["system"], r["precision"], r["task"]): r["value"] for r in rows if r["metric"] == metric}


# --- the rows ---------------------------------------------------------------------------


def test_every_row_has_the_fields_a_result_needs_and_is_marked_smoke(smoke: Smoke) -> None:
    assert smoke.rows
    assert all(set(r) == {"system", "task", "precision", "metric", "value", "smoke"} for r in smoke.rows)
    assert all(r["smoke"] is True for r in smoke.rows)


def test_every_system_is_measured_once_on_every_task_in_both_units(smoke: Smoke) -> None:
    want = {(*D.ROWS[s], t, m) for s in D.available_systems() for t in TASKS for m in METRICS}
    got = [(r["system"], r["precision"], r["task"], r["metric"]) for r in smoke.rows]
    assert sorted(got) == sorted(want)


def test_every_rate_is_positive(smoke: Smoke) -> None:
    assert all(r["value"] > 0 for r in smoke.rows), [r for r in smoke.rows if r["value"] <= 0]


def test_tokens_per_s_is_the_steps_times_sentences_per_s(smoke: Smoke) -> None:
    sentences, tokens = measured(smoke.rows, "sentences_per_s"), measured(smoke.rows, "tokens_per_s")
    for key, rate in sentences.items():
        assert tokens[key] == pytest.approx(SETUP.steps * rate, abs=0.05), key


# --- the files --------------------------------------------------------------------------


def test_json_file_has_the_rows_and_keeps_another_benchmarks(smoke: Smoke) -> None:
    assert OTHER in smoke.saved
    assert len(smoke.saved) == len(smoke.rows) + 1
    assert all(r in smoke.saved for r in smoke.rows)


def test_report_keeps_another_benchmarks_section(smoke: Smoke) -> None:
    assert TRAIN_SECTION in smoke.report


def test_report_has_one_decoding_section_marked_as_a_smoke_run(smoke: Smoke) -> None:
    assert smoke.report.count(D.DECODE_START) == 1 and smoke.report.count(D.DECODE_END) == 1
    assert "## Decoding speed (CPU) — SMOKE RUN, tiny sizes, not a measurement" in smoke.report


def test_report_has_the_speed_table_a_row_per_system(smoke: Smoke) -> None:
    lines = smoke.report.splitlines()
    assert any(line.startswith("| system | precision | greedy sent/s | greedy tok/s |") for line in lines)
    for system in D.available_systems():
        name, precision = D.ROWS[system]
        assert sum(line.startswith(f"| {name} | {precision} | ") for line in lines) == 1, system


def test_report_has_the_bars_ours_against_uncached(smoke: Smoke) -> None:
    lines = smoke.report.splitlines()
    assert "| bar (sentences/s) | greedy | beam 5 | needed |" in lines
    (uncached,) = [line for line in lines if line.startswith("| ours / uncached | ")]
    assert uncached.endswith(" | >= 3.0x |")


@pytest.mark.parametrize("use_cache", [True, False])
def test_our_runner_makes_every_output_the_fixed_length_at_every_beam(use_cache: bool) -> None:
    """The systems must do the same work: FixedLength refuses EOS until the last step, cached or not."""
    from bench.decoding import torch_runner
    from pipeline.model.transformer import build_model
    from tests.support.models import tiny_model_params

    torch.manual_seed(0)
    model = build_model(tiny_model_params(max_positions=64), 30, 30).eval()
    batches = [[[5, 6, 7], [8, 9]], [[10, 11, 12, 13]]]
    for beam in (1, 3):
        assert torch_runner(model, 7, use_cache, workers=1)(batches, beam) == [7, 7, 7]


def test_a_gpu_runs_rows_and_section_are_its_own_and_keep_the_cpus(smoke: Smoke, tmp_path) -> None:
    out, md = tmp_path / "bench.json", tmp_path / "bench.md"
    out.write_text(json.dumps(smoke.saved))
    md.write_text(smoke.report)
    gpu = [r | {"task": r["task"] + "_cuda", "value": 1000.0} for r in smoke.rows]  # as a GPU run names them
    merged = D.merge_rows(out, gpu)
    assert all(r in merged for r in smoke.saved)  # no CPU row replaced
    section = D.decode_section(merged, {}, "bench.decode_speed --device cuda", "note", device="cuda")
    assert section.startswith(D.GPU_START) and "## Decoding speed (GPU)" in section
    assert "| 1,000.0 |" in section and "needed" not in section  # its own rows; the CPU's aims left out
    D.write_markdown(md, section, device="cuda")
    both = md.read_text()
    assert both.count(D.DECODE_START) == 1 and both.count(D.GPU_START) == 1
    cpu = D.decode_section(merged, {}, "cmd", "note")
    assert "| 1,000.0 |" not in cpu and "needed" in cpu


def test_on_a_gpu_the_cpus_ways_to_share_threads_are_left_out() -> None:
    on_gpu = D.available_systems("cuda")
    assert "pytorch-1-worker" not in on_gpu and "ctranslate2-2-workers" not in on_gpu
    assert "pytorch-kv-cache" in on_gpu

"""bench/train_speed.py's --smoke mode: every part runs, and its rows and report have the right shape.

One smoke run per module (the `smoke` fixture); each test checks one claim about it, so a failing
test's name says what broke.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
import torch

from bench import train_speed
from bench.common import row
from bench.training import available_systems, make_setup
from pipeline import params as P
from tests.support.repo import REPO

PRECISIONS = ("fp32", "bf16")
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
    out_json, out_md = root / "bench.json", root / "bench.md"
    out_json.write_text(json.dumps([OTHER]))
    out_md.write_text(f"# Benchmarks\n\n{DECODE_SECTION}\n")
    rows = train_speed.benchmark(
        smoke=True,
        params_file=REPO / "params.yaml",
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


# --- on a GPU (the arithmetic; the GPU check runs it for real) ---------------------------------------


def test_on_a_gpu_mfu_is_each_systems_model_flops_over_the_datasheet_peak(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *_: "NVIDIA H100 80GB HBM3")
    setup = make_setup(P.load(REPO / "params.yaml"), False, 1.0, 1, device="cuda", shape=(256, 32))
    assert setup.task == "train_synthetic_cuda_256x32"
    speeds = [row("ours", setup.task, "bf16", "tokens_per_s", 200_000.0)]
    speeds += [row("hf-marian", setup.task, "bf16", "tokens_per_s", 100_000.0)]
    found = train_speed.utilization([setup], speeds, ["bf16"], setup.vocab)
    per_token = next(r["value"] for r in found if r["metric"] == "model_mflop_per_target_token") * 1e6
    mfu = {r["system"]: r["value"] for r in found if r["metric"] == train_speed.MFU}
    assert mfu["ours"] == pytest.approx(200_000.0 * per_token / 989e12, abs=1e-5)  # H100 SXM, bf16 dense
    assert mfu["ours"] == pytest.approx(2 * mfu["hf-marian"], abs=2e-5)
    section = train_speed.train_section(speeds + found, setup, {}, "bench.train_speed --device cuda")
    assert section.startswith(train_speed.GPU_START) and section.endswith(train_speed.GPU_END)
    assert "## Training speed (GPU)" in section and "Model FLOP utilization" in section


def test_on_a_cpu_there_is_no_datasheet_mfu(smoke: Smoke) -> None:
    assert not any(r["metric"] == train_speed.MFU for r in smoke.rows)
    assert "Model FLOP utilization" not in smoke.report


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_without_a_gpu_device_cuda_is_refused_in_one_line(tmp_path) -> None:
    from click.testing import CliRunner

    out = tmp_path / "b.json"
    done = CliRunner().invoke(train_speed.main, ["--device", "cuda", "--smoke", "--out-json", str(out)])
    assert done.exit_code == 2 and "torch sees no CUDA GPU here" in done.output and not out.exists()


def test_a_bad_shape_is_refused_naming_the_form_it_takes(tmp_path) -> None:
    from click.testing import CliRunner

    for bad in ("128", "128x1", "0x16", "ax16"):
        done = CliRunner().invoke(
            train_speed.main, ["--smoke", "--shape", bad, "--out-json", str(tmp_path / "b")]
        )
        assert done.exit_code == 2 and "sentences x tokens, as 128x16" in done.output, bad
    assert train_speed.parse_shape("256x32") == (256, 32)


@pytest.mark.parametrize("system", ["ours", "torch-nn-transformer"])
def test_a_non_finite_loss_stops_the_benchmark_instead_of_being_timed(system, monkeypatch) -> None:
    from bench import training
    from pipeline.training.step import UpdateStep

    params = P.load(REPO / "params.yaml")
    setup = make_setup(params, True, 1.0, 1)
    step = training.BUILDERS[system](training.with_precision(params, setup.model, "fp32"), setup.vocab, 1)
    batch = training.synthetic_batch(setup.vocab, setup.batch, setup.length, 1)
    step(batch)  # a finite loss: an update
    if system == "ours":  # UpdateStep skips an update whose loss is not finite (tests/unit/training)
        monkeypatch.setattr(UpdateStep, "update", lambda self, batches: None)
    else:  # the peer's own loss turned NaN, gradients and all
        loss = training.F.cross_entropy
        monkeypatch.setattr(training.F, "cross_entropy", lambda *a, **k: loss(*a, **k) * float("nan"))
    with pytest.raises(RuntimeError, match="non-finite loss"):
        step(batch)

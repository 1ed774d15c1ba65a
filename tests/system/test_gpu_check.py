"""bench/gpu_check.sh: its CPU rehearsal (--dry-run) runs every section of the GPU run and writes
only under --out; without a GPU the real run refuses at once and writes nothing. Also the parts a
GPU run cannot show wrong by itself: the FLOPs formula, the peak table, decoding a model directory."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bench import gpu_check
from bench.flops import non_embedding_parameters, peak_flops, update_flops
from pipeline.model.transformer import build_model, count_parameters
from tests.support.models import make_model_dir
from tests.support.repo import BASE, REPO

pytestmark = pytest.mark.slow

TRAIN_RUNS = {
    ("default", "bf16", False),
    ("default", "fp16", False),
    ("default", "fp32", False),
    ("base", "bf16", False),
    ("base", "bf16", True),
}
TEST_MODULES = {f"tests.gpu.test_cuda_{m}" for m in ("attention", "training", "resume", "decoding", "data")}


def run_check(*args: str, timeout: float) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHON=sys.executable)
    command = ["bash", "bench/gpu_check.sh", *args]
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def reports_state() -> dict[str, float]:
    return {p.name: p.stat().st_mtime for p in (REPO / "reports").iterdir()}


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, dict, Path]:
    out = tmp_path_factory.mktemp("gpu-check") / "out"
    before = reports_state()
    done = run_check("--dry-run", "--out", str(out), timeout=300)
    assert reports_state() == before, "the dry run wrote to reports/"
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return done, json.loads((out / "gpu.json").read_text()), out


def test_the_dry_run_runs_every_section_and_times_it(dry_run):
    done, report, _ = dry_run
    assert report["format"] == gpu_check.FORMAT and report["dry_run"] is True
    assert report["problems"] == []
    # serve needs a trained model and its test source, which the rehearsal is not given (tested below)
    expected = dict.fromkeys(gpu_check.SECTIONS, "ran") | {"serve": "skipped"}
    assert {n: s["status"] for n, s in report["sections"].items()} == expected
    assert "no trained model" in report["sections"]["serve"]["reason"]
    for name, status in expected.items():  # elapsed per section, printed as it goes
        assert f"[gpu_check] {name}: {status} in" in done.stdout
    # The time is recorded, not asserted: a wall-clock bound fails on a busy machine (speed is bench's).
    assert report["total_seconds"] > 0


def test_the_dry_run_collects_every_cuda_test_and_skips_it_for_the_missing_gpu(dry_run):
    tests = dry_run[1]["sections"]["tests"]
    cases = tests["cases"]
    assert {c["name"].split("::")[0] for c in cases} == TEST_MODULES
    assert len(cases) >= 30 and tests["counts"]["skipped"] == len(cases)
    assert all("needs a CUDA GPU" in c["message"] for c in cases)


def test_the_dry_run_trains_every_configuration_but_fp16(dry_run):
    train = dry_run[1]["sections"]["train"]
    assert train["corpus"].startswith("synthetic")
    runs = {(r["name"], r["precision"], r["compile"]): r for r in train["runs"]}
    assert set(runs) == TRAIN_RUNS
    fp16 = runs.pop(("default", "fp16", False))
    assert fp16["status"] == "skipped" and "needs CUDA" in fp16["reason"]
    for r in runs.values():
        assert r["status"] == "ran" and r["finite"] and r["loss_last"] < r["loss_first"]
        assert r["target_tokens_per_s"] > 0 and r["model_tflops_per_s"] > 0
        assert r["mfu"] is None and r["peak_tflops"] is None  # no peak for a CPU
        assert r["flops_per_target_token"] > 6 * r["parameters"] * 0.5
    eager, compiled = runs["base", "bf16", False], runs["base", "bf16", True]
    assert compiled["compiled"]["unique_graphs"] >= 1 and eager["compiled"] is None
    # Same weights and first batch: dynamo's capture changes no arithmetic.
    assert compiled["loss_first"] == pytest.approx(eager["loss_first"], rel=1e-4)


def test_the_dry_run_runs_torchrun_with_gloo_and_the_train_stage_under_it(dry_run):
    run = dry_run[1]["sections"]["torchrun"]
    probe, train = run["ddp_probe"], run["pipeline_train"]
    assert probe["returncode"] == 0 and probe["backend"] == "gloo" and probe["world_size"] == 1
    assert probe["all_reduce_ok"] and probe["finite"] and len(probe["losses"]) == 2
    assert train["returncode"] == 0
    assert train["summary"]["steps"] == 2 and train["summary"]["device"] == "cpu"
    assert train["summary"]["world_size"] == 1 and train["summary"]["precision"] == "bf16"


def test_the_dry_run_decodes_greedy_and_beam_five(dry_run):
    decode = dry_run[1]["sections"]["decode"]
    assert decode["source"].startswith("synthetic") and decode["device"] == "cpu"
    assert [r["beam"] for r in decode["runs"]] == [1, 5]
    assert all(r["sentences"] == 8 and r["sentences_per_s"] > 0 for r in decode["runs"])


def test_the_dry_run_writes_its_markdown_section(dry_run):
    md = (dry_run[2] / "bench.md").read_text()
    assert md.count(gpu_check.GPU_START) == 1 and md.count(gpu_check.GPU_END) == 1
    assert "DRY RUN" in md and "| default (32, 1+1, 64, 300) | fp16 | no | 128 | skipped" in md
    assert "**Decoding** on cpu" in md and "Problems:\n\n- none" in md


def test_without_a_gpu_the_real_run_refuses_at_once_and_writes_nothing(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    before = reports_state()
    done = run_check("--out", str(tmp_path / "out"), timeout=120)
    assert done.returncode == 2
    assert "no CUDA GPU here" in done.stderr and "--dry-run" in done.stderr
    assert "[gpu_check]" not in done.stdout  # no section started
    assert not (tmp_path / "out").exists() and reports_state() == before
    done = run_check(timeout=120)  # the default --out, reports/
    assert done.returncode == 2 and reports_state() == before


def test_the_dry_run_never_writes_to_reports():
    done = run_check("--dry-run", "--out", "reports", timeout=120)
    assert done.returncode == 2 and "never to reports/" in done.stderr


def test_the_flops_formula_counts_every_non_embedding_parameter_and_attention_pair():
    cfg = dataclasses.replace(BASE.model, d_model=8, n_heads=2, d_ff=16, n_layers=1, tie_embeddings="all")
    model = build_model(cfg, 10, 10)
    src, tgt = [3, 5], [2, 4]
    p_embedding = 10 * 8  # one shared table; sinusoidal positions are no parameter
    p_layers = count_parameters(model) - p_embedding
    p_enc, p_dec = non_embedding_parameters(model)
    assert p_enc + p_dec == p_layers and p_enc < p_dec  # the decoder has cross-attention too
    matmuls = 6 * (p_enc * 8 + (p_dec + 10 * 8) * 6)
    attention = 12 * 8 * ((9 + 25) + (4 + 16 + 2 * 3 + 4 * 5))
    assert update_flops(model, src, tgt) == matmuls + attention


@pytest.mark.parametrize(
    "name,precision,tf32,tflops",
    [
        ("NVIDIA H200", "bf16", False, 989.0),
        ("NVIDIA H200", "fp32", False, 67.0),
        ("NVIDIA H200", "fp32", True, 494.5),
        ("NVIDIA H100 80GB HBM3", "fp16", False, 989.0),
        ("NVIDIA H100 PCIe", "bf16", False, 756.0),
        ("NVIDIA L40S", "bf16", False, 362.0),  # not the L4's row
        ("NVIDIA L4", "bf16", False, 121.0),
        ("NVIDIA A100-SXM4-80GB", "fp32", False, 19.5),
        ("Tesla T4", "bf16", False, None),
    ],
)
def test_the_peak_table(name, precision, tf32, tflops):
    peak = peak_flops(name, precision, tf32)
    assert (peak is None) if tflops is None else peak == pytest.approx(tflops * 1e12)


def test_decoding_a_model_directory_on_its_test_file(tmp_path):
    model_dir = make_model_dir(tmp_path / "model")
    test_src = tmp_path / "test.src"
    test_src.write_text("der hund läuft\neine katze\n\ndas kind springt\n", encoding="utf-8")
    params = BASE
    check = gpu_check.Check(
        params,
        gpu_check.make_sizes(params, True),
        torch.device("cpu"),
        True,
        tmp_path,
        None,
        model_dir,
        test_src,
    )
    result = gpu_check.decode_section(check, 60.0)
    assert result["source"] == f"{model_dir} on {test_src}"
    assert [(r["beam"], r["sentences"]) for r in result["runs"]] == [(1, 4), (5, 4)]


def test_a_timed_out_test_run_still_reports_the_tests_it_finished():
    output = (
        "tests/gpu/test_cuda_data.py::test_a_batch[True] PASSED   [ 10%]\n"
        "tests/gpu/test_cuda_resume.py::test_a_killed_run[fp16-True] FAILED   [ 20%]\n"
    )
    cases = gpu_check.verbose_cases(output)
    assert [(c["name"], c["outcome"]) for c in cases] == [
        ("tests.gpu.test_cuda_data::test_a_batch[True]", "passed"),
        ("tests.gpu.test_cuda_resume::test_a_killed_run[fp16-True]", "failed"),
    ]


def test_problems_name_failed_sections_tests_non_finite_losses_and_compile_mismatches():
    run = dict(name="base", precision="bf16", status="ran", finite=True)
    report = {
        "sections": {
            "tests": {"status": "failed", "cases": [{"name": "t::a", "outcome": "failed"}]},
            "train": {
                "status": "ran",
                "runs": [
                    run | {"compile": False, "loss_first": 10.0},
                    run | {"compile": True, "loss_first": 10.5},
                    run | {"name": "default", "compile": False, "loss_first": 9.0, "finite": False},
                ],
            },
            "decode": {"status": "ran"},
        }
    }
    found = gpu_check.problems(report)
    assert found[0].startswith("section tests") and "test t::a: failed" in found
    assert "train default bf16: a non-finite loss" in found
    assert any("compiled first loss 10.5000, eager 10.0000" in p for p in found) and len(found) == 4


def test_serving_a_model_directory_under_load(tmp_path):
    model_dir = make_model_dir(tmp_path / "model")
    test_src = tmp_path / "test.src"
    test_src.write_text("der hund läuft\neine katze\n\ndas kind springt\nzwei männer\n", encoding="utf-8")
    params = BASE
    sizes = gpu_check.make_sizes(params, True)
    check = gpu_check.Check(params, sizes, torch.device("cpu"), True, tmp_path, None, model_dir, test_src)
    result = gpu_check.serve_section(check, 120.0)
    assert result["status"] == "ran" and result["source"] == f"{model_dir} on {test_src}"
    assert result["metrics"]["errors"] == 0, result["detail"]["errors"]
    assert result["metrics"]["differs_from_offline"] == 0
    assert result["metrics"]["bad_not_refused"] == 0, result["detail"]["bad"]
    assert result["metrics"]["sentences_per_s"] > 0
    assert "**Serving**" in "\n".join(gpu_check.serve_lines(result))

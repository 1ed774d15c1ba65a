"""bench/gemm_choice.py on tiny sizes: both GEMM routes run and are reported; the switch works both ways."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from bench import gemm_choice as G
from pipeline.model import linear


def test_mkl_gemms_switches_the_route_off_and_back():
    if not linear._ONEDNN:
        pytest.skip("this torch build has no oneDNN linear, or PIPELINE_CPU_GEMM=mkl is set")
    with G.mkl_gemms():
        assert not linear._ONEDNN
    assert linear._ONEDNN


def test_gemm_choice_smoke_rows_and_report(tmp_path: Path):
    if not linear._ONEDNN:
        pytest.skip("this torch build has no oneDNN linear, or PIPELINE_CPU_GEMM=mkl is set")
    out, md = tmp_path / "bench.json", tmp_path / "bench.md"
    md.write_text("# Benchmarks\n\n<!-- train:start -->\nkept\n<!-- train:end -->\n")
    result = CliRunner().invoke(G.main, ["--smoke", "--out", str(out), "--md", str(md)])
    assert result.exit_code == 0, result.output
    rows = json.loads(out.read_text())
    systems = {(r["system"], r["task"], r["metric"]) for r in rows}
    for system in (G.ONEDNN, G.MKL):
        assert (system, "decode_greedy", "sentences_per_s") in systems
        assert (system, "decode_beam5", "sentences_per_s") in systems
        assert any(s == system and t.startswith("train_synthetic") for s, t, _ in systems)
    assert all(r["value"] > 0 and r["smoke"] for r in rows)
    text = md.read_text()
    assert "<!-- train:start -->\nkept\n<!-- train:end -->" in text
    assert text.count(G.GEMM_START) == 1 and "oneDNN / MKL" in text and "SMOKE RUN" in text

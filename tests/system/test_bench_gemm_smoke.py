"""bench/gemm_choice.py on tiny sizes: both GEMM routes run and are reported; the switch works both ways.

One smoke run of the command per module (the `smoke` fixture); each test checks one claim about it,
so a failing test's name says what broke.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
from click.testing import CliRunner

from bench import gemm_choice as G
from pipeline.model import linear

ROUTES = (G.ONEDNN, G.MKL)
TRAIN_SECTION = "<!-- train:start -->\nkept\n<!-- train:end -->"

pytestmark = pytest.mark.skipif(
    not linear.onednn_enabled(),
    reason="this torch build has no oneDNN linear, or PIPELINE_CPU_GEMM=mkl is set",
)


@dataclass(frozen=True)
class Smoke:
    rows: list[dict]  # the JSON file the command wrote
    report: str  # the Markdown file afterwards


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> Smoke:
    """One `gemm_choice --smoke` run, into a Markdown file that holds another benchmark's section."""
    root = tmp_path_factory.mktemp("bench")
    out, md = root / "bench.json", root / "bench.md"
    md.write_text(f"# Benchmarks\n\n{TRAIN_SECTION}\n")
    result = CliRunner().invoke(G.main, ["--smoke", "--out", str(out), "--md", str(md)])
    assert result.exit_code == 0, result.output
    return Smoke(json.loads(out.read_text()), md.read_text())


def test_mkl_gemms_switches_the_route_off_and_back() -> None:
    with G.mkl_gemms():
        assert not linear.onednn_enabled()
    assert linear.onednn_enabled()


# --- the rows ---------------------------------------------------------------------------


def test_every_row_is_marked_smoke_and_has_a_positive_rate(smoke: Smoke) -> None:
    assert smoke.rows
    assert all(r["smoke"] is True and r["value"] > 0 for r in smoke.rows), smoke.rows


def test_both_routes_decode_greedy_and_beam5(smoke: Smoke) -> None:
    measured = {(r["system"], r["task"], r["metric"]) for r in smoke.rows}
    for route in ROUTES:
        assert (route, "decode_greedy", "sentences_per_s") in measured, route
        assert (route, "decode_beam5", "sentences_per_s") in measured, route


def test_both_routes_train(smoke: Smoke) -> None:
    for route in ROUTES:
        assert any(
            r["system"] == route and r["task"].startswith("train_synthetic") and r["metric"] == "tokens_per_s"
            for r in smoke.rows
        ), route


# --- the report -------------------------------------------------------------------------


def test_report_keeps_another_benchmarks_section(smoke: Smoke) -> None:
    assert TRAIN_SECTION in smoke.report


def test_report_has_one_gemm_section_marked_as_a_smoke_run(smoke: Smoke) -> None:
    assert smoke.report.count(G.GEMM_START) == 1 and smoke.report.count(G.GEMM_END) == 1
    assert "## float32 GEMMs: oneDNN against MKL (CPU) — SMOKE RUN, not a measurement" in smoke.report


def test_report_has_a_row_per_route_and_their_ratio(smoke: Smoke) -> None:
    lines = smoke.report.splitlines()
    for label in ("| ours, oneDNN GEMMs | ", "| ours, MKL GEMMs | "):
        assert sum(line.startswith(label) for line in lines) == 1, label
    (ratio,) = [line for line in lines if line.startswith("| oneDNN / MKL | ")]
    cells = ratio.strip("|").split("|")[1:]
    assert len(cells) == 3 and all(c.strip().endswith("x") and c.strip() != "nanx" for c in cells), ratio

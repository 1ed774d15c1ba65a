"""bench/data_scale.py at 2,000 pairs: every stage and floor is measured, and its rows and report have the
right shape.

One smoke run per module (the `smoke` fixture); each test checks one claim about it, so a failing
test's name says what broke.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from bench import data_scale as D
from tests.support.repo import REPO

MIRROR = REPO.parent / "shared" / "corpora"
PAIRS, WORKERS = 2_000, (1, 2)
OTHER = {
    "system": "ours",
    "task": "decode_greedy",
    "precision": "fp32",
    "metric": "sentences_per_s",
    "value": 1.0,
}
TRAIN_SECTION = "<!-- train:start -->\nkept\n<!-- train:end -->"

pytestmark = pytest.mark.skipif(
    not (MIRROR / D.M30K / "train.de.gz").is_file(), reason="needs the corpus mirror's Multi30k"
)


@dataclass(frozen=True)
class Smoke:
    saved: list[dict]  # the JSON file afterwards
    report: str  # the Markdown file afterwards
    plot: Path


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> Smoke:
    """One smoke run into files that already hold another benchmark's row and section."""
    root = tmp_path_factory.mktemp("bench")
    out, md, plot = root / "bench.json", root / "bench.md", root / "figures" / "data.png"
    out.write_text(json.dumps([OTHER]))
    md.write_text(f"# Benchmarks\n\n{TRAIN_SECTION}\n")
    args = ["--sizes", str(PAIRS), "--workers", ",".join(map(str, WORKERS)), "--vocab-size", "500"]
    args += ["--mirror", str(MIRROR), "--out", str(out), "--md", str(md), "--plot", str(plot), "--smoke"]
    result = CliRunner().invoke(D.main, args)
    assert result.exit_code == 0, result.output
    return Smoke(json.loads(out.read_text()), md.read_text(), plot)


def ours(smoke: Smoke) -> list[dict]:
    return [r for r in smoke.saved if r.get("smoke")]


def test_every_stage_is_measured_in_every_metric_clean_and_binarize_with_each_worker_count(
    smoke: Smoke,
) -> None:
    got = {(r["task"], r["metric"], r["workers"]) for r in ours(smoke) if r["system"] == "ours"}
    for stage in D.STAGES:
        for metric in D.METRICS:
            assert any(t == f"data-{stage}" and m == metric for t, m, _ in got), (stage, metric)
    assert (
        {w for t, m, w in got if t == "data-clean"}
        == {w for t, m, w in got if t == "data-binarize"}
        == set(WORKERS)
    )


def test_clean_is_also_measured_with_the_web_rules_on_with_the_most_workers(smoke: Smoke) -> None:
    web = {(r["metric"], r["workers"]) for r in ours(smoke) if r["task"] == "data-clean-web"}
    assert {(m, max(WORKERS)) for m in (*D.METRICS, "ns_per_char")} == web
    assert "data-clean-web at 2,000 pairs, 2 workers: <= 100 ns a character and worker" in smoke.report


def test_the_floors_are_measured(smoke: Smoke) -> None:
    floors = {(r["task"], r["metric"]) for r in ours(smoke) if r["system"] == "floor"}
    assert {("data-readwrite", "seconds"), ("data-spm-encode", "lines_per_s")} <= floors


def test_rows_have_the_issues_fields_and_positive_values(smoke: Smoke) -> None:
    for r in ours(smoke):
        assert set(r) == {"system", "task", "metric", "pairs", "workers", "value", "smoke"}, r
        assert r["pairs"] == PAIRS and r["value"] > 0, r


def test_lines_per_s_is_the_pairs_over_the_seconds(smoke: Smoke) -> None:
    rows = ours(smoke)
    for r in rows:
        if r["metric"] == "seconds":
            rate = D.value(rows, r["system"], r["task"], "lines_per_s", r["pairs"], r["workers"])
            assert rate == pytest.approx(PAIRS / r["value"], rel=0.01)


def test_other_benchmarks_rows_and_sections_are_kept(smoke: Smoke) -> None:
    assert OTHER in smoke.saved
    assert TRAIN_SECTION in smoke.report
    assert D.DATA_START in smoke.report and D.DATA_END in smoke.report


def test_the_report_shows_the_plot(smoke: Smoke) -> None:
    assert smoke.plot.is_file() and smoke.plot.read_bytes().startswith(b"\x89PNG")
    assert "](figures/data.png)" in smoke.report


def test_clean_and_the_read_write_floor_have_a_cost_a_character(smoke: Smoke) -> None:
    rows = [r for r in ours(smoke) if r["metric"] == "ns_per_char"]
    assert {(r["task"], r["workers"]) for r in rows} == {
        ("data-readwrite", 1),
        ("data-clean-web", max(WORKERS)),
        *(("data-clean", w) for w in WORKERS),
    }
    for r in rows:  # the same characters: the cost per worker is seconds x workers over them
        seconds = D.value(ours(smoke), r["system"], r["task"], "seconds", PAIRS, r["workers"])
        clean_one = D.value(ours(smoke), "ours", "data-clean", "ns_per_char", PAIRS, 1)
        one_s = D.value(ours(smoke), "ours", "data-clean", "seconds", PAIRS, 1)
        assert r["value"] == pytest.approx(clean_one * seconds * r["workers"] / one_s, rel=0.01)


def test_the_targets_table_says_which_are_missed() -> None:
    def rows(task: str, workers: int, seconds: dict[int, float]) -> list[dict]:
        return [
            {"system": "ours", "task": task, "metric": "seconds", "pairs": n, "workers": workers, "value": v}
            for n, v in seconds.items()
        ]

    got = rows("data-clean", 1, {1_000_000: 10.0, 4_000_000: 40.0})
    got += rows("data-clean", 2, {1_000_000: 6.0, 4_000_000: 30.0})  # 5x the time for 4x the pairs
    checked = {target: (measured, ok) for target, measured, ok in D.targets(got, [1_000_000, 4_000_000])}
    assert checked["data-clean, 1 worker: time 4M / 1M <= 4.4"] == ("4.00", True)
    assert checked["data-clean, 2 workers: time 4M / 1M <= 4.4"] == ("5.00", False)
    assert checked["data-clean at 1,000,000 pairs: 2 workers >= 1.7x as fast as 1"] == ("1.67x", False)
    assert checked["data-clean at 4,000,000 pairs: 2 workers >= 1.7x as fast as 1"] == ("1.33x", False)
    table = "\n".join(D.targets_table(D.targets(got, [1_000_000, 4_000_000])))
    assert "1 of 4 met" in table and table.count("| **no** |") == 3

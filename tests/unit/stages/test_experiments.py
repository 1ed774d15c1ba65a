"""The experiments command: the runs table from MLflow or DVC, printed as Markdown or written as CSV."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from pipeline.stages import experiments as experiments_stage
from tests.support.repo import REPO
from tests.support.tables import table_rows


def test_cli_dvc_source_prints_and_writes_csv(
    dvc_repo: tuple[Path, list], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, _ = dvc_repo
    monkeypatch.chdir(root)
    monkeypatch.setenv("DVC_NO_ANALYTICS", "1")
    result = CliRunner().invoke(
        experiments_stage.command, ["--source", "dvc", "--out", str(root / "exps.csv")]
    )
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    head = "| # | run | commit | status | model.n_layers | train.lr | flickr BLEU | mscoco BLEU | val BLEU |"
    assert lines[0].startswith(head)
    assert any("| six |" in line and "| 37.0 | 32.0 | 36.0 |" in line for line in lines)
    csv = pd.read_csv(root / "exps.csv")
    assert set(csv["run"]) == {"workspace", "main", "six", "slow", "queued"}
    assert {"test.flickr.bleu", "test.mscoco.chrf", "dev_ter"} <= set(csv.columns)  # the CSV has every score


def test_cli_mlflow_source_writes_markdown(
    store: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store["uri"])
    out = tmp_path / "reports" / "experiments.md"
    result = CliRunner().invoke(
        experiments_stage.command, ["--params", str(REPO / "params.yaml"), "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert text.startswith("# Experiments\n")
    rows = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line]
    head = (
        "| # | run | commit | status | model.dropout | model.n_layers | 2016_flickr BLEU | 2017_mscoco BLEU |"
    )
    assert rows[0].startswith(head)
    assert rows[1].startswith("| 1 | exp-four | 0123456 | finished | 0.3 | 4 | 35.2 | 26.5 | 34.0 |")
    assert "common prefix `multi30k-test_`" in text
    assert "2:04:07 |" in rows[1] and "4,012,345" in rows[1]  # train time h:mm:ss, parameters with commas
    assert rows[3].startswith("| 3 | exp-six | 0123456 | failed |")


def test_cli_without_runs_is_a_user_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    result = CliRunner().invoke(experiments_stage.command, ["--params", str(REPO / "params.yaml")])
    assert result.exit_code == 1 and "no MLflow database" in result.output
    assert "MLFLOW_TRACKING_URI" in result.output


def test_cli_baseline_adds_differences_and_groups_seeds(
    decode_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(decode_repo)
    monkeypatch.setenv("DVC_NO_ANALYTICS", "1")
    result = CliRunner().invoke(experiments_stage.command, ["--source", "dvc", "--baseline", "main"])
    assert result.exit_code == 0, result.output
    rows = table_rows(result.output)
    header, by_run = rows[0], {", ".join(sorted(r[1].split(", "))): r for r in rows[1:]}
    # The stand-in decode scores nothing: "–" for BLEU, then (difference, p) against main per test set.
    flickr, mscoco = header.index("flickr BLEU"), header.index("mscoco BLEU")
    # main and reseeded differ only in train.seed: one row of two runs, its mean difference, no one p.
    assert set(by_run) == {"better", "main, reseeded", "workspace"}
    group = by_run["main, reseeded"]
    assert group[header.index("n")] == "2" and group[header.index("train.seed")] == "1, 2"
    assert group[flickr].startswith("– (") and "p " not in group[flickr]
    for column in (flickr, mscoco):
        delta = by_run["better"][column].split("(")[1].split(",")[0]
        assert float(delta) > 5 and by_run["better"][column].endswith("\\*)")
        assert ", p " in by_run["workspace"][column]  # the workspace's own outputs were found and tested


def test_cli_each_run_keeps_seeds_apart(decode_repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(decode_repo)
    monkeypatch.setenv("DVC_NO_ANALYTICS", "1")
    result = CliRunner().invoke(experiments_stage.command, ["--source", "dvc", "--each-run"])
    assert result.exit_code == 0, result.output
    assert {r[1] for r in table_rows(result.output)[1:]} == {"workspace", "main", "better", "reseeded"}

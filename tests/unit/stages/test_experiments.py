"""Experiments table: the runs' numbers, only the params that differ, best BLEU first; from MLflow and DVC."""

from __future__ import annotations

import copy
import json
import math
import multiprocessing
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from click.testing import CliRunner

from pipeline import tracking
from pipeline.reporting import runs
from pipeline.stages import experiments as experiments_stage
from pipeline.tracking import Tracker
from tests.helpers import REPO

BASE = yaml.safe_load((REPO / "params.yaml").read_text())
COMMIT = "0123456789abcdef0123456789abcdef01234567"

# A small sweep: (DVC experiment, params changed, final metrics or None for a run that failed).
SWEEP = [
    (
        "exp-two",
        {"model": {"n_layers": 2}},
        {
            "test_bleu": 30.55,
            "test_chrf": 52.5,
            "test_ter": 58.0,
            "dev_bleu": 29.5,
            "dev_chrf": 51.0,
            "dev_ter": 59.0,
            "n_params": 2_012_345,
            "train_seconds": 3723.4,
            "tokens_per_s": 15000.0,
        },
    ),
    (
        "exp-four",
        {"model": {"n_layers": 4, "dropout": 0.3}},
        {
            "test_bleu": 35.25,
            "test_chrf": 57.0,
            "test_ter": 52.5,
            "dev_bleu": 34.0,
            "dev_chrf": 56.0,
            "dev_ter": 53.0,
            "n_params": 4_012_345,
            "train_seconds": 7446.8,
            "tokens_per_s": 9000.0,
        },
    ),
    ("exp-six", {"model": {"n_layers": 6}}, None),
]


def sweep_params(change: dict[str, dict[str, Any]]) -> dict[str, Any]:
    params = copy.deepcopy(BASE)
    for section, values in change.items():
        params[section].update(values)
    return params


def log_run(name: str, change: dict, final: dict | None, experiment: str = "nmt") -> str:
    """One training run as train.py and score.py log it: curves by step, then totals and scores."""
    os.environ["DVC_EXP_NAME"] = name
    run = Tracker.start(sweep_params(change), experiment, f"de-en encoder_decoder {name}")
    for step in range(100, 600, 100):
        run.log_metrics({"train_loss": 5.0 - step / 200, "val_bleu": step / 20}, step=step)
    if final is not None:
        totals = ("n_params", "train_seconds", "tokens_per_s")
        run.log_metrics({k: final[k] for k in totals}, step=500)
        run.log_metrics({k: v for k, v in final.items() if k not in totals}, step=0)
    run.end("FINISHED" if final is not None else "FAILED")
    return run.run_id


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One SQLite MLflow store holding the sweep, plus a run of another experiment."""
    root = tmp_path_factory.mktemp("mlflow")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_TRACKING_URI", uri)
        patch.setattr(tracking, "git_commit", lambda cwd=None: COMMIT)
        ids = {name: log_run(name, change, final) for name, change, final in SWEEP}
        log_run("elsewhere", {"model": {"d_model": 64}}, SWEEP[0][2], experiment="other")
        patch.delenv("DVC_EXP_NAME")
        yield {"uri": uri, "ids": ids, "root": root}


# --- the table from MLflow -------------------------------------------------------


def test_mlflow_table_holds_each_runs_numbers(store: dict) -> None:
    frame = runs.mlflow_table("nmt", store["uri"])
    assert list(frame["dvc_exp"]) == ["exp-four", "exp-two", "exp-six"]  # best test BLEU first, unscored last
    for name, _, final in SWEEP:
        row = frame.set_index("dvc_exp").loc[name]
        assert row["id"] == store["ids"][name] and row["run"] == f"de-en encoder_decoder {name}"
        assert row["commit"] == COMMIT
        if final is None:
            assert row["status"] == "failed" and math.isnan(row["test_bleu"])
        else:
            assert row["status"] == "finished"
            assert {k: row[k] for k in final} == pytest.approx(final)


def test_mlflow_table_shows_only_the_params_that_differ(store: dict) -> None:
    frame = runs.mlflow_table("nmt", store["uri"])
    params = [c for c in frame.columns if c not in (*runs.ID_COLUMNS, *runs.METRIC_COLUMNS)]
    assert params == ["model.dropout", "model.n_layers"]  # d_model differs only in another experiment
    assert list(frame["model.n_layers"]) == ["4", "2", "6"]
    assert list(frame["model.dropout"]) == ["0.3", "0.1", "0.1"]
    assert list(frame.columns) == [*runs.ID_COLUMNS, *params, *runs.METRIC_COLUMNS]


def test_validation_histories_by_step(store: dict) -> None:
    histories = runs.mlflow_histories([store["ids"]["exp-two"], "0" * 32], "val_bleu", store["uri"])
    assert list(histories) == [store["ids"]["exp-two"]]  # an unknown run has no history, no error
    frame = histories[store["ids"]["exp-two"]]
    assert list(frame["step"]) == [100, 200, 300, 400, 500] and list(frame["value"]) == [5, 10, 15, 20, 25]


def test_missing_database_is_unavailable_and_not_created(tmp_path: Path) -> None:
    db = tmp_path / "none" / "mlflow.db"
    with pytest.raises(runs.ExperimentsUnavailable, match="no MLflow database"):
        runs.mlflow_table("nmt", f"sqlite:///{db}")
    assert not db.parent.exists()


def test_unreachable_server_is_unavailable_within_seconds() -> None:
    begin = time.monotonic()
    with pytest.raises(runs.ExperimentsUnavailable, match="could not be read"):
        runs.mlflow_table("nmt", "http://127.0.0.1:9")  # the discard port: nothing answers
    assert time.monotonic() - begin < 20


def _train_in_child(uri: str, steps: int) -> None:
    """A training run of a sweep, logging while another process reads the store."""
    os.environ["MLFLOW_TRACKING_URI"] = uri
    run = Tracker.start(sweep_params({"model": {"n_layers": 8}}), "nmt-live", "live", offline_dir=None)
    for step in range(steps):
        run.log_metrics({"train_loss": 1.0, "val_bleu": float(step)}, step=step)
    run.log_metrics({"test_bleu": 40.0}, step=0)
    run.end()
    sys.exit(0 if run.online else 3)


def test_table_reads_while_a_sweep_run_writes(store: dict) -> None:
    """The report of one queued experiment reads the SQLite store while another trains."""
    runs.mlflow_table("nmt-live", store["uri"])  # nothing yet
    child = multiprocessing.get_context("spawn").Process(target=_train_in_child, args=(store["uri"], 60))
    child.start()
    reads = 0
    while child.is_alive():
        runs.mlflow_table("nmt-live", store["uri"])  # must never raise "database is locked"
        reads += 1
        time.sleep(0.05)
    child.join(timeout=60)
    assert child.exitcode == 0 and reads > 0
    frame = runs.mlflow_table("nmt-live", store["uri"])
    assert list(frame["run"]) == ["live"] and list(frame["test_bleu"]) == [40.0]
    assert len(runs.mlflow_histories(list(frame["id"]), "val_bleu", store["uri"])[frame["id"][0]]) == 60


# --- pure pieces ---------------------------------------------------------------------


def test_param_text_matches_between_mlflow_strings_and_dvc_values() -> None:
    for mlflow_value, dvc_value in [
        ("None", None),
        ("True", True),
        ("0.001", 0.001),
        ("[0.9, 0.98]", [0.9, 0.98]),
        ("1e-08", 1.0e-8),
        ("relu", "relu"),
        ("3", 3),
    ]:
        assert runs.param_text(mlflow_value) == runs.param_text(dvc_value)
    assert runs.param_text(None) == "null" and runs.param_text(False) == "false"


def test_a_param_missing_from_some_runs_counts_as_differing() -> None:
    params = [{"a": "1", "b": "x"}, {"a": "1", "b": "x", "c": "2"}, {"a": "1", "b": "y"}]
    assert runs.differing_params(params) == ["b", "c"]
    assert runs.differing_params([{"a": "1"}]) == []


def test_ties_and_unscored_runs_order_newest_first() -> None:
    t = pd.Timestamp("2026-01-01")
    records = [
        runs.RunRecord("old", started=t, metrics={"test_bleu": 30.0}),
        runs.RunRecord("unscored", started=t + pd.Timedelta(hours=3)),
        runs.RunRecord("new", started=t + pd.Timedelta(hours=1), metrics={"test_bleu": 30.0}),
        runs.RunRecord("dev only", started=t, metrics={"dev_bleu": 50.0}),
        runs.RunRecord("best", started=t, metrics={"test_bleu": 31.0}),
    ]
    assert list(runs.table(records)["run"]) == ["best", "new", "old", "dev only", "unscored"]


def test_empty_table_has_the_columns() -> None:
    frame = runs.table([])
    assert frame.empty and list(frame.columns) == [*runs.ID_COLUMNS, *runs.METRIC_COLUMNS]


# --- the table from `dvc exp show --json` ----------------------------------------------

SCORE_STAGE = """\
import json, os, yaml
p = yaml.safe_load(open("params.yaml"))
layers, lr = p["model"]["n_layers"], p["train"]["lr"]
os.makedirs("reports/train", exist_ok=True)
bleu = round(20 + 3 * layers - 1000 * lr, 2)
json.dump({"val": {"bleu": bleu - 1, "chrf": 50.0, "ter": 60.0, "n_lines": 10},
           "test": {"bleu": bleu, "chrf": 51.0, "ter": 59.5, "n_lines": 10}}, open("reports/metrics.json", "w"))
json.dump({"n_params": 1000 * layers, "train_seconds": 60.0 * layers, "tokens_per_s": 100.0 / layers},
          open("reports/train/summary.json", "w"))
"""


def dvc(args: list[str], cwd: Path) -> str:
    env = {
        **os.environ,
        "DVC_NO_ANALYTICS": "1",
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{args}: {done.stdout[-2000:]} {done.stderr[-2000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def dvc_repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list]:
    """A real git + DVC repo with a stand-in score stage, two experiments and one queued; and its exp show."""
    root = tmp_path_factory.mktemp("dvcrepo")
    params = {
        "model": {"n_layers": 3, "d_model": 256, "encoder_layers": None},
        "train": {"lr": 0.001, "betas": [0.9, 0.98], "val_bleu": True},
    }
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    (root / "score.py").write_text(SCORE_STAGE)
    stage = {
        "cmd": f"{sys.executable} score.py",
        "deps": ["score.py"],
        "params": ["model", "train"],
        "metrics": [
            {"reports/metrics.json": {"cache": False}},
            {"reports/train/summary.json": {"cache": False}},
        ],
    }
    (root / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"score": stage}}, sort_keys=False))
    dvc(["git", "init", "-q", "-b", "main"], root)
    dvc(["dvc", "init", "-q"], root)
    dvc(["dvc", "repro", "-q"], root)
    dvc(["git", "add", "-A"], root)
    dvc(["git", "commit", "-qm", "baseline"], root)
    dvc(["dvc", "exp", "run", "-q", "-S", "model.n_layers=6", "-n", "six"], root)
    # An experiment starts from the workspace, which the last one changed: set n_layers back.
    dvc(["dvc", "exp", "run", "-q", "-S", "model.n_layers=3", "-S", "train.lr=0.0005", "-n", "slow"], root)
    dvc(["dvc", "exp", "run", "-q", "--queue", "-S", "model.n_layers=2", "-n", "queued"], root)
    return root, json.loads(dvc(["dvc", "exp", "show", "--json"], root))


def test_dvc_table_from_real_exp_show(dvc_repo: tuple[Path, list]) -> None:
    root, shown = dvc_repo
    frame = runs.dvc_table(shown).set_index("run")
    baseline = next(c["rev"] for c in shown if c["rev"] != "workspace")
    assert set(frame.index) == {"workspace", "main", "six", "slow", "queued"}
    assert frame.loc["six", "test_bleu"] == 37.0 and frame.loc["six", "dev_bleu"] == 36.0
    assert frame.loc["slow", "test_bleu"] == 28.5 and frame.loc["main", "test_bleu"] == 28.0
    assert frame.loc["six", "n_params"] == 6000 and frame.loc["six", "train_seconds"] == 360.0
    assert frame.loc["six", "test_ter"] == 59.5 and frame.loc["six", "dev_chrf"] == 50.0
    assert frame.loc["six", "dvc_exp"] == "six" and frame.loc["six", "commit"] == baseline
    assert frame.loc["main", "commit"] == baseline and pd.isna(frame.loc["main", "dvc_exp"])
    assert frame.loc["queued", "status"] == "queued" and math.isnan(frame.loc["queued", "test_bleu"])
    assert frame.loc["six", "status"] == "finished"


def test_dvc_table_shows_differing_params_best_first(dvc_repo: tuple[Path, list]) -> None:
    _, shown = dvc_repo
    frame = runs.dvc_table(shown)
    params = [c for c in frame.columns if c not in (*runs.ID_COLUMNS, *runs.METRIC_COLUMNS)]
    assert params == ["model.n_layers", "train.lr"]
    by_run = frame.set_index("run")
    assert by_run.loc["queued", "model.n_layers"] == "2" and by_run.loc["slow", "train.lr"] == "0.0005"
    names = list(frame["run"])  # the workspace holds the last experiment's results: a tie with "slow"
    assert names[0] == "six" and set(names[1:3]) == {"slow", "workspace"} and names[3:] == ["main", "queued"]
    assert list(frame["test_bleu"])[:4] == [37.0, 28.5, 28.5, 28.0]


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
    assert lines[0].startswith("| # | run | commit | status | model.n_layers | train.lr | test BLEU |")
    assert any("| six |" in line and "| 37.0 |" in line for line in lines)
    csv = pd.read_csv(root / "exps.csv")
    assert set(csv["run"]) == {"workspace", "main", "six", "slow", "queued"}


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
    assert rows[0].startswith("| # | run | commit | status | model.dropout | model.n_layers | test BLEU |")
    assert rows[1].startswith("| 1 | exp-four | 0123456 | finished | 0.3 | 4 | 35.2 |")
    assert "2:04:07 |" in rows[1] and "4,012,345" in rows[1]  # train time h:mm:ss, parameters with commas
    assert rows[3].startswith("| 3 | exp-six | 0123456 | failed |")


def test_cli_without_runs_is_a_user_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    result = CliRunner().invoke(experiments_stage.command, ["--params", str(REPO / "params.yaml")])
    assert result.exit_code == 1 and "no MLflow database" in result.output
    assert "MLFLOW_TRACKING_URI" in result.output

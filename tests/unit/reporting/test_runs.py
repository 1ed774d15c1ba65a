"""Runs table: the runs' numbers per test set, only the params that differ, best BLEU first; from MLflow
and DVC.

The sweep in MLflow and the DVC repository are conftest's store and dvc_repo fixtures.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import statistics
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from pipeline.reporting import runs
from pipeline.tracking.tracker import Tracker
from tests.support.sweep import COMMIT, SWEEP, T16, T17, sweep_params

# --- the table from MLflow -------------------------------------------------------


def test_mlflow_table_holds_each_runs_numbers(store: dict) -> None:
    frame = runs.mlflow_table("nmt", store["uri"])
    assert list(frame["dvc_exp"]) == ["exp-four", "exp-two", "exp-six"]  # best test BLEU first, unscored last
    for name, _, final in SWEEP:
        row = frame.set_index("dvc_exp").loc[name]
        assert row["id"] == store["ids"][name] and row["run"] == f"de-en encoder_decoder {name}"
        assert row["commit"] == COMMIT
        if final is None:
            assert row["status"] == "failed" and math.isnan(row[f"{T16}.bleu"])
        else:
            assert row["status"] == "finished"
            assert {k: row[k] for k in final} == pytest.approx(final)


def test_mlflow_table_shows_only_the_params_that_differ(store: dict) -> None:
    frame = runs.mlflow_table("nmt", store["uri"])
    params = runs.param_columns(frame)
    assert params == ["model.dropout", "model.n_layers"]  # d_model differs only in another experiment
    assert list(frame["model.n_layers"]) == ["4", "2", "6"]
    assert list(frame["model.dropout"]) == ["0.3", "0.1", "0.1"]
    tests = [f"{t}.{s}" for t in (T16, T17) for s in ("bleu", "chrf", "ter")]  # a column per test set's score
    assert list(frame.columns) == [
        *runs.ID_COLUMNS,
        runs.SETTINGS,
        *params,
        *tests,
        *runs.FIXED_METRICS,
        runs.PRIMARY,
    ]
    assert runs.test_sets(frame) == ["multi30k-test_2016_flickr", "multi30k-test_2017_mscoco"]


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
    # A run from before several test sets logged test_bleu: its one test set is named test.
    assert list(frame["run"]) == ["live"] and list(frame["test.test.bleu"]) == [40.0]
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


def test_a_param_missing_from_some_runs_is_a_schema_change_not_a_column() -> None:
    params = [{"a": "1", "b": "x"}, {"a": "1", "b": "x", "c": "2"}, {"a": "1", "b": "y"}]
    assert runs.differing_params(params) == ["b"]
    assert runs.differing_params([{"a": "1"}]) == []


def test_list_params_read_as_yaml_flow_lists_from_mlflow_and_dvc() -> None:
    assert runs.param_text("['t16', 't17']") == runs.param_text(["t16", "t17"]) == "[t16, t17]"
    assert runs.param_text("[0.9, 0.98]") == "[0.9, 0.98]" and runs.param_text("[not python") == "[not python"


def test_ties_and_unscored_runs_order_newest_first() -> None:
    t = pd.Timestamp("2026-01-01")
    records = [
        runs.RunRecord("old", started=t, metrics={"test.t.bleu": 30.0}),
        runs.RunRecord("unscored", started=t + pd.Timedelta(hours=3)),
        runs.RunRecord("new", started=t + pd.Timedelta(hours=1), metrics={"test.t.bleu": 30.0}),
        runs.RunRecord("dev only", started=t, metrics={"dev_bleu": 50.0}),
        runs.RunRecord("best", started=t, metrics={"test.t.bleu": 31.0}),
    ]
    assert list(runs.table(records)["run"]) == ["best", "new", "old", "dev only", "unscored"]


def test_runs_rank_by_the_first_test_set_of_their_data_test_and_columns_follow_it() -> None:
    t = pd.Timestamp("2026-01-01")
    listed = {"data.test": "['b', 'a']"}  # as MLflow holds a list param
    records = [
        runs.RunRecord(
            "high on a", started=t, params=listed, metrics={"test.a.bleu": 40.0, "test.b.bleu": 20.0}
        ),
        runs.RunRecord(
            "high on b", started=t, params=listed, metrics={"test.a.bleu": 30.0, "test.b.bleu": 25.0}
        ),
        runs.RunRecord("only a", started=t, params=listed, metrics={"test.a.bleu": 22.0}),  # b unscored
    ]
    frame = runs.table(records)
    assert runs.test_sets(frame) == ["b", "a"]  # data.test's order, not the names'
    assert list(frame["run"]) == ["high on b", "only a", "high on a"]
    assert list(frame[runs.PRIMARY]) == [25.0, 22.0, 20.0]


def test_metric_names_of_mlflow_dvc_and_old_runs_meet() -> None:
    names = {
        "test.multi30k-test_2016_flickr.bleu": "test.multi30k-test_2016_flickr.bleu",  # MLflow and DVC
        "val.chrf": "dev_chrf",  # DVC's val is MLflow's dev
        "dev_ter": "dev_ter",
        "test_bleu": "test.test.bleu",  # an old run in MLflow
        "test.ter": "test.test.ter",  # an old run in DVC
        "n_params": "n_params",
        "val_bleu": None,  # a training curve
        "test.a.ci95.bleu": None,
        "test.bootstrap.n": None,
        "val.n_lines": None,
    }
    assert {k: runs.metric_name(k) for k in names} == names


def test_empty_table_has_the_columns() -> None:
    frame = runs.table([])
    assert frame.empty and list(frame.columns) == [
        *runs.ID_COLUMNS,
        runs.SETTINGS,
        *runs.FIXED_METRICS,
        runs.PRIMARY,
    ]


# --- the table from `dvc exp show --json` ----------------------------------------------


def test_dvc_table_from_real_exp_show(dvc_repo: tuple[Path, list]) -> None:
    _, shown = dvc_repo
    frame = runs.dvc_table(shown).set_index("run")
    baseline = next(c["rev"] for c in shown if c["rev"] != "workspace")
    assert set(frame.index) == {"workspace", "main", "six", "slow", "queued"}
    assert frame.loc["six", "test.flickr.bleu"] == 37.0 and frame.loc["six", "dev_bleu"] == 36.0
    assert frame.loc["six", "test.mscoco.bleu"] == 32.0 and frame.loc["six", "test.mscoco.ter"] == 65.0
    assert frame.loc["slow", "test.flickr.bleu"] == 28.5 and frame.loc["main", "test.flickr.bleu"] == 28.0
    assert frame.loc["six", "n_params"] == 6000 and frame.loc["six", "train_seconds"] == 360.0
    assert frame.loc["six", "test.flickr.ter"] == 59.5 and frame.loc["six", "dev_chrf"] == 50.0
    assert frame.loc["six", "dvc_exp"] == "six" and frame.loc["six", "commit"] == baseline
    assert frame.loc["main", "commit"] == baseline and pd.isna(frame.loc["main", "dvc_exp"])
    assert frame.loc["queued", "status"] == "queued" and math.isnan(frame.loc["queued", "test.flickr.bleu"])
    assert frame.loc["six", "status"] == "finished"


def test_dvc_table_shows_differing_params_best_first(dvc_repo: tuple[Path, list]) -> None:
    _, shown = dvc_repo
    frame = runs.dvc_table(shown)
    params = runs.param_columns(frame)
    assert params == ["model.n_layers", "train.lr"]
    by_run = frame.set_index("run")
    assert by_run.loc["queued", "model.n_layers"] == "2" and by_run.loc["slow", "train.lr"] == "0.0005"
    names = list(frame["run"])  # the workspace holds the last experiment's results: a tie with "slow"
    assert names[0] == "six" and set(names[1:3]) == {"slow", "workspace"} and names[3:] == ["main", "queued"]
    assert list(frame["test.flickr.bleu"])[:4] == [37.0, 28.5, 28.5, 28.0]


# --- runs that differ only in train.seed -------------------------------------------------


def seeded(name: str, seed: str, bleu: float, lr: str = "0.001", status: str = "finished") -> runs.RunRecord:
    params = {"train.seed": seed, "train.lr": lr, "model.n_layers": "6"}
    return runs.RunRecord(
        name, id=f"id-{name}", commit=COMMIT, status=status, params=params, metrics={"test.t.bleu": bleu}
    )


def test_three_seeds_of_one_config_are_one_row_with_mean_sd_and_count() -> None:
    records = [
        seeded("s1", "1", 30.0),
        seeded("s2", "2", 31.0),
        seeded("s3", "3", 32.5),
        seeded("other", "1", 33.0, lr="0.0005"),
    ]
    frame = runs.group_seeds(runs.table(records))
    assert list(frame["run"]) == ["other", "s3, s2, s1"]  # best first: 33.0 over the mean 31.17
    group = frame.iloc[1]
    assert group["n_runs"] == 3 and group["members"] == ("id-s3", "id-s2", "id-s1")
    assert group["test.t.bleu"] == pytest.approx(31.1667, abs=1e-3)
    assert group["test.t.bleu_sd"] == pytest.approx(statistics.stdev([30.0, 31.0, 32.5]))
    assert group["train.seed"] == "1, 2, 3"
    assert frame.iloc[0]["n_runs"] == 1 and math.isnan(frame.iloc[0]["test.t.bleu_sd"])
    assert frame.iloc[0]["members"] == ("id-other",)


def test_seeds_of_other_code_or_unfinished_runs_stay_apart() -> None:
    other_commit = runs.RunRecord(
        "c2",
        id="id-c2",
        commit="f" * 40,
        params={"train.seed": "2", "train.lr": "0.001", "model.n_layers": "6"},
    )
    records = [seeded("s1", "1", 30.0), other_commit, seeded("s3", "3", 32.0, status="running")]
    frame = runs.group_seeds(runs.table(records))
    assert sorted(frame["run"]) == ["c2", "s1", "s3"] and set(frame["n_runs"]) == {1}
    sds = [f"{m}_sd" for m in runs.FIXED_METRICS]
    assert list(runs.group_seeds(runs.table([]))) == [*runs.table([]).columns, *sds, *runs.GROUP_COLUMNS]


def test_mapping_params_read_as_yaml_flow_mappings_from_mlflow_and_dvc() -> None:
    value = {"tico19-id": {"catalog": "tico19-enid", "tgt_lang": "id", "max_lines": None}}
    text = "{tico19-id: {catalog: tico19-enid, tgt_lang: id, max_lines: null}}"
    assert runs.param_text(str(value)) == runs.param_text(value) == text
    assert yaml.safe_load(text) == value  # what `dvc exp run -S data.sources=...` reads back

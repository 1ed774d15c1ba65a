"""pipeline/experiments/archive.py: a kept run reads back as it was saved, with no path of the machine
that saved it; a damaged file is named with its fix."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from pipeline.errors import UserError
from pipeline.experiments import archive
from pipeline.reporting.hypotheses import RunHypotheses
from pipeline.reporting.runs import RunRecord


def test_paths_of_the_checkout_and_of_dvcs_queued_copies_become_relative(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    queued = root.joinpath(".dvc", "tmp", "exps", "standalone", "tmpab12cd")  # DVC's copy for a queued run
    elsewhere = str(tmp_path / "elsewhere" / "model")  # outside the checkout: kept as it is
    value = {
        "init_from": str(root / "data" / "model"),
        "ensemble": [str(queued / "data" / "parents" / "x"), elsewhere],
    }
    assert archive.repo_relative({**value, "n": 3}, root) == {
        "init_from": "data/model",
        "ensemble": ["data/parents/x", elsewhere],
        "n": 3,
    }


def test_a_kept_run_reads_back_without_the_checkouts_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    started = pd.Timestamp("2026-01-02T03:04:05")
    params = {"train.init_from": f"{tmp_path.resolve()}/data/parents/p", "train.seed": "1"}
    record = RunRecord("run", "a" * 32, "abl-x", "c" * 40, "finished", started, params, {"test.t.bleu": 30.5})
    hyps = RunHypotheses("abl-x", {"test/t": ["one", "two"]}, {"test/t": "f" * 64})
    path = archive.keep(
        tmp_path / "runs", "abl-x", archive.ArchivedRun(record, {"k": "v"}, {"epochs": 3}, hyps)
    )
    back = archive.load(path)
    assert back.record.params["train.init_from"] == "data/parents/p" and back.record.started == started
    assert back.record.metrics == record.metrics and back.tags == {"k": "v"} and back.summary == {"epochs": 3}
    assert back.hyps == hyps
    assert str(tmp_path.resolve()) not in path.read_text(encoding="utf-8")


def test_a_damaged_file_is_named_with_its_fix(tmp_path: Path) -> None:
    (tmp_path / "x.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(UserError, match=r"x\.json: not an archived run .*git checkout -- .*or delete it"):
        archive.load_all(tmp_path)

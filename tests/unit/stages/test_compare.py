"""The compare command: runs named by DVC experiment, git revision or MLflow run id, tested against a
baseline per test set (conftest's decode_repo: val and test sets flickr and mscoco; `better` garbles
fewer words than `main`, `reseeded` as many with another seed)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from pipeline import files
from pipeline.reporting import hypotheses
from pipeline.stages import compare
from pipeline.tracking.tracker import Tracker
from tests.support.tables import table_rows


def run_compare(repo: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> Result:
    monkeypatch.chdir(repo)
    monkeypatch.setenv("DVC_NO_ANALYTICS", "1")
    return CliRunner().invoke(compare.command, list(args))


def rows_of(output: str, name: str) -> list[list[str]]:
    """The table under `## <name> (...)`: val or a test set's name."""
    return table_rows(output.split(f"## {name} ")[1].split("## ")[0])


def test_a_better_experiment_is_significant_and_a_reseeded_one_is_not(
    decode_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = run_compare(decode_repo, monkeypatch, "main", "better", "reseeded")
    assert result.exit_code == 0, result.output
    assert "## val (60 lines)" in result.output and "## flickr (300 lines)" in result.output
    assert "## mscoco (80 lines)" in result.output and "Skipped" not in result.output
    rows = rows_of(result.output, "flickr")
    assert [r[0] for r in rows[1:]] == ["main (baseline)", "better", "reseeded"]
    p_bleu, p_chrf = rows[0].index("p"), len(rows[0]) - 1
    assert float(rows[2][3]) > 5 and rows[2][p_bleu].endswith(" *") and rows[2][p_chrf].endswith(" *")
    assert not rows[3][p_bleu].endswith(" *") and float(rows[3][p_bleu]) > 0.05
    assert "paired bootstrap resampling against the baseline (1,000 resamples, seed 12345)" in result.output


def test_the_same_command_prints_the_same_numbers_and_the_seed_changes_them(
    decode_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = ["main", "reseeded", "--samples", "200"]
    first, again = (run_compare(decode_repo, monkeypatch, *args).output for _ in range(2))
    other = run_compare(decode_repo, monkeypatch, *args, "--seed", "7").output
    assert first == again and "seed 12345" in first
    assert rows_of(other, "flickr")[2][4] != rows_of(first, "flickr")[2][4]  # the p-value of reseeded


def test_approximate_randomization_on_request(decode_repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = run_compare(decode_repo, monkeypatch, "main", "better", "--test", "ar", "--samples", "500")
    assert result.exit_code == 0, result.output
    assert "approximate randomization against the baseline (500 trials, seed 12345)" in result.output
    assert rows_of(result.output, "flickr")[2][4].endswith(" *")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["main", "no-such-exp"],
            "'no-such-exp' is not an MLflow run id, a DVC experiment or a git revision",
        ),
        (["main", "better", "main"], "main named twice; name each run once"),
    ],
)
def test_user_errors_are_one_line_without_traceback(
    decode_repo: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], message: str
) -> None:
    result = run_compare(decode_repo, monkeypatch, *args)
    assert result.exit_code == 1
    assert result.output.startswith("Error: ") and message in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1


def log_hypotheses(repo: Path, tmp_path: Path, sets: dict[str, str], refs_sha: str | None = None) -> str:
    """An MLflow run holding the hypotheses of DVC revisions, as the score stage logs them: {key: rev}."""
    with Tracker.start({"train": {"seed": 1}}, "compare-test", "train") as run:
        for key, rev in sets.items():
            local = tmp_path / rev / f"{key}.hyp"
            files.write_lines(local, hypotheses.find(rev, repo).hyps[key])
            run.log_artifact(local, f"{hypotheses.HYPS_ARTIFACT_DIR}/{key}".rsplit("/", 1)[0])
            sha = refs_sha or hashlib.sha256((repo / "data" / "raw" / f"{key}.tgt").read_bytes()).hexdigest()
            run.set_tags({hypotheses.refs_tag(key): sha})
    assert run.run_id is not None
    return run.run_id


def test_an_mlflow_run_compares_with_a_dvc_experiment_on_the_splits_it_kept(
    decode_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    run_id = log_hypotheses(decode_repo, tmp_path, {"test/flickr": "better"})
    result = run_compare(decode_repo, monkeypatch, "main", run_id)
    assert result.exit_code == 0, result.output
    assert "## val" not in result.output and f"- val: {run_id} has no hypotheses for it" in result.output
    assert (
        "## mscoco" not in result.output and f"- mscoco: {run_id} has no hypotheses for it" in result.output
    )
    rows = rows_of(result.output, "flickr")
    assert rows[2][0] == run_id and rows[2][4].endswith(" *")


def test_a_run_scored_on_other_references_is_refused(
    decode_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    run_id = log_hypotheses(decode_repo, tmp_path, {"test/flickr": "better"}, refs_sha="0" * 64)
    result = run_compare(decode_repo, monkeypatch, run_id, "main")
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert f"flickr: the baseline {run_id} was scored against other references" in result.output

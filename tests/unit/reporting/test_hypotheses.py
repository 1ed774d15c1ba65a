"""Finding a run's hypotheses: MLflow artifacts by run id, DVC outputs by experiment name or revision."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from pipeline import files
from pipeline.errors import UserError
from pipeline.reporting import hypotheses
from pipeline.tracking import Tracker
from tests.helpers import dvc, garble, references


def test_run_ids_are_32_hex_digits_and_nothing_else() -> None:
    assert hypotheses.is_run_id("0123456789abcdef0123456789abcdef")
    for other in ("better", "HEAD~1", "0123456789abcdef0123456789abcdef01234567", "workspace", "abc"):
        assert not hypotheses.is_run_id(other)


# --- MLflow ------------------------------------------------------------------------


@pytest.fixture
def mlflow_uri(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    return uri


def logged_run(tmp_path: Path, hyps: dict[str, list[str]], tags: dict[str, str]) -> str:
    """A finished run with `hyps` as decode/<split>.hyp artifacts, as the score stage logs them."""
    with Tracker.start({"train": {"seed": 1}}, "hyps-test", "train") as run:
        for split, lines in hyps.items():
            files.write_lines(tmp_path / "decode" / f"{split}.hyp", lines)
            run.log_artifact(tmp_path / "decode" / f"{split}.hyp", hypotheses.HYPS_ARTIFACT_DIR)
        run.set_tags(tags)
    assert run.run_id is not None
    return run.run_id


def test_an_mlflow_run_gives_its_hypotheses_and_references_hash(tmp_path: Path, mlflow_uri: str) -> None:
    test = garble(references(20), 0.3)
    run_id = logged_run(tmp_path, {"test": test}, {"refs_sha256.test": "ab" * 32})
    found = hypotheses.find(run_id, tmp_path)
    assert found == hypotheses.RunHypotheses(run_id, {"test": test}, {"test": "ab" * 32})


def test_an_mlflow_run_without_hypotheses_says_what_to_use_instead(tmp_path: Path, mlflow_uri: str) -> None:
    run_id = logged_run(tmp_path, {}, {})
    with pytest.raises(UserError, match=r"has no hypotheses.*DVC experiment or git revision"):
        hypotheses.find(run_id, tmp_path)


def test_an_unknown_run_id_is_one_line_with_the_fix(tmp_path: Path, mlflow_uri: str) -> None:
    logged_run(tmp_path, {}, {})  # the database exists, the run does not
    with pytest.raises(UserError) as err:
        hypotheses.find("f" * 32, tmp_path)
    assert "could not be read" in err.value.message and "experiments` lists them" in err.value.message
    assert "\n" not in err.value.message


def test_no_mlflow_database_is_not_created(tmp_path: Path, mlflow_uri: str) -> None:
    with pytest.raises(UserError, match="no MLflow database"):
        hypotheses.find("f" * 32, tmp_path)
    assert not (tmp_path / "mlflow.db").exists()


# --- DVC ---------------------------------------------------------------------------


def test_an_experiment_name_gives_its_cached_outputs(decode_repo: Path) -> None:
    refs = files.read_lines(decode_repo / "data" / "raw" / "test.tgt")
    sha = hashlib.sha256((decode_repo / "data" / "raw" / "test.tgt").read_bytes()).hexdigest()
    better = hypotheses.find("better", decode_repo)
    assert set(better.hyps) == {"val", "test"} and better.name == "better"
    assert better.hyps["test"] == garble(refs, 0.2, seed=1)  # what the stand-in decode wrote for it
    assert better.refs_sha256["test"] == sha
    assert hypotheses.find("main", decode_repo).hyps["test"] == garble(refs, 0.5, seed=1)
    assert hypotheses.find("reseeded", decode_repo).hyps["test"] == garble(refs, 0.5, seed=2)


def test_workspace_is_the_files_as_they_are(decode_repo: Path) -> None:
    found = hypotheses.find(hypotheses.WORKSPACE, decode_repo)
    assert found.hyps["test"] == files.read_lines(decode_repo / "data" / "decode" / "test.hyp")


def test_an_unknown_revision_is_one_line_with_the_fix(decode_repo: Path) -> None:
    with pytest.raises(UserError) as err:
        hypotheses.find("no-such-exp", decode_repo)
    assert "'no-such-exp' is not an MLflow run id, a DVC experiment or a git revision" in err.value.message
    assert "dvc exp show" in err.value.message


def test_outputs_missing_from_the_cache_say_to_pull_them(tmp_path: Path, decode_repo: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(decode_repo, copy)
    shutil.rmtree(copy / ".dvc" / "cache")
    with pytest.raises(UserError, match=r"no hypotheses at 'better'.*dvc pull"):
        hypotheses.find("better", copy)


def test_a_revision_without_decode_outputs_says_so(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"no hypotheses at 'HEAD'.*dvc pull"):
        hypotheses.find("HEAD", repo_without_outputs(tmp_path))


def repo_without_outputs(root: Path) -> Path:
    """A git + DVC repository with one commit and no stage run."""
    (root / "README").write_text("x\n")
    dvc(["git", "init", "-q", "-b", "main"], root)
    dvc(["dvc", "init", "-q"], root)
    dvc(["git", "add", "-A"], root)
    dvc(["git", "commit", "-qm", "empty"], root)
    return root

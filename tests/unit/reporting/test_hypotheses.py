"""Finding a run's hypotheses: MLflow artifacts by run id, DVC outputs by experiment name or revision."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from pipeline import files
from pipeline.errors import UserError
from pipeline.reporting import hypotheses
from pipeline.tracking.tracker import Tracker
from tests.support.dvc_repo import dvc
from tests.support.tables import garble, references


def test_sets_are_keyed_val_then_test_sets_by_name(tmp_path: Path) -> None:
    for key in ("test/b-set", "val", "test/a_set"):
        files.write_lines(tmp_path / f"{key}.hyp", ["x"])
    files.write_lines(tmp_path / "test" / "notes.txt", ["x"])
    assert hypotheses.set_keys(tmp_path, ".hyp") == ["val", "test/a_set", "test/b-set"]
    assert hypotheses.set_keys(tmp_path / "none", ".hyp") == []
    assert [hypotheses.label(k) for k in ("val", "test/a_set")] == ["val", "a_set"]
    assert hypotheses.refs_tag("test/a_set") == "refs_sha256.test.a_set"
    assert hypotheses.refs_tag("val") == "refs_sha256.val"


def test_metrics_by_set_key_and_an_old_single_test_split_as_test() -> None:
    new = {"val": {"bleu": 1.0}, "test": {"a": {"bleu": 2.0}, "bleu": {"bleu": 3.0}}}
    assert hypotheses.metrics_of(new) == {
        "val": {"bleu": 1.0},
        "test/a": {"bleu": 2.0},
        "test/bleu": {"bleu": 3.0},
    }
    old = {"val": {"bleu": 1.0}, "test": {"bleu": 2.0, "refs_sha256": "ab"}}
    assert hypotheses.metrics_of(old) == {
        "val": {"bleu": 1.0},
        "test/test": {"bleu": 2.0, "refs_sha256": "ab"},
    }


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
    """A finished run with `hyps` as decode/<path>.hyp artifacts ({"val": ..., "test/t1": ...}, as the
    score stage logs them; "test" as a run from before several test sets did)."""
    with Tracker.start({"train": {"seed": 1}}, "hyps-test", "train") as run:
        for path, lines in hyps.items():
            files.write_lines(tmp_path / "decode" / f"{path}.hyp", lines)
            folder = str(Path(hypotheses.HYPS_ARTIFACT_DIR, path).parent.as_posix())
            run.log_artifact(tmp_path / "decode" / f"{path}.hyp", folder)
        run.set_tags(tags)
    assert run.run_id is not None
    return run.run_id


def test_an_mlflow_run_gives_its_hypotheses_and_references_hash(tmp_path: Path, mlflow_uri: str) -> None:
    val, t1, t2 = garble(references(20), 0.3), garble(references(9), 0.3), garble(references(5), 0.1)
    tags = {"refs_sha256.test.t1": "ab" * 32, "refs_sha256.val": "cd" * 32}
    run_id = logged_run(tmp_path, {"test/t2": t2, "val": val, "test/t1": t1}, tags)
    found = hypotheses.find(run_id, tmp_path)
    assert found.hyps == {"val": val, "test/t1": t1, "test/t2": t2} and list(found.hyps) == [
        "val",
        "test/t1",
        "test/t2",
    ]
    assert found.refs_sha256 == {"test/t1": "ab" * 32, "val": "cd" * 32}  # t2's unknown: no tag


def test_an_mlflow_run_from_before_several_test_sets_has_one_named_test(
    tmp_path: Path, mlflow_uri: str
) -> None:
    test = garble(references(20), 0.3)
    run_id = logged_run(tmp_path, {"test": test}, {"refs_sha256.test": "ab" * 32})
    found = hypotheses.find(run_id, tmp_path)
    assert found == hypotheses.RunHypotheses(run_id, {"test/test": test}, {"test/test": "ab" * 32})


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
    flickr = decode_repo / "data" / "raw" / "test" / "flickr.tgt"
    refs, sha = files.read_lines(flickr), hashlib.sha256(flickr.read_bytes()).hexdigest()
    better = hypotheses.find("better", decode_repo)
    assert list(better.hyps) == ["val", "test/flickr", "test/mscoco"] and better.name == "better"
    assert better.hyps["test/flickr"] == garble(refs, 0.2, seed=1)  # what the stand-in decode wrote for it
    assert better.refs_sha256["test/flickr"] == sha and set(better.refs_sha256) == set(better.hyps)
    assert hypotheses.find("main", decode_repo).hyps["test/flickr"] == garble(refs, 0.5, seed=1)
    assert hypotheses.find("reseeded", decode_repo).hyps["test/flickr"] == garble(refs, 0.5, seed=2)


def test_workspace_is_the_files_as_they_are(decode_repo: Path) -> None:
    found = hypotheses.find(hypotheses.WORKSPACE, decode_repo)
    hyps = decode_repo / "data" / "decode" / "test" / "mscoco.hyp"
    assert found.hyps["test/mscoco"] == files.read_lines(hyps)


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

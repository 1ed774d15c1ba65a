"""Score stage: sacreBLEU numbers, signatures, alignment checks, the CLI and MLflow logging."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from sacrebleu.metrics import BLEU, CHRF, TER

from pipeline import files
from pipeline.errors import UserError
from pipeline.stages import score
from tests.support.tables import garble, references

REFS = [
    "a man in an orange hat starring at something .",
    "a boston terrier is running on lush green grass in front of a white fence .",
    "a girl in karate uniform breaking a stick with a front kick .",
    "five people wearing winter jackets and helmets stand in the snow .",
]
HYPS = [
    "a man in an orange hat looks at something .",
    "a terrier runs on green grass in front of a white fence .",
    "a girl in a karate uniform breaks a board with a kick .",
    "five people in winter jackets and helmets are standing in the snow .",
]


def make_split(tmp_path: Path, key: str, hyps: list[str], refs: list[str]) -> tuple[Path, Path]:
    """decode/<key>.hyp and raw/<key>.tgt, key "val" or "test/<name>"; returns (decode, raw)."""
    decode, raw = tmp_path / "decode", tmp_path / "raw"
    files.write_lines(decode / f"{key}.hyp", hyps)
    files.write_lines(raw / f"{key}.tgt", refs)
    return decode, raw


T = "test/t1"  # a test set named t1


def test_perfect_hypotheses_score_100_100_0(tmp_path: Path) -> None:
    decode, raw = make_split(tmp_path, T, REFS, REFS)
    result = score.score(decode, raw, tmp_path / "metrics.json")
    assert result["test"]["t1"]["bleu"] == 100.0
    assert result["test"]["t1"]["chrf"] == 100.0
    assert result["test"]["t1"]["ter"] == 0.0


def test_scores_match_sacrebleu_rounded(tmp_path: Path) -> None:
    decode, raw = make_split(tmp_path, T, HYPS, REFS)
    result = score.score(decode, raw, tmp_path / "metrics.json")["test"]["t1"]
    assert result["bleu"] == round(BLEU().corpus_score(HYPS, [REFS]).score, 2)
    assert result["chrf"] == round(CHRF().corpus_score(HYPS, [REFS]).score, 2)
    assert result["chrfpp"] == round(CHRF(word_order=2).corpus_score(HYPS, [REFS]).score, 2)
    assert result["chrfpp"] != result["chrf"]  # word bigrams count: a different score
    assert result["ter"] == round(TER().corpus_score(HYPS, [REFS]).score, 2)
    assert 0 < result["bleu"] < 100 and result["n_lines"] == 4


def test_default_settings_are_cased_13a(tmp_path: Path) -> None:
    decode, raw = make_split(tmp_path, T, [r.upper() for r in REFS], REFS)
    result = score.score(decode, raw, tmp_path / "metrics.json")["test"]["t1"]
    assert result["bleu"] < 5  # cased: upper-cased hypotheses share almost nothing
    sig = result["signature"]
    assert "case:mixed" in sig["bleu"] and "tok:13a" in sig["bleu"] and "nrefs:1" in sig["bleu"]
    assert sig["chrf"].startswith("nrefs:1|") and "nc:6" in sig["chrf"] and "nw:0" in sig["chrf"]
    assert "nc:6" in sig["chrfpp"] and "nw:2" in sig["chrfpp"]  # chrF++, as OPUS-MT's tables
    assert "tok:tercom" in sig["ter"]


def test_line_count_mismatch_names_both_files(tmp_path: Path) -> None:
    decode, raw = make_split(tmp_path, T, HYPS[:3], REFS)
    with pytest.raises(UserError) as err:
        score.score(decode, raw, tmp_path / "metrics.json")
    message = err.value.message
    assert str(decode / "test" / "t1.hyp") in message and str(raw / "test" / "t1.tgt") in message
    assert "3 lines" in message and "has 4" in message
    assert not (tmp_path / "metrics.json").exists()


def test_no_hypotheses_is_a_user_error(tmp_path: Path) -> None:
    (tmp_path / "decode").mkdir()
    with pytest.raises(UserError, match="run the decode stage"):
        score.score(tmp_path / "decode", tmp_path / "raw", tmp_path / "metrics.json")


def test_cli_writes_json_for_val_and_each_test_set(tmp_path: Path) -> None:
    make_split(tmp_path, "val", REFS, REFS)
    make_split(tmp_path, "test/t2", HYPS[:2], REFS[:2])
    decode, raw = make_split(tmp_path, T, HYPS, REFS)
    out = tmp_path / "reports" / "metrics.json"
    result = CliRunner().invoke(
        score.command, ["--decode", str(decode), "--refs", str(raw), "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert set(data) == {"val", "test"} and list(data["test"]) == ["t1", "t2"]
    for scores in (data["val"], *data["test"].values()):
        assert set(scores) == {
            "bleu",
            "chrf",
            "chrfpp",
            "ter",
            "n_lines",
            "signature",
            "ci95",
            "bootstrap",
            "refs_sha256",
        }
        assert set(scores["signature"]) == {"bleu", "chrf", "chrfpp", "ter"}
        assert all("version:" in s for s in scores["signature"].values())
        assert all(
            v == round(v, 2) for v in (scores["bleu"], scores["chrf"], scores["chrfpp"], scores["ter"])
        )
    assert data["val"]["bleu"] == 100.0 and data["val"]["ci95"]["bleu"] == [100.0, 100.0]
    assert data["test"]["t2"]["n_lines"] == 2
    lines = result.output.splitlines()
    assert [line.split(":")[0] for line in lines] == ["val", "t1", "t2"]  # one line per set
    assert lines[1].startswith(f"t1: BLEU {data['test']['t1']['bleu']:.2f} [")
    assert list(out.parent.iterdir()) == [out]  # atomic write leaves no temporary behind


def test_a_test_set_without_references_names_both_files(tmp_path: Path) -> None:
    decode, raw = make_split(tmp_path, T, HYPS, REFS)
    files.write_lines(decode / "test" / "t9.hyp", HYPS)
    with pytest.raises(UserError) as err:
        score.score(decode, raw, tmp_path / "metrics.json")
    assert f"{raw / 'test' / 't9.tgt'}: no such file, needed to score {decode / 'test' / 't9.hyp'}" in (
        err.value.message
    )


def test_cli_mismatch_exits_1_with_one_line(tmp_path: Path) -> None:
    decode, raw = make_split(tmp_path, T, HYPS, REFS[:2])
    result = CliRunner().invoke(
        score.command, ["--decode", str(decode), "--refs", str(raw), "--out", str(tmp_path / "m.json")]
    )
    assert result.exit_code == 1
    assert result.output.startswith("Error: ") and "Traceback" not in result.output


def test_scores_go_to_the_training_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("mlflow")
    from mlflow import MlflowClient

    from pipeline.tracking.tracker import Tracker

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    params = {"data": {"src_lang": "de", "tgt_lang": "en"}}
    with Tracker.start(params, "score-test", "train") as run:
        run.save_run_file(tmp_path / "model" / "mlflow_run.json")
    make_split(tmp_path, "val", REFS, REFS)
    decode, raw = make_split(tmp_path, T, HYPS, REFS)
    members = [{"path": "/m/a", "model_sha256": "ab" * 32}, {"path": "/m/b", "model_sha256": "cd" * 32}]
    files.write_json(decode / "stats.json", {"ensemble": members})  # the decode stage's record
    result = score.score(decode, raw, tmp_path / "metrics.json", model_dir=tmp_path / "model")
    client = MlflowClient(run.tracking_uri)
    logged = client.get_run(run.run_id).data
    assert logged.metrics["test.t1.bleu"] == result["test"]["t1"]["bleu"]
    assert logged.metrics["test.t1.ter"] == result["test"]["t1"]["ter"]
    assert logged.metrics["dev_bleu"] == 100.0 and "dev_chrf" in logged.metrics
    assert logged.tags["sacrebleu.bleu"] == result["test"]["t1"]["signature"]["bleu"]
    # What `compare` needs later: the hypotheses, and which references they were scored against.
    sha = hashlib.sha256((raw / "test" / "t1.tgt").read_bytes()).hexdigest()
    assert logged.tags["refs_sha256.test.t1"] == sha
    assert logged.tags["refs_sha256.val"] == hashlib.sha256((raw / "val.tgt").read_bytes()).hexdigest()
    # The scores are an ensemble's: the run says which models besides its own made them.
    assert (logged.tags["ensemble"], logged.tags["ensemble_sha256"]) == (
        "/m/a,/m/b",
        f"{'ab' * 32},{'cd' * 32}",
    )
    assert [a.path for a in client.list_artifacts(run.run_id, "decode/test")] == ["decode/test/t1.hyp"]
    assert "decode/val.hyp" in [a.path for a in client.list_artifacts(run.run_id, "decode")]
    local = client.download_artifacts(run.run_id, "decode/test/t1.hyp", str(tmp_path / "back"))
    assert files.read_lines(local) == HYPS


def test_the_model_is_logged_to_the_training_run_by_score_not_by_train(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, params
) -> None:
    from pipeline.tracking.tracker import Tracker

    logged: list[dict] = []

    class Recording(Tracker):
        def _submit(self, record: dict) -> None:
            logged.append(record)

    monkeypatch.setattr(score, "Tracker", Recording)
    model = tmp_path / "model"
    model.mkdir()
    (model / "mlflow_run.json").write_text('{"run_id": "r1", "tracking_uri": "sqlite:////nowhere.db"}')
    make_split(tmp_path, "val", ["-", "A dog.", "Two cats.", "3."], ["-", "A dog.", "Two cats.", "3."])
    decode, raw = make_split(tmp_path, T, HYPS, REFS)
    files.write_lines(raw / "val.src", ["", "Ein Hund.", "Zwei Katzen.", "Drei."])
    registered = dataclasses.replace(
        params, tracking=dataclasses.replace(params.tracking, register_model="nmt")
    )
    score.score(decode, raw, tmp_path / "metrics.json", model_dir=model, params=registered)
    (spec,) = [r for r in logged if r["op"] == "model"]
    assert spec["register_as"] == "nmt" and spec["spec"]["artifacts"] == {"model_dir": str(model.resolve())}
    assert spec["spec"]["input_example"] == ["Ein Hund.", "Zwei Katzen."]  # val's first non-empty lines
    logged.clear()
    score.score(decode, raw, tmp_path / "metrics.json", model_dir=model)  # no params: scores only
    assert "model" not in [r["op"] for r in logged]


def test_missing_run_file_is_fine(tmp_path: Path) -> None:
    decode, raw = make_split(tmp_path, T, REFS, REFS)
    result = score.score(decode, raw, tmp_path / "metrics.json", model_dir=tmp_path / "no-model")
    assert result["test"]["t1"]["bleu"] == 100.0


def test_intervals_hold_the_scores_and_record_how_they_were_made(tmp_path: Path) -> None:
    refs = references(120)
    decode, raw = make_split(tmp_path, T, garble(refs, 0.3), refs)
    result = score.score(decode, raw, tmp_path / "metrics.json", bootstrap=200, seed=42)["test"]["t1"]
    for name in ("bleu", "chrf"):
        low, high = result["ci95"][name]
        assert low < result[name] < high
    assert "ter" not in result["ci95"]
    assert result["bootstrap"] == {"n": 200, "seed": 42}
    assert result["refs_sha256"] == hashlib.sha256((raw / "test" / "t1.tgt").read_bytes()).hexdigest()
    assert json.loads((tmp_path / "metrics.json").read_text())["test"]["t1"] == result


def test_same_input_same_intervals_and_the_cli_passes_resamples_and_seed(tmp_path: Path) -> None:
    refs = references(80)
    decode, raw = make_split(tmp_path, T, garble(refs, 0.3), refs)
    outs = [tmp_path / f"m{i}.json" for i in range(3)]
    for out, seed in zip(outs, (7, 7, 8)):
        args = ["--decode", str(decode), "--refs", str(raw), "--out", str(out), "--bootstrap", "150"]
        result = CliRunner().invoke(score.command, [*args, "--seed", str(seed)])
        assert result.exit_code == 0, result.output
    first, again, other = (json.loads(o.read_text())["test"]["t1"] for o in outs)
    assert first == again and first["bootstrap"] == {"n": 150, "seed": 7}
    assert other["ci95"] != first["ci95"] and other["bleu"] == first["bleu"]


def test_a_decode_without_an_ensemble_tags_none(tmp_path: Path) -> None:
    assert score.ensemble_tags(tmp_path) == {}  # no stats.json (an older decode)
    files.write_json(tmp_path / "stats.json", {"device": "cpu", "val": {}})
    assert score.ensemble_tags(tmp_path) == {}

"""pipeline/experiments/ablation.py and `python -m pipeline ablation`: the queued variants, and the
table made from runs in a temporary MLflow store.

The runs are logged as train and score log them (Tracker, score.score on made-up hypotheses of the
default test sets): the baseline garbles 30% of the reference words, post-LN 5% (significantly better),
learned positions 30% with another seed (not significant), untied also changed train.max_steps and was
not decoded on one test set, 10+2 failed, decoder-only never ran; a later run of other params and no
DVC experiment must not be taken for the baseline.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from click.testing import CliRunner

from pipeline import files
from pipeline.errors import ParamsError, UserError
from pipeline.experiments import ablation, pairs
from pipeline.reporting.metrics import paired_test
from pipeline.reporting.runs import RunRecord
from pipeline.stages import ablation as ablation_command
from pipeline.stages import score
from pipeline.tracking import metadata
from pipeline.tracking.tracker import Tracker
from tests.support.repo import BASE, REPO
from tests.support.tables import garble, references, table_rows

TESTS = list(BASE.data.test)
LINES = 60
BASE_COMMIT, NEW_COMMIT = "a" * 40, "b" * 40
USER_NOTE = "abl-post-ln trained beside the test suite"  # a note given with --note


@dataclass(frozen=True)
class Made:
    ids: dict[str, str]  # label -> MLflow run id
    scores: dict[str, dict[str, Any]]  # label -> what score() returned
    hyps: dict[str, dict[str, list[str]]]  # label -> test set -> hypotheses
    refs: dict[str, list[str]]
    report: str
    saved: dict[str, Any]  # ablation.json
    root: Path  # the MLflow store (mlflow.db) and the references (raw/)


def raw_params(changes: dict[str, object]) -> dict[str, Any]:
    raw = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
    for key, value in changes.items():
        section, name = key.split(".", 1)
        raw[section][name] = value
    return raw


def log_scored_run(
    root: Path,
    patch: pytest.MonkeyPatch,
    label: str,
    exp: str | None,
    changes: dict[str, object],
    hyps: dict[str, list[str]],
    n_params_as_metric: bool = False,
) -> tuple[str, dict[str, Any]]:
    """A run as train logs it (params, n_params, totals, train/summary.json), then score's scores and
    hypotheses of `hyps`' test sets; returns its id and what score returned."""
    if exp is None:
        patch.delenv("DVC_EXP_NAME", raising=False)
    else:
        patch.setenv("DVC_EXP_NAME", exp)
    patch.setattr(metadata, "git_commit", lambda cwd=None: BASE_COMMIT if exp is None else NEW_COMMIT)
    n_params = 7_000_000 + 1000 * len(label)
    tags = {} if n_params_as_metric else {"n_params": n_params}
    run = Tracker.start(raw_params(changes), "nmt", f"de-en {label}", tags=tags)
    totals = {"train_seconds": 1500.0 + len(label), "tokens_per_s": 3000.0}
    run.log_metrics(totals | ({"n_params": n_params} if n_params_as_metric else {}), step=900)
    summary = root / label / "train" / "summary.json"
    files.write_json(summary, {"epochs": 11, "stopped": "early_stopping", "steps": 900, "best_step": 500})
    run.log_artifact(summary, "train")
    run.save_run_file(root / label / "model" / "mlflow_run.json")
    run.end("FINISHED")
    decode = root / label / "decode"
    for name, lines in hyps.items():
        files.write_lines(decode / "test" / f"{name}.hyp", lines)
    results = score.score(decode, root / "raw", root / label / "metrics.json", root / label / "model")
    assert run.run_id is not None
    return run.run_id, results


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Made:
    root = tmp_path_factory.mktemp("ablation")
    refs = {name: references(LINES, seed=i) for i, name in enumerate(TESTS)}
    for name, lines in refs.items():
        files.write_lines(root / "raw" / "test" / f"{name}.tgt", lines)
    some = lambda share, seed, names=TESTS: {n: garble(refs[n], share, seed) for n in names}
    runs: list[tuple[str, str | None, dict[str, object], dict[str, list[str]], bool]] = [
        ("baseline", None, {}, some(0.3, 1), False),
        ("post-ln", "abl-post-ln", {"model.norm": "post"}, some(0.05, 1), False),
        ("learned-pos", "abl-learned-pos", {"model.positions": "learned"}, some(0.3, 2), True),
        (
            "untied",
            "abl-untied",
            {"bpe.joint": False, "model.tie_embeddings": "none", "train.max_steps": 200},
            some(0.3, 3, TESTS[:-1]),
            False,
        ),
        ("other", None, {"model.d_model": 128}, some(0.3, 4), False),  # newer than the baseline
    ]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ablation, "experiment_baselines", dict)  # not this checkout's own experiments
        patch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{root / 'mlflow.db'}")
        ids, scores = {}, {}
        for label, exp, changes, hyps, as_metric in runs:
            ids[label], scores[label] = log_scored_run(root, patch, label, exp, changes, hyps, as_metric)
        patch.setenv("DVC_EXP_NAME", "abl-10-2")
        failed = Tracker.start(raw_params({"model.encoder_layers": 10}), "nmt", "de-en 10-2")
        failed.end("FAILED")
        ids["10-2"] = str(failed.run_id)
        patch.delenv("DVC_EXP_NAME")
        out = root / "reports" / "ablation.md"
        args = [
            "table",
            "--params",
            str(REPO / "params.yaml"),
            "--refs",
            str(root / "raw"),
            "--out",
            str(out),
            "--note",
            USER_NOTE,
        ]
        result = CliRunner().invoke(ablation_command.command, args)
    assert result.exit_code == 0, result.output
    return Made(
        ids,
        scores,
        {label: hyps for label, _, _, hyps, _ in runs},
        refs,
        out.read_text(encoding="utf-8"),
        json.loads(out.with_suffix(".json").read_text(encoding="utf-8")),
        root,
    )


def summary_rows(report: str) -> list[list[str]]:
    return table_rows(report.split("## ")[0])


def test_queue_runs_the_whole_pipeline_with_only_each_variants_changes() -> None:
    result = CliRunner().invoke(
        ablation_command.command, ["queue", "--params", str(REPO / "params.yaml"), "--dry-run"]
    )
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert [line.split()[5] for line in lines] == list(ablation.VARIANTS)  # no baseline: it is `dvc repro`
    assert all(line.startswith("dvc exp run --queue -n abl-") for line in lines)
    assert not any(" train" in line or "max_steps" in line or "warmup" in line for line in lines)
    assert "dvc exp run --queue -n abl-untied -S bpe.joint=false -S model.tie_embeddings=none" in lines


def test_every_variant_is_valid_params_and_separate_vocabularies_need_untied_embeddings() -> None:
    raw = raw_params({})
    for changes in (v.changes for v in ablation.VARIANTS.values()):
        ablation.variant_params(raw, changes)
    untied = ablation.variant_params(raw, ablation.VARIANTS["abl-untied"].changes)
    assert untied.bpe.joint is False and untied.model.tie_embeddings == "none"
    with pytest.raises(ParamsError, match=r"model\.tie_embeddings: .all. ties"):
        ablation.variant_params(raw, {"bpe.joint": False})  # tie "all" with separate vocabularies


def test_a_row_per_variant_the_baseline_first_with_its_commit(made: Made) -> None:
    rows = summary_rows(made.report)
    header, body = rows[0], rows[1:]
    assert header[:7] == ["variant", "change", "commit", "parameters", "epochs", "train time", "tokens/s"]
    assert [r[0] for r in body] == ["baseline", *ablation.VARIANTS]
    assert body[0][2] == BASE_COMMIT[:7] and body[1][2] == NEW_COMMIT[:7]
    assert made.saved["rows"][0]["run_id"] == made.ids["baseline"]  # not the newer run of other params
    assert made.saved["rows"][0]["status"] == "finished" and made.saved["baseline_ref"] is None
    assert f"MLflow run `{made.ids['baseline']}` (the default pipeline's own" in made.report
    assert body[1][4] == "11 (early stop)" and body[1][5] == "0:25:07"


def test_parameters_come_from_the_tag_or_from_an_old_runs_metric(made: Made) -> None:
    body = summary_rows(made.report)[1:]
    assert body[1][3] == f"{7_000_000 + 1000 * len('post-ln'):,}"  # a tag
    assert body[2][3] == f"{7_000_000 + 1000 * len('learned-pos'):,}"  # a metric


def test_runs_not_made_yet_are_rows_that_say_so(made: Made) -> None:
    body = {r[0]: r for r in summary_rows(made.report)[1:]}
    assert body["abl-decoder-only"][2] == "not run yet (queued?)"
    assert body["abl-10-2"][2] == f"no scored run yet (latest {made.ids['10-2'][:8]}: failed)"
    assert set(body["abl-10-2"][3:]) == {"–"}
    assert made.saved["rows"][-1] == {
        "variant": "abl-decoder-only",
        "change": ablation.VARIANTS["abl-decoder-only"].what,
        "status": "not run yet (queued?)",
        "settings": ["model.arch=decoder_only", "model.n_layers=null", "model.decoder_layers=6"],
    }


def test_bleu_and_its_interval_per_test_set_are_the_score_stages(made: Made) -> None:
    rows = {r["variant"]: r for r in made.saved["rows"]}
    for label, variant in (("baseline", "baseline"), ("post-ln", "abl-post-ln")):
        for name in TESTS:
            scored = made.scores[label]["test"][name]
            assert rows[variant]["tests"][name]["bleu"] == scored["bleu"]
            assert rows[variant]["tests"][name]["ci95"] == scored["ci95"]["bleu"]
    short = TESTS[0][len("multi30k-test_") :]  # without the common prefix
    table = table_rows(made.report.split(f"## {short}\n")[1].split("## ")[0])
    ci = made.scores["baseline"]["test"][TESTS[0]]["ci95"]["bleu"]
    assert table[1][:3] == [
        "baseline",
        f"{made.scores['baseline']['test'][TESTS[0]]['bleu']:.1f}",
        f"{ci[0]:.1f}–{ci[1]:.1f}",
    ]


def test_differences_and_p_values_are_the_paired_test_of_the_hypotheses(made: Made) -> None:
    rows = {r["variant"]: r for r in made.saved["rows"]}
    for label, variant in (("post-ln", "abl-post-ln"), ("learned-pos", "abl-learned-pos")):
        for name in TESTS:
            systems = {"base": made.hyps["baseline"][name], label: made.hyps[label][name]}
            expected = paired_test(systems, made.refs[name])[label]["bleu"]
            got = rows[variant]["tests"][name]
            assert (got["delta"], got["p"], got["significant"]) == (
                expected.delta,
                expected.p_value,
                expected.significant,
            )
    assert all(rows["abl-post-ln"]["tests"][n]["significant"] for n in TESTS)
    assert not any(rows["abl-learned-pos"]["tests"][n]["significant"] for n in TESTS)
    cell = summary_rows(made.report)[2][7]
    assert cell.startswith(f"{rows['abl-post-ln']['tests'][TESTS[0]]['bleu']:.1f} (+") and cell.endswith(
        " *)"
    )


def test_a_run_that_differs_in_more_than_its_change_or_lacks_a_set_is_noted(made: Made) -> None:
    notes = made.report.split("## Notes")[1]
    assert "abl-untied also differs from the baseline in train.max_steps (200 vs 0)" in notes
    assert f"{TESTS[-1]}: abl-untied has no hypotheses for it" in notes
    untied = summary_rows(made.report)[4]
    assert untied[-1] == "–" and untied[7].endswith(")")
    assert "abl-post-ln also differs" not in notes
    assert f"- {USER_NOTE}" in notes and USER_NOTE in made.saved["notes"]


def test_a_baseline_named_on_the_command_line_is_said_to_be(
    made: Made, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{made.root / 'mlflow.db'}")
    out = tmp_path / "ablation.md"
    args = ["table", "--baseline", made.ids["other"], "--refs", str(made.root / "raw"), "--out", str(out)]
    result = CliRunner().invoke(ablation_command.command, [*args, "--params", str(REPO / "params.yaml")])
    assert result.exit_code == 0, result.output
    text = out.read_text(encoding="utf-8")
    assert f"MLflow run `{made.ids['other']}` (named with --baseline {made.ids['other']})" in text
    # Every variant now also differs from the baseline in the other run's d_model.
    assert "abl-post-ln also differs from the baseline in model.d_model (256 vs 128)" in text


def record(run_id: str, exp: str | None, params: dict[str, str], day: int) -> RunRecord:
    started = pd.Timestamp(f"2026-01-{day:02d}")
    return RunRecord(run_id, run_id, exp, "c" * 40, "finished", started, params, {"test.t.bleu": 30.0})


def test_the_baseline_is_the_newest_default_run_or_the_one_named() -> None:
    defaults = {"model.norm": "pre", "train.seed": "1"}
    older, newer = record("1" * 32, None, defaults, 1), record("2" * 32, None, defaults, 2)
    other = record("3" * 32, None, {**defaults, "model.norm": "post"}, 3)
    named = record("4" * 32, "abl-post-ln", {**defaults, "model.norm": "post"}, 4)
    records = [older, newer, other, named]
    assert ablation.pick_baseline(records, defaults, None) is newer
    assert ablation.pick_baseline(records, defaults, "1" * 32) is older
    assert ablation.pick_baseline(records, defaults, "abl-post-ln") is named
    with pytest.raises(UserError, match=r"3{32}, has model.norm post \(default pre\).*--baseline"):
        ablation.pick_baseline([other, named], defaults, None)


def test_dvc_experiments_are_read_from_the_repositorys_refs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True, text=True)
        return done.stdout.strip()

    git("init", "-q")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "x")
    a, b = "ab" + "1" * 38, "cd" + "2" * 38
    for ref in (f"{a[:2]}/{a[2:]}/abl-10-2", f"{a[:2]}/{a[2:]}/abl-untied", f"{b[:2]}/{b[2:]}/abl-untied"):
        git("update-ref", f"refs/exps/{ref}", "HEAD")
    git("update-ref", "refs/exps/celery/stash", "HEAD")  # DVC's queue, not an experiment
    first = git("rev-parse", "HEAD")
    monkeypatch.setenv("GIT_COMMITTER_DATE", "2030-01-01T00:00:00")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "y")
    newer = git("rev-parse", "HEAD")
    git("update-ref", f"refs/exps/{b[:2]}/{b[2:]}/abl-untied", newer)  # a later run of it
    monkeypatch.chdir(tmp_path)
    assert ablation.experiment_baselines() == {"abl-10-2": {a}, "abl-untied": {a, b}}
    assert pairs.experiment_rev("abl-untied") == newer and pairs.experiment_rev("abl-10-2") == first
    assert pairs.experiment_rev("abl-none") is None
    monkeypatch.chdir(tmp_path.parent)  # not a checkout: none
    assert ablation.experiment_baselines() == {}


def test_an_experiments_row_names_its_baseline_commit_and_notes_a_tag_that_differs() -> None:
    base = ablation.Row(ablation.BASELINE, "", record("1" * 32, None, {}, 1))
    moved = ablation.Row("abl-10-2", "", record("2" * 32, "abl-10-2", {}, 2))  # tagged "c" * 40
    right = ablation.Row("abl-post-ln", "", replace(record("3" * 32, "abl-post-ln", {}, 3), commit="d" * 40))
    twice = ablation.Row("abl-untied", "", record("4" * 32, "abl-untied", {}, 4))
    baselines = {"abl-10-2": {"d" * 40}, "abl-post-ln": {"d" * 40}, "abl-untied": {"d" * 40, "e" * 40}}
    notes = ablation.experiment_commits([base, moved, right, twice], baselines)
    assert [r.record.commit for r in (base, moved, right, twice)] == ["c" * 40, "d" * 40, "d" * 40, "c" * 40]
    assert notes == [
        "abl-10-2: commit ddddddd is its DVC experiment's baseline (refs/exps); its MLflow run's git_commit "
        "tag, ccccccc, is the workspace's HEAD when the run started (the tag of runs made before tracking "
        "read the stage's own checkout)"
    ]


def test_the_table_outlives_its_mlflow_store(
    made: Made, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A later checkout has no MLflow database, only the runs the first table kept in git."""
    archive = made.root / "reports" / "ablation" / "runs"
    kept = {r["variant"] for r in made.saved["rows"] if r["status"] == "finished"}
    assert {p.stem for p in archive.glob("*.json")} == kept and len(kept) == 4  # not the failed one
    monkeypatch.setattr(ablation, "experiment_baselines", dict)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'absent.db'}")
    out = tmp_path / "ablation.md"
    args = ["table", "--params", str(REPO / "params.yaml"), "--refs", str(made.root / "raw")]
    result = CliRunner().invoke(
        ablation_command.command, [*args, "--out", str(out), "--archive", str(archive)]
    )
    assert result.exit_code == 0, result.output
    again = json.loads(out.with_suffix(".json").read_text(encoding="utf-8"))
    finished = [r for r in made.saved["rows"] if r["status"] == "finished"]
    assert [r for r in again["rows"] if r["status"] == "finished"] == finished  # intervals and p alike
    assert any(n.startswith("MLflow unavailable") for n in again["notes"])

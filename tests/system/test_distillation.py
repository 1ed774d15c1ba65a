"""Distillation as DVC stages: `dvc repro` on tiny data with it on, in a copy of the repo.

The teachers (the run's data/model, a tiny model trained by the train stage, and one more that
the teachers stage trains from another seed) translate the clean training sources; the student
trains on those translations with its own shape, and is decoded and scored as its own MLflow run
under the teacher's. Then: a second `dvc repro` reruns nothing, a change to the student's settings
retrains the student only, and one to the teacher's reaches the student through data/model,
data/teachers and data/distill alone (running that chain again costs a minute).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import mlflow
import pytest
import yaml

from pipeline import files, lineage
from pipeline import params as P
from pipeline.decoding.translator import Translator
from tests.system.test_dvc_pipeline import (
    dvc_status,
    make_test_sets,
    reproduced_copy,
    run,
    tiny_params,
    write_corpus,
)

pytestmark = pytest.mark.slow


def distill_params(src: Path, tgt: Path, tests: dict) -> dict:
    raw = tiny_params(src, tgt, tests)
    d = raw["distill"]
    d["enabled"] = True
    d["teacher_seeds"] = [2]
    d["decode"].update(beam=2, batch_tokens=400)
    student = d["student"]
    student["preset"] = "none"  # the field's shapes are too big for a test: a tiny deep-shallow one
    student["model"].update(
        d_model=32,
        n_heads=2,
        d_ff=64,
        n_layers=None,
        encoder_layers=2,
        decoder_layers=1,
        dropout=0.0,
        attention_dropout=0.0,
    )
    student["train"].update(
        precision="fp32", max_tokens=400, max_epochs=2, warmup_steps=10, lr=0.003, log_every=5, threads=1
    )
    student["decode"]["batch_tokens"] = 400
    return raw


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("distill") / "repo"
    src, tgt = write_corpus(root.parent / "corpus", n=400, seed=0)
    tests = make_test_sets(root.parent / "tests")
    return reproduced_copy(root, distill_params(src, tgt, tests))


def test_the_distilled_corpus_is_the_teachers_beam_translation_of_the_training_sources(repo):
    sources = files.read_lines(repo / "data/clean/train.src")
    seeded = repo / "data/teachers/seed2"  # the teachers stage's, beside data/model
    settings = dataclasses.replace(P.load(repo / "params.yaml").distill.decode, ensemble=(str(seeded),))
    translated = list(
        Translator.from_dir(repo / "data/model", "cpu", settings=settings).translate_corpus(sources)
    )
    kept = [(s, t) for s, t in zip(sources, translated) if t.strip()]  # an empty translation teaches nothing
    assert files.read_lines(repo / "data/distill/train.src") == [s for s, _ in kept]
    assert files.read_lines(repo / "data/distill/train.tgt") == [t for _, t in kept]
    stats = json.loads((repo / "data/distill/stats.json").read_text())
    assert stats["pairs"] == len(kept) > 0 and stats["empty_translations"] == len(sources) - len(kept)
    record = json.loads((repo / "data/distill/teachers.json").read_text())
    for member, model in zip(record["teachers"], (repo / "data/model", seeded), strict=True):
        assert member["model_sha256"] == lineage.sha256(model / "model.pt")
        assert member["mlflow_run_id"] == json.loads((model / "mlflow_run.json").read_text())["run_id"]


def test_the_teachers_stage_trains_data_models_settings_from_another_seed(repo):
    model, seeded = (
        yaml.safe_load((repo / d / "params.yaml").read_text()) for d in ("data/model", "data/teachers/seed2")
    )
    assert (model["train"]["seed"], seeded["train"]["seed"]) == (1, 2)
    assert {k: v for k, v in seeded["train"].items() if k != "seed"} == {
        k: v for k, v in model["train"].items() if k != "seed"
    }
    assert seeded["model"] == model["model"] and seeded["data"] == model["data"]
    assert lineage.sha256(repo / "data/teachers/seed2/model.pt") != lineage.sha256(
        repo / "data/model/model.pt"
    )
    assert (repo / "data/teachers-work/seed2/log/valid.tsv").is_file()


def test_the_student_has_its_own_shape_trains_on_the_distilled_pairs_and_is_scored(repo):
    saved = yaml.safe_load((repo / "data/student/params.yaml").read_text())
    assert (saved["model"]["encoder_layers"], saved["model"]["decoder_layers"]) == (2, 1)
    assert saved["data"]["train"] == ["distilled", "synthetic"]  # distill.original: true, the default
    work, distilled = repo / "data/student-work/clean", repo / "data/distill/train.tgt"
    original = repo / "data/clean/train.tgt"
    assert files.read_lines(work / "train.tgt") == files.read_lines(distilled) + files.read_lines(original)
    assert json.loads((repo / "reports/student/summary.json").read_text())["steps"] > 0
    metrics = json.loads((repo / "reports/student/metrics.json").read_text())
    assert set(metrics["test"]) == {"plain", "tabbed"} and metrics["val"]["bleu"] >= 0
    hyps = files.read_lines(repo / "data/student-decode/test/plain.hyp")
    assert len(hyps) == len(files.read_lines(repo / "data/raw/test/plain.src"))
    shown = (repo / "reports/report.md").read_text()
    assert "## The student" in shown and "student, int8" in shown  # the report stage shows it


def test_its_int8_export_translates_and_is_scored_beside_it(repo):
    info = json.loads((repo / "data/student-ct2/pipeline.json").read_text())
    assert info["quantization"] == "int8" and info["model_sha256"] == lineage.sha256(
        repo / "data/student/model.pt"
    )
    hyps = files.read_lines(repo / "data/student-ct2-decode/test/plain.hyp")
    assert len(hyps) == len(files.read_lines(repo / "data/raw/test/plain.src"))
    metrics = json.loads((repo / "reports/student/metrics-int8.json").read_text())
    student = json.loads((repo / "data/student/mlflow_run.json").read_text())
    logged = mlflow.MlflowClient(student["tracking_uri"]).get_run(student["run_id"]).data.metrics
    assert logged["int8.dev_bleu"] == metrics["val"]["bleu"]
    assert (
        logged["dev_bleu"] == json.loads((repo / "reports/student/metrics.json").read_text())["val"]["bleu"]
    )


def test_the_students_run_is_logged_under_its_teachers(repo):
    student = json.loads((repo / "data/student/mlflow_run.json").read_text())
    teacher = json.loads((repo / "data/model/mlflow_run.json").read_text())
    client = mlflow.MlflowClient(student["tracking_uri"])
    tags = client.get_run(student["run_id"]).data.tags
    assert tags["mlflow.parentRunId"] == teacher["run_id"] != student["run_id"]
    teachers = (repo / "data/model/model.pt", repo / "data/teachers/seed2/model.pt")
    assert tags["teacher_model_sha256"] == ",".join(map(lineage.sha256, teachers))


def test_a_second_repro_reruns_nothing_and_only_the_teachers_settings_re_distil(repo):
    assert "up to date" in run(["dvc", "repro"], repo).stdout
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["distill"]["student"]["train"]["lr"] = 0.002
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    assert set(dvc_status(repo)) == {"student"}
    params["distill"]["student"]["train"]["lr"] = 0.003
    params["train"]["lr"] = 0.002  # the teacher's: the student sees it only through data/model
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    changed = set(dvc_status(repo))
    assert {"train", "teachers"} <= changed and not changed & {"distill", "student"}
    stages = yaml.safe_load((repo / "dvc.yaml").read_text())["stages"]
    assert "data/model" in stages["train"]["outs"] and "data/model" in stages["distill"]["deps"]
    assert "data/teachers" in stages["teachers"]["outs"] and "data/teachers" in stages["distill"]["deps"]
    assert "data/distill" in stages["distill"]["outs"] and "data/distill" in stages["student"]["deps"]

"""The distill stage: the teachers' translations, resumed after a kill, the refusals of teachers it
cannot use; and the student stage, which learns what the teachers wrote, not the references."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from pipeline import files, lineage
from pipeline import params as P
from pipeline.decoding.translator import Translator
from pipeline.errors import ParamsError, UserError
from pipeline.stages import distill as D
from pipeline.stages import student as S
from tests.support.hf import SRC_WORDS, TGT_WORDS, make_trained_model_dir, marian_pairs
from tests.support.models import train_spm
from tests.support.repo import BASE


def distilling(*teachers: Path, **student: object) -> P.Params:
    decode = dataclasses.replace(BASE.distill.decode, beam=2, batch_tokens=400)
    # original=False: the student learns the distilled pairs alone, so a test can tell what it learnt
    d = dataclasses.replace(
        BASE.distill, enabled=True, original=False, teachers=tuple(map(str, teachers)), decode=decode
    )
    if student:
        d = dataclasses.replace(d, student=dataclasses.replace(d.student, **student))
    return dataclasses.replace(BASE, distill=d)


@pytest.fixture(scope="module")
def teachers(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("teachers")
    return make_trained_model_dir(root / "a", steps=60, seed=0), make_trained_model_dir(
        root / "b", steps=60, seed=0
    )


def clean_dir(root: Path, pairs: list[tuple[str, str]]) -> Path:
    clean = root / "clean"
    (clean / "test").mkdir(parents=True)
    for stem, part in (("train", pairs), ("val", pairs[:20]), ("test/t", pairs[20:40])):
        with files.PairedWriter(clean / stem) as w:
            w.write_lines("src", [s for s, _ in part])
            w.write_lines("tgt", [t for _, t in part])
    return clean


def distilled_dir(root: Path, pairs: list[tuple[str, str]]) -> Path:
    """What the distill stage writes, with `pairs` as the teachers' translations (and a fake teacher)."""
    root.mkdir()
    with files.PairedWriter(root / "train") as w:
        w.write_lines("src", [s for s, _ in pairs])
        w.write_lines("tgt", [t for _, t in pairs])
    files.write_json(root / D.TEACHERS, {"teachers": [{"path": "fake", "model_sha256": "0" * 64}]})
    files.write_json(root / "stats.json", {"enabled": True, "pairs": len(pairs), "empty_translations": 0})
    return root


def test_the_corpus_pairs_each_source_with_the_teachers_ensemble_translation(tmp_path, teachers):
    a, b = teachers
    sources = [s for s, _ in marian_pairs(30, seed=3)]
    clean = clean_dir(tmp_path, [(s, "x") for s in sources])
    params = distilling(a, b)
    stats = D.distill(params, tmp_path / "unused", clean, a, tmp_path / "work", tmp_path / "out", "cpu")
    settings = dataclasses.replace(params.distill.decode, ensemble=(str(b),))
    expected = list(Translator.from_dir(a, "cpu", settings=settings).translate_corpus(sources))
    kept = [(s, t) for s, t in zip(sources, expected) if t]
    assert files.read_lines(tmp_path / "out/train.src") == [s for s, _ in kept]
    assert files.read_lines(tmp_path / "out/train.tgt") == [t for _, t in kept]
    record = json.loads((tmp_path / "out" / D.TEACHERS).read_text())
    shas = [t["model_sha256"] for t in record["teachers"]]
    assert shas == [lineage.sha256(p / "model.pt") for p in (a, b)] and stats["chunks_translated"] == 1
    again = D.distill(params, tmp_path / "unused", clean, a, tmp_path / "work", tmp_path / "out", "cpu")
    assert again["chunks_resumed"] == 1 and again["chunks_translated"] == 0  # nothing translated twice


def test_off_it_writes_only_a_marker_and_the_student_stage_asks_for_the_distill_stage(tmp_path):
    D.distill(BASE, tmp_path / "m", tmp_path / "c", tmp_path / "b", tmp_path / "work", tmp_path / "out")
    assert [p.name for p in (tmp_path / "out").iterdir()] == [D.OFF]
    outs = S.Outputs(*(tmp_path / name for name in ("s", "h", "log", "raw", "ct2", "ct2h")))
    with pytest.raises(UserError, match=r"no distilled corpus in it; run the distill stage first"):
        S.student(distilling(), tmp_path / "out", tmp_path / "c", tmp_path / "b", tmp_path / "sw", outs)


@pytest.mark.parametrize("fault", ["no model", "another pair", "another vocabulary"])
def test_a_teacher_it_cannot_use_is_refused_in_one_line_before_anything_is_written(tmp_path, teachers, fault):
    teacher = tmp_path / "teacher"
    shutil.copytree(teachers[0], teacher)
    if fault == "no model":
        (teacher / "model.pt").unlink()
        match = r"^distill.teachers: .*teacher is not a model directory \(it has no model.pt\)"
    elif fault == "another pair":
        saved = yaml.safe_load((teacher / "params.yaml").read_text())
        saved["data"]["src_lang"] = "fr"
        (teacher / "params.yaml").write_text(yaml.safe_dump(saved))
        match = r"^distill.teachers: .*teacher translates fr->en, this run de->en; list teachers of de->en$"
    else:
        train_spm(teacher / "spm.model", 50, seed=9)
        match = r"^distill.teachers: .*teacher has another vocabulary than .* \(spm.model differ\)"
    clean = clean_dir(tmp_path, marian_pairs(10))
    with pytest.raises(ParamsError, match=match):
        D.distill(distilling(teacher), tmp_path, clean, teachers[0], tmp_path / "work", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_killed_distillation_goes_on_where_it_stopped_with_no_line_lost_or_repeated(tmp_path, teachers):
    sources = [s for s, _ in marian_pairs(1500, seed=4)]
    clean = clean_dir(tmp_path, [(s, "x") for s in sources])
    params_file = tmp_path / "params.yaml"
    params_file.write_text(yaml.safe_dump(distilling(teachers[0]).to_dict(), sort_keys=False))
    args = [sys.executable, "-m", "pipeline", "distill", "--params", str(params_file), "--model", "unused"]
    args += ["--clean", str(clean), "--bpe", str(teachers[0]), "--work", str(tmp_path / "work")]
    args += ["--out", str(tmp_path / "out"), "--device", "cpu", "--chunk-lines", "20"]
    child = subprocess.Popen(args, stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    chunks = tmp_path / "work" / "chunks"
    deadline = time.monotonic() + 120
    while len(list(chunks.glob("*.tgt"))) < 3 and time.monotonic() < deadline and child.poll() is None:
        time.sleep(0.01)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    done = len(list(chunks.glob("*.tgt")))
    assert 3 <= done < len(sources) / 20 and not (tmp_path / "out").exists()  # killed midway, no output
    subprocess.run(args, check=True, capture_output=True)
    D.distill(
        distilling(teachers[0]), tmp_path, clean, teachers[0], tmp_path / "w2", tmp_path / "whole", "cpu", 20
    )
    for side in ("src", "tgt"):
        assert (tmp_path / f"out/train.{side}").read_bytes() == (
            tmp_path / f"whole/train.{side}"
        ).read_bytes()


def test_the_student_learns_what_its_teachers_wrote_not_the_references(tmp_path, teachers, monkeypatch):
    """The "teachers" here wrote another lexicon than the references' (each word's neighbour in
    TGT_WORDS): a student that learnt from the distilled pairs writes that one on the test set."""
    monkeypatch.chdir(tmp_path)  # its MLflow store
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    pairs = marian_pairs(600, seed=6)
    other = dict(zip(SRC_WORDS, (TGT_WORDS[1:] + TGT_WORDS[:1]) * 2))
    lexicon = [(s, " ".join(other[word] for word in s.split())) for s, _ in pairs]
    distilled = distilled_dir(tmp_path / "distill", lexicon)
    clean = clean_dir(tmp_path, pairs)
    with files.PairedWriter(clean / "val") as w:  # validated on what the teachers write (as they would)
        w.write_lines("src", [s for s, _ in pairs[:20]])
        w.write_lines("tgt", [" ".join(other[word] for word in s.split()) for s, _ in pairs[:20]])
    shutil.copytree(clean, tmp_path / "raw")
    student = dataclasses.replace(BASE.distill.student, preset="none")
    model = dataclasses.replace(
        student.model,
        d_model=32,
        n_heads=4,
        d_ff=64,
        encoder_layers=2,
        decoder_layers=1,
        dropout=0.0,
        attention_dropout=0.0,
    )
    train = dataclasses.replace(
        student.train,
        precision="fp32",
        max_tokens=400,
        max_epochs=60,
        warmup_steps=10,
        lr=0.003,
        threads=1,
        val_bleu=False,
        early_stop_metric="loss",
        patience=0,
    )
    params = distilling(teachers[0], preset="none", model=model, train=train, quantization="none")
    outs = S.Outputs(*(tmp_path / name for name in ("student", "hyps", "log", "raw", "ct2", "ct2h")))
    S.student(params, distilled, clean, teachers[0], tmp_path / "work", outs)
    hyps = files.read_lines(tmp_path / "hyps/test/t.hyp")  # the references: pairs[20:40]'s targets
    sources, refs = [s for s, _ in pairs[20:40]], [t for _, t in pairs[20:40]]
    taught = [" ".join(other[word] for word in s.split()) for s in sources]

    def matches(wanted: list[str]) -> int:
        return sum(h == w for hs, ws in zip(hyps, wanted) for h, w in zip(hs.split(), ws.split()))

    assert matches(taught) > 3 * max(matches(refs), 1)


def test_with_distill_original_the_students_corpus_is_the_distilled_pairs_then_the_original_ones(tmp_path):
    pairs = marian_pairs(50, seed=7)
    distilled = distilled_dir(tmp_path / "distill", [(s, f"taught {i}") for i, (s, _) in enumerate(pairs)])
    clean = clean_dir(tmp_path, pairs)
    files.write_json(clean / "stats.json", {"train": {"sources": {"multi30k": {"lines_out": len(pairs)}}}})
    for original, sources, targets in (
        (True, ["distilled", "multi30k"], [f"taught {i}" for i in range(len(pairs))] + [t for _, t in pairs]),
        (False, ["distilled"], [f"taught {i}" for i in range(len(pairs))]),
    ):
        params = dataclasses.replace(BASE, distill=dataclasses.replace(BASE.distill, original=original))
        out = tmp_path / f"student-{original}"
        S.write_corpus(params, distilled, clean, out)
        assert files.read_lines(out / "train.tgt") == targets
        assert files.read_lines(out / "train.src") == [s for s, _ in pairs] * (2 if original else 1)
        assert list(json.loads((out / "stats.json").read_text())["train"]["sources"]) == sources

"""bench/efficiency.py: teachers, a student and its int8 export, each measured in its own process,
in one table with their sizes, speeds, latency, memory, and quality against the ensemble (and the
students' against their shape trained on the original data)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from bench import efficiency
from pipeline import files
from pipeline.interop.ct2 import export
from tests.support.hf import make_trained_model_dir, marian_pairs
from tests.support.repo import BASE


def test_the_table_measures_each_system_and_compares_it_with_the_teacher_ensemble(tmp_path, monkeypatch):
    # one seed: one vocabulary (its spm trains on the seed's pairs); other weights by their steps
    teachers = [make_trained_model_dir(tmp_path / f"t{steps}", steps=steps) for steps in (40, 60)]
    student = make_trained_model_dir(tmp_path / "student", steps=40, n_layers=1)
    original = make_trained_model_dir(tmp_path / "original", steps=20, n_layers=1)
    ct2 = export(student, tmp_path / "student-ct2", "int8")
    clean, refs = tmp_path / "clean", tmp_path / "raw"
    for root in (clean, refs):
        (root / "test").mkdir(parents=True)
    for stem, pairs in (
        ("val", marian_pairs(10, 5)),
        ("test/a", marian_pairs(40, 6)),
        ("test/b", marian_pairs(30, 7)),
    ):
        files.write_lines(clean / f"{stem}.src", [s for s, _ in pairs])
        files.write_lines(refs / f"{stem}.tgt", [t for _, t in pairs])
    out = tmp_path / "efficiency.md"
    params = Path("params.yaml").resolve()
    monkeypatch.chdir(tmp_path)  # no data/ here: the child processes must not need the defaults
    args = [
        "--params",
        str(params),
        "--clean",
        str(clean),
        "--refs",
        str(refs),
        "--out",
        str(out),
        "--threads",
        "2",
    ]
    args += [
        *(a for t in teachers for a in ("--teacher", str(t))),
        "--student",
        str(student),
        "--student-ct2",
        str(ct2),
        "--original",
        str(original),
    ]
    result = CliRunner().invoke(efficiency.main, args)
    assert result.exit_code == 0, result.output
    body = json.loads(out.with_suffix(".json").read_text())["systems"]
    names = ["teacher ensemble (2)", "one teacher", "student, fp32", "student, int8", efficiency.ORIGINAL]
    assert list(body) == names
    assert all(
        s["words_per_s"] > 0 and s["words_per_s_one_core"] > 0 and s["latency_ms"] > 0 for s in body.values()
    )
    assert all(s["peak_rss_mb"] > 50 for s in body.values())  # a process with torch in it
    assert body["teacher ensemble (2)"]["size_mb"] == 2 * body["one teacher"]["size_mb"]
    assert (
        body["student, int8"]["size_mb"] > 0
        and body["student, fp32"]["size_mb"] < body["one teacher"]["size_mb"]
    )
    beams = (BASE.distill.decode.beam, BASE.distill.student.decode.beam)  # each at the beam its params name
    assert (body["teacher ensemble (2)"]["beam"], body["student, int8"]["beam"]) == beams
    text = out.read_text()
    assert "### a (40 lines)" in text and "### b (30 lines)" in text and text.count("student, int8") >= 3
    _, gained = text.split("## The students against their shape trained on the original data")
    assert gained.count("### a (40 lines)") == 1 and "student, int8" in gained and "one teacher" not in gained


def test_a_missing_folder_is_named_with_the_stage_that_makes_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no data/ here
    (tmp_path / "m").mkdir()
    args = ["--teacher", "m", "--student", "m", "--clean", "m"]
    result = CliRunner().invoke(efficiency.main, args)
    assert result.exit_code == 2 and "--refs" in result.output
    assert "no directory data/raw: run dvc repro download, or name one" in result.output
    result = CliRunner().invoke(efficiency.main, args[:4])
    assert result.exit_code == 2 and "no directory data/clean: run dvc repro clean" in result.output

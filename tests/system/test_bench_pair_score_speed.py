"""bench/pair_score_speed.py: each score of the clean stage's scorer timed on one thread and on every
core, in pairs a second and a second per core."""

from __future__ import annotations

import json

from click.testing import CliRunner

from bench import pair_score_speed
from pipeline import files
from pipeline.data.pool import cores
from tests.support.hf import make_trained_model_dir, marian_pairs


def test_speed_times_each_score_on_one_thread_and_every_core(tmp_path):
    model = make_trained_model_dir(tmp_path / "model", steps=20)
    pairs = marian_pairs(30, seed=2)
    src, tgt = tmp_path / "s.txt", tmp_path / "t.txt"
    files.write_lines(src, [s for s, _ in pairs])
    files.write_lines(tgt, [t for _, t in pairs])
    out = tmp_path / "speed.json"
    args = ["--forward", str(model), "--reverse", str(model), "--src", str(src), "--tgt", str(tgt)]
    result = CliRunner().invoke(pair_score_speed.main, [*args, "--pairs", "20", "--out", str(out)])
    assert result.exit_code == 0, result.output
    body = json.loads(out.read_text(encoding="utf-8"))
    kinds = {(r["score"], r["threads"]) for r in body["rows"]}
    assert {score for score, _ in kinds} == {"cross-entropy", "relative", "dual, relative"}
    assert {threads for _, threads in kinds} == {1, cores()} and body["pairs"] == 20
    assert all(
        r["pairs_per_s"] > 0 and abs(r["per_core"] - r["pairs_per_s"] / r["threads"]) < 0.1
        for r in body["rows"]
    )

"""Markdown tables: escaped cells, aligned columns, the experiments table with this run marked."""

from __future__ import annotations

import math

import pandas as pd

from pipeline.reporting import runs, tables
from tests.support.tables import table_rows


def test_pipes_and_markdown_in_sentences_are_escaped() -> None:
    assert tables.escape_cell("a | b") == "a \\| b"
    assert tables.escape_cell("x\\|y") == "x\\\\\\|y"
    assert tables.escape_cell("<unk> *bold*\nnext") == "\\<unk\\> \\*bold\\* next"
    table = tables.markdown_table(["a", "b"], [["1 | 2", 3]], "lr")
    assert table.splitlines() == ["| a | b |", "| --- | ---: |", "| 1 \\| 2 | 3 |"]


def test_experiments_markdown_keeps_this_run_beyond_the_limit() -> None:
    frame = runs.table(
        runs.RunRecord(f"run {i}", id=f"id{i}", metrics={"test.t.bleu": 40.0 - i}) for i in range(20)
    )
    text = tables.experiments_markdown(frame, current="id17", limit=5)
    assert [r[0] for r in table_rows(text)[1:]] == ["1", "2", "3", "4", "5", "→ 18"]
    assert "14 more runs not shown" in text and "18 of 20 by BLEU on its first test set" in text
    plain = tables.experiments_markdown(frame)
    assert len(table_rows(plain)) == 21 and "→" not in plain and "not shown" not in plain


def test_experiments_markdown_shows_status_only_when_a_run_did_not_finish() -> None:
    finished = runs.table([runs.RunRecord("a", metrics={"test.t.bleu": 30.0}), runs.RunRecord("b")])
    assert table_rows(tables.experiments_markdown(finished))[0][:3] == ["#", "run", "commit"]
    failed = runs.table(
        [runs.RunRecord("a", metrics={"test.t.bleu": 30.0}), runs.RunRecord("b", status="failed")]
    )
    rows = table_rows(tables.experiments_markdown(failed))
    assert rows[0][:4] == ["#", "run", "commit", "status"] and rows[2][:4] == ["2", "b", "–", "failed"]


def seeded_frame() -> pd.DataFrame:
    records = [
        runs.RunRecord(
            f"s{seed}", id=f"id{seed}", params={"train.seed": str(seed)}, metrics={"test.t.bleu": bleu}
        )
        for seed, bleu in ((1, 30.0), (2, 31.0), (3, 32.5))
    ]
    params = {"train.seed": "1", "model.d_model": "512"}
    other = runs.RunRecord("big", id="id-big", params=params, metrics={"test.t.bleu": 20.0})
    return runs.group_seeds(runs.table([*records, other]))


def test_seed_groups_show_mean_sd_and_count_and_mark_this_run_inside_them() -> None:
    text = tables.experiments_markdown(seeded_frame(), current="id2")
    rows = table_rows(text)
    assert rows[0][:3] == ["#", "run", "n"] and "t BLEU" in rows[0]
    bleu = rows[0].index("t BLEU")
    assert rows[1][:3] == ["→ 1", "s3, s2, s1", "3"] and rows[1][bleu] == "31.2 ± 1.3"
    assert rows[2][:3] == ["2", "big", "1"] and rows[2][bleu] == "20.0"
    assert rows[1][rows[0].index("train.seed")] == "1, 2, 3"
    assert "mean ± standard deviation over n runs" in text and "1 of 2 by BLEU" in text


def test_without_groups_there_is_no_count_column() -> None:
    frame = runs.group_seeds(runs.table([runs.RunRecord("a", metrics={"test.t.bleu": 30.0})]))
    text = tables.experiments_markdown(frame)
    assert table_rows(text)[0][:3] == ["#", "run", "commit"] and "±" not in text


def test_one_test_set_shows_its_chrf_and_ter_too() -> None:
    metrics = {
        "test.heldout.bleu": 30.0,
        "test.heldout.chrf": 55.0,
        "test.heldout.ter": 50.0,
        "dev_bleu": 29.0,
    }
    rows = table_rows(tables.experiments_markdown(runs.table([runs.RunRecord("a", metrics=metrics)])))
    at = rows[0].index("heldout BLEU")
    assert rows[0][at:] == ["heldout BLEU", "chrF", "TER", "val BLEU", "parameters", "train time", "tokens/s"]
    assert rows[1][at : at + 4] == ["30.0", "55.0", "50.0", "29.0"]


def several() -> pd.DataFrame:
    names = ["multi30k-test_2016_flickr", "multi30k-test_2017_flickr", "multi30k-test_2017_mscoco"]
    return runs.table(
        [
            runs.RunRecord(n, id=n, metrics={f"test.{t}.bleu": b - i for i, t in enumerate(names)})
            for n, b in (("a", 31.0), ("b", 30.0), ("c", 29.0))
        ]
    )


def test_several_test_sets_show_bleu_each_under_a_short_name() -> None:
    text = tables.experiments_markdown(several())
    rows = table_rows(text)
    assert rows[0][2:] == [
        "commit",
        "2016_flickr BLEU",
        "2017_flickr BLEU",
        "2017_mscoco BLEU",
        "val BLEU",
        "parameters",
        "train time",
        "tokens/s",
    ]
    assert rows[1][3:6] == ["31.0", "30.0", "29.0"]
    assert "common prefix `multi30k-test_`" in text and "chrF and TER per test set" in text
    assert tables.common_prefix(["multi30k-test_2016_flickr", "multi30k-dev"]) == "multi30k-"
    assert tables.common_prefix(["flickr", "flickr2"]) == "" and tables.common_prefix(["a-b"]) == ""


def test_baseline_differences_and_p_follow_each_test_sets_bleu_with_significance_starred() -> None:
    frame = several().assign(
        **{
            "delta.multi30k-test_2016_flickr": [1.0, 0.0, math.nan],
            "p.multi30k-test_2016_flickr": [0.01, math.nan, math.nan],
            "delta.multi30k-test_2017_flickr": [-0.5, 0.0, 0.2],
            "p.multi30k-test_2017_flickr": [0.3, math.nan, 0.6],
        }
    )
    text = tables.experiments_markdown(frame)
    rows = table_rows(text)
    at = rows[0].index("2016_flickr BLEU")
    assert rows[1][at : at + 3] == ["31.0 (+1.0, p 0.0100 \\*)", "30.0 (-0.5, p 0.3000)", "29.0"]
    assert rows[2][at : at + 2] == ["30.0 (+0.0)", "29.0 (+0.0)"]  # the baseline
    assert rows[3][at : at + 2] == ["29.0", "28.0 (+0.2, p 0.6000)"]  # its hypotheses of 2016 not found
    assert "difference to the baseline on that test set" in text

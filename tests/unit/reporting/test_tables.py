"""Markdown tables: escaped cells, aligned columns, the experiments table with this run marked."""

from __future__ import annotations

import math

import pandas as pd

from pipeline.reporting import runs, tables
from tests.helpers import table_rows


def test_pipes_and_markdown_in_sentences_are_escaped() -> None:
    assert tables.escape_cell("a | b") == "a \\| b"
    assert tables.escape_cell("x\\|y") == "x\\\\\\|y"
    assert tables.escape_cell("<unk> *bold*\nnext") == "\\<unk\\> \\*bold\\* next"
    table = tables.markdown_table(["a", "b"], [["1 | 2", 3]], "lr")
    assert table.splitlines() == ["| a | b |", "| --- | ---: |", "| 1 \\| 2 | 3 |"]


def test_experiments_markdown_keeps_this_run_beyond_the_limit() -> None:
    frame = runs.table(
        runs.RunRecord(f"run {i}", id=f"id{i}", metrics={"test_bleu": 40.0 - i}) for i in range(20)
    )
    text = tables.experiments_markdown(frame, current="id17", limit=5)
    assert [r[0] for r in table_rows(text)[1:]] == ["1", "2", "3", "4", "5", "→ 18"]
    assert "14 more runs not shown" in text and "18 of 20 by test BLEU" in text
    plain = tables.experiments_markdown(frame)
    assert len(table_rows(plain)) == 21 and "→" not in plain and "not shown" not in plain


def test_experiments_markdown_shows_status_only_when_a_run_did_not_finish() -> None:
    finished = runs.table([runs.RunRecord("a", metrics={"test_bleu": 30.0}), runs.RunRecord("b")])
    assert table_rows(tables.experiments_markdown(finished))[0][:3] == ["#", "run", "commit"]
    failed = runs.table(
        [runs.RunRecord("a", metrics={"test_bleu": 30.0}), runs.RunRecord("b", status="failed")]
    )
    rows = table_rows(tables.experiments_markdown(failed))
    assert rows[0][:4] == ["#", "run", "commit", "status"] and rows[2][:4] == ["2", "b", "–", "failed"]


def seeded_frame() -> pd.DataFrame:
    records = [
        runs.RunRecord(
            f"s{seed}", id=f"id{seed}", params={"train.seed": str(seed)}, metrics={"test_bleu": bleu}
        )
        for seed, bleu in ((1, 30.0), (2, 31.0), (3, 32.5))
    ]
    params = {"train.seed": "1", "model.d_model": "512"}
    other = runs.RunRecord("big", id="id-big", params=params, metrics={"test_bleu": 20.0})
    return runs.group_seeds(runs.table([*records, other]))


def test_seed_groups_show_mean_sd_and_count_and_mark_this_run_inside_them() -> None:
    text = tables.experiments_markdown(seeded_frame(), current="id2")
    rows = table_rows(text)
    assert rows[0][:3] == ["#", "run", "n"] and "test BLEU" in rows[0]
    bleu = rows[0].index("test BLEU")
    assert rows[1][:3] == ["→ 1", "s3, s2, s1", "3"] and rows[1][bleu] == "31.2 ± 1.3"
    assert rows[2][:3] == ["2", "big", "1"] and rows[2][bleu] == "20.0"
    assert rows[1][rows[0].index("train.seed")] == "1, 2, 3"
    assert "mean ± standard deviation over n runs" in text and "1 of 2 by test BLEU" in text


def test_without_groups_there_is_no_count_column() -> None:
    frame = runs.group_seeds(runs.table([runs.RunRecord("a", metrics={"test_bleu": 30.0})]))
    text = tables.experiments_markdown(frame)
    assert table_rows(text)[0][:3] == ["#", "run", "commit"] and "±" not in text


def test_baseline_columns_follow_test_bleu_with_significance_starred() -> None:
    frame = runs.table(
        [
            runs.RunRecord(n, id=n, metrics={"test_bleu": b})
            for n, b in (("a", 31.0), ("b", 30.0), ("c", 29.0))
        ]
    )
    frame = frame.assign(delta_bleu=[1.0, 0.0, math.nan], p_bleu=[0.01, math.nan, math.nan])
    rows = table_rows(tables.experiments_markdown(frame))
    at = rows[0].index("test BLEU")
    assert rows[0][at : at + 3] == ["test BLEU", "Δ BLEU", "p"]
    assert rows[1][at : at + 3] == ["31.0", "+1.0", "0.0100 \\*"]
    assert rows[2][at + 1 : at + 3] == ["+0.0", "–"] and rows[3][at + 1 : at + 3] == ["–", "–"]

"""Markdown tables: escaped cells, aligned columns, the experiments table with this run marked."""

from __future__ import annotations

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

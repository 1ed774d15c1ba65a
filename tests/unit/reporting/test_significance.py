"""Runs against a baseline: the splits they share, what is skipped and why, the tables printed."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from pipeline import files
from pipeline.errors import UserError
from pipeline.reporting import runs, significance
from pipeline.reporting.hypotheses import RunHypotheses
from tests.helpers import garble, references, table_rows


@pytest.fixture
def refs_dir(tmp_path: Path) -> Path:
    files.write_lines(tmp_path / "val.tgt", references(60, seed=3))
    files.write_lines(tmp_path / "test.tgt", references(200, seed=4))
    return tmp_path


def run(
    name: str, refs_dir: Path, noise: float, seed: int, splits: tuple[str, ...] = ("val", "test")
) -> RunHypotheses:
    """A run whose hypotheses garble `noise` of the words of the references in refs_dir."""
    hyps = {s: garble(files.read_lines(refs_dir / f"{s}.tgt"), noise, seed) for s in splits}
    shas = {s: significance.sha256_of(refs_dir / f"{s}.tgt") for s in splits}
    return RunHypotheses(name, hyps, shas)


def test_a_better_run_is_significant_on_every_split(refs_dir: Path) -> None:
    base, better = run("base", refs_dir, 0.5, 1), run("better", refs_dir, 0.2, 2)
    result = significance.compare(base, [better], refs_dir, n=300)
    assert [s.split for s in result.splits] == ["val", "test"] and result.skipped == []
    test = result.splits[1]
    assert test.n_lines == 200 and list(test.scores) == ["base", "better"]
    assert test.scores["better"]["bleu"].significant and test.scores["better"]["bleu"].delta > 10
    assert test.scores["base"]["bleu"].p_value is None


def test_runs_are_compared_on_the_splits_they_share_and_the_rest_is_named(refs_dir: Path) -> None:
    base = run("base", refs_dir, 0.5, 1)
    test_only = run("test-only", refs_dir, 0.2, 2, splits=("test",))
    result = significance.compare(base, [test_only], refs_dir, n=200)
    assert [s.split for s in result.splits] == ["test"]
    assert result.skipped == ["val: test-only has no hypotheses for it"]
    result = significance.compare(test_only, [base], refs_dir, n=200)
    assert [s.split for s in result.splits] == ["test"]
    assert result.skipped == ["val: the baseline test-only has no hypotheses for it"]


def test_a_run_scored_on_other_references_is_skipped_with_the_reason(refs_dir: Path) -> None:
    base, other = run("base", refs_dir, 0.5, 1), run("other", refs_dir, 0.2, 2)
    other = RunHypotheses("other", other.hyps, {**other.refs_sha256, "test": "0" * 64})
    result = significance.compare(base, [other], refs_dir, n=200)
    assert [s.split for s in result.splits] == ["val"]
    assert len(result.skipped) == 1 and result.skipped[0].startswith(
        "test: other was scored against other ref"
    )
    assert "000000000000" in result.skipped[0] and "dvc checkout" in result.skipped[0]


def test_hypotheses_of_another_length_are_skipped(refs_dir: Path) -> None:
    base, short = run("base", refs_dir, 0.5, 1), run("short", refs_dir, 0.2, 2)
    short = RunHypotheses("short", {"val": short.hyps["val"], "test": short.hyps["test"][:-1]})
    result = significance.compare(base, [short], refs_dir, n=200)
    assert [s.split for s in result.splits] == ["val"]
    assert result.skipped == [f"test: short has 199 lines of hypotheses but {refs_dir / 'test.tgt'} has 200"]


def test_nothing_shared_is_a_user_error_with_the_reasons(refs_dir: Path) -> None:
    base = run("base", refs_dir, 0.5, 1, splits=("val",))
    other = run("other", refs_dir, 0.2, 2, splits=("test",))
    with pytest.raises(UserError) as err:
        significance.compare(base, [other], refs_dir)
    assert "no test set to compare" in err.value.message and "other has no hypotheses" in err.value.message


def test_the_table_marks_the_baseline_and_stars_what_is_significant(refs_dir: Path) -> None:
    base, better, same = (
        run("base", refs_dir, 0.5, 1),
        run("better", refs_dir, 0.2, 2),
        run("same", refs_dir, 0.5, 1),
    )
    text = significance.comparison_markdown(
        significance.compare(base, [better, same], refs_dir, n=300, seed=9)
    )
    assert "## val (60 lines)" in text and "## test (200 lines)" in text
    rows = table_rows(text.split("## test")[1])
    assert rows[0] == ["run", "BLEU", "95% CI", "Δ BLEU", "p", "chrF", "95% CI", "Δ chrF", "p"]
    assert rows[1][0] == "base (baseline)" and rows[1][3:5] == ["–", "–"]
    assert rows[2][0] == "better" and rows[2][3].startswith("+") and rows[2][4].endswith(" *")
    assert rows[3][0] == "same" and rows[3][3:5] == ["+0.0", "1.0000"]
    assert "paired bootstrap resampling against the baseline (300 resamples, seed 9)" in text


def test_the_experiments_table_gets_differences_where_hypotheses_were_found(refs_dir: Path) -> None:
    frame = runs.table(
        [
            runs.RunRecord("a", id="id-a", metrics={"test_bleu": 30.0}),
            runs.RunRecord("b", id="id-b", metrics={"test_bleu": 20.0}),
            runs.RunRecord("c", id="id-c", metrics={"test_bleu": 10.0}),
        ]
    )
    base, a = run("id-b", refs_dir, 0.5, 1), run("id-a", refs_dir, 0.2, 2)
    out = significance.against_baseline(frame, base, [a, base], refs_dir)
    assert out.loc[0, "delta_bleu"] > 10 and out.loc[0, "p_bleu"] < 0.05
    assert out.loc[1, "delta_bleu"] == 0 and math.isnan(out.loc[1, "p_bleu"])  # the baseline itself
    assert math.isnan(out.loc[2, "delta_bleu"]) and math.isnan(out.loc[2, "p_bleu"])  # not found
    assert list(frame.columns) == list(out.columns)[: len(frame.columns)]

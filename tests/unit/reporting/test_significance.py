"""Runs against a baseline: the sets they share, what is skipped and why, the tables printed."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from pipeline import files
from pipeline.errors import UserError
from pipeline.reporting import runs, significance
from pipeline.reporting.hypotheses import RunHypotheses
from tests.support.tables import garble, references, table_rows

ALL = ("val", "test/a", "test/b")


@pytest.fixture
def refs_dir(tmp_path: Path) -> Path:
    """val and two test sets, a (200 lines) and b (50), laid out as data/raw."""
    files.write_lines(tmp_path / "val.tgt", references(60, seed=3))
    files.write_lines(tmp_path / "test" / "a.tgt", references(200, seed=4))
    files.write_lines(tmp_path / "test" / "b.tgt", references(50, seed=5))
    return tmp_path


def run(name: str, refs_dir: Path, noise: float, seed: int, keys: tuple[str, ...] = ALL) -> RunHypotheses:
    """A run whose hypotheses garble `noise` of the words of the references in refs_dir."""
    hyps = {k: garble(files.read_lines(refs_dir / f"{k}.tgt"), noise, seed) for k in keys}
    shas = {k: significance.sha256_of(refs_dir / f"{k}.tgt") for k in keys}
    return RunHypotheses(name, hyps, shas)


def test_a_better_run_is_significant_on_every_set(refs_dir: Path) -> None:
    base, better = run("base", refs_dir, 0.5, 1), run("better", refs_dir, 0.2, 2)
    result = significance.compare(base, [better], refs_dir, n=300)
    assert [s.split for s in result.splits] == list(ALL) and result.skipped == []
    assert [s.label for s in result.splits] == ["val", "a", "b"]
    test = result.splits[1]
    assert test.n_lines == 200 and list(test.scores) == ["base", "better"]
    assert test.scores["better"]["bleu"].significant and test.scores["better"]["bleu"].delta > 10
    assert test.scores["base"]["bleu"].p_value is None


def test_runs_are_compared_on_the_sets_they_share_and_the_rest_is_named(refs_dir: Path) -> None:
    base = run("base", refs_dir, 0.5, 1)
    only_a = run("only-a", refs_dir, 0.2, 2, keys=("test/a",))
    result = significance.compare(base, [only_a], refs_dir, n=200)
    assert [s.split for s in result.splits] == ["test/a"]
    assert result.skipped == ["val: only-a has no hypotheses for it", "b: only-a has no hypotheses for it"]
    result = significance.compare(only_a, [base], refs_dir, n=200)
    assert [s.split for s in result.splits] == ["test/a"]
    assert result.skipped == [
        "val: the baseline only-a has no hypotheses for it",
        "b: the baseline only-a has no hypotheses for it",
    ]


def test_runs_from_before_several_test_sets_compare_on_their_one_named_test(tmp_path: Path) -> None:
    files.write_lines(tmp_path / "test.tgt", references(100, seed=4))  # the old layout's data/raw
    refs = files.read_lines(tmp_path / "test.tgt")
    old = [RunHypotheses(n, {"test/test": garble(refs, noise, 1)}) for n, noise in (("a", 0.5), ("b", 0.1))]
    result = significance.compare(old[0], old[1:], tmp_path, n=200)
    assert [s.split for s in result.splits] == ["test/test"] and result.splits[0].n_lines == 100


def test_a_run_scored_on_other_references_is_skipped_with_the_reason(refs_dir: Path) -> None:
    base, other = run("base", refs_dir, 0.5, 1), run("other", refs_dir, 0.2, 2)
    other = RunHypotheses("other", other.hyps, {**other.refs_sha256, "test/a": "0" * 64})
    result = significance.compare(base, [other], refs_dir, n=200)
    assert [s.split for s in result.splits] == ["val", "test/b"]
    assert len(result.skipped) == 1 and result.skipped[0].startswith("a: other was scored against other ref")
    assert "000000000000" in result.skipped[0] and "dvc checkout" in result.skipped[0]


def test_hypotheses_of_another_length_are_skipped(refs_dir: Path) -> None:
    base, short = run("base", refs_dir, 0.5, 1), run("short", refs_dir, 0.2, 2)
    short = RunHypotheses("short", {**short.hyps, "test/a": short.hyps["test/a"][:-1]})
    result = significance.compare(base, [short], refs_dir, n=200)
    assert [s.split for s in result.splits] == ["val", "test/b"]
    path = refs_dir / "test" / "a.tgt"
    assert result.skipped == [f"a: short has 199 lines of hypotheses but {path} has 200"]


def test_nothing_shared_is_a_user_error_with_the_reasons(refs_dir: Path) -> None:
    base = run("base", refs_dir, 0.5, 1, keys=("val",))
    other = run("other", refs_dir, 0.2, 2, keys=("test/a",))
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
    assert "## val (60 lines)" in text and "## a (200 lines)" in text and "## b (50 lines)" in text
    rows = table_rows(text.split("## a ")[1].split("## b ")[0])
    assert rows[0] == ["run", "BLEU", "95% CI", "Δ BLEU", "p", "chrF", "95% CI", "Δ chrF", "p"]
    assert rows[1][0] == "base (baseline)" and rows[1][3:5] == ["–", "–"]
    assert rows[2][0] == "better" and rows[2][3].startswith("+") and rows[2][4].endswith(" *")
    assert rows[3][0] == "same" and rows[3][3:5] == ["+0.0", "1.0000"]
    assert "paired bootstrap resampling against the baseline (300 resamples, seed 9)" in text


def test_the_experiments_table_gets_differences_per_test_set_where_hypotheses_were_found(
    refs_dir: Path,
) -> None:
    frame = runs.table(
        [
            runs.RunRecord(n, id=f"id-{n}", metrics={"test.a.bleu": b, "test.b.bleu": b})
            for n, b in (("a", 30.0), ("b", 20.0), ("c", 10.0))
        ]
    )
    base = run("id-b", refs_dir, 0.5, 1)
    a = run("id-a", refs_dir, 0.2, 2, keys=("val", "test/a"))  # not decoded on b
    out = significance.against_baseline(frame, base, [a, base], refs_dir)
    assert list(out.columns)[len(frame.columns) :] == ["delta.a", "p.a", "delta.b", "p.b"]
    assert out.loc[0, "delta.a"] > 10 and out.loc[0, "p.a"] < 0.05
    assert math.isnan(out.loc[0, "delta.b"]) and math.isnan(out.loc[0, "p.b"])  # not shared
    assert out.loc[1, "delta.a"] == 0 and math.isnan(out.loc[1, "p.a"])  # the baseline itself
    assert math.isnan(out.loc[2, "delta.a"]) and math.isnan(out.loc[2, "p.a"])  # not found
    assert list(frame.columns) == list(out.columns)[: len(frame.columns)]

"""Pair scores: a model that learned a task scores its real pairs better than misaligned ones, and
the clean stage's score rule drops the worst of the sources that have it."""

from __future__ import annotations

import dataclasses
import random
import re
from pathlib import Path

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from pipeline import files, params
from pipeline.decoding.pair_scores import PairScorer, cross_entropies, dropped, dual_cross_entropy, worst
from pipeline.decoding.translator import Translator
from pipeline.errors import UserError
from pipeline.lineage import sha256
from pipeline.stages import clean, score_pairs
from tests.support.hf import make_trained_model_dir, marian_pairs
from tests.support.repo import REPO

PAIRS = marian_pairs(120, seed=5)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model trained on marian_pairs' word-by-word task (not on PAIRS themselves)."""
    return make_trained_model_dir(tmp_path_factory.mktemp("scorer") / "model", steps=300)


def misaligned(pairs: list[tuple[str, str]], seed: int = 0) -> list[tuple[str, str]]:
    """Each source with another pair's target."""
    targets = [t for _, t in pairs]
    random.Random(seed).shuffle(targets)
    return [(s, t) for (s, _), t in zip(pairs, targets) if t != dict(pairs).get(s)]


def test_misaligned_pairs_score_worse_than_real_ones(model_dir: Path) -> None:
    translator = Translator.from_dir(model_dir, device="cpu", workers=1)
    vocab = translator.vocab
    noisy = PAIRS[:80] + misaligned(PAIRS[80:])
    src, tgt = vocab.encode_src([s for s, _ in noisy]), vocab.encode_tgt([t for _, t in noisy])
    scores = cross_entropies(translator.model, src, tgt, batch_tokens=64)  # several batches
    planted = np.arange(len(noisy)) >= 80
    dropped = worst(scores, planted.mean())
    assert (dropped & planted).sum() >= 0.8 * planted.sum()  # most misaligned pairs are the worst
    assert scores[planted].mean() > scores[~planted].mean() + 1.0


def test_the_score_of_a_pair_does_not_depend_on_its_batch(model_dir: Path) -> None:
    translator = Translator.from_dir(model_dir, device="cpu", workers=1)
    src = translator.vocab.encode_src([s for s, _ in PAIRS[:30]])
    tgt = translator.vocab.encode_tgt([t for _, t in PAIRS[:30]])
    together = cross_entropies(translator.model, src, tgt, batch_tokens=4000)
    alone = np.array([cross_entropies(translator.model, [s], [t])[0] for s, t in zip(src, tgt)])
    np.testing.assert_allclose(together, alone, rtol=1e-5, atol=1e-5)


def test_the_dual_score_rewards_agreement_and_likelihood() -> None:
    forward, reverse = np.array([1.0, 1.0, 3.0]), np.array([1.0, 3.0, 3.0])
    np.testing.assert_allclose(dual_cross_entropy(forward, reverse), [1.0, 4.0, 3.0])
    assert worst(np.array([0.5, 2.0, 1.0, 3.0]), 0.5).tolist() == [False, True, False, True]


def test_the_command_writes_a_score_a_line_and_refuses_unaligned_files(
    model_dir: Path, tmp_path: Path
) -> None:
    src, tgt = tmp_path / "train.src", tmp_path / "train.tgt"
    files.write_lines(src, [s for s, _ in PAIRS[:20]])
    files.write_lines(tgt, [t for _, t in PAIRS[:20]])
    args = ["--model", str(model_dir), "--src", str(src), "--tgt", str(tgt), "--out", str(tmp_path / "s.txt")]
    result = CliRunner().invoke(score_pairs.command, [*args, "--reverse", str(model_dir)])
    assert result.exit_code == 0, result.output
    assert len(files.read_lines(tmp_path / "s.txt")) == 20 and "pairs/s" in result.output
    files.write_lines(tgt, [t for _, t in PAIRS[:19]])
    result = CliRunner().invoke(score_pairs.command, args)
    assert result.exit_code == 1 and "has 20 lines but" in result.output


def test_a_relative_score_is_the_cross_entropy_over_the_one_with_no_source(model_dir: Path) -> None:
    plain, relative = PairScorer(model_dir), PairScorer(model_dir, relative=True)
    real = PAIRS[:40]
    wrong = misaligned(real, seed=1)
    src, tgt = [s for s, _ in real], [t for _, t in real]
    model, vocab = plain.forward
    no_source = cross_entropies(model, [[] for _ in tgt], vocab.encode_tgt(tgt))
    np.testing.assert_allclose(relative(src, tgt), plain(src, tgt) / no_source, rtol=1e-6)
    # the source explains a translation's target: well under 1; another line's target: not at all
    assert np.median(relative(src, tgt)) < 0.7 < np.median(relative(*map(list, zip(*wrong))))


def test_the_drop_mask_takes_the_worst_share_of_the_scored_pairs_and_those_above_the_cut() -> None:
    scores = np.array([0.5, np.nan, 2.0, 1.0, np.nan, 3.0])
    assert dropped(scores, 0.5, None).tolist() == [False, False, True, False, False, True]
    assert dropped(scores, 0.0, 0.9).tolist() == [False, False, True, True, False, True]
    assert not dropped(scores, 0.0, None).any()


def crawl_raw(
    root: Path,
    curated: list[tuple[str, str]],
    crawl: list[tuple[str, str]],
    langs: tuple[str, str] = ("de", "en"),
) -> Path:
    """A raw directory as download writes it: a curated source, then a web-crawled one of mtdata's."""
    raw = root / "raw"
    (raw / "test").mkdir(parents=True)
    pairs = curated + crawl
    files.write_lines(raw / "train.src", [s for s, _ in pairs])
    files.write_lines(raw / "train.tgt", [t for _, t in pairs])
    for stem in ("val", "test/t"):
        files.write_lines(raw / f"{stem}.src", ["zzz"])
        files.write_lines(raw / f"{stem}.tgt", ["zzz"])
    train = [
        {"name": "curated", "lines": len(curated)},
        {"name": "crawl", "lines": len(crawl), "origin": "mtdata"},
    ]
    manifest = {"src_lang": langs[0], "tgt_lang": langs[1], "splits": {"train": train}}
    files.write_json(raw / "manifest.json", manifest)
    return raw


def score_settings(model: Path, drop_worst: float, reverse: Path | None = None) -> params.CleanParams:
    base = params.load(REPO / "params.yaml").clean
    score = dataclasses.replace(
        base.score,
        forward=str(model),
        reverse=None if reverse is None else str(reverse),
        drop_worst=drop_worst,
    )
    return dataclasses.replace(base, max_ratio=10.0, dedupe=False, web_filters=("score",), score=score)


def test_the_score_rule_drops_the_misaligned_pairs_of_the_sources_that_have_it(
    model_dir: Path, tmp_path: Path
) -> None:
    wrong = misaligned(PAIRS[60:100], seed=3)[:20]
    crawl = PAIRS[100:120] + wrong  # half misaligned
    raw = crawl_raw(tmp_path, PAIRS[:60], crawl)
    stats = clean.clean(score_settings(model_dir, 0.5), raw, tmp_path / "clean")
    sources = stats["train"]["sources"]
    assert sources["curated"]["lines_out"] == 60  # curated sets are not scored
    assert sources["crawl"]["dropped"]["score"] == 20 and sources["crawl"]["lines_out"] == 20
    assert stats["train"]["dropped"]["score"] == 20 and stats["train"]["lines_out"] == 80
    kept = set(zip(*(files.read_lines(tmp_path / "clean" / f"train.{side}") for side in ("src", "tgt"))))
    assert set(PAIRS[:60]) <= kept
    assert len(set(wrong) - kept) >= 16  # most of what it dropped is what was misaligned
    record = stats["score"]
    assert record["forward_sha256"] == sha256(model_dir / "model.pt") and record["reverse"] is None
    assert (record["scored"], record["dropped"]) == (40, 20)


def test_a_score_model_that_is_not_a_model_directory_is_one_line_and_keeps_the_old_output(
    tmp_path: Path,
) -> None:
    raw = crawl_raw(tmp_path, PAIRS[:5], PAIRS[5:10])
    out = tmp_path / "clean"
    out.mkdir()
    (out / "old").write_text("kept", encoding="utf-8")
    with pytest.raises(UserError, match=re.escape("no model.pt, so it is not a model directory")):
        clean.clean(score_settings(tmp_path / "nothing", 0.1), raw, out)
    assert (out / "old").read_text(encoding="utf-8") == "kept"


def test_a_scorer_of_the_other_direction_is_refused_naming_both_pairs(
    model_dir: Path, tmp_path: Path
) -> None:
    raw = crawl_raw(tmp_path, PAIRS[:5], PAIRS[5:10], langs=("en", "de"))  # the model translates de→en
    says = "translates de→en, but the forward scorer must translate en→de; name a en→de model in "
    says += "clean.score.forward"
    with pytest.raises(UserError, match=re.escape(says)):
        clean.clean(score_settings(model_dir, 0.1), raw, tmp_path / "clean")
    assert not (tmp_path / "clean").exists()
    with pytest.raises(UserError, match=re.escape("but the reverse scorer must translate en→de")):
        PairScorer(model_dir, reverse=model_dir, pair=("de", "en"))


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (
            {"web_filters": ["score"]},
            "clean.score.forward: is null, but a list in clean names the score rule",
        ),
        ({"score": {"forward": "m"}}, "clean.score.forward: names a model, but no list in clean names"),
        (
            {"filters": ["score"], "score": {"forward": "m", "drop_worst": 1.0}},
            "clean.score.drop_worst: must be",
        ),
        ({"filters": ["score"], "score": {"forward": "m"}}, "so the score rule would drop nothing"),
        ({"score": {"reverse": "m"}}, "clean.score.reverse: is only read with clean.score.forward"),
    ],
)
def test_score_settings_that_cannot_work_are_refused_naming_the_key(
    tmp_path: Path, change: dict, says: str
) -> None:
    raw = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
    raw["clean"]["score"].update(change.pop("score", {}))
    raw["clean"].update(change)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    with pytest.raises(params.ParamsError, match=re.escape(says)):
        params.load(path)

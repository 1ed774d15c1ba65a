"""Pair scores: a model that learned a task scores its real pairs better than misaligned ones."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from pipeline import files
from pipeline.decoding.pair_scores import cross_entropies, dual_cross_entropy, worst
from pipeline.decoding.translator import Translator
from pipeline.stages import score_pairs
from tests.support.hf import make_trained_model_dir, marian_pairs

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

"""Our replay of sentencepiece's samplers: without randomness it is sentencepiece's own segmentation."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.data import subwords
from pipeline.data.vocab import Vocab
from tests.support.models import make_text_corpus


@pytest.fixture(scope="module", params=["bpe", "unigram"])
def model(request, tmp_path_factory):
    paths = make_text_corpus(tmp_path_factory.mktemp(request.param), model_type=request.param, n_train=300)
    lines = (paths.clean_dir / "train.src").read_text(encoding="utf-8").splitlines()
    vocab = Vocab.load(paths.bpe_dir, threads=1)
    assert vocab.model_type == request.param
    return request.param, vocab, [*lines, "hgfe abcd", "a b c", "abcdefgh" * 3]


def replay(kind: str, vocab: Vocab, line: str, draws: subwords.Draws | None, amount: float) -> list[int]:
    pieces = vocab.pieces("src")
    longest = max(map(len, pieces))
    if kind == "bpe":
        word_pieces = lambda w: subwords.bpe_dropout(w, pieces, amount, draws)
    else:
        word_pieces = lambda w: subwords.unigram_sample(w, pieces, amount, draws, longest)
    return subwords.sample_line(line, pieces, word_pieces, lambda t: vocab.encode_src([t])[0])


def test_without_randomness_the_replay_is_sentencepieces_segmentation(model):
    kind, vocab, lines = model
    draws = subwords.Draws(np.random.default_rng(0))
    # BPE with dropout 0, unigram with the best path instead of a drawn one
    got = [
        replay(kind, vocab, line, draws if kind == "bpe" else None, 0.0 if kind == "bpe" else 1.0)
        for line in lines
    ]
    assert got == vocab.encode_src(lines)


def test_a_sampled_segmentation_spells_the_sentence_and_varies(model):
    kind, vocab, lines = model
    draws = subwords.Draws(np.random.default_rng(1))
    sampled = [replay(kind, vocab, line, draws, 0.3 if kind == "bpe" else 0.1) for line in lines]
    assert [vocab.decode_src(ids) for ids in sampled] == lines
    assert sum(a != b for a, b in zip(sampled, vocab.encode_src(lines))) > len(lines) // 4


def test_a_word_with_a_character_the_model_lacks_falls_back_to_sentencepiece(model):
    kind, vocab, _ = model
    line = "abc xyzé def"  # x, y, z and é are not in the model
    draws = subwords.Draws(np.random.default_rng(2))
    ids = replay(kind, vocab, line, draws if kind == "bpe" else None, 0.0 if kind == "bpe" else 1.0)
    assert ids == vocab.encode_src([line])[0]
    assert 1 in ids  # the unknown characters are UNK, as sentencepiece has them


def test_bpe_dropout_of_one_drops_every_merge():
    pieces = {"▁": (5, 0.0), "a": (6, 0.0), "b": (7, 0.0), "▁a": (8, -1.0), "ab": (9, -2.0)}
    draws = subwords.Draws(np.random.default_rng(0))
    assert subwords.bpe_dropout("▁ab", pieces, 1.0, draws) == ["▁", "a", "b"]
    assert subwords.bpe_dropout("▁ab", pieces, 0.0, draws) == ["▁a", "b"]  # highest score first


def test_unigram_draws_follow_the_scores():
    # "▁ab" is ▁a+b (score -1 + -1 = -2) or ▁+ab (-1.5 + -1.5 = -3): with alpha 1, p(▁a b) = 1 / (1 + e^-1)
    pieces = {"▁": (5, -1.5), "a": (6, -9.0), "b": (7, -1.0), "▁a": (8, -1.0), "ab": (9, -1.5)}
    draws = subwords.Draws(np.random.default_rng(3))
    seen = [tuple(subwords.unigram_sample("▁ab", pieces, 1.0, draws, 2)) for _ in range(4000)]
    share = seen.count(("▁a", "b")) / len(seen)
    others = 1 + np.exp(-1.0) + np.exp(-(1.5 + 9.0 + 1.0) + 2.0)  # ▁ a b is the third, nearly never
    assert abs(share - 1 / others) < 0.03

"""Sampled segmentations of sentencepiece models, drawn from a generator of our own.

sentencepiece's own sampling (enable_sampling) ignores the seed `set_random_generator_seed` sets:
the same seed gives other segmentations in another process (measured with sentencepiece 0.2.3,
unigram and BPE), which would break exact resume. So the two samplers are replayed here on the
model's pieces and scores, each random choice taken from `Draws`:
- BPE-dropout (Provilkov et al. 2020) as bpe_model.cc does it: of the adjacent pairs whose join is
  a piece, the one of highest score (leftmost on a tie) is merged, but a pair is dropped, for
  good, with probability p each time it comes up;
- unigram sampling (Kudo 2018) over every segmentation: forward-filtering backward-sampling of the
  lattice, a segmentation drawn with probability ∝ exp(alpha * its score); over the n best
  (sentencepiece's, which are deterministic), the same draw among them.
With p = 0, and with the best path instead of a sampled one, they give sentencepiece's own
segmentation (tests check both). Pieces never span words, so each word ("▁" and what follows) is
segmented alone; a word holding a character the model lacks falls back to `fallback`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence

import numpy as np

SPACE = "\u2581"  # sentencepiece's word-start mark
_DRAWS = 4096  # uniform numbers drawn at a time

Pieces = dict[str, tuple[int, float]]  # piece -> (id, score), as Vocab.pieces gives them


class Draws:
    """Uniform [0, 1) numbers from `rng`, handed out one at a time (drawn in bulk: fewer numpy calls)."""

    def __init__(self, rng: np.random.Generator) -> None:
        self._rng, self._buffer, self._at = rng, np.zeros(0), 0

    def next(self) -> float:
        if self._at == len(self._buffer):
            self._buffer, self._at = self._rng.random(_DRAWS), 0
        self._at += 1
        return float(self._buffer[self._at - 1])


def words(line: str) -> list[str]:
    """The line as sentencepiece splits it before segmenting: each word with its "▁" mark in front."""
    return [SPACE + word for word in line.split()]


def sample_line(
    line: str,
    pieces: Pieces,
    word_pieces: Callable[[str], list[str] | None],
    fallback: Callable[[str], list[int]],
    atoms: Collection[str] = (),
) -> list[int]:
    """A sentence's ids, each word segmented by `word_pieces` (None: it cannot, so `fallback`). A word
    of `atoms` (user-defined pieces such as target-language tags) is never split: `fallback` too."""
    out: list[int] = []
    for word in words(line):
        whole = word[1:] in atoms
        segmented = word_pieces(word) if not whole and all(ch in pieces for ch in word[1:]) else None
        if segmented is None or any(piece not in pieces for piece in segmented):
            out += fallback(word[1:])
        else:
            out += [pieces[piece][0] for piece in segmented]
    return out


def nbest_sample(nbest: list[tuple[list[int], float]], alpha: float, draws: Draws) -> list[int]:
    """One of a sentence's n best segmentations (ids, score), drawn with probability ∝ exp(alpha * score)."""
    weights = [alpha * score for _, score in nbest]
    index = _draw(list(enumerate(weights)), _logsumexp(weights), draws)
    return nbest[index][0]


# --- BPE-dropout -----------------------------------------------------------------------------


def bpe_dropout(word: str, pieces: Pieces, p: float, draws: Draws) -> list[str]:
    """One word's pieces after BPE merges with dropout `p` (p = 0: sentencepiece's segmentation)."""
    symbols = list(word)
    dropped: set[tuple[int, str, str]] = set()  # (position, left, right): pair instances dropped for good
    while len(symbols) > 1:
        best, best_score = -1, -math.inf
        for i in range(len(symbols) - 1):
            found = pieces.get(symbols[i] + symbols[i + 1])
            if found is not None and found[1] > best_score and (i, symbols[i], symbols[i + 1]) not in dropped:
                best, best_score = i, found[1]
        if best < 0:
            break
        if p > 0 and draws.next() < p:
            dropped.add((best, symbols[best], symbols[best + 1]))
            continue
        symbols[best : best + 2] = [symbols[best] + symbols[best + 1]]
        # pairs touching the merged symbol are new; those right of it moved one place left
        dropped = {(i - 1 if i > best else i, a, b) for i, a, b in dropped if i < best - 1 or i > best + 1}
    return symbols


# --- unigram sampling ------------------------------------------------------------------------


def unigram_sample(
    word: str, pieces: Pieces, alpha: float, draws: Draws | None, longest: int
) -> list[str] | None:
    """One word's pieces drawn with probability ∝ exp(alpha * score) (draws None: the best ones).

    None if no segmentation covers the word. `longest`: the longest piece, in characters.
    """
    n = len(word)
    ends: list[list[tuple[int, float]]] = [[] for _ in range(n + 1)]  # j -> (start, alpha * score)
    for j in range(1, n + 1):
        for i in range(max(0, j - longest), j):
            found = pieces.get(word[i:j])
            if found is not None:
                ends[j].append((i, alpha * found[1]))
    total = [0.0] + [-math.inf] * n  # log of the summed (or, for the best path, the best) weight
    for j in range(1, n + 1):
        reach = [total[i] + w for i, w in ends[j] if total[i] > -math.inf]
        if reach:
            total[j] = max(reach) if draws is None else _logsumexp(reach)
    if total[n] == -math.inf:
        return None
    out, j = [], n
    while j > 0:
        options = [(i, total[i] + w) for i, w in ends[j] if total[i] > -math.inf]
        i = _best(options) if draws is None else _draw(options, total[j], draws)
        out.append(word[i:j])
        j = i
    return out[::-1]


def _logsumexp(values: Sequence[float]) -> float:
    top = max(values)
    return top + math.log(sum(math.exp(v - top) for v in values))


def _best(options: list[tuple[int, float]]) -> int:
    return max(options, key=lambda option: option[1])[0]


def _draw(options: list[tuple[int, float]], log_total: float, draws: Draws) -> int:
    u, acc = draws.next(), 0.0
    for i, weight in options:
        acc += math.exp(weight - log_total)
        if u < acc:
            return i
    return options[-1][0]  # rounding left u above the last sum: the last option

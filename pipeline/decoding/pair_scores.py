"""How well a model explains each translation pair: for finding misaligned pairs, which rules miss.

The cross-entropy of a pair is the target's mean negative log-probability per token (EOS
included) given its source, teacher-forced. Junczys-Dowmunt (2018, "Dual Conditional
Cross-Entropy Filtering of Noisy Parallel Corpora") scores a pair with a forward and a reverse
model, H_A (tgt | src) and H_B (src | tgt), as |H_A - H_B| + (H_A + H_B) / 2: low when both
models find the pair likely and agree on it; a misaligned pair is unlikely under both. With one
model the score is its cross-entropy. mozilla/translations filters with the same kind of score.

A cross-entropy mixes two things: how well the source explains the target, and how hard the
target is anyway (long, rare words). `relative` divides each by the same model's cross-entropy of
the same output with no input (its decoder as a language model), leaving the first: about 1 where
the source tells the model nothing about the target, as for a misaligned pair, and well under 1
for a translation, however hard. On Multi30k with planted noise it found more misaligned pairs
for each clean pair lost than the cross-entropy alone (docs/cleaning.md).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import torch

from pipeline.data.vocab import Vocab
from pipeline.decoding.translator import Translator
from pipeline.errors import UserError
from pipeline.model.transformer import Seq2SeqBase
from pipeline.tokens import BOS, EOS, PAD


class PairScorer:
    """A forward model (src -> tgt) and optionally a reverse one (tgt -> src), loaded once, scoring
    pairs of text: the forward's cross-entropy, or with the reverse the dual cross-entropy."""

    def __init__(
        self,
        forward: Path,
        reverse: Path | None = None,
        batch_tokens: int = 4000,
        relative: bool = False,
        pair: tuple[str, str] | None = None,
    ):
        """`pair`: the (src, tgt) languages of the pairs to score, which the forward model must
        translate (and the reverse model the other way); None: not checked."""
        back = None if pair is None else (pair[1], pair[0])
        self.forward = _load(forward, "forward", pair)
        self.reverse = _load(reverse, "reverse", back) if reverse is not None else None
        self.batch_tokens, self.relative = batch_tokens, relative

    def __call__(self, src: list[str], tgt: list[str]) -> np.ndarray:
        scores = self._direction(*self.forward, src, tgt)
        if self.reverse is None:
            return scores
        return dual_cross_entropy(scores, self._direction(*self.reverse, tgt, src))

    def _direction(
        self, model: Seq2SeqBase, vocab: Vocab, inputs: list[str], outputs: list[str]
    ) -> np.ndarray:
        ids = vocab.encode_tgt(outputs)
        scores = cross_entropies(model, vocab.encode_src(inputs), ids, self.batch_tokens)
        if self.relative:
            scores /= cross_entropies(model, [[] for _ in ids], ids, self.batch_tokens)
        return scores


def _load(model_dir: Path, role: str, pair: tuple[str, str] | None) -> tuple[Seq2SeqBase, Vocab]:
    """A model directory's one model (no ensemble: its own settings name none) and vocabulary,
    refused unless it translates `pair` (where given)."""
    if not (Path(model_dir) / "model.pt").is_file():
        raise UserError(
            f"{model_dir}: no model.pt, so it is not a model directory to score pairs with ({role}); "
            "name a trained model's directory (a run's data/model)"
        )
    translator = Translator.from_dir(model_dir, device="cpu", workers=1)
    if not isinstance(translator.model, Seq2SeqBase):
        raise UserError(f"{model_dir}: a decoder-only model; pairs are scored with encoder-decoder models")
    data = translator.params.data
    if pair is not None and (data.src_lang, data.tgt_lang) != pair:
        raise UserError(
            f"{model_dir} translates {data.src_lang}→{data.tgt_lang}, but the {role} scorer must translate "
            f"{pair[0]}→{pair[1]}; name a {pair[0]}→{pair[1]} model in clean.score.{role}"
        )
    return translator.model, translator.vocab


def cross_entropies(
    model: Seq2SeqBase, src: Sequence[Sequence[int]], tgt: Sequence[Sequence[int]], batch_tokens: int = 4000
) -> np.ndarray:
    """Per pair of id sequences (no EOS or BOS), the target's mean cross-entropy in nats per token."""
    if len(src) != len(tgt):
        raise ValueError(f"{len(src)} sources but {len(tgt)} targets")
    device = next(model.parameters()).device
    out = np.empty(len(src), dtype=np.float64)
    with torch.inference_mode():
        for batch in _batches(src, tgt, batch_tokens):
            s = _padded([[*src[i], EOS] for i in batch], device)  # (B, S)
            t_in = _padded([[BOS, *tgt[i]] for i in batch], device)  # (B, T)
            t_out = _padded([[*tgt[i], EOS] for i in batch], device)  # (B, T)
            logp = torch.log_softmax(model(s, t_in).float(), dim=-1)  # (B, T, V)
            nll = -logp.gather(-1, t_out.unsqueeze(-1)).squeeze(-1)  # (B, T)
            real = t_out != PAD
            out[batch] = ((nll * real).sum(1) / real.sum(1)).cpu().numpy()
    return out


def dual_cross_entropy(forward: np.ndarray, reverse: np.ndarray) -> np.ndarray:
    """|H_A - H_B| + (H_A + H_B) / 2 per pair (Junczys-Dowmunt 2018, eq. 2, before its exp(-x))."""
    return np.abs(forward - reverse) + (forward + reverse) / 2


def dropped(scores: np.ndarray, drop_worst: float, max_score: float | None) -> np.ndarray:
    """A mask of the pairs to drop: the `drop_worst` share with the highest scores, and every pair
    scoring above `max_score` (NaN scores, pairs not scored, are never dropped)."""
    scored = np.flatnonzero(~np.isnan(scores))
    mask = np.zeros(len(scores), dtype=bool)
    mask[scored[worst(scores[scored], drop_worst)]] = True
    if max_score is not None:
        mask |= np.nan_to_num(scores, nan=-np.inf) > max_score
    return mask


def worst(scores: np.ndarray, fraction: float) -> np.ndarray:
    """A mask of the `fraction` of pairs with the highest scores (the least likely), ties to the later."""
    n = round(len(scores) * fraction)
    mask = np.zeros(len(scores), dtype=bool)
    if n:
        mask[np.argsort(scores, kind="stable")[-n:]] = True
    return mask


def _batches(
    src: Sequence[Sequence[int]], tgt: Sequence[Sequence[int]], batch_tokens: int
) -> Iterator[list[int]]:
    """Indices of pairs of like length, at most batch_tokens padded tokens a side (one pair at least)."""
    order = sorted(range(len(src)), key=lambda i: (len(tgt[i]), len(src[i])))
    batch: list[int] = []
    longest = 0
    for i in order:
        longest = max(longest, len(src[i]) + 1, len(tgt[i]) + 1)
        if batch and longest * (len(batch) + 1) > batch_tokens:
            yield batch
            batch, longest = [], max(len(src[i]), len(tgt[i])) + 1
        batch.append(i)
    if batch:
        yield batch


def _padded(seqs: list[list[int]], device: torch.device) -> torch.Tensor:
    width = max(map(len, seqs))
    return torch.tensor([s + [PAD] * (width - len(s)) for s in seqs], device=device)

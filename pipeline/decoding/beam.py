"""Batched beam search (greedy is beam 1) over the models' decoding interface (steps.SearchModel).

Its steps, as fairseq's: `step_log_probs`, `top_candidates` (the 2K best extensions), `finish`
(EOS ones in the top K, ranked by GNMT's length penalty), `survivors` (the K best others),
`advance`. Scores are exact teacher-forced log-probabilities (banned tokens -inf, no
renormalization). The KV cache, greedy's ties, batches and the decoding workers:
docs/beam-search.md. `beam_ids` decodes whole inputs (batches.decode_ids).

Shapes (docs/shapes.md): B sentences, K beam, R = B x K rows, S source length, V vocabulary;
n sentences still searching, k beams each so far (1, then K).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from pipeline.decoding.batches import decode_ids
from pipeline.decoding.steps import (
    CachedDecoder,
    Decoder,
    Hypothesis,
    NaiveDecoder,
    SearchModel,
    SearchStats,
    ban_repeated_ngrams,
    length_penalty,
    step_log_probs,
)
from pipeline.tokens import EOS


@dataclass
class Beams:
    """The live part of a batch's search: its active sentences and their k beams each.

    k is 1 before the first step (every beam would be the start token alone), then K.
    """

    sentences: torch.Tensor  # (n,) index in the batch of each active sentence
    max_lens: torch.Tensor  # (n,) their maximum output lengths
    history: torch.Tensor  # (n*k, t+1) start token, then the tokens generated
    scores: torch.Tensor  # (n, k) float32 sums of log-probs


def initial_beams(model: SearchModel, max_lens: torch.Tensor) -> Beams:
    """One start token per sentence: the first step expands it into K beams."""
    B, device = max_lens.size(0), max_lens.device
    history = torch.full((B, 1), model.start_token, dtype=torch.long, device=device)
    return Beams(torch.arange(B, device=device), max_lens, history, torch.zeros(B, 1, device=device))


def top_candidates(
    scores: torch.Tensor, lprobs: torch.Tensor, beam: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """scores (n, k) + lprobs (n*k, V) -> the 2K best extensions per sentence (K = beam), best first:

    their summed log-probs, the beam each extends and the token it adds, each (n, 2K).
    Greedy (K = 1) takes the best extension alone, (n, 1): see `survivors`.
    """
    n, k = scores.shape
    if beam == 1:
        best, words = lprobs.max(dim=1, keepdim=True)  # k is 1
        return scores + best, torch.zeros_like(words), words
    V = lprobs.size(-1)
    # Each beam's own best 2K first: the sentence's 2K best are among them, and the
    # sums are then taken over k x 2K candidates instead of k x V.
    width = min(2 * beam, V)
    best, words = lprobs.topk(width, dim=1)  # (n*k, 2K)
    totals = (scores[:, :, None] + best.view(n, k, width)).view(n, k * width)
    values, flat = totals.topk(min(2 * beam, k * width), dim=1)  # (n, 2K)
    return values, flat // width, words.view(n, k * width).gather(1, flat)


def finish(
    finished: list[list[Hypothesis]],
    beams: Beams,
    values: torch.Tensor,
    parents: torch.Tensor,
    words: torch.Tensor,
    K: int,
    alpha: float,
) -> None:
    """Move the EOS candidates ranked in the top K into `finished` (per batch sentence)."""
    k = beams.scores.size(1)
    hits = ((words[:, :K] == EOS) & values[:, :K].isfinite()).nonzero().tolist()  # [(i, rank)]
    if not hits:
        return
    top_values, top_parents = values[:, :K].tolist(), parents[:, :K].tolist()  # one sync, not one a hit
    rows = [i * k + top_parents[i][r] for i, r in hits]
    prefixes = beams.history[rows, 1:].tolist()
    lp = length_penalty(beams.history.size(1), alpha)  # tokens generated so far, + the EOS
    sentences = beams.sentences.tolist()
    for (i, r), tokens in zip(hits, prefixes):
        finished[sentences[i]].append(Hypothesis(tokens, top_values[i][r] / lp))


def survivors(
    values: torch.Tensor, parents: torch.Tensor, words: torch.Tensor, beam: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The K best candidates that do not end in EOS: scores, parent beams, tokens, each (n, K).

    Each of k beams offers one EOS candidate at most, so 2K candidates hold K
    others; only a vocabulary smaller than the beam leaves fewer (then all are kept).
    Greedy's one candidate is its survivor: where it is EOS, `finish` has taken it
    and the sentence, with K = 1 hypotheses, is done (`advance` drops it).
    """
    if beam == 1:
        return values, parents, words
    rank = torch.arange(words.size(1), device=words.device)
    is_eos = words == EOS
    width = min(beam, words.size(1) - int(is_eos.sum(1).max()))
    order = is_eos.long() * words.size(1) + rank  # non-EOS first, by rank
    pick = order.topk(width, dim=1, largest=False).indices  # (n, K), in rank order
    return values.gather(1, pick), parents.gather(1, pick), words.gather(1, pick)


def advance(
    beams: Beams,
    decoder: Decoder,
    finished: list[list[Hypothesis]],
    beam: int,
    scores: torch.Tensor,
    parents: torch.Tensor,
    words: torch.Tensor,
) -> Beams:
    """Drop done sentences (`beam` finished, or at their maximum length), move the survivors
    (scores, parents, words: (n, K)) into place: history and decoder rows."""
    k, K = beams.scores.size(1), scores.size(1)
    steps = beams.history.size(1) - 1  # tokens generated before this step's
    counts = torch.tensor([len(finished[s]) for s in beams.sentences.tolist()], device=scores.device)
    keep = ((counts < beam) & (beams.max_lens > steps)).nonzero().squeeze(1)  # (n',)
    rows = (keep[:, None] * k + parents[keep]).view(-1)  # (n'*K,) parents' rows
    decoder.reorder(rows, K)
    history = torch.cat([beams.history[rows], words[keep].view(-1, 1)], dim=1)
    return Beams(beams.sentences[keep], beams.max_lens[keep], history, scores[keep])


def beam_search(
    model: SearchModel,
    src: torch.Tensor,
    max_lens: torch.Tensor,
    *,
    beam: int,
    alpha: float,
    n_best: int = 1,
    use_cache: bool = True,
    no_repeat_ngram_size: int = 0,
) -> list[list[Hypothesis]]:
    """src (B, S) with EOS, padded; max_lens (B,) -> per sentence its n_best hypotheses, best first.

    no_repeat_ngram_size: no hypothesis repeats an n-gram that long (ban_repeated_ngrams).
    """
    fed = int(max_lens.max()) + 1 if max_lens.numel() else 0  # the start token, then up to max_len
    decoder = (CachedDecoder if use_cache else NaiveDecoder)(model, src, fed)
    beams = initial_beams(model, max_lens.to(src.device))
    finished: list[list[Hypothesis]] = [[] for _ in range(src.size(0))]
    while beams.sentences.numel():
        steps = beams.history.size(1) - 1
        force_eos = (beams.max_lens <= steps).repeat_interleave(beams.scores.size(1))  # (R,)
        lprobs = step_log_probs(decoder.step(beams.history[:, -1:]), force_eos)
        ban_repeated_ngrams(lprobs, beams.history, no_repeat_ngram_size)
        values, parents, words = top_candidates(beams.scores, lprobs, beam)
        finish(finished, beams, values, parents, words, beam, alpha)
        beams = advance(beams, decoder, finished, beam, *survivors(values, parents, words, beam))
    return [sorted(hyps, key=lambda h: -h.score)[:n_best] for hyps in finished]


def beam_ids(
    model: SearchModel,
    seqs: Sequence[Sequence[int]],
    *,
    beam: int,
    length_penalty: float,
    max_len_a: float,
    max_len_b: int,
    batch_tokens: int,
    device: torch.device | str,
    n_best: int = 1,
    use_cache: bool = True,
    stats: SearchStats | None = None,
    workers: int = 1,
    no_repeat_ngram_size: int = 0,
) -> list[list[Hypothesis]]:
    """Beam-search source ids (without EOS) -> per input up to n_best hypotheses, in input order
    (batches.decode_ids: limits, batches, workers)."""

    def run(src: torch.Tensor, max_lens: torch.Tensor, sources: list[list[int]]) -> list[list[Hypothesis]]:
        return beam_search(
            model,
            src,
            max_lens,
            beam=beam,
            alpha=length_penalty,
            n_best=n_best,
            use_cache=use_cache,
            no_repeat_ngram_size=no_repeat_ngram_size,
        )

    limits = (max_len_a, max_len_b)
    return decode_ids(model, seqs, run, beam, limits, batch_tokens, device, stats, workers)

"""Sampling instead of searching: each token drawn from the model's distribution (top-k, nucleus,
temperature), over the same decoding interface and cache as beam search, seeded by the sentence
alone (docs/sampling.md). `sample_ids` decodes whole inputs (batches.decode_ids).

Shapes (docs/shapes.md): B sentences, K samples, R = B x K rows, V vocabulary, L draws a row.
"""

from __future__ import annotations

import hashlib
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
from pipeline.params import SamplingParams
from pipeline.tokens import EOS


@dataclass
class Samples:
    """The live part of a batch's sampling: its active sentences and their K sample rows each.

    A row that has drawn EOS stays, fed EOS, until every row of its sentence has: the
    decoder state keeps K rows a sentence (DecoderState.reorder), as a beam's does.
    """

    sentences: torch.Tensor  # (n,) index in the batch of each active sentence
    max_lens: torch.Tensor  # (n,) their maximum output lengths
    history: torch.Tensor  # (n*K, t+1) start token, then the tokens drawn
    scores: torch.Tensor  # (n*K,) float32 sums of the model's log-probs
    done: torch.Tensor  # (n*K,) rows that have drawn EOS
    draws: torch.Tensor  # (n*K, L) float64 uniforms in [0, 1): column t decides step t's token


def stream_seed(seed: int, source: Sequence[int], sample: int) -> int:
    """The seed of one sample's random stream: of (seed, the source ids, the sample's number) alone,
    so that a sentence draws the same tokens whatever batch, chunk or order it is decoded in."""
    key = ",".join(map(str, (seed, sample, *source))).encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little") >> 1


def sample_draws(
    sources: Sequence[Sequence[int]], max_lens: Sequence[int], samples: int, seed: int
) -> torch.Tensor:
    """(B*K, L) uniforms, L = max(max_lens) + 1: row b*K + j is sample j of sentence b, its own
    stream's first max_len + 1 numbers (one a token, the EOS included), then zeros."""
    width = max(max_lens) + 1
    draws = torch.zeros(len(sources) * samples, width, dtype=torch.float64)
    for b, (source, max_len) in enumerate(zip(sources, max_lens)):
        for j in range(samples):
            stream = torch.Generator().manual_seed(stream_seed(seed, source, j))
            draws[b * samples + j, : max_len + 1] = torch.rand(
                max_len + 1, generator=stream, dtype=torch.float64
            )
    return draws


def filter_logits(lprobs: torch.Tensor, sampling: SamplingParams) -> tuple[torch.Tensor, torch.Tensor | None]:
    """lprobs (R, V) -> the tokens a draw may pick: tempered scores (R, W), -inf for those cut,
    and their ids (R, W), likeliest first; W = top_k, else V. Without top_k or top_p, the
    scores (R, V) in vocabulary order and ids None: unrestricted sampling needs no sort.

    Temperature, top-k, then the nucleus (the likeliest tokens whose tempered probability
    first reaches top_p; Holtzman et al. 2020): as in fairseq, Hugging Face and
    CTranslate2 the nucleus is of the tempered distribution, so a top_p means what it
    means there. The likeliest token is always kept. docs/sampling.md.
    """
    tempered = lprobs / sampling.temperature
    if sampling.top_k:
        values, ids = tempered.topk(min(sampling.top_k, tempered.size(1)), dim=1)  # sorted
    elif sampling.top_p < 1.0:
        values, ids = tempered.sort(dim=1, descending=True)
    else:
        return tempered, None
    if sampling.top_p < 1.0:
        probs = torch.softmax(values, dim=1)
        before = probs.cumsum(dim=1) - probs  # the probability of the likelier tokens
        values = values.masked_fill(before >= sampling.top_p, float("-inf"))
    return values, ids


def draw_tokens(lprobs: torch.Tensor, draws: torch.Tensor, sampling: SamplingParams) -> torch.Tensor:
    """lprobs (R, V), draws (R,) uniforms -> (R,) tokens drawn from the filtered distribution.

    By inversion: the first token (in filter_logits' order) whose cumulative probability
    exceeds the draw. A row's token depends on its own log-probs and draw alone.
    """
    values, ids = filter_logits(lprobs, sampling)
    probs = torch.softmax(values.double(), dim=1)  # (R, W), zeros where cut
    cdf = probs.cumsum(dim=1)
    pick = (cdf <= draws[:, None] * cdf[:, -1:]).sum(dim=1)  # tokens the draw passes
    # Rounding can pass them all: then the last token that may be drawn.
    order = torch.arange(probs.size(1), device=probs.device)
    last = torch.where(probs > 0, order, -1).amax(dim=1)
    pick = torch.minimum(pick, last)
    return pick if ids is None else ids.gather(1, pick[:, None]).squeeze(1)


def initial_samples(
    decoder: Decoder, model: SearchModel, max_lens: torch.Tensor, draws: torch.Tensor
) -> Samples:
    """K rows a sentence from the start: the decoder's one row each is expanded K times."""
    B, device = max_lens.size(0), max_lens.device
    K = draws.size(0) // max(B, 1)
    decoder.reorder(torch.arange(B, device=device).repeat_interleave(K), K)
    history = torch.full((B * K, 1), model.start_token, dtype=torch.long, device=device)
    zeros = torch.zeros(B * K, device=device)
    return Samples(torch.arange(B, device=device), max_lens, history, zeros, zeros.bool(), draws)


def collect(finished: list[list[Hypothesis]], live: Samples, new_eos: torch.Tensor, alpha: float) -> None:
    """The rows that drew EOS this step become hypotheses of their sentences."""
    rows = new_eos.nonzero().squeeze(1)
    if not rows.numel():
        return
    K = live.done.size(0) // live.sentences.size(0)
    lp = length_penalty(live.history.size(1), alpha)  # tokens drawn so far, + the EOS
    sentences = live.sentences[rows // K].tolist()
    for sentence, tokens, score in zip(
        sentences, live.history[rows, 1:].tolist(), live.scores[rows].tolist()
    ):
        finished[sentence].append(Hypothesis(tokens, score / lp))


def advance_samples(live: Samples, decoder: Decoder, tokens: torch.Tensor) -> Samples:
    """Drop the sentences whose K rows all have drawn EOS; append `tokens` (R,) to the others."""
    n, K = live.sentences.size(0), live.done.size(0) // live.sentences.size(0)
    keep = (~live.done.view(n, K).all(dim=1)).nonzero().squeeze(1)  # (n',)
    rows = (keep[:, None] * K + torch.arange(K, device=keep.device)).view(-1)  # (n'*K,)
    decoder.reorder(rows, K)
    history = torch.cat([live.history[rows], tokens[rows, None]], dim=1)
    return Samples(
        live.sentences[keep],
        live.max_lens[keep],
        history,
        live.scores[rows],
        live.done[rows],
        live.draws[rows],
    )


def sample_search(
    model: SearchModel,
    src: torch.Tensor,
    max_lens: torch.Tensor,
    draws: torch.Tensor,
    *,
    sampling: SamplingParams,
    alpha: float,
    use_cache: bool = True,
    no_repeat_ngram_size: int = 0,
) -> list[list[Hypothesis]]:
    """src (B, S) with EOS, padded; max_lens (B,); draws (B*K, L) from sample_draws -> per sentence
    its K samples, best first.

    Each token is drawn from the model's distribution as filter_logits cuts it; a
    sample is scored as a beam hypothesis is, by the model's own log-probs (neither
    tempered nor cut) over GNMT's length penalty. EOS, max_len and repeated n-grams as
    in beam_search.
    """
    fed = int(max_lens.max()) + 1 if max_lens.numel() else 0
    decoder = (CachedDecoder if use_cache else NaiveDecoder)(model, src, fed)
    live = initial_samples(decoder, model, max_lens.to(src.device), draws.to(src.device))
    finished: list[list[Hypothesis]] = [[] for _ in range(src.size(0))]
    while live.sentences.numel():
        steps = live.history.size(1) - 1
        K = live.done.size(0) // live.sentences.size(0)
        force_eos = (live.max_lens <= steps).repeat_interleave(K) | live.done  # done rows idle on EOS
        lprobs = step_log_probs(decoder.step(live.history[:, -1:]), force_eos)
        ban_repeated_ngrams(lprobs, live.history, no_repeat_ngram_size)
        tokens = draw_tokens(lprobs, live.draws[:, steps], sampling)
        gained = lprobs.gather(1, tokens[:, None]).squeeze(1)
        live.scores = live.scores + gained.masked_fill(live.done, 0.0)
        new_eos = (tokens == EOS) & ~live.done
        collect(finished, live, new_eos, alpha)
        live.done = live.done | new_eos
        live = advance_samples(live, decoder, tokens)
    return [sorted(hyps, key=lambda h: -h.score) for hyps in finished]


def sample_ids(
    model: SearchModel,
    seqs: Sequence[Sequence[int]],
    *,
    sampling: SamplingParams,
    n_best: int,
    length_penalty: float,
    max_len_a: float,
    max_len_b: int,
    batch_tokens: int,
    device: torch.device | str,
    use_cache: bool = True,
    stats: SearchStats | None = None,
    workers: int = 1,
    no_repeat_ngram_size: int = 0,
) -> list[list[Hypothesis]]:
    """n_best samples of each input's translation, best first, in input order; each input's
    samples depend on sampling.seed and its ids alone (batches.decode_ids: limits, batches)."""

    def run(src: torch.Tensor, max_lens: torch.Tensor, sources: list[list[int]]) -> list[list[Hypothesis]]:
        draws = sample_draws(sources, max_lens.tolist(), n_best, sampling.seed)  # (B*K, L)
        return sample_search(
            model,
            src,
            max_lens,
            draws,
            sampling=sampling,
            alpha=length_penalty,
            use_cache=use_cache,
            no_repeat_ngram_size=no_repeat_ngram_size,
        )

    limits = (max_len_a, max_len_b)
    return decode_ids(model, seqs, run, n_best, limits, batch_tokens, device, stats, workers)

"""Batched beam search (greedy is beam 1) over the models' decoding interface.

The search uses only `model.start`, `model.step`, `state.reorder` and
`model.start_token` (see Seq2SeqBase in pipeline/model/transformer.py), so it
serves both architectures, and an Ensemble of models (pipeline/decoding/ensemble.py).
Its steps, as fairseq's: `step_log_probs`, `top_candidates` (the 2K best
extensions), `finish` (EOS ones in the top K, ranked by GNMT's length penalty),
`survivors` (the K best others), `advance`.
Scores are exact teacher-forced log-probabilities (banned tokens -inf, no
renormalization). The KV cache, greedy's ties, batches and the decoding
workers: docs/beam-search.md. `sample_search` draws instead, over the same
interface and cache (top-k, top-p, temperature, seeded): docs/sampling.md.

Shapes (docs/shapes.md): B sentences, K beam (or samples), R = B x K rows, S source length,
V vocabulary; n sentences still searching, k beams each so far (1, then K).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from pipeline.data.batching import collate_src
from pipeline.decoding.ensemble import Ensemble
from pipeline.model.transformer import Seq2SeqBase
from pipeline.params import ModelParams, SamplingParams
from pipeline.tokens import BOS, EOS, PAD, SEP

log = logging.getLogger(__name__)

BANNED = (PAD, BOS, SEP)

SearchModel = Seq2SeqBase | Ensemble  # what the search decodes with


@dataclass
class Hypothesis:
    """One output: tokens without BOS/EOS, and the length-normalized score it was ranked by."""

    tokens: list[int]
    score: float


@dataclass
class SearchStats:
    """Counts one or more translate_ids calls add to (a caller's running totals)."""

    sentences: int = 0
    src_tokens: int = 0  # as decoded, after any truncation
    out_tokens: int = 0  # of the 1-best, with its EOS
    truncated: int = 0
    batches: int = 0

    def add(
        self,
        seqs: Sequence[Sequence[int]],
        fitted: Sequence[tuple[list[int], int]],
        results: Sequence[list[Hypothesis]],
        truncated: int,
    ) -> None:
        """Count one call's inputs, their fitted sources and 1-best outputs (batches are counted apart)."""
        self.sentences += len(seqs)
        self.src_tokens += sum(len(f[0]) for f in fitted)
        self.out_tokens += sum(len(r[0].tokens) + 1 for r, s in zip(results, seqs) if s)
        self.truncated += truncated


def length_penalty(length: int, alpha: float) -> float:
    """GNMT's lp(Y) = ((5 + |Y|) / 6) ** alpha; alpha 0 leaves scores as raw log-prob sums."""
    return ((5.0 + length) / 6.0) ** alpha


# --- the two ways of running the decoder ------------------------------------------


class Decoder(Protocol):
    """What the search needs of a model: one step's logits, and rows that follow the beams."""

    def step(self, tokens: torch.Tensor) -> torch.Tensor: ...  # (R, 1) -> (R, V)

    # Keep rows `index` (R',), `beams` rows a sentence from now on.
    def reorder(self, index: torch.Tensor, beams: int) -> None: ...


class CachedDecoder:
    """model.step with the KV cache: the source is encoded once; see DecoderState."""

    def __init__(self, model: SearchModel, src: torch.Tensor, steps: int):
        self.model = model
        # src (B, S): one row per sentence until the first reorder. A DecoderState, or an ensemble's
        # EnsembleState: each model steps with its own kind.
        self.state: Any = model.start(src, steps)

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.model.step(tokens, self.state)

    def reorder(self, index: torch.Tensor, beams: int) -> None:
        self.state.reorder(index, beams)


class NaiveDecoder:
    """Runs model(src, BOS + prefix) over the whole prefix every step: no cache at all."""

    def __init__(self, model: SearchModel, src: torch.Tensor, steps: int):  # steps: no cache to size
        self.model = model
        self.src = src  # (R, S)
        self.prefix: torch.Tensor | None = None  # (R, t+1): BOS, then the tokens fed so far

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        # forward() takes targets starting with BOS (decoder-only swaps in SEP itself),
        # so the first fed token, model.start_token, is replaced by BOS here.
        bos = torch.full_like(tokens, BOS)
        self.prefix = bos if self.prefix is None else torch.cat([self.prefix, tokens], dim=1)
        return self.model(self.src, self.prefix)[:, -1]

    def reorder(self, index: torch.Tensor, beams: int) -> None:
        self.src = self.src.index_select(0, index)
        if self.prefix is not None:
            self.prefix = self.prefix.index_select(0, index)


# --- the search's steps --------------------------------------------------------------


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


def step_log_probs(logits: torch.Tensor, force_eos: torch.Tensor, ban_eos: bool = False) -> torch.Tensor:
    """logits (R, V) -> log-probs (R, V) float32, banned tokens -inf, rows `force_eos` (R,) EOS only.

    ban_eos refuses EOS in the other rows (before a minimum length). Forced rows are
    written by index, and only when there are any: a boolean-mask write touches all of
    R x V every step (docs/cpu-speed.md). The log_softmax is written over `logits` (the
    caller's fresh step output, or its float32 copy): a new R x V buffer a step cost more
    than the log_softmax itself (freshly mapped pages), and the kernel reads each row
    whole before writing it.
    """
    logits = logits.float()
    lprobs = torch.log_softmax(logits, dim=-1, out=logits)
    lprobs[:, list(BANNED)] = float("-inf")
    if ban_eos:
        lprobs[:, EOS].masked_fill_(~force_eos, float("-inf"))
    if bool(force_eos.any()):
        rows = force_eos.nonzero().squeeze(1)
        eos = lprobs[rows, EOS]
        lprobs[rows] = float("-inf")
        lprobs[rows, EOS] = eos
    return lprobs


def ban_repeated_ngrams(lprobs: torch.Tensor, history: torch.Tensor, size: int) -> None:
    """-inf in lprobs (R, V), in place, for each token that would repeat an n-gram of `size` tokens
    already in its row's output: history (R, t+1), the start token then the t tokens generated.

    As fairseq's --no-repeat-ngram-size, Hugging Face's and CTranslate2's no_repeat_ngram_size:
    the output's last size-1 tokens are looked up among its earlier n-grams, and the token that
    followed each match is banned (size 1: every token already output). EOS is never banned,
    so that every row keeps a token to end with. size 0 bans nothing.
    """
    t = history.size(1) - 1
    if size <= 0 or t < size:  # every step of every search: nothing made when off
        return
    out = history[:, 1:]
    grams = out.unfold(1, size, 1)  # (R, t-size+1, size): every n-gram of each output
    hit = (grams[:, :, :-1] == out[:, None, t - size + 1 :]).all(dim=2)  # its first size-1 are the tail
    rows, at = hit.nonzero(as_tuple=True)
    tokens = grams[rows, at, -1]
    keep = tokens != EOS
    lprobs[rows[keep], tokens[keep]] = float("-inf")


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
    min_len: int = 0,
    no_repeat_ngram_size: int = 0,
) -> list[list[Hypothesis]]:
    """src (B, S) with EOS, padded; max_lens (B,) -> per sentence its n_best hypotheses, best first.

    min_len: EOS is refused until that many tokens are generated (a benchmark's fixed
    output length: min_len = max_len); at max_len it is still forced.
    no_repeat_ngram_size: no hypothesis repeats an n-gram that long (ban_repeated_ngrams).
    """
    fed = int(max_lens.max()) + 1 if max_lens.numel() else 0  # the start token, then up to max_len
    decoder = (CachedDecoder if use_cache else NaiveDecoder)(model, src, fed)
    beams = initial_beams(model, max_lens.to(src.device))
    finished: list[list[Hypothesis]] = [[] for _ in range(src.size(0))]
    while beams.sentences.numel():
        steps = beams.history.size(1) - 1
        force_eos = (beams.max_lens <= steps).repeat_interleave(beams.scores.size(1))  # (R,)
        lprobs = step_log_probs(decoder.step(beams.history[:, -1:]), force_eos, ban_eos=steps < min_len)
        ban_repeated_ngrams(lprobs, beams.history, no_repeat_ngram_size)
        values, parents, words = top_candidates(beams.scores, lprobs, beam)
        finish(finished, beams, values, parents, words, beam, alpha)
        beams = advance(beams, decoder, finished, beam, *survivors(values, parents, words, beam))
    return [sorted(hyps, key=lambda h: -h.score)[:n_best] for hyps in finished]


# --- sampling -------------------------------------------------------------------------


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
    min_len: int = 0,
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
        lprobs = step_log_probs(decoder.step(live.history[:, -1:]), force_eos, ban_eos=steps < min_len)
        ban_repeated_ngrams(lprobs, live.history, no_repeat_ngram_size)
        tokens = draw_tokens(lprobs, live.draws[:, steps], sampling)
        gained = lprobs.gather(1, tokens[:, None]).squeeze(1)
        live.scores = live.scores + gained.masked_fill(live.done, 0.0)
        new_eos = (tokens == EOS) & ~live.done
        collect(finished, live, new_eos, alpha)
        live.done = live.done | new_eos
        live = advance_samples(live, decoder, tokens)
    return [sorted(hyps, key=lambda h: -h.score) for hyps in finished]


# --- whole inputs: limits, batches, order ----------------------------------------------


def max_output_length(src_len: int, max_len_a: float, max_len_b: int) -> int:
    return int(max_len_a * src_len + max_len_b)


class ModelLimits(Protocol):
    """What fit_to_model reads of a model: its params (a CTranslate2 export passes a stand-in)."""

    @property
    def cfg(self) -> ModelParams: ...


def fit_to_model(
    model: ModelLimits, seq: Sequence[int], max_len_a: float, max_len_b: int
) -> tuple[list[int], int]:
    """The source as the model can take it, and its maximum output length.

    Only learned positions limit lengths (sinusoidal ones extend to any length).
    Encoder-decoder: the source keeps max_positions - 1 tokens (+ EOS), and the
    output at most max_positions - 1 tokens (+ EOS; the last token fed sits at
    position max_len). Decoder-only, where source and output share one
    sequence (source, EOS, SEP, output): the source is cut only as far as
    needed for its own max_len output to fit (if max_len_b alone overflows, it
    keeps half the room), and the output is capped by what room is left.
    """
    seq = list(seq)
    positions = model.cfg.max_positions
    if model.cfg.positions != "learned":
        return seq, max_output_length(len(seq), max_len_a, max_len_b)
    if model.cfg.arch != "decoder_only":
        seq = seq[: positions - 1]
        return seq, min(max_output_length(len(seq), max_len_a, max_len_b), positions - 1)
    room = max(positions - 2, 0)  # source tokens + output tokens; EOS and SEP take the other two
    n = min(len(seq), room)
    while n > 0 and n + max_output_length(n, max_len_a, max_len_b) > room:
        n -= 1
    if n == 0 and seq:  # max_len_b alone overflows: give the source half the room
        n = min(len(seq), max(room // 2, 1))
    return seq[:n], max(min(max_output_length(n, max_len_a, max_len_b), room - n), 0)


def length_batches(lengths: Sequence[int], beam: int, batch_tokens: int) -> list[list[int]]:
    """Indices of non-empty inputs, longest first, cut so that B x K x max(S) <= batch_tokens.

    S counts the EOS; a sentence too long for the budget gets a batch of its own.
    Sorting by length keeps padding (wasted work) small.
    """
    order = sorted((i for i, n in enumerate(lengths) if n > 0), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    for i in order:
        # Longest first: the batch's first sentence is its widest.
        if batches and (len(batches[-1]) + 1) * beam * (lengths[batches[-1][0]] + 1) <= batch_tokens:
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


# Fewer sentences a batch than this are decoded faster as one batch on all threads than split
# among the workers (the default model, beam 5, 2 cores: 32 sentences split in two 1.44x, 8 split
# in two 0.83x, interleaved in one process).
SPREAD_MIN_SENTENCES = 16


def spread_batches(lengths: Sequence[int], beam: int, batch_tokens: int, workers: int) -> list[list[int]]:
    """`length_batches`, as many as it makes rounded up to a multiple of `workers`, under the
    smallest budget that packs them so: about equal batches, so that no worker idles through the
    last round (the 64 sentences of a served batch: two of 32, not 51 beside 13). Not below
    SPREAD_MIN_SENTENCES a batch, nor where no budget gives a multiple: length_batches' own."""
    batches = length_batches(lengths, beam, batch_tokens)
    if workers <= 1 or sum(n > 0 for n in lengths) < workers * SPREAD_MIN_SENTENCES:
        return batches
    count = -(-len(batches) // workers) * workers
    low, high = 1, batch_tokens  # the smallest budget that makes no more than `count` batches
    while low < high:
        middle = (low + high) // 2
        if len(length_batches(lengths, beam, middle)) <= count:
            high = middle
        else:
            low = middle + 1
    spread = length_batches(lengths, beam, low)
    return spread if len(spread) % workers == 0 else batches


@contextlib.contextmanager
def evaluating(model: torch.nn.Module) -> Iterator[None]:
    """eval() and inference_mode inside; the model's training mode is restored after (validation)."""
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            yield
    finally:
        model.train(was_training)


_SHARING_THREADS = threading.Lock()  # held while workers have torch's threads shared out


def default_workers(device: torch.device | str) -> int:
    """Batches to decode at once: two on a CPU with at least two torch threads, else one."""
    return 2 if torch.device(device).type == "cpu" and torch.get_num_threads() >= 2 else 1


def search_batches(
    model: SearchModel,
    fitted: Sequence[tuple[list[int], int]],
    batches: Sequence[list[int]],
    *,
    workers: int,
    device: torch.device | str,
    sampling: SamplingParams | None = None,
    samples: int = 1,
    **search,
) -> list[list[list[Hypothesis]]]:
    """Beam-search each batch (indices into `fitted`) -> its sentences' hypotheses, in `batches` order.

    With `sampling`, draw `samples` samples a sentence instead (sample_search; `search`
    then holds no beam or n_best).

    On CPU, `workers` > 1 decodes that many batches at once, each in a thread with
    torch's threads shared out among them (at least one each). torch ops release
    the GIL, so one batch's matrix products run while another's search steps in
    Python, and small ops stop waiting on a second thread (bench/decode_speed.py
    measures the gain). Each batch's search is the same either way; its products
    may round differently on fewer threads. torch's thread count is the process's:
    while workers run it is their share, and concurrent multi-worker searches take
    turns. Recording attention weights (Seq2SeqBase.recording_attention) keeps to
    one worker, in order. See docs/beam-search.md.
    """
    recording = any(getattr(m, "record", None) is not None for m in model.modules())
    if torch.device(device).type != "cpu" or recording:
        workers = 1
    workers = max(min(workers, len(batches)), 1)
    autocast_dtype, autocast_enabled = torch.get_autocast_dtype("cpu"), torch.is_autocast_enabled("cpu")

    def run(batch: list[int]) -> list[list[Hypothesis]]:
        if workers > 1:
            torch.set_num_threads(share)  # `share` is set below, before any worker starts
        # Inference mode and autocast are thread-local: each worker takes the caller's.
        with torch.inference_mode(), torch.autocast("cpu", dtype=autocast_dtype, enabled=autocast_enabled):
            src = collate_src([fitted[i][0] for i in batch]).to(device)  # (B, S)
            max_lens = torch.tensor([fitted[i][1] for i in batch], device=device)  # (B,)
            if sampling is None:
                return beam_search(model, src, max_lens, **search)
            sources, lens = [fitted[i][0] for i in batch], [fitted[i][1] for i in batch]
            draws = sample_draws(sources, lens, samples, sampling.seed)  # (B*K, L)
            return sample_search(model, src, max_lens, draws, sampling=sampling, **search)

    if workers <= 1:
        return [run(batch) for batch in batches]
    with _SHARING_THREADS:
        threads = torch.get_num_threads()
        share = max(threads // workers, 1)
        pool = ThreadPoolExecutor(workers, thread_name_prefix="search")
        try:
            return list(pool.map(run, batches))
        finally:  # after a failure, batches not started are dropped
            pool.shutdown(cancel_futures=True)
            torch.set_num_threads(threads)


def batches_of(
    fitted: Sequence[tuple[list[int], int]],
    rows: int,
    batch_tokens: int,
    workers: int,
    device: torch.device | str,
    given: Sequence[list[int]] | None,
) -> list[list[int]]:
    """translate_ids' batches: spread_batches of the fitted sources (`rows` a sentence: its beam or
    samples), or those `given` once checked to hold every non-empty input exactly once."""
    if given is None:
        lengths = [len(f[0]) for f in fitted]
        on_cpu = torch.device(device).type == "cpu"  # where workers share the cores (search_batches)
        return spread_batches(lengths, rows, batch_tokens, workers if on_cpu else 1)
    batches = [list(b) for b in given]
    if sorted(i for b in batches for i in b) != [i for i, f in enumerate(fitted) if f[0]]:
        raise ValueError("batches must hold the index of every non-empty input exactly once")
    return batches


def translate_ids(
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
    min_len: int = 0,
    stats: SearchStats | None = None,
    workers: int = 1,
    batches: Sequence[list[int]] | None = None,
    sampling: SamplingParams | None = None,
    no_repeat_ngram_size: int = 0,
) -> list[list[Hypothesis]]:
    """Decode source ids (without EOS) -> per input, up to n_best hypotheses, in input order.

    With `sampling` (beam must be 1), n_best samples per input instead, best first
    (sample_search); each input's samples depend on sampling.seed and its ids alone.

    The model must already be on `device`. An empty input gives [Hypothesis([], 0.0)]
    without running the model. An input longer than the model takes is truncated
    (see fit_to_model) and counted, with one warning per call; none is dropped.
    Batches: `length_batches` by batch_tokens, spread evenly over the CPU's `workers`
    (spread_batches), or `batches` as given (indices of non-empty inputs; a benchmark's fixed
    batches); `workers` see search_batches. `no_repeat_ngram_size`: see ban_repeated_ngrams.
    """
    stats = stats if stats is not None else SearchStats()
    fitted = [fit_to_model(model, s, max_len_a, max_len_b) if s else ([], 0) for s in seqs]
    truncated = sum(len(f[0]) < len(s) for f, s in zip(fitted, seqs))
    if truncated:
        log.warning(
            f"{truncated} of {len(seqs)} inputs exceed the model's length limit "
            f"(model.max_positions={model.cfg.max_positions}) and were truncated"
        )
    results: list[list[Hypothesis]] = [[Hypothesis([], 0.0)] for _ in seqs]
    if sampling is not None and beam != 1:
        raise ValueError(f"sampling draws one token a step: beam must be 1, not {beam}")
    rows = beam if sampling is None else n_best  # rows a sentence takes in a batch
    batches = batches_of(fitted, rows, batch_tokens, workers, device, batches)
    search: dict[str, Any] = dict(alpha=length_penalty, use_cache=use_cache, min_len=min_len)
    search |= dict(no_repeat_ngram_size=no_repeat_ngram_size)
    search |= dict(beam=beam, n_best=n_best) if sampling is None else dict(sampling=sampling, samples=n_best)
    with evaluating(model):
        found = search_batches(model, fitted, batches, workers=workers, device=device, **search)
    for batch, hyps in zip(batches, found):
        for i, h in zip(batch, hyps):
            results[i] = h
    stats.batches += len(batches)
    stats.add(seqs, fitted, results, truncated)
    return results

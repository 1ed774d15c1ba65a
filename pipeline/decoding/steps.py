"""What beam search and sampling share: a hypothesis, the counts of a call, GNMT's length penalty,
the two ways of running the decoder (with the KV cache or without), and one step's log-probs with
banned tokens and repeated n-grams ruled out.

The searches use only `model.start`, `model.step`, `state.reorder` and `model.start_token` (see
Seq2SeqBase in pipeline/model/transformer.py), so they serve both architectures and an Ensemble
of models (pipeline/decoding/ensemble.py) alike; SearchModel says so without importing either,
so that the code that trains a model depends on none of the decoding it does not do.

Shapes (docs/shapes.md): R rows (sentences x beams or samples), V vocabulary.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from pipeline.params import ModelParams
from pipeline.tokens import BOS, EOS, PAD, SEP

BANNED = (PAD, BOS, SEP)


class SearchModel(Protocol):
    """What the searches decode with: a model (Seq2SeqBase) or an Ensemble of models of one vocabulary."""

    cfg: ModelParams
    start_token: int
    training: bool

    def start(self, src: torch.Tensor, steps: int = 0) -> Any: ...  # its decoder state
    def step(self, tokens: torch.Tensor, state: Any) -> torch.Tensor: ...  # (R, 1) -> (R, V)
    def __call__(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor: ...
    def modules(self) -> Iterator[torch.nn.Module]: ...
    def eval(self) -> Any: ...
    def train(self, mode: bool = True) -> Any: ...
    def to(self, *args: Any, **kwargs: Any) -> Any: ...


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


def step_log_probs(logits: torch.Tensor, force_eos: torch.Tensor) -> torch.Tensor:
    """logits (R, V) -> log-probs (R, V) float32, banned tokens -inf, rows `force_eos` (R,) EOS only.

    Forced rows are written by index, and only when there are any: a boolean-mask write touches all of
    R x V every step (docs/cpu-speed.md). The log_softmax is written over `logits` (the
    caller's fresh step output, or its float32 copy): a new R x V buffer a step cost more
    than the log_softmax itself (freshly mapped pages), and the kernel reads each row
    whole before writing it.
    """
    logits = logits.float()
    lprobs = torch.log_softmax(logits, dim=-1, out=logits)
    lprobs[:, list(BANNED)] = float("-inf")
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

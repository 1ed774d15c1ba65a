"""Decoding source ids: beam search (beam.py), or sampling (sampling.py) where settings say so.

`translate_ids` is the one entry the translators, the benchmarks and the tests call; the code
that trains a model validates with beam.beam_ids alone, so that it depends on no sampling and
no ensemble (dvc.yaml's train deps). The steps both share: steps.py; whole inputs through a
search (limits, batches, workers): batches.py. docs/beam-search.md, docs/sampling.md.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import torch

from pipeline.decoding.beam import beam_ids
from pipeline.decoding.sampling import sample_ids
from pipeline.decoding.steps import Hypothesis, SearchModel, SearchStats
from pipeline.params import SamplingParams


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
    (sampling.sample_ids); each input's samples depend on sampling.seed and its ids alone.
    Otherwise beam search (beam.beam_ids). Limits, batches and workers: batches.decode_ids.
    `no_repeat_ngram_size`: see steps.ban_repeated_ngrams.
    """
    if sampling is not None and beam != 1:
        raise ValueError(f"sampling draws one token a step: beam must be 1, not {beam}")
    search: Callable[..., list[list[Hypothesis]]] = (
        functools.partial(beam_ids, beam=beam)
        if sampling is None
        else functools.partial(sample_ids, sampling=sampling)
    )
    return search(
        model,
        seqs,
        length_penalty=length_penalty,
        max_len_a=max_len_a,
        max_len_b=max_len_b,
        batch_tokens=batch_tokens,
        device=device,
        n_best=n_best,
        use_cache=use_cache,
        min_len=min_len,
        stats=stats,
        workers=workers,
        batches=batches,
        no_repeat_ngram_size=no_repeat_ngram_size,
    )

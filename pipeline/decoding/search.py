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
from pipeline.params import DecodeParams


def translate_ids(
    model: SearchModel,
    seqs: Sequence[Sequence[int]],
    settings: DecodeParams,
    *,
    device: torch.device | str,
    stats: SearchStats | None = None,
    workers: int = 1,
    use_cache: bool = True,
) -> list[list[Hypothesis]]:
    """Decode source ids (without EOS) as `settings` say -> per input, up to n_best hypotheses, in
    input order (their ensemble is the caller's: `model` is one model or an Ensemble).

    With settings.sampling enabled (beam must be 1), n_best samples per input instead, best first
    (sampling.sample_ids); each input's samples depend on sampling.seed and its ids alone.
    Otherwise beam search (beam.beam_ids). Limits, batches and workers: batches.decode_ids.
    `use_cache` off runs the model over the whole prefix every step (NaiveDecoder); `stats` adds
    this call's counts.
    """
    s = settings
    if s.sampling.enabled and s.beam != 1:
        raise ValueError(f"sampling draws one token a step: beam must be 1, not {s.beam}")
    search: Callable[..., list[list[Hypothesis]]] = (
        functools.partial(sample_ids, sampling=s.sampling)
        if s.sampling.enabled
        else functools.partial(beam_ids, beam=s.beam)
    )
    return search(
        model,
        seqs,
        length_penalty=s.length_penalty,
        max_len_a=s.max_len_a,
        max_len_b=s.max_len_b,
        batch_tokens=s.batch_tokens,
        device=device,
        n_best=s.n_best,
        use_cache=use_cache,
        stats=stats,
        workers=workers,
        no_repeat_ngram_size=s.no_repeat_ngram_size,
    )

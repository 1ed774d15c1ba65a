"""Whole inputs through a search: each source fitted to the model's limits, cut into batches by
length, the batches spread over the decoding workers, the hypotheses put back in input order.

The search itself (beam.beam_search, sampling.sample_search) comes as a BatchSearch; see
docs/beam-search.md for the batches and the workers.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

import torch

from pipeline.data.batching import collate_src
from pipeline.decoding.steps import Hypothesis, SearchModel, SearchStats
from pipeline.params import ModelParams

log = logging.getLogger(__name__)

# One batch's search: src (B, S) with EOS, padded; max_lens (B,); the sources' ids -> per sentence
# its hypotheses, best first.
BatchSearch = Callable[[torch.Tensor, torch.Tensor, list[list[int]]], list[list[Hypothesis]]]


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
def evaluating(model: SearchModel | torch.nn.Module) -> Iterator[None]:
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
    run: BatchSearch,
    *,
    workers: int,
    device: torch.device | str,
) -> list[list[list[Hypothesis]]]:
    """`run` on each batch (indices into `fitted`) -> its sentences' hypotheses, in `batches` order.

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

    def one(batch: list[int]) -> list[list[Hypothesis]]:
        if workers > 1:
            torch.set_num_threads(share)  # `share` is set below, before any worker starts
        # Inference mode and autocast are thread-local: each worker takes the caller's.
        with torch.inference_mode(), torch.autocast("cpu", dtype=autocast_dtype, enabled=autocast_enabled):
            src = collate_src([fitted[i][0] for i in batch]).to(device)  # (B, S)
            max_lens = torch.tensor([fitted[i][1] for i in batch], device=device)  # (B,)
            return run(src, max_lens, [fitted[i][0] for i in batch])

    if workers <= 1:
        return [one(batch) for batch in batches]
    with _SHARING_THREADS:
        threads = torch.get_num_threads()
        share = max(threads // workers, 1)
        pool = ThreadPoolExecutor(workers, thread_name_prefix="search")
        try:
            return list(pool.map(one, batches))
        finally:  # after a failure, batches not started are dropped
            pool.shutdown(cancel_futures=True)
            torch.set_num_threads(threads)


def decode_ids(
    model: SearchModel,
    seqs: Sequence[Sequence[int]],
    run: BatchSearch,
    rows: int,
    limits: tuple[float, int],
    batch_tokens: int,
    device: torch.device | str,
    stats: SearchStats | None = None,
    workers: int = 1,
) -> list[list[Hypothesis]]:
    """Source ids (without EOS) -> per input the hypotheses `run` finds, in input order.

    The model must already be on `device`. An empty input gives [Hypothesis([], 0.0)]
    without running the model. An input longer than the model takes is truncated
    (see fit_to_model; `limits` is (max_len_a, max_len_b)) and counted, with one warning
    per call; none is dropped. Batches: `length_batches` by batch_tokens with `rows` a
    sentence (its beam, or samples), spread evenly over the CPU's `workers` (spread_batches);
    `workers` see search_batches.
    """
    stats = stats if stats is not None else SearchStats()
    fitted = [fit_to_model(model, s, *limits) if s else ([], 0) for s in seqs]
    truncated = sum(len(f[0]) < len(s) for f, s in zip(fitted, seqs))
    if truncated:
        log.warning(
            f"{truncated} of {len(seqs)} inputs exceed the model's length limit "
            f"(model.max_positions={model.cfg.max_positions}) and were truncated"
        )
    results: list[list[Hypothesis]] = [[Hypothesis([], 0.0)] for _ in seqs]
    on_cpu = torch.device(device).type == "cpu"  # where workers share the cores (search_batches)
    batches = spread_batches([len(f[0]) for f in fitted], rows, batch_tokens, workers if on_cpu else 1)
    with evaluating(model):
        found = search_batches(model, fitted, batches, run, workers=workers, device=device)
    for batch, hyps in zip(batches, found):
        for i, h in zip(batch, hyps):
            results[i] = h
    stats.batches += len(batches)
    stats.add(seqs, fitted, results, truncated)
    return results

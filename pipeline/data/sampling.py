"""Subword sampling: a fresh segmentation of every training sentence each epoch, made ahead of the updates.

Unigram sampling (Kudo 2018) or BPE-dropout (Provilkov et al. 2020) of the clean text, by
pipeline.data.subwords (sentencepiece's own sampler ignores its seed across processes); validation
and decoding keep data/bin's deterministic segmentation. Each block of BLOCK sentences of a side
draws from a generator seeded by (train.seed, epoch, side, block), so an epoch's segmentation is
a pure function of those, whatever ran before, and a resumed run redoes it exactly (settings:
docs/low-resource.md; resume: docs/exact-resume.md). `Prefetcher` runs it in one child process,
an epoch ahead of the one being trained, handing whole epochs over in order through a queue of one.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import queue
import signal
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pipeline import files
from pipeline.data import subwords
from pipeline.data.tags import BT_TAG, tags_in
from pipeline.data.vocab import Vocab
from pipeline.errors import UserError
from pipeline.files import SIDES
from pipeline.params import TrainParams

BLOCK = 1024  # sentences drawn from one generator: the unit of the seed, so fixed, not tuned
_POLL_S = 1.0  # how often a blocked side checks that the other is still alive
_CLOSE_S = 10.0  # how long close() waits for the child to go on SIGTERM before it kills it

# One side's sentences: ids end to end and n+1 offsets from 0, as binarize's .bin/.idx hold them.
Segmented = tuple[np.ndarray, np.ndarray]


@dataclass(frozen=True)
class Sampling:
    """train.subword_* as the sampler needs them."""

    kind: str  # unigram | bpe_dropout
    alpha: float
    nbest: int
    seed: int

    @classmethod
    def of(cls, t: TrainParams) -> Sampling | None:
        """The run's sampling, or None when train.subword_sampling is none."""
        if t.subword_sampling == "none":
            return None
        return cls(t.subword_sampling, t.subword_alpha, t.subword_nbest, t.seed)


def block_seed(seed: int, epoch: int, side: int, block: int) -> int:
    """sentencepiece's seed for a block of a side's sentences in an epoch (a uint32)."""
    return int(np.random.SeedSequence([seed, epoch, side, block]).generate_state(1)[0])


def sample_side(vocab: Vocab, side: str, lines: Sequence[str], sampling: Sampling, epoch: int) -> Segmented:
    """One side's sentences, each segmented afresh for `epoch`: (ids, offsets)."""
    sampler = _Sampler(vocab, side, sampling)
    encoded: list[list[int]] = []
    for block, start in enumerate(range(0, len(lines), BLOCK)):
        draws = subwords.Draws(
            np.random.default_rng(block_seed(sampling.seed, epoch, SIDES.index(side), block))
        )
        encoded += [sampler.sample(line, draws) for line in lines[start : start + BLOCK]]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(ids) for ids in encoded], out=offsets[1:])
    ids = np.fromiter((i for sentence in encoded for i in sentence), dtype=np.int32, count=int(offsets[-1]))
    return ids, offsets


class _Sampler:
    """One side's model, sampled as `sampling` says by pipeline.data.subwords."""

    def __init__(self, vocab: Vocab, side: str, sampling: Sampling) -> None:
        self.vocab, self.side, self.how = vocab, side, sampling
        self.pieces = vocab.pieces(side)
        self.longest = max(map(len, self.pieces), default=1)
        encode = vocab.encode_src if side == "src" else vocab.encode_tgt
        self.fallback = lambda text: encode([text])[0]
        # target-language tags and the back-translation tag stay whole
        self.atoms = frozenset(tags_in(self.pieces).values()) | ({BT_TAG} & self.pieces.keys())

    def sample(self, line: str, draws: subwords.Draws) -> list[int]:
        how = self.how
        if how.kind == "unigram" and how.nbest > 1:
            return subwords.nbest_sample(self.vocab.nbest(self.side, line, how.nbest), how.alpha, draws)
        if how.kind == "unigram":
            word_pieces = lambda w: subwords.unigram_sample(w, self.pieces, how.alpha, draws, self.longest)
        else:
            word_pieces = lambda w: subwords.bpe_dropout(w, self.pieces, how.alpha, draws)
        return subwords.sample_line(line, self.pieces, word_pieces, self.fallback, self.atoms)


def sample_epoch(
    vocab: Vocab, text: tuple[list[str], list[str]], sampling: Sampling, epoch: int
) -> list[Segmented]:
    """Both sides of every training sentence, segmented for `epoch`."""
    return [sample_side(vocab, side, lines, sampling, epoch) for side, lines in zip(SIDES, text)]


def read_text(clean_dir: Path, n_sentences: int) -> tuple[list[str], list[str]]:
    """The clean train split that data/bin encodes, refusing one that is not line for line the same."""
    text = []
    for side in SIDES:
        path = clean_dir / f"train.{side}"
        if not path.is_file():
            raise UserError(
                f"{path}: missing; train.subword_sampling segments the clean text each epoch: "
                "pass --clean with the clean stage's output (data/clean)"
            )
        lines = files.read_lines(path)
        if len(lines) != n_sentences:
            raise UserError(
                f"{path} has {len(lines)} lines but the binarized train split {n_sentences} sentences; "
                "rerun the binarize stage on this clean output"
            )
        text.append(lines)
    return text[0], text[1]


class Prefetcher:
    """Epochs' segmentations from one child process, in order from `first`, at most one epoch ahead.

    The queue holds one finished epoch; the child makes the next one meanwhile, so an epoch waits
    only if sampling is slower than training it. A child that dies (or fails) fails the run with
    what it said; a child whose parent died (SIGKILL) exits on its own.
    """

    def __init__(self, bpe_dir: Path, text: tuple[list[str], list[str]], sampling: Sampling, first: int):
        self._args = (bpe_dir, text, sampling)
        self._next = first
        self._start(first)

    def _start(self, first: int) -> None:
        # fork: the child inherits the text instead of pickling it, and imports nothing (no torch)
        context = multiprocessing.get_context("fork")
        self._queue: Any = context.Queue(maxsize=1)
        self._process = context.Process(
            target=_produce, args=(*self._args, first, self._queue, os.getpid()), daemon=True
        )
        self._process.start()
        self._next = first

    def get(self, epoch: int) -> list[Segmented]:
        """Epoch `epoch`'s segmentation of both sides (restarting the child if it is not the next)."""
        if epoch != self._next:
            self.close()
            self._start(epoch)
        while True:
            try:
                got, item = self._queue.get(timeout=_POLL_S)
                break
            except queue.Empty:
                if not self._process.is_alive():
                    code = self._process.exitcode
                    raise UserError(
                        f"the subword sampling process died (exit code {code}); out of memory? "
                        "set train.subword_sampling: none to train without it"
                    ) from None
        if got != epoch:  # -1: the child failed, and item is its exception
            raise RuntimeError(f"subword sampling of epoch {epoch} failed: {item}")
        self._next = epoch + 1
        return item

    def close(self) -> None:
        """Stop the child (it is usually blocked handing over the next epoch) and wait for it."""
        if self._process.is_alive():
            self._process.terminate()
            self._process.join(timeout=_CLOSE_S)
        if self._process.is_alive():  # a SIGTERM it did not act on: not worth a hung run
            self._process.kill()
        self._process.join()
        self._queue.close()


def _produce(
    bpe_dir: Path, text: tuple[list[str], list[str]], sampling: Sampling, first: int, out: Any, parent: int
) -> None:
    """The child: every epoch from `first` on, each put on `out` as (epoch, sides), until the parent goes."""
    # Forked from a training that handles SIGINT and SIGTERM by stopping between updates (signals.py):
    # here that handler would only set a flag nobody reads, and close()'s SIGTERM would go unheard.
    # Ctrl-C is the parent's to act on; it then closes this process.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    vocab = Vocab.load(bpe_dir, threads=1)
    for epoch in _count(first):
        try:
            item: Any = sample_epoch(vocab, text, sampling, epoch)
        except Exception as e:  # noqa: BLE001 - any failure goes to the parent, which raises it
            out.put((-1, repr(e)))
            return
        while not _put(out, (epoch, item)):
            if os.getppid() != parent:  # the parent was killed: nobody will read this
                return


def _put(out: Any, item: Any) -> bool:
    with contextlib.suppress(queue.Full):
        out.put(item, timeout=_POLL_S)
        return True
    return False


def _count(first: int) -> Iterator[int]:
    epoch = first
    while True:
        yield epoch
        epoch += 1

"""The train split epoch by epoch: which sentences, in what segmentation, in which batches.

`TrainSplit` loads data/bin's train split and keeps the sentences that fit
model.max_positions. Each epoch trains on data/bin's segmentation, or with
subword sampling on a fresh one made ahead by a `Prefetcher`; train sources may
be drawn in other proportions than they come (`CorpusDraws`, pipeline/data/draws.py). An epoch's
batches are a pure function of (train.seed, epoch, rank), so a resumed run
sees the same ones (docs/exact-resume.md).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from pipeline import params as P
from pipeline.data import batching
from pipeline.data.batching import ParallelData, TokenArray
from pipeline.data.draws import CorpusDraws
from pipeline.data.sampling import Prefetcher, Sampling, read_text
from pipeline.data.vocab import Vocab
from pipeline.errors import UserError
from pipeline.files import SIDES
from pipeline.training.distributed import Dist
from pipeline.training.state import Paths


def fitting_sentences(data: ParallelData, cfg: P.ModelParams) -> np.ndarray:
    """Indices of sentences whose positions fit model.max_positions (a learned table cannot grow)."""
    src, tgt = data.src.lengths, data.tgt.lengths
    if cfg.arch == "decoder_only":
        ok = src + tgt + 2 <= cfg.max_positions  # source, EOS, SEP, target
    else:
        ok = np.maximum(src, tgt) + 1 <= cfg.max_positions  # + EOS / + BOS
    return np.flatnonzero(ok)


def fitting_ids(
    data: ParallelData, split: str, cfg: P.ModelParams, bin_dir: Path, say: Callable[[str], None]
) -> np.ndarray:
    """`fitting_sentences`, saying how many were dropped; none fitting is the user's error."""
    ids = fitting_sentences(data, cfg)
    if len(ids) == 0:
        raise UserError(
            f"{bin_dir}: no {split} sentence fits model.max_positions={cfg.max_positions}; raise it, "
            f"or check the {split} split"
        )
    if len(ids) < len(data):
        say(
            f"train: dropped {len(data) - len(ids)} of {len(data)} {split} sentences longer than "
            f"model.max_positions={cfg.max_positions} allows"
        )
    return ids


def sampling_text(params: P.Params, paths: Paths, vocab: Vocab, n_train: int) -> tuple[list[str], list[str]]:
    """The clean text that subword sampling segments each epoch, checked against data/bin and data/bpe."""
    kind = params.train.subword_sampling
    want = "unigram" if kind == "unigram" else "bpe"
    if vocab.model_type != want:
        raise UserError(
            f"train.subword_sampling: {kind} needs a {want} model, but {paths.bpe_dir} holds a "
            f"{vocab.model_type} one; rerun the bpe stage with bpe.model_type: {want}"
        )
    if paths.clean_dir is None:
        raise UserError(
            f"train.subword_sampling: {kind} segments the clean text each epoch; pass --clean data/clean"
        )
    return read_text(paths.clean_dir, n_train)


class TrainSplit:
    """data/bin's train split, each epoch's segmentation of it and this rank's batches of it.

    `close()` stops the sampling process, if one runs; `for_epoch` starts another when asked.
    """

    def __init__(self, params: P.Params, paths: Paths, vocab: Vocab, dist: Dist, say: Callable[[str], None]):
        self.params, self.paths, self.dist = params, paths, dist
        t = params.train
        self.data = ParallelData.load(paths.bin_dir, "train")
        self.ids = fitting_ids(self.data, "train", params.model, paths.bin_dir, say)
        self.sources = CorpusDraws.plan(paths.bin_dir, len(self.data), t)
        self.sampling = Sampling.of(t)
        self._text = sampling_text(params, paths, vocab, len(self.data)) if self.sampling else None
        self._prefetcher: Prefetcher | None = None
        self._sampled: tuple[int, ParallelData] | None = None
        # With subword sampling an estimate: sampled segmentations are longer than data/bin's.
        self.n_batches = len(self._batches(self.data, self.ids, 1))

    @property
    def sampled_from(self) -> list[Path]:
        """The clean text files that sampling segments (part of the resume fingerprint); none without it."""
        if self._text is None or self.paths.clean_dir is None:
            return []
        return [self.paths.clean_dir / f"train.{side}" for side in SIDES]

    def for_epoch(self, epoch: int) -> ParallelData:
        """The train split as `epoch` sees it: data/bin's, or with subword sampling its own segmentation."""
        if self._text is None or self.sampling is None:
            return self.data
        if self._sampled is None or self._sampled[0] != epoch:
            if self._prefetcher is None:  # started here, at the first epoch this session trains
                self._prefetcher = Prefetcher(self.paths.bpe_dir, self._text, self.sampling, epoch)
            src, tgt = self._prefetcher.get(epoch)
            self._sampled = (epoch, ParallelData(TokenArray.from_arrays(*src), TokenArray.from_arrays(*tgt)))
        return self._sampled[1]

    def batches(self, epoch: int) -> list[np.ndarray]:
        """This rank's batches of sentence indices for `epoch`: a pure function of (seed, epoch)."""
        data = self.for_epoch(epoch)
        fitting = self.ids if data is self.data else fitting_sentences(data, self.params.model)
        return self._batches(data, fitting, epoch)

    def _batches(self, data: ParallelData, fitting: np.ndarray, epoch: int) -> list[np.ndarray]:
        """Batches by token count of `data`'s lengths (the sampled ones, with sampling)."""
        t, d = self.params.train, self.dist
        return batching.epoch_batches(
            data,
            t.max_tokens,
            shuffle=True,
            seed=t.seed,
            epoch=epoch,
            rank=d.rank,
            world_size=d.world_size,
            ids=self.sources.epoch_ids(fitting, t.seed, epoch),
        )

    def close(self) -> None:
        if self._prefetcher is not None:
            self._prefetcher.close()
            self._prefetcher = None

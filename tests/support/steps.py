"""Batches of random rows, and an UpdateStep's weights: what the tests of updates share."""

from __future__ import annotations

import numpy as np
import torch

from pipeline.data.batching import Batch
from pipeline.tokens import BOS, EOS, N_SPECIAL, PAD
from pipeline.training.step import UpdateStep
from tests.support.models import VOCAB


def make_batch(rows: list[list[int]]) -> Batch:
    """Rows of ids as the collate function pads them: src ids+EOS, tgt BOS+ids / ids+EOS, PAD after."""
    width = max(map(len, rows)) + 1

    def pad(seqs: list[list[int]]) -> torch.Tensor:
        return torch.tensor([s + [PAD] * (width - len(s)) for s in seqs])  # (B, width)

    n_tokens = sum(len(r) + 1 for r in rows)
    return Batch(
        src=pad([[*r, EOS] for r in rows]),
        tgt_in=pad([[BOS, *r] for r in rows]),
        tgt_out=pad([[*r, EOS] for r in rows]),
        n_src_tokens=n_tokens,
        n_tgt_tokens=n_tokens,
        indices=np.arange(len(rows)),
    )


def random_rows(n: int, seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(2, 9, (n,), generator=g).tolist()
    return [torch.randint(N_SPECIAL, VOCAB, (k,), generator=g).tolist() for k in lengths]


def weights(step: UpdateStep) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in step.model.state_dict().items()}

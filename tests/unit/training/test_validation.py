"""Validation: the val split's loss and greedy BLEU, leaving the training's random state untouched."""

from __future__ import annotations

import random

import pytest
import torch

from pipeline.data.batching import collate
from pipeline.training.loop import Trainer
from tests.support.models import make_corpus, tiny_params


def test_validation_leaves_every_rng_as_it_found_it(tmp_path, monkeypatch):
    trainer = Trainer(tiny_params(val_bleu=True), make_corpus(tmp_path, n_train=20))
    real_val_loss = trainer.val.loss
    # as if validating drew random numbers (dropout left on, sampling)
    monkeypatch.setattr(trainer.val, "loss", lambda: (torch.rand(3), random.random(), real_val_loss())[-1])
    state = torch.get_rng_state(), random.getstate()
    val_loss, val_bleu = trainer.val.evaluate()
    assert val_loss > 0 and 0 <= val_bleu <= 100
    assert torch.equal(torch.get_rng_state(), state[0]) and random.getstate() == state[1]
    assert trainer.model.training


def test_val_loss_is_the_plain_nll_per_token_whatever_the_label_smoothing(tmp_path):
    paths = make_corpus(tmp_path, n_train=20)
    plain = Trainer(tiny_params(label_smoothing=0.0), paths)
    smoothed = Trainer(tiny_params(label_smoothing=0.3), paths)  # the same seed: the same weights
    assert smoothed.val.loss() == pytest.approx(plain.val.loss(), rel=1e-6)
    data, ids = plain.val.data, plain.val.ids
    with torch.no_grad():  # one sentence at a time, summed by hand
        plain.model.eval()
        total = sum(
            float(plain.model(b.src, b.tgt_in, b.tgt_out, smoothing=0.0))
            for b in (collate(data, ids[i : i + 1]) for i in range(len(ids)))
        )
    tokens = int(sum(data.tgt.lengths[ids]) + len(ids))  # each target and its EOS
    assert plain.val.loss() == pytest.approx(total / tokens, rel=1e-4)

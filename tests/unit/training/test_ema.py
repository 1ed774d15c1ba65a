"""The moving average of the weights (train.ema_decay): its arithmetic, its swap in and out, and what a
run validates and saves with it."""

from __future__ import annotations

import pytest
import torch

from pipeline.model import checkpoint
from pipeline.stages.train import train
from pipeline.training.ema import WARMUP, WeightAverage
from tests.support.models import make_corpus, model_weights, tiny_params


def test_the_shadow_follows_the_formula_with_its_warm_up() -> None:
    layer = torch.nn.Linear(3, 2)
    ema = WeightAverage(layer, 0.9)
    expected = [p.detach().clone() for p in layer.parameters()]
    rates = []
    for n in range(100):
        with torch.no_grad():
            for p in layer.parameters():
                p.add_(torch.randn_like(p))
        d = min(0.9, (1 + n) / (WARMUP + n))
        rates.append(ema.rate())
        ema.update()
        expected = [d * e + (1 - d) * p.detach() for e, p in zip(expected, layer.parameters(), strict=True)]
    assert rates[0] == pytest.approx(0.1) and rates[-1] == 0.9 and rates == sorted(rates)
    for got, want in zip(ema.shadow, expected, strict=True):
        torch.testing.assert_close(got, want)


def test_applied_swaps_the_shadow_in_and_the_raw_weights_back_bitwise_even_on_error() -> None:
    layer = torch.nn.Linear(4, 4)
    ema = WeightAverage(layer, 0.5)
    with torch.no_grad():
        layer.weight.mul_(3.0)
    ema.update()
    raw = layer.weight.detach().clone()
    with ema.applied():
        assert torch.equal(layer.weight, ema.shadow[0]) and not torch.equal(layer.weight, raw)
    assert torch.equal(layer.weight, raw)
    with pytest.raises(RuntimeError), ema.applied():
        raise RuntimeError("validation failed")
    assert torch.equal(layer.weight, raw)


def test_the_state_round_trips_and_another_models_is_refused() -> None:
    a = WeightAverage(torch.nn.Linear(3, 3), 0.99)
    a.update()
    b = WeightAverage(torch.nn.Linear(3, 3), 0.99)
    b.load_state_dict(a.state_dict())
    assert b.n == 1 and all(torch.equal(x, y) for x, y in zip(a.shadow, b.shadow, strict=True))
    assert list(a.state_dict()["shadow"]) == ["weight", "bias"]
    with pytest.raises(ValueError, match="another model"):
        WeightAverage(torch.nn.Linear(3, 4), 0.99).load_state_dict(a.state_dict())


def test_a_run_validates_and_saves_the_average_and_keeps_the_raw_weights_in_its_state(tmp_path) -> None:
    paths = make_corpus(tmp_path, n_train=60)
    summary = train(tiny_params(max_steps=8, validate_every=4, ema_decay=0.9), paths, tracking=False)
    assert summary["steps"] == 8
    state = checkpoint.load(paths.ckpt_dir / "last.pt")
    assert state["ema"]["n"] == 8 and state["ema"]["decay"] == 0.9
    saved = model_weights(paths.ckpt_dir / "ckpt_8.pt")
    differs = 0
    for name, tensor in state["ema"]["shadow"].items():
        assert torch.equal(saved[name], tensor), name  # the checkpoint holds the shadow
        differs += not torch.equal(state["model"][name], tensor)  # last.pt the raw weights
    assert differs > 0

"""An exponential moving average of the weights (train.ema_decay), validated and saved in their place.

After every update the shadow moves toward the weights,

    shadow <- d * shadow + (1 - d) * weights,   d = min(ema_decay, (1 + n) / (10 + n)),

n being the updates averaged so far: the warm-up (as in TensorFlow's ExponentialMovingAverage with
num_updates) keeps the first updates' random weights from dominating the average for thousands of
steps. Validation, the checkpoints (ckpt_<step>.pt, best.pt) and so the final model use the shadow;
the optimizer goes on updating the raw weights, and last.pt holds both, so a resumed run continues
the same average. Averaging weights over the late, noisy part of training is the cheap relative of
checkpoint averaging (train.average_last) that Marian (--exponential-smoothing) and many
low-resource recipes use.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

WARMUP = 10  # the (1 + n) / (WARMUP + n) ramp


class WeightAverage:
    """The shadow copy of `model`'s floating-point parameters and how many updates it averages."""

    def __init__(self, model: torch.nn.Module, decay: float):
        if not 0.0 < decay < 1.0:
            raise ValueError(f"decay must lie in (0, 1), got {decay}")
        self.decay = decay
        named = [(name, p) for name, p in model.named_parameters() if p.is_floating_point()]
        self.names = [name for name, _ in named]
        self.params: list[torch.Tensor] = [p for _, p in named]
        self._values = [p.detach() for p in self.params]  # views of the weights, made once: no autograd
        self.shadow = [p.detach().clone() for p in self.params]
        self.n = 0

    def rate(self) -> float:
        """The decay of the next update, with the warm-up."""
        return min(self.decay, (1 + self.n) / (WARMUP + self.n))

    @torch.no_grad()
    def update(self) -> None:
        """Move the shadow toward the current weights (call after each optimizer step)."""
        torch._foreach_lerp_(self.shadow, self._values, 1.0 - self.rate())
        self.n += 1

    @contextlib.contextmanager
    @torch.no_grad()
    def applied(self) -> Iterator[None]:
        """The model holds the shadow inside the block, its own weights again (bitwise) after it."""
        raw = [p.detach().clone() for p in self.params]
        torch._foreach_copy_(self.params, self.shadow)
        try:
            yield
        finally:
            torch._foreach_copy_(self.params, raw)

    def state_dict(self) -> dict[str, Any]:
        """The shadow by parameter name (as the model's state_dict names them), and the count."""
        shadow = {name: s.clone() for name, s in zip(self.names, self.shadow, strict=True)}
        return {"decay": self.decay, "n": self.n, "shadow": shadow}

    @torch.no_grad()
    def load_state_dict(self, state: dict[str, Any]) -> None:
        saved: dict[str, torch.Tensor] = state["shadow"]
        if list(saved) != self.names or any(
            saved[name].shape != s.shape for name, s in zip(self.names, self.shadow, strict=True)
        ):
            raise ValueError("the saved weight average is of another model")
        torch._foreach_copy_(
            self.shadow, [saved[name].to(s.device) for name, s in zip(self.names, self.shadow, strict=True)]
        )
        self.n = int(state["n"])

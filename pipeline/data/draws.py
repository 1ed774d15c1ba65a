"""The corpus draws: how many pairs each train source gives an epoch (train.source_weights,
train.source_temperature), and which ones, seeded by epoch."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline import params as P
from pipeline.data import artifacts
from pipeline.errors import UserError


@dataclass(frozen=True)
class CorpusDraws:
    """How many pairs each train source gives an epoch (train.source_weights, train.source_temperature)."""

    names: tuple[str, ...]
    sizes: tuple[int, ...]
    factors: tuple[float, ...]

    @classmethod
    def plan(cls, bin_dir: Path, n_train: int, t: P.TrainParams) -> CorpusDraws:
        listed = artifacts.train_corpora(
            bin_dir / artifacts.BIN_META, n_train, bin_dir / "train.src", "binarize"
        )
        names = tuple(c.name for c in listed)
        unknown = sorted(set(t.source_weights) - set(names))
        if unknown:
            raise UserError(
                f"train.source_weights: no train source named {', '.join(unknown)}; "
                f"the train sources are {', '.join(names)}"
            )
        sizes = tuple(c.lines for c in listed)
        weights = [t.source_weights.get(name, 1.0) for name in names]
        pairs = [c.pair for c in listed] if any(c.pair for c in listed) else None
        factors = tuple(source_factors(sizes, weights, t.source_temperature, pairs))
        return cls(names, sizes, factors)

    @property
    def natural(self) -> bool:
        return all(math.isclose(f, 1.0) for f in self.factors)

    def epoch_ids(self, fitting: np.ndarray, seed: int, epoch: int) -> np.ndarray:
        """The fitting sentences an epoch trains on: all of them, or each source's draws (seeded by epoch)."""
        if self.natural:
            return fitting
        drawn = draw_sources(self.sizes, self.factors, seed, epoch)
        fits = np.zeros(sum(self.sizes), dtype=bool)
        fits[fitting] = True
        return drawn[fits[drawn]]

    def drawn_per_epoch(self) -> dict[str, int]:
        return {name: round(f * n) for name, n, f in zip(self.names, self.sizes, self.factors)}


def source_factors(
    sizes: Sequence[int],
    weights: Sequence[float],
    temperature: float,
    groups: Sequence[str | None] | None = None,
) -> list[float]:
    """How many times each source's pairs are drawn per epoch (1.0 each: natural proportions).

    Temperature first: source k's share of the epoch becomes p_k ∝ (n_k / N)^(1/T) (T=1
    keeps n_k / N; larger T flattens towards equal shares), the epoch keeping N pairs;
    then its weight multiplies what it draws. Factor k = weight_k * N * p_k / n_k.
    With `groups` (each source's language pair, where there are several), the temperature is
    over the groups' sizes N_g, as multilingual training samples language pairs, and a group's
    share goes to its sources by their sizes: p_k = (n_k / N_g) * p_g.
    """
    total = sum(sizes)
    if groups is None or len(set(groups)) < 2:
        shares = [(n / total) ** (1.0 / temperature) if n else 0.0 for n in sizes]
    else:
        per_group: dict[str | None, int] = {}
        for n, g in zip(sizes, groups):
            per_group[g] = per_group.get(g, 0) + n
        group_share = {g: (m / total) ** (1.0 / temperature) if m else 0.0 for g, m in per_group.items()}
        shares = [n / per_group[g] * group_share[g] if n else 0.0 for n, g in zip(sizes, groups)]
    norm = sum(shares)
    return [w * total * (p / norm) / n if n else 0.0 for n, w, p in zip(sizes, weights, shares)]


def draw_sources(sizes: Sequence[int], factors: Sequence[float], seed: int, epoch: int) -> np.ndarray:
    """Sentence ids of one epoch: source k (the k-th run of sizes[k] ids) drawn round(factor_k * n_k) times.

    A factor of 2.5 takes every pair twice and a seeded half once more; 0.3 a seeded
    30% without repeats. Sorted ids; the same for the same (seed, epoch).
    """
    rng = np.random.default_rng([seed, epoch, 0x5EED])
    parts, start = [], 0
    for n, factor in zip(sizes, factors):
        draws = round(factor * n)
        whole, rest = divmod(draws, n) if n else (0, 0)
        ids = np.arange(start, start + n, dtype=np.int64)
        parts += [ids] * whole + [np.sort(rng.choice(ids, size=rest, replace=False))]
        start += n
    return np.sort(np.concatenate(parts)) if parts else np.zeros(0, np.int64)

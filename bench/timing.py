"""How the benchmarks time systems against each other: interleaved, in a shuffled order, so that a
drift in the machine's speed (another process, the CPU's clock) hits every system alike.

`measure_round` takes turns of one call each until every system has run a given time (training
updates); `shuffled_rounds` times one call of each per round (decoding passes).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Hashable, Mapping
from typing import TypeVar

K = TypeVar("K", bound=Hashable)


def seconds_of(call: Callable[[], object]) -> float:
    """Wall seconds of one call."""
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def measure_round(
    steps: Mapping[str, Callable[[], object]], tokens_per_step: int, seconds: float, rng: random.Random
) -> dict[str, float]:
    """Tokens/s of each system over one round: the systems take turns, one whole update each, in a
    shuffled order every turn, until each has run for about `seconds`; each system's updates are
    timed alone. Turns of one update keep a drift in the machine's speed from favouring anyone."""
    names = list(steps)
    spent = dict.fromkeys(names, 0.0)
    done = dict.fromkeys(names, 0)
    while min(spent.values()) < seconds:
        for name in rng.sample(names, len(names)):
            spent[name] += seconds_of(steps[name])
            done[name] += 1
    return {name: done[name] * tokens_per_step / spent[name] for name in names}


def shuffled_rounds(
    calls: Mapping[K, Callable[[], object]], repeats: int, rng: random.Random
) -> dict[K, list[float]]:
    """Seconds of each call in each of `repeats` rounds; a round runs every call once, in a shuffled order."""
    seconds: dict[K, list[float]] = {key: [] for key in calls}
    for _ in range(repeats):
        for key in rng.sample(list(calls), len(calls)):
            seconds[key].append(seconds_of(calls[key]))
    return seconds

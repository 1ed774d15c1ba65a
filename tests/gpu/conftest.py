"""The CUDA tests: marked `cuda`, and skipped with the reason where torch sees no GPU (CI, the CPU
development machine). bench/gpu_check.sh runs them on a lent GPU and reports each one's outcome
and the numbers it records (record_property: measured differences, whether resume was bitwise)."""

from __future__ import annotations

import pytest
import torch

REASON = (
    "needs a CUDA GPU, and torch.cuda.is_available() is False here; "
    "bash bench/gpu_check.sh runs these on a GPU machine"
)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "cuda: needs a CUDA GPU; skipped without one (tests/gpu/conftest.py)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason=REASON)
    for item in items:
        if item.get_closest_marker("cuda") is not None:
            item.add_marker(skip)


@pytest.fixture
def cuda() -> torch.device:
    return torch.device("cuda", 0)

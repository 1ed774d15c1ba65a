"""The CUDA tests: marked `cuda`, and skipped with the reason where torch sees no GPU (CI, the CPU
development machine). bench/gpu_check.sh runs them on a lent GPU, their outcomes and the numbers
they record (record_property: measured differences, whether resume was bitwise) in a junit XML, and
the device they ran on in the header."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import torch

REASON = (
    "needs a CUDA GPU, and torch.cuda.is_available() is False here; "
    "bash bench/gpu_check.sh runs these on a GPU machine"
)


def pytest_report_header() -> list[str]:
    """The device: the GPU, its driver, CUDA, cuDNN, NCCL and torch versions (or the CPU build)."""
    if not torch.cuda.is_available():
        return [f"device: no CUDA GPU (torch {torch.__version__}, CUDA build {torch.version.cuda})"]
    props = torch.cuda.get_device_properties(0)
    nccl = torch.cuda.nccl.version()
    driver = (
        subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,  # a wedged driver must not hold up the header
        ).stdout.strip()
        if shutil.which("nvidia-smi")
        else "unknown"
    )
    return [
        f"device: {torch.cuda.get_device_name(0)}, {props.total_memory / 2**30:.0f} GiB, capability "
        f"{props.major}.{props.minor}, driver {driver}",
        f"CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}, NCCL "
        f"{'.'.join(map(str, nccl)) if isinstance(nccl, tuple) else nccl}, torch {torch.__version__}",
    ]


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

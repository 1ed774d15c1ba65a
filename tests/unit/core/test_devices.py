"""Where a model runs: auto follows the GPU; cuda without one, or an unknown value, is refused."""

from __future__ import annotations

import pytest
import torch

from pipeline import devices
from pipeline.errors import UserError


def test_auto_picks_the_gpu_when_there_is_one_and_the_cpu_otherwise() -> None:
    assert devices.pick_device("auto", has_cuda=False) == "cpu"
    assert devices.pick_device("auto", has_cuda=True) == "cuda"


def test_an_explicit_device_that_is_there_is_kept() -> None:
    assert devices.pick_device("cpu", has_cuda=True) == "cpu"
    assert devices.pick_device("cuda", has_cuda=True) == "cuda"


def test_cuda_without_a_gpu_is_refused_naming_the_key_and_the_fix() -> None:
    with pytest.raises(UserError) as refused:
        devices.pick_device("cuda", has_cuda=False, key="train.device")
    assert refused.value.message == (
        "train.device is cuda, but torch sees no GPU here; set train.device to auto or cpu"
    )
    with pytest.raises(UserError, match=r"^--device is cuda, but CTranslate2 sees no GPU here"):
        devices.pick_device("cuda", has_cuda=False, runtime="CTranslate2")


def test_an_unknown_device_is_refused_with_the_choices() -> None:
    with pytest.raises(UserError) as refused:
        devices.pick_device("gpu", has_cuda=True, key="train.device")
    assert refused.value.message == "train.device: 'gpu' is not a device; use one of auto, cpu, cuda"


def test_torch_device_gives_cuda_its_index_and_auto_the_cpu_without_a_gpu(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert devices.torch_device("auto") == torch.device("cpu")
    with pytest.raises(UserError, match=r"^train\.device is cuda"):
        devices.torch_device("cuda", key="train.device")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert devices.torch_device("cuda", index=1) == torch.device("cuda", 1)  # a torchrun process's LOCAL_RANK

"""Where a model runs: one rule for training, the Translator and the CTranslate2 backend."""

from __future__ import annotations

from pipeline.errors import UserError

DEVICES = ("auto", "cpu", "cuda")


def pick_device(setting: str, has_cuda: bool, *, key: str = "--device", runtime: str = "torch") -> str:
    """auto -> cuda when `runtime` sees a GPU, else cpu; an explicit cuda without one is refused.

    `key` names the setting in the message (train.device, --device), so the user
    knows what to change.
    """
    if setting not in DEVICES:
        raise UserError(f"{key}: {setting!r} is not a device; use one of {', '.join(DEVICES)}")
    if setting == "cuda" and not has_cuda:
        raise UserError(f"{key} is cuda, but {runtime} sees no GPU here; set {key} to auto or cpu")
    if setting == "auto":
        return "cuda" if has_cuda else "cpu"
    return setting


def torch_device(setting: str, *, index: int = 0, key: str = "--device"):  # -> torch.device
    """pick_device for torch: cuda gets the GPU `index` (a torchrun process's LOCAL_RANK)."""
    import torch  # here: the download and clean stages import this module's package without torch

    name = pick_device(setting, torch.cuda.is_available(), key=key)
    return torch.device("cuda", index) if name == "cuda" else torch.device("cpu")

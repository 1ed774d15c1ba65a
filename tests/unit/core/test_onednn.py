"""oneDNN's kernel cache: capped unless the environment says otherwise."""

from __future__ import annotations

import os

import pytest

from pipeline import onednn


def test_kernels_are_capped_unless_the_environment_says_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(onednn.CACHE, raising=False)
    onednn.keep_kernels()
    assert os.environ[onednn.CACHE] == str(onednn.KERNELS)
    monkeypatch.setenv(onednn.CACHE, "1024")  # the user's own setting wins
    onednn.keep_kernels(8)
    assert os.environ[onednn.CACHE] == "1024"

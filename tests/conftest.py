"""Shared fixtures: the repository's params, and where the offline corpus mirror is."""

from pathlib import Path

import pytest

from pipeline import params as P

REPO = Path(__file__).resolve().parents[1]
MIRROR = REPO.parent / "shared" / "corpora"


@pytest.fixture(scope="session")
def params() -> P.Params:
    """The repository's default params.yaml, validated."""
    return P.load(REPO / "params.yaml")


@pytest.fixture
def mirror() -> Path:
    """The offline corpus mirror; tests that need a real corpus skip without it."""
    if not (MIRROR / "SHA256SUMS").is_file():
        pytest.skip(f"the offline corpus mirror is not at {MIRROR} (see its README in shared/corpora)")
    return MIRROR

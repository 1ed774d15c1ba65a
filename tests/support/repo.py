"""The repository's paths and its params.yaml, as the tests read them."""

from __future__ import annotations

from pathlib import Path

from pipeline import params as P

REPO = Path(__file__).resolve().parents[2]
MIRROR = REPO.parent / "shared" / "corpora"
BASE = P.load(REPO / "params.yaml")

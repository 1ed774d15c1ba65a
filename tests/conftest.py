"""Shared fixtures: the repository's params, where the offline corpus mirror is, a tiny model."""

import urllib.error
import urllib.request
from pathlib import Path

import pytest

from pipeline import params as P
from pipeline.data import fetch
from pipeline.decoding.translator import Translator
from tests.helpers import MIRROR, REPO, make_model_dir


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


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    """A tiny random model directory (helpers.make_model_dir), made once per test module."""
    return make_model_dir(tmp_path_factory.mktemp("m") / "model")


@pytest.fixture(scope="module")
def translator(model_dir: Path) -> Translator:
    """The Translator of `model_dir`, on the CPU."""
    return Translator.from_dir(model_dir, device="cpu")


@pytest.fixture
def offline(monkeypatch):
    """No test touches the network or waits: urlopen fails unless a test replaces it; sleeps are recorded.

    The download and fetch tests use it for every test (pytestmark).
    """
    monkeypatch.delenv("CORPUS_MIRROR", raising=False)
    sleeps: list[float] = []
    monkeypatch.setattr(fetch, "_sleep", sleeps.append)

    def no_network(url, timeout=None):
        raise urllib.error.URLError("network disabled in tests")

    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    return sleeps


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    """List how many cases each fuzz test tried (recorded as a `fuzz` user property), with or without -s."""
    lines = [
        value
        for reports in terminalreporter.stats.values()
        for report in reports
        if getattr(report, "when", None) == "call"
        for name, value in getattr(report, "user_properties", ())
        if name == "fuzz"
    ]
    if lines:
        terminalreporter.section("fuzz cases tried")
        for line in lines:
            terminalreporter.write_line(line)


@pytest.fixture(autouse=True, scope="session")
def one_torch_thread():
    """Tests use tiny models, which run fastest on one thread, and never oversubscribe
    the cores when pytest shares the machine (measured: 50x slower decoding at 2 threads
    on a busy 2-core machine)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)

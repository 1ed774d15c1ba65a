"""Shared fixtures: the repository's params, the offline corpus mirror, a tiny model, no network,
runs to tabulate (an MLflow sweep, a DVC repository with experiments), the figures a test saves."""

import json
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from matplotlib.figure import Figure

from pipeline import files
from pipeline import params as P
from pipeline.data import fetch, lock
from pipeline.decoding.translator import Translator
from pipeline.tracking import metadata
from tests.support.dvc_repo import DECODE_SETS, DECODE_STAGE, SCORE_STAGE, dvc
from tests.support.models import make_model_dir
from tests.support.repo import MIRROR, REPO
from tests.support.sweep import COMMIT, SWEEP, log_run
from tests.support.tables import references


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
    """A tiny random model directory (support.models.make_model_dir), made once per test module."""
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


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One SQLite MLflow store holding support.sweep's SWEEP and a run of another experiment (per module)."""
    root = tmp_path_factory.mktemp("mlflow")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_TRACKING_URI", uri)
        patch.setattr(metadata, "git_commit", lambda cwd=None: COMMIT)
        ids = {name: log_run(name, change, final) for name, change, final in SWEEP}
        log_run("elsewhere", {"model": {"d_model": 64}}, SWEEP[0][2], experiment="other")
        patch.delenv("DVC_EXP_NAME")
        yield {"uri": uri, "ids": ids, "root": root}


@pytest.fixture(scope="module")
def dvc_repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list]:
    """A real git + DVC repo with a stand-in score stage, two experiments and one queued; and its exp show
    (made once per module that uses it)."""
    root = tmp_path_factory.mktemp("dvcrepo")
    params = {
        "model": {"n_layers": 3, "d_model": 256, "encoder_layers": None},
        "train": {"lr": 0.001, "betas": [0.9, 0.98], "val_bleu": True},
    }
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    (root / "score.py").write_text(SCORE_STAGE)
    stage = {
        "cmd": f"{sys.executable} score.py",
        "deps": ["score.py"],
        "params": ["model", "train"],
        "metrics": [
            {"reports/metrics.json": {"cache": False}},
            {"reports/train/summary.json": {"cache": False}},
        ],
    }
    (root / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"score": stage}}, sort_keys=False))
    dvc(["git", "init", "-q", "-b", "main"], root)
    dvc(["dvc", "init", "-q"], root)
    dvc(["dvc", "repro", "-q"], root)
    dvc(["git", "add", "-A"], root)
    dvc(["git", "commit", "-qm", "baseline"], root)
    dvc(["dvc", "exp", "run", "-q", "-S", "model.n_layers=6", "-n", "six"], root)
    # An experiment starts from the workspace, which the last one changed: set n_layers back.
    dvc(["dvc", "exp", "run", "-q", "-S", "model.n_layers=3", "-S", "train.lr=0.0005", "-n", "slow"], root)
    dvc(["dvc", "exp", "run", "-q", "--queue", "-S", "model.n_layers=2", "-n", "queued"], root)
    return root, json.loads(dvc(["dvc", "exp", "show", "--json"], root))


@pytest.fixture(scope="session")
def decode_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real git + DVC repo whose stand-in decode stage (support.dvc_repo) caches data/decode, with
    references in data/raw (val, test sets flickr and mscoco: DECODE_SETS); the baseline commit
    `main` garbles half the words (decode.noise 0.5, train.seed 1), experiment `better` a fifth,
    `reseeded` half with train.seed 2 (made once per session)."""
    root = tmp_path_factory.mktemp("decoderepo")
    (root / "params.yaml").write_text(yaml.safe_dump({"decode": {"noise": 0.5}, "train": {"seed": 1}}))
    (root / "decode.py").write_text(DECODE_STAGE)
    for key, n in DECODE_SETS:
        files.write_lines(root / "data" / "raw" / f"{key}.tgt", references(n, seed=len(key)))
    stage = {
        "cmd": f"{sys.executable} decode.py",
        "deps": ["decode.py", "data/raw"],
        "params": ["decode", "train"],
        "outs": ["data/decode"],
        "metrics": [{"reports/metrics.json": {"cache": False}}],
    }
    (root / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"decode": stage}}, sort_keys=False))
    dvc(["git", "init", "-q", "-b", "main"], root)
    dvc(["dvc", "init", "-q"], root)
    dvc(["dvc", "repro", "-q"], root)
    dvc(["git", "add", "-A"], root)
    dvc(["git", "commit", "-qm", "baseline"], root)
    # Each experiment sets both params: it starts from the workspace, which the one before changed.
    dvc(["dvc", "exp", "run", "-q", "-S", "decode.noise=0.2", "-S", "train.seed=1", "-n", "better"], root)
    dvc(["dvc", "exp", "run", "-q", "-S", "decode.noise=0.5", "-S", "train.seed=2", "-n", "reseeded"], root)
    return root


@pytest.fixture(scope="session")
def marian_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny OPUS-MT-shaped MarianMTModel directory (support.hf.make_marian_dir: two sentencepiece
    models over one vocab.json, swish), made once per session."""
    pytest.importorskip("transformers")
    from tests.support.hf import make_marian_dir

    return make_marian_dir(tmp_path_factory.mktemp("marian") / "opus-mt-de-en")


@pytest.fixture
def saved_figures(monkeypatch) -> dict[str, Figure]:
    """Every matplotlib Figure saved during the test, by file name (still written to its file), so a test
    can read what the reader sees: titles, axis labels, legends, lines."""
    saved: dict[str, Figure] = {}
    savefig = Figure.savefig

    def recording(self: Figure, fname, *args, **kwargs):
        saved[Path(fname).name] = self
        return savefig(self, fname, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", recording)
    return saved


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


@pytest.fixture(autouse=True)
def corpus_lock_in_tmp(tmp_path, monkeypatch) -> Path:
    """A download without a pinned sum records it in corpora.lock at the project root: in a test,
    tmp_path's, never the repository's."""
    path = tmp_path / lock.LOCK_FILE
    monkeypatch.setattr(lock, "lock_path", lambda: path)
    return path


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

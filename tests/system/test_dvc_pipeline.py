"""Integration: the real `dvc repro`, then `dvc exp run -S`, in a temporary copy of the repository.

The corpus is synthetic (made here) and the model tiny, so the whole pipeline
runs in about a minute; what is checked is that every stage produces its
outputs from the previous ones as dvc.yaml wires them, that the scores are
finite, and that an experiment's scores reach `dvc exp show --json`.
"""

import json
import math
import os
import random
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from tests.support.repo import REPO

pytestmark = pytest.mark.slow

WORDS = "ein zwei drei vier fünf sechs sieben acht neun zehn hund katze haus baum".split()
ENGLISH = dict(zip(WORDS, "one two three four five six seven eight nine ten dog cat house tree".split()))


def write_corpus(folder: Path, n: int, seed: int) -> tuple[Path, Path]:
    """A word-for-word 'translation' task: German number/animal words to English."""
    rng = random.Random(seed)
    src, tgt = [], []
    for _ in range(n):
        words = rng.choices(WORDS, k=rng.randint(2, 6))
        src.append(" ".join(words).capitalize() + ".")
        tgt.append(" ".join(ENGLISH[w] for w in words).capitalize() + ".")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "corpus.de").write_text("\n".join(src) + "\n", encoding="utf-8")
    (folder / "corpus.en").write_text("\n".join(tgt) + "\n", encoding="utf-8")
    return folder / "corpus.de", folder / "corpus.en"


TEST_SETS = ("plain", "tabbed")  # two test sets, the second a TSV inside a tgz


def make_test_sets(folder: Path) -> dict:
    """data.sources entries of the two test sets: plain text per side, and a TSV member of a tgz."""
    src, tgt = write_corpus(folder / "plain", n=30, seed=1)
    other_src, other_tgt = write_corpus(folder / "tabbed", n=25, seed=2)
    rows = zip(other_src.read_text().splitlines(), other_tgt.read_text().splitlines())
    tsv = folder / "tabbed" / "sets.tsv"
    tsv.write_text("".join(f"{s}\t{t}\n" for s, t in rows), encoding="utf-8")
    with tarfile.open(folder / "tabbed.tgz", "w:gz") as tar:
        tar.add(tsv, arcname="sets/tabbed.tsv")
    return {
        "plain": {"src": str(src), "tgt": str(tgt)},
        "tabbed": {"archive": str(folder / "tabbed.tgz"), "file": "sets/tabbed.tsv"},
    }


def tiny_params(src: Path, tgt: Path, tests: dict) -> dict:
    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    raw["data"].update(train=["synthetic"], val=[], test=list(TEST_SETS), heldout_val=40)
    raw["data"]["sources"] = {"synthetic": {"src": str(src), "tgt": str(tgt)}, **tests}
    raw["bpe"]["vocab_size"] = 60
    raw["model"].update(d_model=32, n_heads=2, d_ff=64, n_layers=1, dropout=0.0, attention_dropout=0.0)
    raw["train"].update(
        precision="fp32", max_tokens=400, max_epochs=2, warmup_steps=10, lr=0.003, log_every=5, threads=1
    )
    raw["decode"].update(beam=2, batch_tokens=400)
    return raw


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    env.pop("MLFLOW_TRACKING_URI", None)
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, (
        f"{' '.join(args)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    )
    return result


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    """A git + DVC copy of the project with tiny params, after `dvc repro`."""
    root = tmp_path_factory.mktemp("repo")
    src, tgt = write_corpus(root.parent / "corpus", n=600, seed=0)
    tests = make_test_sets(root.parent / "tests")
    return reproduced_copy(root, tiny_params(src, tgt, tests))


def reproduced_copy(root: Path, params: dict) -> Path:
    """The project's files (git's and the package's) copied to `root` with `params` as params.yaml,
    without dvc.lock and reports/, committed to a new git repository, after `dvc repro`."""
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True).stdout.split()
    for name in set(tracked) | {str(p.relative_to(REPO)) for p in (REPO / "pipeline").rglob("*.py")}:
        if (REPO / name).is_file():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, root / name)
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    (root / "dvc.lock").unlink(missing_ok=True)
    shutil.rmtree(root / "reports", ignore_errors=True)
    run(["git", "init", "-q"], root)
    run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "add", "-A"], root)
    run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "tiny"], root)
    run(["dvc", "repro"], root)
    return root


def test_every_stage_wrote_its_outputs(repo):
    for split in ("train", "val"):
        for side in ("src", "tgt"):
            assert (repo / f"data/raw/{split}.{side}").is_file()
            assert (repo / f"data/clean/{split}.{side}").is_file()
            assert (repo / f"data/bin/{split}.{side}.00000.bin").is_file()
    assert (repo / "data/bpe/spm.model").is_file()
    assert (repo / "data/model/model.pt").is_file() and (repo / "data/model/spm.model").is_file()
    assert json.loads((repo / "data/clean/stats.json").read_text())
    sizes = {"val": 40, "test/plain": 30, "test/tabbed": 25}
    for stem, n in sizes.items():
        hyps = (repo / f"data/decode/{stem}.hyp").read_text().splitlines()
        assert len(hyps) == len((repo / f"data/raw/{stem}.src").read_text().splitlines()) == n
    manifest = json.loads((repo / "data/raw/manifest.json").read_text())
    assert [s["name"] for s in manifest["splits"]["test"]] == list(TEST_SETS)
    assert manifest["splits"]["test"][1]["format"] == "tsv"
    report = (repo / "reports/report.md").read_text()
    assert "BLEU" in report
    assert any((repo / "reports/figures").glob("*.png"))
    assert (repo / "dvc.lock").is_file()


def test_metrics_hold_finite_scores(repo):
    metrics = json.loads((repo / "reports/metrics.json").read_text())
    assert sorted(metrics["test"]) == sorted(TEST_SETS)
    for scores in (metrics["val"], *metrics["test"].values()):
        for name in ("bleu", "chrf", "chrfpp", "ter"):
            assert math.isfinite(scores[name])
        assert scores["signature"]["bleu"].startswith("nrefs:1")
    assert metrics["test"]["tabbed"]["n_lines"] == 25


def test_the_run_is_in_mlflow(repo):
    run_file = json.loads((repo / "data/model/mlflow_run.json").read_text())
    assert str(repo / "mlflow.db") in run_file["tracking_uri"]
    import mlflow

    run_info = mlflow.MlflowClient(run_file["tracking_uri"]).get_run(run_file["run_id"])
    assert run_info.data.params["model.d_model"] == "32"
    assert "train_loss" in run_info.data.metrics
    assert {f"test.{name}.bleu" for name in TEST_SETS} <= set(run_info.data.metrics)


def test_experiment_changes_a_model_param_and_shows_scores(repo):
    run(["dvc", "exp", "run", "-S", "model.n_layers=2", "-n", "two-layers"], repo)
    shown = json.loads(run(["dvc", "exp", "show", "--json"], repo).stdout)
    experiments = [
        exp
        for commit in shown
        for exp in (commit.get("experiments") or [])
        if exp.get("name") == "two-layers"
    ]
    assert experiments, f"no experiment named two-layers in {json.dumps(shown)[:2000]}"
    data = experiments[0]["revs"][0]["data"]
    assert data["params"]["params.yaml"]["data"]["model"]["n_layers"] == 2
    scores = data["metrics"]["reports/metrics.json"]["data"]
    assert all(math.isfinite(scores["test"][name]["bleu"]) for name in TEST_SETS)


def test_a_clone_pulls_the_outputs_from_a_dvc_remote_and_translates_without_training(repo, tmp_path):
    """What docs/experiments.md shows a team: push the outputs to a DVC remote from the clone that
    ran the pipeline; another clone pulls the model and translates as the first does, training nothing."""
    store, clone = tmp_path / "store", tmp_path / "clone"
    run(["dvc", "remote", "add", "-d", "storage", str(store)], repo)
    run(["git", "add", "dvc.lock", ".dvc/config"], repo)
    run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "the run and its remote"], repo)
    run(["dvc", "push"], repo)
    run(["git", "clone", "-q", str(repo), str(clone)], tmp_path)
    assert not (clone / "data" / "model").exists()
    run(["dvc", "pull", "data/model"], clone)
    (tmp_path / "in.txt").write_text("Ein hund.\nZwei katze drei.\n", encoding="utf-8")
    translate = [sys.executable, "-m", "pipeline", "translate", "--model", "data/model", "--input"]
    theirs, ours = (run([*translate, str(tmp_path / "in.txt")], where).stdout for where in (clone, repo))
    assert theirs == ours and len(theirs.splitlines()) == 2
    assert not (clone / "data" / "bin").exists()  # nothing but the model came over


def dvc_status(repo: Path) -> dict:
    dvc = Path(sys.executable).parent / "dvc"
    done = subprocess.run(
        [str(dvc), "status", "--json"], cwd=repo, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout or "{}")


def test_an_edit_to_the_mlflow_code_or_settings_reruns_score_and_never_train(tmp_path):
    """Issue 25: logging a run to MLflow is no part of training, so editing it costs no retraining."""
    listed = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True)
    repo = tmp_path / "repo"
    for name in listed.stdout.split():
        if (REPO / name).is_file():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, repo / name)
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    before = dvc_status(repo)
    with open(repo / "pipeline" / "tracking" / "tracker.py", "a", encoding="utf-8") as f:
        f.write("\n# an edit to the MLflow code\n")
    params = yaml.safe_load((repo / "params.yaml").read_text(encoding="utf-8"))
    params["tracking"]["experiment"] = "renamed"
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False), encoding="utf-8")
    after = dvc_status(repo)
    assert after.get("train") == before.get("train")  # whatever else it says, the edit added nothing
    changed = {k: v for entry in after["score"] if isinstance(entry, dict) for k, v in entry.items()}
    assert changed["changed deps"]["pipeline/tracking"] == "modified"  # the stage that logs to MLflow

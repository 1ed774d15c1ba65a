"""dvc.yaml's plots: the real `dvc plots show`/`diff` over training logs as the train stage writes them."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import yaml

from pipeline.training.loop import STEPS_HEADER, VALID_HEADER
from tests.support.dvc_repo import dvc
from tests.support.repo import REPO

DVC = Path(sys.executable).parent / "dvc"
PLOTS = {  # title -> (file, y column), as the README promises them
    "Training loss": ("reports/train/steps.tsv", "loss"),
    "Learning rate": ("reports/train/steps.tsv", "lr"),
    "Validation loss": ("reports/train/valid.tsv", "val_loss"),
    "Validation BLEU": ("reports/train/valid.tsv", "val_bleu"),
}
STEPS = [[50, 0, 8.5, 1.0e-4, 15000.0], [100, 0, 7.25, 2.0e-4, 15100.0], [150, 1, 6.0, 3.0e-4, 14900.0]]
VALID = [[100, 0, 6.5, 3.5], [150, 1, 5.75, 7.25]]


def write_logs(root: Path, steps: list[list], valid: list[list]) -> None:
    """steps.tsv and valid.tsv with the train stage's own headers."""
    log = root / "reports" / "train"
    log.mkdir(parents=True, exist_ok=True)
    for name, header, rows in (("steps.tsv", STEPS_HEADER, steps), ("valid.tsv", VALID_HEADER, valid)):
        lines = ["\t".join(header)] + ["\t".join(map(str, row)) for row in rows]
        (log / name).write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """git + DVC with the project's dvc.yaml and committed training logs (no stage is run)."""
    if not DVC.is_file():
        pytest.skip(f"no dvc beside {sys.executable}")
    root = tmp_path_factory.mktemp("plots")
    shutil.copy2(REPO / "dvc.yaml", root / "dvc.yaml")
    write_logs(root, STEPS, VALID)
    dvc(["git", "init", "-q"], root)
    dvc([str(DVC), "init", "-q"], root)
    dvc(["git", "add", "-A"], root)
    dvc(["git", "commit", "-qm", "logs"], root)
    return root


def values(plot: dict, y: str) -> dict[str, list[tuple[float, float]]]:
    """(step, y) points of one vega plot, per revision; DVC passes TSV cells on as strings."""
    out: dict[str, list[tuple[float, float]]] = {}
    for row in plot["content"]["data"]["values"]:
        out.setdefault(row["rev"], []).append((float(row["step"]), float(row[y])))
    return out


def test_every_plot_reads_a_column_the_train_stage_writes() -> None:
    plots = yaml.safe_load((REPO / "dvc.yaml").read_text())["plots"]
    defined = {title: spec for entry in plots for title, spec in entry.items()}
    assert set(defined) == set(PLOTS)
    headers = {"reports/train/steps.tsv": STEPS_HEADER, "reports/train/valid.tsv": VALID_HEADER}
    for title, spec in defined.items():
        assert spec["x"] == "step"
        assert spec["y"] == {PLOTS[title][0]: PLOTS[title][1]}
        assert PLOTS[title][1] in headers[PLOTS[title][0]]


def test_plots_show_json_has_the_four_plots_with_their_data(repo: Path) -> None:
    shown = json.loads(dvc([str(DVC), "plots", "show", "--json"], repo))
    assert not shown.get("errors")
    assert set(shown["data"]) == set(PLOTS)
    columns = {"loss": 2, "lr": 3, "val_loss": 2, "val_bleu": 3}
    for title, (path, y) in PLOTS.items():
        (plot,) = shown["data"][title]
        assert plot["type"] == "vega" and plot["content"]["encoding"]["x"]["field"] == "step"
        rows = STEPS if path.endswith("steps.tsv") else VALID
        expected = [(float(r[0]), float(r[columns[y]])) for r in rows]
        assert values(plot, y) == {"workspace": expected}


def test_plots_diff_overlays_the_workspace_and_a_revision(repo: Path) -> None:
    """What `dvc plots diff <exp>` does to compare runs: one series per revision in each plot."""
    write_logs(repo, [[50, 0, 9.0, 1.0e-4, 1.0]], [[50, 0, 7.0, 1.5]])
    try:
        shown = json.loads(dvc([str(DVC), "plots", "diff", "HEAD", "--json"], repo))
    finally:
        write_logs(repo, STEPS, VALID)
    (bleu,) = shown["data"]["Validation BLEU"]
    assert set(bleu["revisions"]) == {"HEAD", "workspace"}
    assert values(bleu, "val_bleu") == {"HEAD": [(100.0, 3.5), (150.0, 7.25)], "workspace": [(50.0, 1.5)]}


def test_plots_show_writes_html_with_every_plot(repo: Path, tmp_path: Path) -> None:
    dvc([str(DVC), "plots", "show", "-o", str(tmp_path / "html")], repo)
    page = (tmp_path / "html" / "index.html").read_text()
    for title in PLOTS:
        assert title in page
    assert '"val_bleu": "7.25"' in page or '"val_bleu":"7.25"' in page  # the data is inlined

"""Ablation of the architecture choices, as DVC experiments on a reduced training budget.

    python -m bench.ablation queue          # one queued `dvc exp run ... train` per variant
    dvc queue start -j 1                    # run them (dvc queue status to follow)
    python -m bench.ablation table          # reports/ablation.{md,json} from those runs in MLflow

Every variant differs from the baseline (the default params.yaml) in the
settings listed in VARIANTS, and all of them, the baseline included, share
BUDGET, so the table compares architectures at equal training steps. Only the
stages up to train run: the BLEU compared is the train stage's own validation
BLEU (greedy decoding of the val split, logged as val_bleu), which keeps an
ablation run to a few minutes on a CPU. Runs taken through score (a full-budget
re-run) also have BLEU per test set (test.<name>.bleu): the table adds a column
per test set then. The numbers come from the runs themselves (MLflow, where
train and score log them), never typed in.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import click
import pandas as pd

from pipeline import files, tracking
from pipeline import params as P
from pipeline.reporting.runs import metric_name
from pipeline.reporting.tables import common_prefix

BUDGET = {"train.max_steps": 200, "train.warmup_steps": 100}
VARIANTS: dict[str, tuple[str, dict[str, object]]] = {
    "abl-baseline": ("encoder-decoder 3+3, pre-LN, sinusoidal, three-way tied", {}),
    "abl-post-ln": ("post-LN instead of pre-LN", {"model.norm": "post"}),
    "abl-learned-pos": ("learned instead of sinusoidal positions", {"model.positions": "learned"}),
    "abl-untied": ("untied embeddings (joint vocabulary)", {"model.tie_embeddings": "none"}),
    "abl-10-2": (
        "deep encoder, shallow decoder: 10+2",
        {"model.encoder_layers": 10, "model.decoder_layers": 2},
    ),
    "abl-decoder-only": (
        "decoder-only, 6 layers, on `source <sep> target`",
        {"model.arch": "decoder_only", "model.decoder_layers": 6},
    ),
}


def _dvc() -> str:
    beside = Path(sys.executable).parent / "dvc"
    return str(beside) if beside.exists() else (shutil.which("dvc") or "dvc")


@click.group()
def cli() -> None:
    """Queue the ablation experiments, or tabulate their results."""


@cli.command()
def queue() -> None:
    """Queue one `dvc exp run` per variant (then run `dvc queue start -j 1`)."""
    for name, (_, changes) in VARIANTS.items():
        settings = {**BUDGET, **changes}
        args = [_dvc(), "exp", "run", "--queue", "-n", name, "train"]
        for key, value in settings.items():
            args += ["-S", f"{key}={value}"]
        subprocess.run(args, check=True)
        click.echo(f"queued {name}: {settings}")


@cli.command()
@click.option("--params", "params_file", type=click.Path(exists=True, path_type=Path), default="params.yaml")
@click.option("--out", type=click.Path(path_type=Path), default="reports/ablation.md", show_default=True)
def table(params_file: Path, out: Path) -> None:
    """Write the ablation table from the variants' latest finished runs in MLflow."""
    params = P.load(params_file)
    frame = latest_runs(mlflow_runs(params.tracking.experiment))
    files.write_text(out, render(frame))
    files.write_json(out.with_suffix(".json"), json.loads(frame.to_json(orient="records")))
    click.echo(f"wrote {out}")


METRICS = ("val_bleu", "val_loss", "n_params", "train_seconds", "tokens_per_s")


def mlflow_runs(experiment: str) -> pd.DataFrame:
    """The ablation variants' finished runs: dvc_exp, commit, started and METRICS (their last values)."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking.tracking_uri())
    found = client.get_experiment_by_name(experiment)
    if found is None:
        raise click.ClickException(f"no MLflow experiment {experiment!r} at {tracking.tracking_uri()}")
    runs = client.search_runs([found.experiment_id], "attributes.status = 'FINISHED'", max_results=1000)
    runs = [run for run in runs if run.data.tags.get("dvc_exp") in VARIANTS]
    return pd.DataFrame(
        {
            "dvc_exp": run.data.tags["dvc_exp"],
            "commit": run.data.tags.get("git_commit", "")[:7],
            "started": run.info.start_time,
            **{m: run.data.metrics.get(m, float("nan")) for m in METRICS},
            **bleu_per_test_set(run.data.metrics),
        }
        for run in runs
    )


def bleu_per_test_set(metrics: dict[str, float]) -> dict[str, float]:
    """A run's BLEU per test set, as score logs it (test.<name>.bleu; an old run's test_bleu as test)."""
    named = {metric_name(k): v for k, v in metrics.items()}
    return {k: v for k, v in named.items() if k is not None and k.startswith("test.") and k.endswith(".bleu")}


def latest_runs(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per variant: its newest finished run, in VARIANTS order."""
    if frame.empty:
        raise click.ClickException(
            "no finished ablation run in MLflow yet: queue them and run dvc queue start"
        )
    done = frame.sort_values("started").groupby("dvc_exp").tail(1).set_index("dvc_exp")
    missing = [name for name in VARIANTS if name not in done.index]
    if missing:
        click.echo(f"warning: no finished run yet for {', '.join(missing)}", err=True)
    tests = [c for c in done.columns if c.startswith("test.")]
    rows = [
        {
            "variant": name,
            "change": VARIANTS[name][0],
            **done.loc[name, ["commit", *METRICS, *tests]].to_dict(),
        }
        for name in VARIANTS
        if name in done.index
    ]
    return pd.DataFrame(rows)


def render(frame: pd.DataFrame) -> str:
    budget = ", ".join(f"`{k}={v}`" for k, v in BUDGET.items())
    lines = [
        "# Ablation: architecture variants at equal training budget",
        "",
        f"Every run uses the default params.yaml plus {budget} (a reduced budget: about",
        "0.8 epoch of Multi30k, so absolute BLEU is far below the full run's), and the change",
        "named in its row. BLEU: sacreBLEU of greedy decoding of the val split at the end of",
        "that budget, as the train stage logs it (val_bleu); loss: the val split's per-token NLL.",
        "Train time includes that validation. Generated by `python -m bench.ablation table` from",
        "the runs in MLflow; the experiments were run with `python -m bench.ablation queue` and",
        "`dvc queue start -j 1` on the 2-core CPU of the README's results.",
        "",
    ]
    tests = [c for c in frame.columns if c.startswith("test.") and c.endswith(".bleu")]
    names = [c[len("test.") : -len(".bleu")] for c in tests]
    prefix = common_prefix(names)
    header = ["variant", "change", "val BLEU", *(f"{n[len(prefix) :]} BLEU" for n in names)]
    header += ["val loss", "parameters", "train time", "target tok/s", "commit"]
    lines += ["| " + " | ".join(header) + " |", "|---|---|" + "---:|" * (len(header) - 3) + "---|"]
    for row in frame.to_dict("records"):
        cells = [row["variant"], row["change"], f"{row['val_bleu']:.1f}", *(_score(row[c]) for c in tests)]
        cells += [
            f"{row['val_loss']:.3f}",
            f"{int(row['n_params']):,}",
            f"{row['train_seconds'] / 60:.1f} min",
            f"{row['tokens_per_s']:,.0f}",
            row["commit"] or "",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    if names:
        note = f" (names without their common prefix `{prefix}`)" if prefix else ""
        lines += [
            "",
            f"Test-set columns: sacreBLEU of the score stage on each test set{note}; – if not scored.",
        ]
    return "\n".join(lines) + "\n"


def _score(value: float) -> str:
    return "–" if pd.isna(value) else f"{value:.1f}"


if __name__ == "__main__":
    cli()

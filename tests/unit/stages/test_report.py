"""Report stage: tables carry the inputs' numbers, samples are the right lines, figures are real PNGs
with the titles, axis labels and legends a reader needs."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from pipeline import files
from pipeline import params as P
from pipeline.errors import UserError
from pipeline.stages import report
from pipeline.tracking import metadata
from pipeline.tracking.run_file import RUN_FILE
from tests.support.figures import axis_labels, legend_texts, notes, png_size
from tests.support.models import make_model_dir
from tests.support.repo import REPO
from tests.support.tables import table_rows

PARAMS_FILE = REPO / "params.yaml"

# (source, reference, hypothesis): exact, close, bad, and very short lines
TEST_LINES = [
    ("ein hund rennt im park .", "a dog runs in the park .", "a dog runs in the park ."),
    ("zwei männer spielen schach .", "two men play chess outside .", "two men are playing chess outside ."),
    ("eine frau liest ein buch .", "a woman reads a book .", "completely unrelated words here"),
    ("hallo da", "hi there", "zzz"),
    ("ok", "ok", "ok"),
    (
        "kinder schwimmen im blauen pool .",
        "children are swimming in a blue pool .",
        "children are swimming in a blue pool .",
    ),
    (
        "eine katze schläft am fenster .",
        "a cat sleeps on the warm window sill .",
        "a cat sleeps on the warm window sill .",
    ),
    ("der alte mann verkauft obst .", "the old man sells fruit at the market .", "qqq rrr sss"),
    ("ein junge kickt einen ball .", "a boy kicks a red ball across the field .", "a boy kicks a ball ."),
    ("leute gehen eine straße entlang .", "people walk along a busy city street .", "xx yy"),
]
METRICS = {
    "val": {
        "bleu": 33.33,
        "chrf": 55.5,
        "ter": 50.0,
        "n_lines": 10,
        "signature": {
            "bleu": "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0",
            "chrf": "nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.6.0",
            "ter": "nrefs:1|case:lc|tok:tercom|norm:no|punct:yes|asian:no|version:2.6.0",
        },
    },
    "test": {
        name: {
            "bleu": bleu,
            "chrf": 60.27,
            "ter": 45.0,
            "n_lines": 10,
            "signature": {
                "bleu": "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0",
                "chrf": "nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.6.0",
                "ter": "nrefs:1|case:lc|tok:tercom|norm:no|punct:yes|asian:no|version:2.6.0",
            },
        }
        for name, bleu in (("zz-first", 37.12), ("aa-second", 21.0))
    },
}
# data.test's order: zz-first is the first test set though it sorts last.
TEST_SETS = ("zz-first", "aa-second")


def manifest_entry(name: str, lines: int) -> dict:
    files = [{"role": r, "source": f"https://example.org/{name}.{r}", "member": None} for r in ("src", "tgt")]
    return {"name": name, "catalog": name.startswith("multi30k"), "lines": lines, "files": files}


MANIFEST = {
    "src_lang": "de",
    "tgt_lang": "en",
    "splits": {
        "train": [manifest_entry("multi30k-train", 29000), manifest_entry("my-corpus", 500)],
        "val": [manifest_entry("multi30k-val", 1014)],
        "test": [manifest_entry(name, 10) for name in TEST_SETS],
    },
    "heldout": None,
}
SUMMARY = {
    "n_params": 9_912_832,
    "train_seconds": 3723.4,
    "tokens_per_s": 15234.7,
    "best_step": 1800,
    "best_val_bleu": 34.56,
    "device": "cuda (NVIDIA H200)",
    "precision": "bf16",
    "stopped": "early stopping: no val BLEU gain in 5 validations",
    "steps": 2400,
    "epochs": 12.0,
}


def clean_counts(lines_in: int, **dropped: int) -> dict:
    reasons = {r: dropped.get(r, 0) for r in ("empty", "heldout_overlap", "too_long", "ratio", "duplicate")}
    return {"lines_in": lines_in, "lines_out": lines_in - sum(reasons.values()), "dropped": reasons}


CLEAN_STATS = {
    "train": {
        **clean_counts(29500, heldout_overlap=12, too_long=200, ratio=35, duplicate=3),
        "normalized": {"src": {"nfc": 3}, "tgt": {"nfc": 1}},
        "sources": {
            "multi30k-train": clean_counts(29000, heldout_overlap=10, too_long=200, ratio=35),
            "my-corpus": clean_counts(500, heldout_overlap=2, duplicate=3),
        },
    },
    "val": clean_counts(1014),
    "test": {name: clean_counts(10) for name in TEST_SETS},
    "unicode_version": "15.0.0",
}


def write_inputs(root: Path, with_valid: bool = True) -> dict[str, Path]:
    """The other stages' outputs, small and synthetic, as the report stage reads them."""
    raw, decode, train_log = root / "data/raw", root / "data/decode", root / "reports/train"
    files.write_lines(raw / "test/zz-first.src", [s for s, _, _ in TEST_LINES])
    files.write_lines(raw / "test/zz-first.tgt", [r for _, r, _ in TEST_LINES])
    files.write_lines(decode / "test/zz-first.hyp", [h for _, _, h in TEST_LINES])
    # The second test set: other lines, so a sample or length row taken from it would show.
    files.write_lines(raw / "test/aa-second.src", ["nur ein satz hier ."] * 10)
    files.write_lines(raw / "test/aa-second.tgt", ["just one sentence here ."] * 10)
    files.write_lines(decode / "test/aa-second.hyp", ["only one phrase ."] * 10)
    files.write_json(raw / "manifest.json", MANIFEST)
    steps = pd.DataFrame(
        {
            "step": range(50, 2450, 50),
            "epoch": [s / 200 for s in range(50, 2450, 50)],
            "loss": [8.0 * 0.97**i + 2.0 for i in range(48)],
            "lr": [min((i + 1) / 20, (20 / (i + 1)) ** 0.5) * 1e-3 for i in range(48)],
            "tokens_per_s": [15000.0] * 48,
        }
    )
    train_log.mkdir(parents=True)
    steps.to_csv(train_log / "steps.tsv", sep="\t", index=False)
    if with_valid:
        valid = pd.DataFrame(
            {
                "step": [600, 1200, 1800, 2400],
                "epoch": [3.0, 6.0, 9.0, 12.0],
                "val_loss": [4.1, 3.2, 2.9, 2.95],
                "val_bleu": [12.0, 28.5, 34.56, 34.1],
            }
        )
        valid.to_csv(train_log / "valid.tsv", sep="\t", index=False)
    files.write_json(train_log / "summary.json", SUMMARY)
    files.write_json(root / "reports/metrics.json", METRICS)
    files.write_json(root / "data/clean/stats.json", CLEAN_STATS)
    return {
        "raw": raw,
        "decode": decode,
        "train_log": train_log,
        "metrics": root / "reports/metrics.json",
        "clean_stats": root / "data/clean/stats.json",
        "out": root / "reports/report.md",
        "figures": root / "reports/figures",
    }


def build(paths: dict[str, Path], model_dir: Path | None = None, student_dir: Path | None = None) -> str:
    return report.build_report(
        P.load(PARAMS_FILE),
        paths["metrics"],
        paths["train_log"],
        paths["clean_stats"],
        paths["raw"],
        paths["decode"],
        paths["out"],
        paths["figures"],
        model_dir,
        student_dir,
    )


def section(text: str, heading: str) -> str:
    """The Markdown under `heading` up to the next heading of any level."""
    rest = text[text.index(heading) + len(heading) :]
    end = rest.find("\n#")
    return rest if end < 0 else rest[:end]


@pytest.fixture(autouse=True)
def own_mlflow_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test's own (absent until a test makes runs) MLflow database, never the project's."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.delenv("DVC_EXP_NAME", raising=False)
    return uri


@pytest.fixture
def built(tmp_path: Path, saved_figures: dict) -> tuple[str, dict[str, Path]]:
    """The report of write_inputs; its figures are in `saved_figures` too."""
    paths = write_inputs(tmp_path)
    return build(paths), paths


def test_title_names_pair_and_training_sources(built: tuple[str, dict]) -> None:
    text, _ = built
    assert text.splitlines()[0] == "# Translation report: de→en (multi30k-train, my-corpus)"


def test_scores_table_has_val_then_each_test_set_in_data_test_order(built: tuple[str, dict]) -> None:
    text, _ = built
    rows = table_rows(section(text, "## Scores"))
    assert rows == [
        ["set", "BLEU", "chrF", "TER", "lines"],
        ["val", "33.3", "55.5", "50.0", "10"],  # one decimal, as sacreBLEU prints them
        ["zz-first", "37.1", "60.3", "45.0", "10"],
        ["aa-second", "21.0", "60.3", "45.0", "10"],
    ]
    assert "`nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0`" in text
    assert text.count("tok:tercom") == 1  # the same signature for every set is listed once


def test_training_summary_table(built: tuple[str, dict]) -> None:
    text, _ = built
    rows = dict((r[0], r[1]) for r in table_rows(section(text, "## Training")))
    assert rows["parameters"] == "9.91 M (9,912,832)"
    assert rows["training time"].startswith("1:02:03")
    assert rows["tokens/s"] == "15,235"
    assert rows["device"] == "cuda (NVIDIA H200)"
    assert rows["stopped"] == SUMMARY["stopped"]
    assert rows["best val BLEU (greedy)"] == "34.6"
    assert rows["epochs"] == "12" and rows["steps"] == "2,400"
    assert "![Learning curves" in text and "](figures/learning_curves.png)" in text


def test_data_lists_each_splits_sources(built: tuple[str, dict]) -> None:
    text, _ = built
    rows = table_rows(section(text, "## Data"))
    assert rows[0] == ["split", "source", "lines", "from"]
    assert rows[1:3] == [
        ["train", "multi30k-train", "29,000", "catalog"],
        ["train", "my-corpus", "500", "https://example.org/my-corpus.src, https://example.org/my-corpus.tgt"],
    ]
    assert [r[:2] for r in rows[3:]] == [["val", "multi30k-val"], ["test", "zz-first"], ["test", "aa-second"]]


def test_cleaning_counts_each_train_source_and_every_reason(built: tuple[str, dict]) -> None:
    text, _ = built
    part = section(text, "### Cleaning")
    rows = table_rows(part)
    reasons = ["empty", "heldout_overlap", "too_long", "ratio", "duplicate"]
    assert rows[0] == ["", "lines in", "lines out", *(f"dropped: {r}" for r in reasons)]
    assert rows[1] == ["train: multi30k-train", "29,000", "28,755", "0", "10", "200", "35", "0"]
    assert rows[2] == ["train: my-corpus", "500", "495", "0", "2", "0", "0", "3"]
    assert rows[3][:4] == ["train, all", "29,500", "29,250", "0"]
    assert [r[0] for r in rows[4:]] == ["val", "test: zz-first", "test: aa-second"]
    assert "heldout_overlap: training pairs whose source or target occurs in a val or test set" in part


def test_params_one_table_per_section(built: tuple[str, dict]) -> None:
    text, _ = built
    params = section(text, "## Params")
    for name in P.SECTIONS:
        assert f"**{name}**" in params
    rows = table_rows(params)
    assert ["lr", "0.001"] in rows and ["betas", "[0.9, 0.98]"] in rows
    assert ["src_lang", "de"] in rows and ["dedupe", "true"] in rows


def test_bleu_by_length_table_and_chart(built: tuple[str, dict]) -> None:
    text, paths = built
    part = section(text, "## BLEU by source length")
    assert part.startswith(" (zz-first)") and "On the first test set, zz-first." in part
    rows = table_rows(part)
    assert rows[0] == ["source words", "lines", "BLEU"]
    assert rows[1][:2] == ["1-10", "10"]  # every fixture source is short
    assert "](figures/bleu_by_length.png)" in text
    width, height = png_size(paths["figures"] / "bleu_by_length.png")
    assert width > 400 and height > 200


def test_bleu_by_length_chart_has_a_labelled_bar_per_table_row(
    built: tuple[str, dict], saved_figures
) -> None:
    text, _ = built
    rows = table_rows(section(text, "## BLEU by source length"))[1:]
    (ax,) = saved_figures["bleu_by_length.png"].axes
    assert axis_labels(ax) == ("BLEU by source length: zz-first", "source length (words)", "BLEU")
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1-10", "11-20", "21-30", "31-40", "41+"]
    assert [t.get_text() for t in ax.get_xticklabels()] == [bucket for bucket, _, _ in rows]
    # Each bar says what the table's row says; an empty bucket says so instead of showing 0.
    assert notes(ax) == [f"{bleu}\n{n} lines" if n != "0" else "no lines" for _, n, bleu in rows]
    assert [f"{bar.get_height():.1f}" for bar in ax.patches] == [b if n != "0" else "0.0" for _, n, b in rows]


def test_best_and_worst_samples_by_chrf_skip_short_lines(built: tuple[str, dict]) -> None:
    text, _ = built
    best = table_rows(section(text, "### Best 3"))[1:]
    worst = table_rows(section(text, "### Worst 3"))[1:]
    first = table_rows(section(text, "### First 3"))[1:]
    assert [r[0] for r in best] == ["1", "6", "7"]  # the exact translations, ties in line order
    assert all(r[1] == "100.0" and r[3] == r[4] for r in best)
    assert sorted(r[0] for r in worst) == ["10", "3", "8"]
    assert {r[4] for r in worst} == {"completely unrelated words here", "qqq rrr sss", "xx yy"}
    assert [r[0] for r in first] == ["1", "2", "3"]
    assert first[1][2:] == list(TEST_LINES[1])
    assert "zzz" not in section(text, "### Worst 3")  # "hi there" is too short to rank


def test_learning_curves_panels_have_their_titles_axes_and_legend(
    built: tuple[str, dict], saved_figures
) -> None:
    loss, bleu, lr = saved_figures["learning_curves.png"].axes
    assert axis_labels(loss) == ("Loss", "update step", "cross-entropy per target token (nats)")
    assert legend_texts(loss) == ["train (label-smoothed)", "val"]
    # A point per logged step (train), a point per validation (val).
    assert [len(line.get_xdata()) for line in loss.get_lines()] == [48, 4]
    assert axis_labels(bleu) == ("Validation BLEU (greedy)", "update step", "BLEU")
    assert notes(bleu) == ["best 34.6"]  # the best validation, marked
    assert axis_labels(lr) == ("Learning rate", "update step", "learning rate ($\\times 10^{-3}$)")
    (schedule,) = lr.get_lines()
    assert max(schedule.get_ydata()) == pytest.approx(1.0)  # the peak 1e-3, shown as 1 x 10^-3
    assert notes(loss) == notes(lr) == []  # no "no data" on a panel that has data


def test_learning_curves_png_is_a_real_figure(built: tuple[str, dict]) -> None:
    _, paths = built
    png = paths["figures"] / "learning_curves.png"
    width, height = png_size(png)
    assert width > 1000 and 300 < height < width  # 12 x 3.5 in at dpi 110: three panels side by side
    assert png.stat().st_size > 10_000


def test_missing_valid_log_still_reports(tmp_path: Path) -> None:
    paths = write_inputs(tmp_path, with_valid=False)
    text = build(paths)
    assert "9,912,832" in text and "37.1" in text
    assert png_size(paths["figures"] / "learning_curves.png")[0] > 1000


def test_regenerated_from_scratch(built: tuple[str, dict]) -> None:
    _, paths = built
    (paths["figures"] / "stale.png").write_bytes(b"old")
    paths["out"].write_text("old report\n")
    text = build(paths)
    assert not (paths["figures"] / "stale.png").exists()
    assert paths["out"].read_text() == text and "old report" not in text
    written = sorted(p.name for p in paths["out"].parent.iterdir())
    assert not (paths["out"].parents[1] / "mlflow.db").exists()  # reading runs creates no database
    assert written == ["figures", "metrics.json", "report.md", "train"]  # no temporaries left


def test_cli_logs_report_to_the_mlflow_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("mlflow")
    from mlflow import MlflowClient

    from pipeline.tracking.tracker import Tracker

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    with Tracker.start({"data": {"src_lang": "de"}}, "report-test", "train") as run:
        run.save_run_file(tmp_path / "data/model/mlflow_run.json")
    paths = write_inputs(tmp_path)
    args = [
        "--params",
        str(PARAMS_FILE),
        "--metrics",
        str(paths["metrics"]),
        "--train-log",
        str(paths["train_log"]),
        "--clean-stats",
        str(paths["clean_stats"]),
        "--raw",
        str(paths["raw"]),
        "--decode",
        str(paths["decode"]),
        "--out",
        str(paths["out"]),
        "--figures",
        str(paths["figures"]),
        "--model",
        str(tmp_path / "data/model"),
    ]
    result = CliRunner().invoke(report.command, args)
    assert result.exit_code == 0, result.output
    assert f"MLflow run: `{run.run_id}`" in paths["out"].read_text()
    client = MlflowClient(run.tracking_uri)
    logged = [a.path for a in client.list_artifacts(run.run_id, "report")]
    assert logged == ["report/figures", "report/report.md"]
    figures = sorted(a.path for a in client.list_artifacts(run.run_id, "report/figures"))
    assert figures == ["report/figures/bleu_by_length.png", "report/figures/learning_curves.png"]


def test_cli_missing_metrics_is_a_user_error(tmp_path: Path) -> None:
    paths = write_inputs(tmp_path)
    paths["metrics"].unlink()
    args = [
        "--params",
        str(PARAMS_FILE),
        "--metrics",
        str(paths["metrics"]),
        "--train-log",
        str(paths["train_log"]),
        "--clean-stats",
        str(paths["clean_stats"]),
        "--raw",
        str(paths["raw"]),
        "--decode",
        str(paths["decode"]),
        "--out",
        str(paths["out"]),
        "--figures",
        str(paths["figures"]),
    ]
    result = CliRunner().invoke(report.command, args)
    assert result.exit_code == 1 and "metrics.json: no such file" in result.output
    assert not paths["out"].exists()


# --- sections added for comparing runs ------------------------------------------------


def test_section_order_scores_first(built: tuple[str, dict]) -> None:
    text, _ = built
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert headings == [
        "## Scores",
        "## Experiments",
        "## Training",
        "## BLEU by source length (zz-first)",
        "## Sample translations (zz-first)",
        "## Cross-attention (zz-first)",
        "## Data",
        "## Params",
    ]


def test_without_mlflow_runs_the_experiments_section_says_why(built: tuple[str, dict]) -> None:
    text, _ = built
    assert "No experiments table: no MLflow database at" in section(text, "## Experiments")


@pytest.fixture
def ranked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, own_mlflow_store: str, saved_figures: dict
) -> tuple[str, dict[str, Path]]:
    """The report of the run exp-c, ranked 2 of 3 MLflow runs by test BLEU; its figures in saved_figures."""
    from pipeline.tracking.tracker import Tracker

    monkeypatch.setattr(metadata, "git_commit", lambda cwd=None: "c0ffee" + "0" * 34)
    ids = {}
    for name, layers, bleu in (("exp-a", 2, 30.04), ("exp-b", 4, 36.0), ("exp-c", 6, 33.0)):
        monkeypatch.setenv("DVC_EXP_NAME", name)
        params = P.load(PARAMS_FILE).to_dict()
        params["model"]["n_layers"] = layers
        params["data"]["test"] = list(TEST_SETS)  # as params.data.test holds them
        with Tracker.start(params, "nmt", f"de-en encoder_decoder {name}") as run:
            for step in (100, 200, 300):
                run.log_metrics({"val_bleu": bleu * step / 300}, step=step)
            run.log_metrics(
                {
                    "n_params": 1e6 * layers + 0.0,
                    "train_seconds": 3600.0 * layers + 61,
                    "tokens_per_s": 15000.0 / layers,
                },
                step=300,
            )
            scores = {"bleu": bleu, "chrf": 55.0, "ter": 50.0}
            run.log_metrics({f"test.zz-first.{k}": v for k, v in scores.items()}, step=0)
            run.log_metrics({"test.aa-second.bleu": bleu - 10, "dev_bleu": bleu - 1}, step=0)
        ids[name] = run.run_id
    paths = write_inputs(tmp_path)
    files.write_json(
        tmp_path / "data/model" / RUN_FILE,
        {"run_id": ids["exp-c"], "tracking_uri": own_mlflow_store},
    )
    return build(paths, tmp_path / "data/model"), paths


def test_experiments_table_ranks_runs_and_marks_this_one(ranked: tuple[str, dict]) -> None:
    text, paths = ranked
    part = section(text, "## Experiments")
    rows = table_rows(part)
    assert rows[0] == [
        "#",
        "run",
        "commit",
        "model.n_layers",
        "zz-first BLEU",  # data.test's first set first
        "aa-second BLEU",
        "val BLEU",
        "parameters",
        "train time",
        "tokens/s",
    ]
    assert rows[1:] == [
        ["1", "exp-b", "c0ffee0", "4", "36.0", "26.0", "35.0", "4,000,000", "4:01:01", "3,750"],
        ["→ 2", "exp-c", "c0ffee0", "6", "33.0", "23.0", "32.0", "6,000,000", "6:01:01", "2,500"],
        ["3", "exp-a", "c0ffee0", "2", "30.0", "20.0", "29.0", "2,000,000", "2:01:01", "7,500"],
    ]
    assert "→ this report's run, 2 of 3 by BLEU on its first test set." in part
    assert "](figures/experiments_val_bleu.png)" in part
    width, height = png_size(paths["figures"] / "experiments_val_bleu.png")
    assert width > 600 and height > 300


def test_experiments_figure_draws_each_run_by_rank_this_one_in_black(ranked, saved_figures) -> None:
    (ax,) = saved_figures["experiments_val_bleu.png"].axes
    title = "Validation BLEU (greedy): this run and the best others"
    assert axis_labels(ax) == (title, "update step", "BLEU")
    assert legend_texts(ax) == ["1. exp-b", "2. exp-c (this run)", "3. exp-a"]
    curves = ax.get_lines()
    assert [list(line.get_xdata()) for line in curves] == [[100, 200, 300]] * 3
    assert [line.get_ydata()[-1] for line in curves] == pytest.approx([36.0, 33.0, 30.04])
    assert [line.get_color() for line in curves][1] == "black"
    assert "black" not in {curves[0].get_color(), curves[2].get_color()}


def test_heatmaps_of_two_fixed_test_sentences(tmp_path: Path, saved_figures) -> None:
    pytest.importorskip("pipeline.reporting.heatmaps")

    paths = write_inputs(tmp_path)
    make_model_dir(tmp_path / "data/model")
    text = build(paths, tmp_path / "data/model")
    part = section(text, "## Cross-attention (zz-first)")
    links = [line for line in part.splitlines() if line.startswith("![")]
    # Lines 1 and 2 of the first test set are its first sources of 5 to 15 words.
    assert [line.split("](")[0] for line in links] == [
        "![Cross-attention of line 1 of zz-first, heads averaged",
        "![Cross-attention of line 2 of zz-first, heads averaged",
    ]
    for line in links:
        width, height = png_size(paths["out"].parent / line.split("](")[1].rstrip(")"))
        assert width > 200 and height > 100
    titles = [saved_figures[f"cross_attention_{i}.png"].get_suptitle() for i in (0, 1)]
    assert titles == [f"{TEST_LINES[i][0]}  (heads averaged)" for i in (0, 1)]


def test_heatmap_sentences_are_picked_by_length() -> None:
    sources = ["zu kurz", "eins zwei drei vier fünf", " ".join(["wort"] * 16), "a b c d e f g", "h i j k l"]
    assert report.heatmap_lines(sources) == [2, 4]
    assert report.heatmap_lines(sources[:1]) == []


def test_no_model_means_no_heatmaps_and_a_reason(built: tuple[str, dict]) -> None:
    text, _ = built
    assert "No attention heatmaps:" in section(text, "## Cross-attention (zz-first)")


def test_the_student_stages_scores_show_when_distillation_was_on_and_not_when_off(tmp_path):
    paths = write_inputs(tmp_path)
    student = tmp_path / "reports/student"
    files.write_json(student / "summary.json", {"enabled": False, "why": "distill.enabled is false"})
    assert "## The student" not in build(paths, student_dir=student)
    files.write_json(student / "summary.json", SUMMARY)
    files.write_json(student / "metrics.json", METRICS)
    with pytest.raises(UserError, match=r"metrics-int8.json: no such file; run the stage that makes it"):
        build(paths, student_dir=student)  # its int8 scores (distill.student.quantization) are missing
    files.write_json(student / "metrics-int8.json", METRICS)
    assert "student, int8" in section(build(paths, student_dir=student), "## The student")

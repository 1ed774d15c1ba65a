"""pipeline/experiments/pairs.py and `python -m pipeline recipes`: the queued recipes and sweep, and the
table made from runs in a temporary MLflow store.

The runs are logged as train and score log them (Tracker, score.score on made-up hypotheses of the pairs'
val and test sets). ru-en: the baseline garbles 30% of the words everywhere; lowres is the best on every
test set (5%) but worse on val (35%); a custom run (--name) is the best on val (10%) and no better on test
(30%): best-by-val must pick the custom run. Two ranking runs (val only; one better than its center) and a
failed one; the README's old `ru-en` run is no experiment of the table's. en-ms: lowres only, no
baseline, scored against references other than the ones the table is given.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sacrebleu
import yaml
from click.testing import CliRunner

from pipeline import files
from pipeline.data import corpora
from pipeline.errors import UserError
from pipeline.experiments import pairs
from pipeline.reporting.hypotheses import key_of
from pipeline.reporting.metrics import paired_test
from pipeline.reporting.runs import RunRecord
from pipeline.reporting.significance import sha256_of
from pipeline.stages import recipes, score
from pipeline.tracking import metadata
from pipeline.tracking.tracker import Tracker
from tests.support.repo import MIRROR, REPO
from tests.support.tables import garble, references, table_rows

LINES = 40
COMMIT = "a" * 40
PARAMS = REPO / "params.yaml"
RAW = yaml.safe_load(PARAMS.read_text(encoding="utf-8"))
RU_TESTS = ["newstest2018-ruen", "newstest2020-ruen", "ntrex128-enru"]
# What experiments/ says, written out again here so that a changed file is noticed
RU_EN_README_TRAIN = [
    *(f"newstest{year}-ruen" for year in range(2012, 2017)),
    "tatoeba-v2021-08-07-enru",
    "tico19-enru",
]
NEWS_EN = [f"newstest{year}-deen" for year in (*range(2009, 2019), 2020)]
INDONESIAN = {"tatoeba-enid", "tico19-id"}


@dataclass(frozen=True)
class Made:
    ids: dict[str, str]
    hyps: dict[str, dict[str, list[str]]]  # run -> set (val or a test set) -> hypotheses
    refs: dict[str, list[str]]  # ru-en's sets
    report: str
    saved: dict[str, Any]
    out: Path  # the table's pairs.md; its archive is pairs/runs beside it


def raw_params(changes: dict[str, object]) -> dict[str, Any]:
    raw = json.loads(json.dumps(RAW))
    for key, value in changes.items():
        section, name = key.split(".", 1)
        raw[section][name] = value
    return raw


def log_run(root: Path, patch: pytest.MonkeyPatch, exp: str, changes: dict[str, object], hyps, refs_dir):
    """A run as train logs it (params, totals, summary), then score's scores and hypotheses; its id."""
    patch.setenv("DVC_EXP_NAME", exp)
    patch.setattr(metadata, "git_commit", lambda cwd=None: COMMIT)
    run = Tracker.start(raw_params(changes), "nmt", exp, tags={"n_params": 1000})
    run.log_metrics({"train_seconds": 3600.0 + 60 * len(exp), "tokens_per_s": 3000.0}, step=100)
    summary = root / exp / "train" / "summary.json"
    files.write_json(summary, {"epochs": 3, "stopped": "max_steps", "steps": 100, "best_step": 100})
    run.log_artifact(summary, "train")
    run.save_run_file(root / exp / "model" / "mlflow_run.json")
    run.end("FINISHED")
    for key, lines in hyps.items():
        files.write_lines(root / exp / "decode" / ("val.hyp" if key == "val" else f"test/{key}.hyp"), lines)
    score.score(root / exp / "decode", refs_dir, root / exp / "metrics.json", root / exp / "model")
    assert run.run_id is not None
    return run.run_id


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Made:
    root = tmp_path_factory.mktemp("pairs")
    refs = {name: references(LINES, seed=i) for i, name in enumerate(["val", *RU_TESTS])}
    ms_refs = {"val": references(LINES, seed=10), "ntrex128-enms": references(LINES, seed=11)}
    for folder, sets in (("ru", refs), ("ms", ms_refs)):
        for name, lines in sets.items():
            files.write_lines(root / folder / ("val.tgt" if name == "val" else f"test/{name}.tgt"), lines)
    other_ms = root / "ms-other" / "test" / "ntrex128-enms.tgt"  # what the table is given for en-ms
    files.write_lines(other_ms, references(LINES, seed=12))
    files.write_lines(other_ms.with_suffix(".src"), garble(references(LINES, seed=12), 0.5, 13))

    def some(sets: dict[str, list[str]], val: float, test: float, seed: int) -> dict[str, list[str]]:
        return {n: garble(lines, val if n == "val" else test, seed) for n, lines in sets.items()}

    ru = lambda recipe, steps=None: pairs.recipe_experiment("ru-en", recipe, steps).changes
    center = pairs.sweep_experiments(RAW, "ru-en", "lowres", 300, ("dropout",))
    dropout = next(e for e in center if e.value == "0.2")
    custom = ru("lowres") | {"model.d_model": 512}
    logged = [
        ("ru-en-baseline", ru("baseline"), some(refs, 0.3, 0.3, 1), root / "ru"),
        ("ru-en-lowres", ru("lowres"), some(refs, 0.35, 0.05, 2), root / "ru"),
        ("ru-en-lowres-big", custom, some(refs, 0.1, 0.3, 3), root / "ru"),
        ("ru-en-lowres-s300", ru("lowres", 300), some(refs, 0.3, 0.01, 4), root / "ru"),
        (dropout.name, dropout.changes, some(refs, 0.2, 0.5, 5), root / "ru"),
        (
            "ru-en",
            ru("baseline") | {"data.train": RU_EN_README_TRAIN},
            some(refs, 0.0, 0.0, 6),
            root / "ru",
        ),
        (
            "en-ms-lowres",
            pairs.recipe_experiment("en-ms", "lowres").changes,
            some(ms_refs, 0.5, 0.5, 7),
            root / "ms",
        ),
    ]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pairs, "experiment_baselines", dict)  # not this checkout's own experiments
        patch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{root / 'mlflow.db'}")
        ids = {
            exp: log_run(root, patch, exp, changes, hyps, refs_dir) for exp, changes, hyps, refs_dir in logged
        }
        patch.setenv("DVC_EXP_NAME", "ru-en-lowres-s300-lr-0.002")
        failed = Tracker.start(raw_params(ru("lowres", 300) | {"train.lr": 0.002}), "nmt", "lr")
        failed.end("FAILED")
        ids["failed"] = str(failed.run_id)
        out = root / "reports" / "pairs.md"
        args = ["table", "--params", str(PARAMS), "--refs", f"ru-en={root / 'ru'}"]
        args += ["--refs", f"en-ms={root / 'ms-other'}", "--out", str(out)]
        result = CliRunner().invoke(recipes.command, args)
    assert result.exit_code == 0, result.output
    saved = json.loads(out.with_suffix(".json").read_text(encoding="utf-8"))
    return Made(ids, {e: h for e, _, h, _ in logged}, refs, out.read_text(encoding="utf-8"), saved, out)


def test_queue_prints_the_exact_dvc_command_of_the_baseline_on_the_new_data() -> None:
    result = CliRunner().invoke(
        recipes.command, ["queue", "--pair", "ru-en", "--params", str(PARAMS), "--dry-run"]
    )
    assert result.exit_code == 0, result.output
    train = ", ".join([*RU_EN_README_TRAIN, "mlqe-pe-ruen-train", "mlqe-pe-ruen-dev", "newstest2020-enru"])
    assert result.output.splitlines() == [
        "dvc exp run --queue -n ru-en-baseline -S data.src_lang=ru -S data.tgt_lang=en "
        f"-S 'data.train=[{train}]' -S 'data.val=[newstest2017-ruen]' "
        "-S 'data.test=[newstest2018-ruen, newstest2020-ruen, ntrex128-enru]'"
    ]
    assert "newstest2019-enru" not in result.output  # NTREX-128's source: a test set of this pair


def test_a_ranking_run_is_capped_and_named_by_its_steps() -> None:
    args = ["queue", "--pair", "en-ms", "--recipe", "lowres", "--steps", "2000", "--dry-run"]
    result = CliRunner().invoke(recipes.command, [*args, "--params", str(PARAMS)])
    assert result.exit_code == 0, result.output
    (line,) = result.output.splitlines()
    words = shlex.split(line)
    assert words[:6] == ["dvc", "exp", "run", "--queue", "-n", "en-ms-lowres-s2000"]
    settings = words[7::2]
    # exactly 2,000 updates: the recipe's epoch cap (15 for en-ms) and early stopping would end it first
    assert {"train.max_epochs=10000", "train.max_steps=2000", "train.patience=0"} <= set(settings)
    assert "train.max_epochs=15" not in settings
    assert "bpe.vocab_size=1000" in settings and "train.subword_sampling=unigram" in settings
    assert "model.encoder_layers=10" in settings  # the en-ms baseline's settings stay


def test_a_sweep_runs_the_axes_or_the_values_it_is_given() -> None:
    plan = pairs.sweep_experiments(RAW, "en-ms", "lowres", 500, ("depth=3x3", "sampling", "depth=6x6"))
    assert [e.name.removeprefix("en-ms-lowres-s500") for e in plan] == [
        "",
        "-depth-3x3",
        "-depth-6x6",  # in the grid's order, whatever order they were named in
        *(f"-sampling-{v}" for v in pairs.GRID["sampling"] if v != "unigram-0.2"),  # 0.2: the center
    ]
    for bad in ("depth=4x4", "heads"):
        with pytest.raises(UserError, match=bad.split("=")[0]):
            pairs.sweep_experiments(RAW, "en-ms", "lowres", 500, (bad,))


def test_every_queued_experiment_is_valid_params_and_a_sweep_changes_one_thing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    queued_names(monkeypatch, set())  # a dry sweep asks what is taken: nothing, not this checkout's store
    for pair in pairs.PAIRS:
        for recipe in (r for r in pairs.RECIPES if pairs.RECIPES[r].applies(pair)):
            exp = pairs.recipe_experiment(pair, recipe)
            assert set(exp.changes) >= set(pairs.PAIRS[pair].base)
            pairs.check(RAW, exp)
            sources = exp.changes.get("data.sources", {})
            for name in (*exp.changes["data.train"], *exp.changes["data.test"]):  # type: ignore[misc]
                assert name in corpora.SETS or sources[name]["catalog"] in corpora.SETS  # type: ignore[index]
            tgt_lang = exp.changes["data.tgt_lang"]
            for name in exp.changes.get("backtranslation.mono", []):  # type: ignore[attr-defined]
                assert tgt_lang in corpora.SETS[name].langs  # text in the target language
            result = CliRunner().invoke(
                recipes.command,
                [
                    "sweep",
                    "--pair",
                    pair,
                    "--from",
                    recipe,
                    "--steps",
                    "500",
                    "--params",
                    str(PARAMS),
                    "--dry-run",
                ],
            )
            assert result.exit_code == 0, result.output
            lines = result.output.splitlines()
            plan = pairs.sweep_experiments(RAW, pair, recipe, 500)
            assert [shlex.join(pairs.dvc_command(e)) for e in plan] == lines
            center = pairs.variant_params(RAW, plan[0].changes)
            for exp in plan[1:]:
                assert exp.axis is not None and exp.value is not None
                assert exp.name == f"{pair}-{recipe}-s500-{exp.axis}-{exp.value}"
                changed = {k for k, v in exp.changes.items() if plan[0].changes.get(k, object()) != v}
                assert changed <= set(pairs.GRID[exp.axis][exp.value])  # one axis's change only
                assert pairs.check(RAW, exp) != center  # never the center again
                assert exp.changes["train.max_steps"] == 500


def test_the_multilingual_recipe_adds_indonesian_as_a_tagged_second_target() -> None:
    args = ["queue", "--pair", "en-ms", "--recipe", "multilingual", "--dry-run", "--params", str(PARAMS)]
    result = CliRunner().invoke(recipes.command, args)
    assert result.exit_code == 0, result.output
    settings = shlex.split(result.output)[7::2]
    # a mapping goes in with Hydra's ++: `data.sources=` would refuse the keys params.yaml's {} lacks
    assert (
        "++data.sources={tatoeba-enid: {catalog: tatoeba-v2021-08-07-enid, tgt_lang: id}, " in result.output
    )
    assert "data.train=[tatoeba-v2021-08-07-enms, tico19-enms, tatoeba-enid, tico19-id]" in settings
    params = pairs.check(RAW, pairs.recipe_experiment("en-ms", "multilingual"))
    assert yaml.safe_load(next(s for s in settings if "data.sources" in s).split("=", 1)[1]) == {
        name: {k: v for k, v in vars(spec).items() if v is not None and k in ("catalog", "tgt_lang")}
        for name, spec in params.data.sources.items()
    }
    refused = CliRunner().invoke(
        recipes.command, ["queue", "--pair", "en-ms", "--recipe", "back-translation"]
    )
    assert refused.exit_code != 0 and "for ru-en only" in refused.output  # no Malay text to translate


def test_the_multilingual_recipe_adds_german_news_into_the_same_english_for_ru_en() -> None:
    params = pairs.check(RAW, exp := pairs.recipe_experiment("ru-en", "multilingual"))
    german = {name: s for name, s in params.data.sources.items() if s.src_lang == "de"}
    assert sorted(s.catalog for s in german.values()) == sorted(NEWS_EN)
    assert set(german) < set(params.data.train) and params.data.tgt_lang == "en"
    assert {s.tgt_lang for s in params.data.sources.values()} <= {None, "en"}  # one target: no tags
    assert exp.changes["train.max_epochs"] == 8


def test_the_multilingual_news_recipe_adds_english_to_german_news_as_a_third_target() -> None:
    params = pairs.check(RAW, pairs.recipe_experiment("en-ms", "multilingual-news"))
    german = {name: s for name, s in params.data.sources.items() if s.tgt_lang == "de"}
    assert sorted(s.catalog for s in german.values()) == sorted(NEWS_EN)
    assert set(german) | INDONESIAN < set(params.data.train)
    assert (params.data.src_lang, params.data.tgt_lang) == ("en", "ms")
    assert params.train.source_temperature == 2.0 and params.bpe.vocab_size == 8000
    refused = CliRunner().invoke(
        recipes.command, ["queue", "--pair", "ru-en", "--recipe", "multilingual-news"]
    )
    assert refused.exit_code != 0 and "for en-ms only" in refused.output


def test_the_back_translation_recipe_sets_the_reverse_models_settings_apart() -> None:
    params = pairs.check(RAW, exp := pairs.recipe_experiment("ru-en", "back-translation"))
    assert params.backtranslation.enabled and list(params.backtranslation.mono) == NEWS_EN
    assert params.backtranslation.reverse.train.max_epochs == 8 and params.train.max_epochs == 9
    assert "backtranslation.reverse.train.max_epochs=8" in pairs.settings(exp.changes)
    typo = pairs.Experiment("x", "ru-en", pairs.CUSTOM, {"backtranslation.reverse.train.max_epoch": 8})
    with pytest.raises(UserError, match=r"backtranslation\.reverse\.train\.max_epoch: unknown key"):
        pairs.check(RAW, typo)
    deeper = pairs.Experiment("x", "ru-en", pairs.CUSTOM, {"train.max_epochs.x": 8})
    with pytest.raises(UserError, match=r"train\.max_epochs\.x: max_epochs is a setting, not a section"):
        pairs.check(RAW, deeper)


def queued_names(
    monkeypatch: pytest.MonkeyPatch, taken: set[str], archived: frozenset[str] = frozenset()
) -> list[str]:
    """`taken` as the repository's experiments and `archived` as the table's archived runs; -> the
    names `dvc exp run --queue` is then called with."""
    names: list[str] = []

    def dvc(args: list[str], **kw: Any) -> Any:
        names.append(args[args.index("-n") + 1])

    monkeypatch.setattr(pairs, "experiment_names", lambda: taken)
    monkeypatch.setattr(pairs, "archived_names", lambda: set(archived))
    monkeypatch.setattr(pairs.subprocess, "run", dvc)
    return names


def test_a_sweep_run_again_queues_only_what_is_not_queued_running_or_finished(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    names = queued_names(monkeypatch, {"en-ms-lowres-s500", "en-ms-lowres-s500-dropout-0.2"})
    args = ["sweep", "--pair", "en-ms", "--steps", "500", "--only", "dropout", "--params", str(PARAMS)]
    result = CliRunner().invoke(recipes.command, args)
    assert result.exit_code == 0, result.output
    assert names == ["en-ms-lowres-s500-dropout-0.1", "en-ms-lowres-s500-dropout-0.4"]  # 0.3: lowres's own
    assert "skipped en-ms-lowres-s500: already queued, running or finished" in result.output


def test_a_run_archived_by_an_earlier_checkout_is_not_queued_again(monkeypatch: pytest.MonkeyPatch) -> None:
    names = queued_names(monkeypatch, set(), archived=frozenset({"en-ms-lowres-s500"}))
    args = ["sweep", "--pair", "en-ms", "--steps", "500", "--only", "dropout=0.1", "--params", str(PARAMS)]
    # the dry run shows what the sweep would queue: the centre is skipped there too
    shown = CliRunner().invoke(recipes.command, [*args, "--dry-run"])
    assert shown.exit_code == 0 and names == [], shown.output
    (skipped, command) = shown.output.splitlines()
    assert skipped.startswith("skipped en-ms-lowres-s500: ")
    assert shlex.split(command)[:5] == ["dvc", "exp", "run", "--queue", "-n"]
    assert shlex.split(command)[5] == "en-ms-lowres-s500-dropout-0.1"
    result = CliRunner().invoke(recipes.command, args)
    assert result.exit_code == 0, result.output
    assert names == ["en-ms-lowres-s500-dropout-0.1"]
    assert (
        f"skipped en-ms-lowres-s500: already queued, running or finished (archived in {pairs.ARCHIVE})"
        in (result.output)
    )
    refused = CliRunner().invoke(
        recipes.command,
        [
            "queue",
            "--pair",
            "en-ms",
            "--recipe",
            "lowres",
            "--set",
            "train.max_steps=500",
            "--name",
            "en-ms-lowres-s500",
            "--params",
            str(PARAMS),
        ],
    )
    assert refused.exit_code != 0 and names == ["en-ms-lowres-s500-dropout-0.1"]
    assert f"earlier checkout ({pairs.ARCHIVE / 'en-ms-lowres-s500'}.json holds it)" in refused.output
    assert "another --name" in refused.output


def test_a_queued_experiments_name_taken_already_is_refused_naming_the_fix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    names = queued_names(monkeypatch, {"ru-en-baseline"})
    result = CliRunner().invoke(recipes.command, ["queue", "--pair", "ru-en", "--params", str(PARAMS)])
    assert result.exit_code != 0 and names == []
    assert "ru-en-baseline is already queued, running or finished" in result.output
    assert "dvc queue remove ru-en-baseline" in result.output and "--name" in result.output


def test_a_bad_change_is_refused_before_anything_is_queued() -> None:
    args = ["queue", "--pair", "en-ms", "--set", "model.dropout=1.5", "--name", "en-ms-x", "--dry-run"]
    result = CliRunner().invoke(recipes.command, [*args, "--params", str(PARAMS)])
    assert result.exit_code != 0 and "model.dropout" in result.output and "dvc exp run" not in result.output
    args = ["queue", "--pair", "en-ms", "--set", "model.dropout=0.2", "--dry-run"]  # no --name
    assert CliRunner().invoke(recipes.command, [*args, "--params", str(PARAMS)]).exit_code != 0


def test_the_json_has_the_issues_schema(made: Made) -> None:
    runs = {r["name"]: r for r in made.saved["runs"]}
    assert set(runs) == {"ru-en-baseline", "ru-en-lowres", "ru-en-lowres-big", "en-ms-lowres"}  # not `ru-en`
    base = runs["ru-en-baseline"]
    assert {"name", "pair", "recipe", "commit", "params", "train_minutes", "val", "test"} <= set(base)
    assert (base["pair"], base["recipe"], base["commit"]) == ("ru-en", "baseline", COMMIT)
    assert base["params"]["data.src_lang"] == "ru" and "model.dropout" not in base["params"]
    assert runs["ru-en-lowres"]["params"]["model.dropout"] == 0.3
    assert runs["ru-en-lowres"]["params"]["data.test"] == RU_TESTS
    assert runs["ru-en-lowres-big"]["recipe"] == "custom"
    assert base["train_minutes"] == round((3600 + 60 * len("ru-en-baseline")) / 60, 1)
    assert base["upstream_minutes"] == {} and base["total_minutes"] == base["train_minutes"]
    assert set(base["test"]) == set(RU_TESTS)
    for name in RU_TESTS:
        entry = base["test"][name]
        assert set(entry) >= {"bleu", "chrf", "ci95", "p_vs_baseline"}
        assert entry["p_vs_baseline"] is None and set(entry["ci95"]) == {"bleu", "chrf"}
    assert set(base["val"]) == {"bleu", "chrf"} and base["val"]["bleu"] > 0


def test_p_values_are_the_paired_test_against_the_pairs_baseline(made: Made) -> None:
    runs = {r["name"]: r for r in made.saved["runs"]}
    for name in ("ru-en-lowres", "ru-en-lowres-big"):
        for test in RU_TESTS:
            systems = {"base": made.hyps["ru-en-baseline"][test], name: made.hyps[name][test]}
            expected = paired_test(systems, made.refs[test])[name]
            got = runs[name]["test"][test]
            assert got["p_vs_baseline"] == {m: expected[m].p_value for m in ("bleu", "chrf")}
            assert got["delta_vs_baseline"] == {m: expected[m].delta for m in ("bleu", "chrf")}
    assert all(runs["ru-en-lowres"]["test"][t]["p_vs_baseline"]["bleu"] < 0.05 for t in RU_TESTS)


def test_the_source_copied_as_the_translation_is_scored_where_the_source_is_given(made: Made) -> None:
    refs_dir = made.out.parent.parent / "ms-other" / "test"
    source, refs = (files.read_lines(refs_dir / f"ntrex128-enms.{side}") for side in ("src", "tgt"))
    expected = {
        "bleu": round(sacrebleu.corpus_bleu(source, [refs]).score, 2),
        "chrf": round(sacrebleu.corpus_chrf(source, [refs]).score, 2),
    }
    assert made.saved["pairs"]["en-ms"]["copy_source"] == {"ntrex128-enms": expected}
    assert 0 < expected["chrf"] < 100
    assert made.saved["pairs"]["ru-en"]["copy_source"] == {}  # its references came without sources
    assert f"ntrex128-enms BLEU {expected['bleu']:.1f}, chrF {expected['chrf']:.1f}" in made.report


def test_the_best_is_picked_by_val_never_by_test(made: Made) -> None:
    assert made.saved["pairs"]["ru-en"]["best_val"] == "ru-en-lowres-big"  # not lowres, the best on test
    assert [r["name"] for r in made.saved["runs"] if r["best_val"]] == ["ru-en-lowres-big", "en-ms-lowres"]
    assert made.saved["pairs"]["ru-en"]["best_val_sweep"] == "ru-en-lowres-s300-dropout-0.2"
    table = table_rows(made.report.split("## ru-en")[1].split("### Sweep")[0])
    assert [r[0] for r in table[1:]] == ["ru-en-baseline", "ru-en-lowres", "ru-en-lowres-big ★"]


def test_ranking_runs_have_val_scores_only(made: Made) -> None:
    sweep = {r["name"]: r for r in made.saved["sweep"]}
    assert set(sweep) == {"ru-en-lowres-s300", "ru-en-lowres-s300-dropout-0.2", "ru-en-lowres-s300-lr-0.002"}
    assert all("test" not in r for r in sweep.values())
    dropout = sweep["ru-en-lowres-s300-dropout-0.2"]
    assert (dropout["steps"], dropout["axis"], dropout["value"]) == (300, "dropout", "0.2")
    assert sweep["ru-en-lowres-s300-lr-0.002"]["status"].startswith(
        f"no scored run yet (latest {made.ids['failed'][:8]}"
    )
    rows = {r[0]: r for r in table_rows(made.report.split("### Sweep")[1].split("## en-ms")[0])}
    delta = dropout["val"]["bleu"] - sweep["ru-en-lowres-s300"]["val"]["bleu"]
    assert rows["ru-en-lowres-s300-dropout-0.2 ★"][-1] == f"{delta:+.1f}"


def test_a_pair_without_a_baseline_says_so_and_other_references_are_refused(made: Made) -> None:
    assert made.saved["pairs"]["en-ms"]["baseline"] is None
    assert made.saved["pairs"]["en-ms"]["status"].startswith("no scored baseline run (en-ms-baseline)")
    assert "queue --pair en-ms --recipe baseline" in made.report.split("## en-ms")[1]
    ms = next(r for r in made.saved["runs"] if r["name"] == "en-ms-lowres")
    assert ms["test"]["ntrex128-enms"]["p_vs_baseline"] is None and ms["test"]["ntrex128-enms"]["bleu"] > 0
    assert ms["test"]["ntrex128-enms"]["ci95"] is None
    assert any(
        n.startswith("ntrex128-enms: en-ms-lowres was scored against other references")
        for n in made.saved["notes"]
    )


@pytest.mark.skipif(not (MIRROR / "raw.githubusercontent.com").is_dir(), reason="no corpus mirror")
def test_without_refs_the_test_references_come_from_the_catalog(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("CORPUS_MIRROR", str(MIRROR))
    where, how, notes = pairs.references("en-ms", PARAMS, None, True, tmp_path / "refs")
    assert notes == [] and where is not None and "mirror" in str(how)
    lines = files.read_lines(where / "test" / "ntrex128-enms.tgt")
    assert len(lines) == corpora.SETS["ntrex128-enms"].lines
    # The same bytes as the download stage writes for the pair (what each run's score stage hashed).
    from pipeline.stages import download

    data = pairs.variant_params(RAW, pairs.PAIRS["en-ms"].base).data
    download.download(data, tmp_path / "raw")
    name = "test/ntrex128-enms.tgt"
    assert sha256_of(where / name) == sha256_of(tmp_path / "raw" / name)
    # NTREX-128's English copied as its Malay: the floor docs/low-resource.md quotes
    assert pairs.copy_source_scores(where, ["ntrex128-enms"]) == (
        {"ntrex128-enms": {"bleu": 3.84, "chrf": 21.66}},
        [],
    )


def test_a_source_that_does_not_match_its_reference_gets_a_note_not_a_floor(tmp_path: Path) -> None:
    (tmp_path / "test").mkdir()
    ref = pairs.references_path(tmp_path, key_of("ntrex128-enms"))
    files.write_lines(ref, ["Kucing itu tidur.", "Dia membaca buku."])
    files.write_lines(ref.with_suffix(".src"), ["The cat sleeps."])  # one line short
    scores, notes = pairs.copy_source_scores(tmp_path, ["ntrex128-enms", "newstest2018-ruen"])
    assert scores == {}
    assert len(notes) == 2
    assert "ntrex128-enms" in notes[0] and "has 1 lines" in notes[0] and "2" in notes[0]
    assert notes[1].startswith("newstest2018-ruen: no source beside the reference")
    files.write_lines(ref.with_suffix(".src"), ["The cat sleeps.", "Dia membaca buku."])
    scores, notes = pairs.copy_source_scores(tmp_path, ["ntrex128-enms"])
    assert notes == [] and 0 < scores["ntrex128-enms"]["bleu"] < 100


def test_the_table_outlives_its_mlflow_store(
    made: Made, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A later session has a fresh checkout: no MLflow database, only the archive committed to git."""
    archive = made.out.parent / "pairs" / "runs"
    finished = {r["name"] for r in made.saved["runs"]} | {
        r["name"] for r in made.saved["sweep"] if r["status"] == "finished"
    }
    assert {p.stem for p in archive.glob("*.json")} == finished  # the failed run is not archived
    monkeypatch.setattr(pairs, "experiment_baselines", dict)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'absent.db'}")
    out = tmp_path / "pairs.md"
    args = ["table", "--params", str(PARAMS), "--refs", f"ru-en={made.out.parent.parent / 'ru'}"]
    args += ["--refs", f"en-ms={made.out.parent.parent / 'ms-other'}", "--out", str(out)]
    args += ["--archive", str(archive)]
    result = CliRunner().invoke(recipes.command, args)
    assert result.exit_code == 0, result.output
    again = json.loads(out.with_suffix(".json").read_text(encoding="utf-8"))
    assert again["runs"] == made.saved["runs"]  # scores, intervals and p-values recomputed alike
    finished_sweep = [r for r in made.saved["sweep"] if r["status"] == "finished"]
    assert again["sweep"] == finished_sweep
    assert any(n.startswith("MLflow unavailable") for n in again["notes"])


def test_a_damaged_archive_entry_is_named_with_its_fix(tmp_path: Path) -> None:
    from pipeline.experiments import archive as run_archive

    (tmp_path / "ru-en-lowres.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(UserError, match=r"ru-en-lowres\.json: not an archived run .*git checkout"):
        run_archive.load_all(tmp_path)


def test_the_parent_recipe_starts_from_a_fetched_parent_at_a_fine_tuning_rate() -> None:
    for pair, parent in (("en-ms", "en-ms-multilingual"), ("ru-en", "ru-en-baseline")):
        args = ["queue", "--pair", pair, "--recipe", "parent", "--dry-run", "--params", str(PARAMS)]
        result = CliRunner().invoke(recipes.command, args)
        assert result.exit_code == 0, result.output
        settings = shlex.split(result.output)[7::2]
        # absolute: a queued run works in a copy of the repository without the git-ignored data/
        assert f"train.init_from={Path.cwd() / 'data' / 'parents' / parent}" in settings
        assert {"train.lr=0.0003", "train.warmup_steps=100"} <= set(settings)
    news = pairs.recipe_experiment("ru-en", "parent").changes["data.train"]
    assert news == [*(f"newstest{y}-ruen" for y in range(2012, 2017)), "newstest2020-enru"]


def test_the_parent_recipe_starts_from_another_experiment_named_by_parent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = ["queue", "--pair", "ru-en", "--params", str(PARAMS)]
    args = [*base, "--recipe", "parent", "--parent", "ru-en-back-translation"]
    result = CliRunner().invoke(recipes.command, [*args, "--dry-run"])
    assert result.exit_code == 0, result.output
    command = shlex.split(result.output)
    assert command[5] == "ru-en-parent-back-translation"  # the name says what it started from
    assert f"train.init_from={pairs.parent_dir('ru-en-back-translation')}" in command[7::2]
    for bad, why in (
        (["--recipe", "lowres", "--parent", "ru-en-baseline"], "--recipe lowres starts from no parent"),
        (["--recipe", "parent", "--parent", "en-ms-baseline"], "not an experiment of ru-en"),
    ):
        result = CliRunner().invoke(recipes.command, [*base, *bad, "--dry-run"])
        assert result.exit_code != 0 and why in result.output
    # a changed recipe (--set, --name) still starts from, and fetches, its parent
    monkeypatch.chdir(tmp_path)  # no git repository: no experiments, so nothing to fetch
    result = CliRunner().invoke(recipes.command, [*args, "--set", "train.lr=0.0001", "--name", "ru-en-x"])
    assert result.exit_code != 0 and "no finished DVC experiment ru-en-back-translation" in result.output
    swept = pairs.sweep_experiments(RAW, "en-ms", "parent", 300, ("dropout",))
    assert len(swept) > 1 and {e.parent for e in swept} == {"en-ms-multilingual"}  # each variant fetches it
    own = [*args, "--set", f"train.init_from={tmp_path}", "--name", "ru-en-x", "--dry-run"]
    result = CliRunner().invoke(recipes.command, own)  # a parent of its own: nothing fetched
    assert result.exit_code == 0 and f"train.init_from={tmp_path}" in result.output


def test_a_parent_that_has_not_run_or_does_not_fit_is_refused_before_queueing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no git repository: no experiments
    run = pairs.subprocess.run

    def never_queue(args: list[str], **kw: Any) -> Any:
        assert "exp" not in args, "queued"
        return run(args, **kw)

    monkeypatch.setattr(pairs.subprocess, "run", never_queue)
    args = ["queue", "--pair", "en-ms", "--recipe", "parent", "--params", str(PARAMS)]
    result = CliRunner().invoke(recipes.command, args)
    assert result.exit_code != 0
    assert "no finished DVC experiment en-ms-multilingual" in result.output
    assert "python -m pipeline recipes queue --pair en-ms --recipe multilingual" in result.output

    # a run of it whose model is not in the DVC cache: said so, with the way to make one; nothing kept
    monkeypatch.setattr(pairs, "experiment_rev", lambda name: "c" * 40)
    result = CliRunner().invoke(recipes.command, args)
    assert result.exit_code != 0 and "is not in the DVC cache" in result.output
    assert "--recipe multilingual` first" in result.output
    assert not pairs.parent_dir("en-ms-multilingual").parent.exists() or not any(
        pairs.parent_dir("en-ms-multilingual").parent.iterdir()
    )

    # fetched before, from the newest run of it: the child's 10+2 layers against a 3+3 parent
    rev = "b" * 40
    monkeypatch.setattr(pairs, "experiment_rev", lambda name: rev)
    parent = pairs.parent_dir("en-ms-multilingual")
    parent.mkdir(parents=True)
    files.write_json(parent / pairs.FETCHED, {"experiment": "en-ms-multilingual", "commit": rev})
    (parent / "model.pt").write_bytes(b"weights")
    (parent / "params.yaml").write_text(yaml.safe_dump(RAW), encoding="utf-8")
    result = CliRunner().invoke(recipes.command, args)
    assert result.exit_code != 0  # and never_queue saw no `dvc exp run`
    assert "en-ms-parent: train.init_from" in result.output and "model.encoder_layers" in result.output


def finished_row(name: str, recipe: str, minutes: float, params: dict[str, str] | None = None) -> pairs.Row:
    seconds = {"train_seconds": minutes * 60}
    record = RunRecord(name, id=name, dvc_exp=name, params=params or {}, metrics=seconds)
    return pairs.Row(pairs.Experiment(name, "ru-en", recipe, {}), record, "finished", {})


def test_a_run_counts_the_minutes_of_the_reverse_model_and_parents_it_needed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    looked_up = []

    def committed(name: str, path: str) -> str | None:
        looked_up.append((name, path))
        reverse = {"train_seconds": 2412.0, "best_val_bleu": 6.2, "steps": 5000, "epochs": 8, "device": "cpu"}
        return json.dumps(reverse) if name == "ru-en-back-translation" else None

    monkeypatch.setattr(pairs, "experiment_file", committed)
    base = finished_row("ru-en-baseline", "baseline", 76.6)
    bt = finished_row("ru-en-back-translation", "back-translation", 76.4, {"backtranslation.enabled": "true"})
    lost = finished_row("ru-en-bt-gone", "custom", 70.0, {"backtranslation.enabled": "true"})
    child = finished_row(
        "ru-en-parent-back-translation",
        "parent",
        27.9,
        {"train.init_from": str(pairs.parent_dir("ru-en-back-translation"))},
    )
    orphan = finished_row("ru-en-parent-x", "parent", 10.0, {"train.init_from": "/elsewhere/model"})
    assert [pairs.add_reverse(r) for r in (base, bt, lost, child)] == [False, True, False, False]
    assert looked_up == [(n, pairs.REVERSE_SUMMARY) for n in ("ru-en-back-translation", "ru-en-bt-gone")]
    kept = {"train_seconds": 2412.0, "best_val_bleu": 6.2, "steps": 5000, "epochs": 8}
    assert bt.summary["reverse"] == kept
    assert not pairs.add_reverse(bt)  # there already: not looked up again (the archive keeps it)

    rows = [base, bt, lost, child, orphan]
    pairs.link_upstream(rows, rows)
    assert base.upstream == {} and base.total_minutes == 76.6
    assert bt.upstream == {"reverse model": 40.2} and bt.total_minutes == 116.6
    assert child.upstream == {"parent ru-en-back-translation": 116.6} and child.total_minutes == 144.5
    assert orphan.upstream == {} and lost.upstream == {}  # a parent without a row, a reverse not found
    assert pairs._minutes(child) == "27.9 (+116.6 parent ru-en-back-translation)"
    pairs.link_upstream(rows, rows)  # again: the same, not counted twice
    assert child.total_minutes == 144.5

    # the budget is per training: a run's own and its reverse model's, never its parent's total again
    long = finished_row("ru-en-long", "custom", 95.0, {"backtranslation.enabled": "true"})
    long.summary["reverse"] = {"train_seconds": 91 * 60.0}
    pairs.link_upstream([long], [long])
    assert pairs.over_budget([base, bt, child, long]) == [
        "ru-en-long: its model trained 95.0 minutes, over the 90-minute budget",
        "ru-en-long: its reverse model trained 91.0 minutes, over the 90-minute budget",
    ]


def test_a_run_from_another_parent_is_of_its_recipe_and_a_look_alike_name_is_custom() -> None:
    def record(name: str, parent: str) -> RunRecord:
        return RunRecord(name, dvc_exp=name, params={"train.init_from": f"/x/data/parents/{parent}"})

    known = pairs.known_experiments(set())
    other = pairs.experiment_of(record("ru-en-parent-multilingual", "ru-en-multilingual"), known)
    assert other is not None and (other.recipe, other.parent) == ("parent", "ru-en-multilingual")
    alike = pairs.experiment_of(record("en-ms-parent-lr-0.0001", "en-ms-multilingual"), known)
    assert alike is not None and (alike.recipe, alike.parent) == (pairs.CUSTOM, None)


def test_an_ensemble_run_decodes_with_fetched_members_and_counts_their_minutes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = ["queue", "--pair", "ru-en", "--recipe", "parent", "--params", str(PARAMS)]
    members = ["--ensemble", "ru-en-parent", "--ensemble", "ru-en-baseline"]
    result = CliRunner().invoke(recipes.command, [*args, *members, "--name", "ru-en-ens", "--dry-run"])
    assert result.exit_code == 0, result.output
    listed = f"decode.ensemble=[{pairs.parent_dir('ru-en-parent')}, {pairs.parent_dir('ru-en-baseline')}]"
    assert listed in shlex.split(result.output)
    for bad, why in (
        ([*members], "need --name"),
        (["--ensemble", "en-ms-baseline", "--name", "ru-en-ens"], "not an experiment of ru-en"),
    ):
        result = CliRunner().invoke(recipes.command, [*args, *bad, "--dry-run"])
        assert result.exit_code != 0 and why in result.output
    monkeypatch.chdir(tmp_path)  # no git repository: no experiments, so no member to fetch
    result = CliRunner().invoke(recipes.command, [*args, "--ensemble", "ru-en-gone", "--name", "ru-en-ens"])
    assert result.exit_code != 0 and "no finished DVC experiment ru-en-gone" in result.output

    parent = finished_row("ru-en-baseline", "baseline", 76.6)
    other = finished_row("ru-en-other", "custom", 70.0)
    ensemble = finished_row(
        "ru-en-ens",
        "custom",
        27.9,
        {
            "train.init_from": str(pairs.parent_dir("ru-en-baseline")),
            "decode.ensemble": f"[{pairs.parent_dir('ru-en-other')}, {pairs.parent_dir('ru-en-baseline')}]",
        },
    )
    rows = [parent, other, ensemble]
    pairs.link_upstream(rows, rows)
    assert ensemble.upstream == {"parent ru-en-baseline": 76.6, "ensemble member ru-en-other": 70.0}
    assert ensemble.total_minutes == 174.5  # the parent, a member too, counted once

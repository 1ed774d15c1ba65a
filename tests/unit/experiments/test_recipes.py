"""pipeline/experiments/recipes.py: the experiments' data read from experiments/, and files of the
wrong shape refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pipeline.errors import ParamsError, UserError
from pipeline.experiments import recipes
from pipeline.params.coerce import flatten
from tests.support.repo import REPO

ROOT = REPO / recipes.EXPERIMENTS


def test_the_repositorys_experiments_are_pairs_recipes_and_axes_of_real_settings() -> None:
    pairs = recipes.load_pairs(ROOT)
    assert list(pairs) == ["ru-en", "en-ms"]  # the file's order: the results' sections
    assert pairs["ru-en"].tests == ["newstest2018-ruen", "newstest2020-ruen", "ntrex128-enru"]
    found = recipes.load_recipes(pairs, ROOT)
    assert {"baseline", "lowres", "parent"} <= set(found) and found["baseline"].for_pair("en-ms") == {}
    assert found["parent"].parent == {"en-ms": "en-ms-multilingual", "ru-en": "ru-en-baseline"}
    assert not found["back-translation"].applies("en-ms") and found["lowres"].applies("en-ms")
    grid = recipes.load_grid(ROOT)
    assert grid["vocab"]["1000"] == {"bpe.vocab_size": 1000}
    keys = set(flatten(yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))))
    every = [pairs[p].base for p in pairs] + [r.for_pair(p) for r in found.values() for p in pairs]
    every += [s for values in grid.values() for s in values.values()]
    named = {k for settings in every for k in settings if not k.startswith("data.sources")}
    assert named <= keys, named - keys  # each a key of params.yaml, as dvc exp run -S needs


def test_the_ablation_variants_are_named_settings_over_params_yaml() -> None:
    variants = recipes.load_variants(ROOT / "ablation.yaml")
    assert next(iter(variants)) == "abl-post-ln" and variants["abl-post-ln"].changes == {"model.norm": "post"}
    assert variants["abl-10-2"].changes["model.n_layers"] is None  # null: the depth is set per side


def test_a_per_pair_setting_overrides_the_recipes_own() -> None:
    lowres = recipes.load_recipes(recipes.load_pairs(ROOT), ROOT)["lowres"]
    assert lowres.changes["train.max_tokens"] == 1024 and "bpe.vocab_size" not in lowres.changes
    assert lowres.for_pair("ru-en")["bpe.vocab_size"] == 2000 != lowres.for_pair("en-ms")["bpe.vocab_size"]


def write(
    root: Path, pairs: str, recipe: str | None = None, grid: str = "lr: {'0.1': {train.lr: 0.1}}"
) -> Path:
    (root / "recipes").mkdir(parents=True)
    (root / "pairs.yaml").write_text(pairs)
    (root / "grid.yaml").write_text(grid)
    if recipe is not None:
        (root / "recipes" / "mine.yaml").write_text(recipe)
    return root


PAIR = "de-en: {why: the default, set: {data.src_lang: de}}\n"


@pytest.mark.parametrize(
    ("pairs", "recipe", "grid", "message"),
    [
        (PAIR, "what: x\nset: {lr: 1}\n", None, r"mine.yaml: set: expected settings, a mapping of dotted"),
        (PAIR, "what: x\nchanges: {train.lr: 1}\n", None, r"mine.yaml: unknown key\(s\) \['changes'\]"),
        (PAIR, "per_pair: {fr-en: {train.lr: 1}}\n", None, r"pair\(s\) \['fr-en'\] are not in"),
        (PAIR, "what: [unclosed\n", None, r"mine.yaml: not valid YAML"),
        ("de-en: {set: {data.src_lang: de}, base: 1}\n", None, None, r"de-en: unknown key\(s\) \['base'\]"),
        (PAIR, None, "lr: {}\n", r"grid.yaml: lr: expected value labels"),
        ("- de-en\n", None, None, r"pairs.yaml: expected a mapping"),
    ],
)
def test_a_file_of_the_wrong_shape_is_refused_naming_it(
    tmp_path: Path, pairs: str, recipe: str | None, grid: str | None, message: str
) -> None:
    root = write(tmp_path / "experiments", pairs, recipe, *([grid] if grid else []))
    with pytest.raises(UserError, match=message):
        found = recipes.load_pairs(root)
        recipes.load_recipes(found, root)
        recipes.load_grid(root)


def test_a_missing_folder_says_where_it_comes_from(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no such file; experiments/ comes with the repository"):
        recipes.load_pairs(tmp_path)


def test_settings_are_spelled_as_dvc_exp_run_s_takes_them() -> None:
    given = {"bpe.joint": False, "model.n_layers": None, "data.test": ["a", "b"], "data.sources": {"x": {}}}
    assert recipes.settings(given) == [
        "bpe.joint=false",
        "model.n_layers=null",
        "data.test=[a, b]",
        "++data.sources={x: {}}",  # a mapping: added to params.yaml's, not merged key by key
    ]


def test_a_variant_is_params_yaml_with_its_settings_checked() -> None:
    raw = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
    assert recipes.variant_params(raw, {"model.norm": "post"}).model.norm == "post"
    assert raw["model"]["norm"] == "pre"  # the raw mapping itself is left as it was
    with pytest.raises(ParamsError, match=r"model\.norm\.x: norm is a setting, not a section"):
        recipes.variant_params(raw, {"model.norm.x": 1})
    with pytest.raises(ParamsError, match=r"model\.norm"):
        recipes.variant_params(raw, {"model.norm": "sideways"})

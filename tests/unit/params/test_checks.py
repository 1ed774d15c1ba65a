"""params.yaml is loaded into typed sections; bad keys and values are refused with one line, exit 2."""

import copy
import subprocess
import sys

import pytest
import yaml

from pipeline import params as P
from pipeline.errors import ParamsError
from tests.support.repo import REPO


@pytest.fixture
def raw() -> dict:
    return yaml.safe_load((REPO / "params.yaml").read_text())


def refused(raw: dict) -> str:
    with pytest.raises(ParamsError) as e:
        P.from_dict(raw)
    message = e.value.message
    assert "\n" not in message
    return message


def test_defaults_load_typed(params):
    assert params.model.d_model == 256 and params.model.n_encoder_layers == params.model.n_layers
    assert params.train.betas == (0.9, 0.98) and isinstance(params.train.lr, float)
    assert P.from_dict(params.to_dict()) == params


def test_per_stack_depths_win_over_n_layers_only_where_set(raw):
    raw["model"].update(n_layers=None, encoder_layers=10, decoder_layers=2)
    m = P.from_dict(copy.deepcopy(raw)).model
    assert (m.n_encoder_layers, m.n_decoder_layers) == (10, 2)
    raw["model"].update(n_layers=6, encoder_layers=None)  # n_layers sizes the stack left null
    m = P.from_dict(raw).model
    assert (m.n_encoder_layers, m.n_decoder_layers) == (6, 2)


# --- settings that cannot take effect: refused, never silently ignored (issue 30) -------


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (  # the trap: `dvc exp run -S model.n_layers=6` on a 10+2 workspace trained 10+2 again
            {"model": {"n_layers": 6, "encoder_layers": 10, "decoder_layers": 2}},
            "model.n_layers: 6 has no effect while model.encoder_layers and model.decoder_layers are both "
            "set (10, 2): set those, or null them",
        ),
        (
            {"model": {"n_layers": None}},
            "model.n_layers: null sizes no stack: set it, or set model.encoder_layers and "
            "model.decoder_layers",
        ),
        (
            {"model": {"n_layers": None, "encoder_layers": 10}},
            "model.n_layers: null sizes no stack: set it, or set",
        ),
        (
            {"model": {"arch": "decoder_only", "encoder_layers": 6}},
            "model.encoder_layers: 6 has no effect with model.arch: decoder_only (it has no encoder): "
            "null it, and size the model with model.decoder_layers or model.n_layers",
        ),
        (
            {"model": {"arch": "decoder_only", "n_layers": 3, "decoder_layers": 6}},
            "model.n_layers: 3 has no effect while model.decoder_layers is set (6) with model.arch: "
            "decoder_only: set that, or null it",
        ),
        (
            {"model": {"arch": "decoder_only", "tie_embeddings": "target"}},
            "model.tie_embeddings: 'target' is 'all' for model.arch: decoder_only (one embedding table "
            "reads both sides): use all or none",
        ),
        (
            {"data": {"heldout_val": 500}},
            "data.heldout_val: 500 has no effect while data.val lists sets (multi30k-val): null it, or set "
            "data.val: [] to hold 500 val lines out of train",
        ),
        (
            {"data": {"heldout_test": 500}},
            "data.heldout_test: 500 has no effect while data.test lists sets",
        ),
        (
            {"data": {"val": []}},
            "data.heldout_val: null, but data.val is [] (val lines held out of train): set how many, "
            "e.g. 1000",
        ),
        (
            {"train": {"source_temperature": 2.0}},
            "train.source_temperature: 2.0 has no effect with one train source (multi30k-train): set it "
            "to 1.0, or list more sources in data.train",
        ),
        (
            {"train": {"source_weights": {"europarl": 0.5}}},
            "train.source_weights.europarl: no train source of that name, so it has no effect; the train "
            "sources (data.train) are multi30k-train",
        ),
        (
            {"train": {"average_last": 4, "keep_last": 3}},
            "train.average_last: cannot average more checkpoints than train.keep_last=3 keeps",
        ),
        (
            {"model": {"tie_embeddings": "all"}, "bpe": {"joint": False}},
            "model.tie_embeddings: 'all' ties source and target embeddings, which needs bpe.joint: true; "
            "use 'target' or 'none'",
        ),
    ],
)
def test_a_setting_that_cannot_take_effect_is_refused(raw, changes, expected):
    for section, values in changes.items():
        raw[section].update(values)
    assert refused(raw).startswith(expected)


def test_settings_that_do_take_effect_still_load(raw):
    one = copy.deepcopy(raw)
    one["data"].update(val=[], heldout_val=500)
    assert P.from_dict(one).data.heldout_val == 500
    two = copy.deepcopy(raw)
    two["data"]["train"] = ["multi30k-train", "tatoeba-v2021-08-07-deen"]
    two["train"].update(source_temperature=2.0, source_weights={"tatoeba-v2021-08-07-deen": 0.5})
    assert P.from_dict(two).train.source_temperature == 2.0
    gpt = copy.deepcopy(raw)
    gpt["model"].update(arch="decoder_only", n_layers=None, decoder_layers=6)
    assert P.from_dict(gpt).model.n_decoder_layers == 6


@pytest.mark.parametrize(
    "section, key, value, expected",
    [
        ("model", "dropuot", 0.1, "model.dropuot: unknown key"),
        ("model", "d_model", "256", "model.d_model: got '256'; expected a whole number"),
        ("model", "d_model", 250, "model.d_model: 250 is not divisible by model.n_heads=4"),
        ("model", "dropout", -0.1, "model.dropout: must be within [0, 1)"),
        ("model", "norm", "sandwich", "model.norm: got 'sandwich'; allowed: pre | post"),
        ("train", "betas", [0.9], "train.betas"),
        ("train", "val_bleu", "yes", "train.val_bleu: got 'yes'; expected true or false"),
        ("decode", "beam", 0, "decode.beam: must be at least 1"),
        ("decode", "sampling", {"top_k": 3}, "decode.sampling.enabled: missing"),
        ("bpe", "vocab_size", 6, "bpe.vocab_size: must exceed the 5 special tokens"),
        ("bpe", "vocab_size", "big", "bpe.vocab_size: got 'big'; expected a whole number or auto"),
        ("bpe", "model_type", "char", "bpe.model_type: got 'char'; allowed: bpe | unigram"),
        ("train", "subword_sampling", "yes", "train.subword_sampling: got 'yes'; allowed: none | unigram"),
        ("train", "init_from", 3, "train.init_from: got 3; expected a non-empty string"),
        ("train", "init_from", " ", "train.init_from: must be null (train from scratch) or the path"),
        ("train", "ema_decay", 1.0, "train.ema_decay: must be 0 (off) or within (0, 1)"),
        ("train", "ema_decay", -0.5, "train.ema_decay: must be 0 (off) or within (0, 1)"),
    ],
)
def test_bad_values_are_refused_naming_the_key(raw, section, key, value, expected):
    raw[section][key] = value
    assert expected in refused(raw)


def test_vocab_size_auto_is_taken_as_the_word(raw):
    raw["bpe"]["vocab_size"] = "auto"
    assert P.from_dict(raw).bpe.vocab_size == "auto"


# --- subword sampling: each bad setting stops with one line naming the key and the fix -----


def sampling(raw: dict, model_type: str, kind: str, **train) -> dict:
    raw["bpe"]["model_type"] = model_type
    raw["train"].update(subword_sampling=kind, **train)
    return raw


@pytest.mark.parametrize("alpha", [0.0, -0.1, 1.5])
@pytest.mark.parametrize(("model_type", "kind"), [("unigram", "unigram"), ("bpe", "bpe_dropout")])
def test_an_alpha_outside_0_1_is_refused_for_either_kind_of_sampling(raw, alpha, model_type, kind):
    message = refused(sampling(raw, model_type, kind, subword_alpha=alpha))
    assert message.startswith("train.subword_alpha: must be within (0, 1]")
    assert "subword_sampling: none turns sampling off" in message


@pytest.mark.parametrize("alpha", [1e-6, 0.1, 1.0])
def test_an_alpha_within_0_1_is_accepted(raw, alpha):
    assert P.from_dict(sampling(raw, "bpe", "bpe_dropout", subword_alpha=alpha)).train.subword_alpha == alpha


def test_nbest_below_minus_one_is_refused_and_minus_one_or_more_than_one_accepted(raw):
    message = refused(sampling(copy.deepcopy(raw), "unigram", "unigram", subword_nbest=-2))
    assert message.startswith("train.subword_nbest: must be -1 (sample among every segmentation)")
    for nbest in (-1, 2, 64):
        assert P.from_dict(sampling(copy.deepcopy(raw), "unigram", "unigram", subword_nbest=nbest))


@pytest.mark.parametrize("nbest", [0, 1])
def test_an_nbest_that_leaves_nothing_to_sample_is_refused(raw, nbest):
    message = refused(sampling(raw, "unigram", "unigram", subword_nbest=nbest))
    assert message.startswith(f"train.subword_nbest: {nbest} leaves one segmentation to sample from")


@pytest.mark.parametrize(("model_type", "kind"), [("bpe", "bpe_dropout"), ("bpe", "none")])
def test_an_nbest_without_unigram_sampling_is_refused_as_having_no_effect(raw, model_type, kind):
    message = refused(sampling(raw, model_type, kind, subword_nbest=8))
    assert message == (
        f"train.subword_nbest: 8 has no effect with subword_sampling: {kind} (only unigram sampling draws "
        "among the n best): set subword_sampling: unigram, or set this to -1"
    )


def test_bpe_dropout_on_a_unigram_model_is_refused_with_the_fix(raw):
    message = refused(sampling(raw, "unigram", "bpe_dropout"))
    assert message == (
        "train.subword_sampling: bpe_dropout drops the merges of a BPE model, but bpe.model_type is "
        "unigram; use subword_sampling: unigram for a unigram model, or set bpe.model_type: bpe"
    )


def test_unigram_sampling_on_a_bpe_model_is_refused_with_the_fix(raw):
    message = refused(sampling(raw, "bpe", "unigram"))
    assert message.startswith("train.subword_sampling: unigram samples a unigram model's segmentations")
    assert message.endswith(
        "use subword_sampling: bpe_dropout for a BPE model, or set bpe.model_type: unigram"
    )


@pytest.mark.parametrize(("model_type", "kind"), [("bpe", "unigram"), ("unigram", "bpe_dropout")])
def test_with_a_parent_the_kind_of_sampling_is_left_to_its_model(raw, model_type, kind):
    """bpe.model_type trains nothing while train.init_from is set: the train stage checks the parent's."""
    raw = sampling(raw, model_type, kind)
    raw["train"]["init_from"] = "data/parent"
    assert P.from_dict(raw).train.subword_sampling == kind


@pytest.mark.parametrize("stage", ["bpe", "binarize", "train"])
def test_a_bad_sampling_setting_stops_a_stage_before_it_writes_anything(tmp_path, raw, stage):
    bad = tmp_path / "params.yaml"
    bad.write_text(yaml.safe_dump(sampling(raw, "unigram", "bpe_dropout")))
    out = tmp_path / "out"
    dirs = {"bpe": ["--clean", str(tmp_path)], "binarize": ["--clean", str(tmp_path), "--bpe", str(tmp_path)]}
    dirs["train"] = ["--bin", str(tmp_path), "--bpe", str(tmp_path), "--checkpoints", str(tmp_path / "c")]
    dirs["train"] += ["--log", str(tmp_path / "log")]
    args = [sys.executable, "-m", "pipeline", stage, "--params", str(bad), *dirs[stage], "--out", str(out)]
    result = subprocess.run(args, capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "Error: train.subword_sampling: bpe_dropout drops the merges of a BPE model, but bpe.model_type is "
        "unigram; use subword_sampling: unigram for a unigram model, or set bpe.model_type: bpe"
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["params.yaml"]


def test_tying_needs_a_joint_vocabulary(raw):
    raw["bpe"]["joint"] = False
    assert refused(copy.deepcopy(raw)).startswith("model.tie_embeddings:")
    raw["model"]["tie_embeddings"] = "target"
    P.from_dict(raw)


def test_missing_key_and_unknown_section(raw):
    del raw["train"]["lr"]
    assert refused(copy.deepcopy(raw)).startswith("train.lr: missing")
    raw["train"]["lr"] = 1e-3
    raw["extra"] = {}
    assert refused(raw).startswith("extra: unknown key")


def test_flatten():
    assert P.flatten({"a": {"b": 1, "c": {"d": 2}}, "e": 3}) == {"a.b": 1, "a.c.d": 2, "e": 3}


def test_cli_refuses_bad_params_with_exit_2_and_no_traceback(tmp_path, raw):
    raw["model"]["d_model"] = 250
    bad = tmp_path / "params.yaml"
    bad.write_text(yaml.safe_dump(raw))
    out = tmp_path / "clean"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline",
            "clean",
            "--params",
            str(bad),
            "--raw",
            str(tmp_path),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        "Error: model.d_model: 250 is not divisible by model.n_heads=4"
    ]
    assert not out.exists()


# --- the data section: splits as lists of names, the user's own sources ----------------


def test_splits_are_lists_of_names_and_one_name_is_a_list_of_one(raw):
    assert P.from_dict(raw).data.test[0] == "multi30k-test_2016_flickr"
    raw["data"]["test"] = "newstest2018-deen"  # what `dvc exp run -S data.test=newstest2018-deen` sets
    assert P.from_dict(raw).data.test == ("newstest2018-deen",)
    raw["data"].update(val=[], heldout_val=1000)
    assert P.from_dict(raw).data.val == ()


def test_a_source_spec_may_leave_out_keys_and_round_trips(raw):
    raw["data"]["sources"] = {"ep": {"archive": "ep.tgz", "src": "ep/de", "tgt": "ep/en", "sha256": "a" * 64}}
    raw["data"]["train"] = ["ep"]
    data = P.from_dict(raw).data
    spec = data.sources["ep"]
    assert (spec.archive, spec.src, spec.format, spec.columns, spec.max_lines) == (
        "ep.tgz",
        "ep/de",
        "auto",
        (0, 1),
        None,
    )
    assert P.from_dict(P.from_dict(raw).to_dict()).data == data


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"train": []}, "data.train: needs at least one source"),
        ({"test": ["a", "a"]}, "data.test: a is listed twice"),
        ({"test": ["multi30k-train"]}, "data.test: multi30k-train is also in data.train"),
        ({"val": ["multi30k-train"]}, "data.val: multi30k-train is also in data.train"),
        ({"test": ["news.2019"]}, "data.test: 'news.2019' cannot name a test set"),
        ({"test": ["heldout"]}, "data.test: 'heldout' cannot name a test set"),
        ({"sources": {"x": {}}}, "data.sources.x: give exactly one of: catalog"),
        ({"sources": {"x": {"src": "a", "file": "b.tsv"}}}, "got src/tgt and file"),
        (
            {"sources": {"x": {"src": "a"}}, "train": ["x"]},
            "data.sources.x: has only src: one side is monolingual",
        ),
        ({"sources": {"x": {"file": "a", "format": "text"}}}, "data.sources.x.format: text holds one side"),
        (
            {"sources": {"x": {"src": "a", "tgt": "b", "format": "tmx"}}},
            "data.sources.x.format: tmx holds both",
        ),
        ({"sources": {"x": {"catalog": "multi30k-val", "sha256": "a" * 64}}}, "sha256: not with catalog"),
        (
            {"sources": {"x": {"src": "a", "tgt": "b", "sha256": "a" * 64}}},
            "data.sources.x.sha256: is the sum of",
        ),
        ({"sources": {"x": {"file": "a.tsv", "columns": [1, 1]}}}, "data.sources.x.columns: two different"),
        ({"sources": {"x": {"file": "a.tsv", "max_lines": 0}}}, "data.sources.x.max_lines: must be null"),
        ({"sources": {"x": {"file": "a.tsv", "format": "csv"}}}, "data.sources.x.format: got 'csv'"),
        ({"sources": {"x": {"file": "a.tsv", "typo": 1}}}, "data.sources.x.typo: unknown key"),
        ({"sources": {"a b": {"file": "a.tsv"}}}, "data.sources.a b: a source name uses"),
    ],
)
def test_bad_data_sections_are_refused_naming_the_key(raw, change, expected):
    raw["data"].update(change)
    assert expected in refused(raw)


@pytest.mark.parametrize(
    "key, value, expected",
    [
        ("enabled", "yes", "decode.sampling.enabled: got 'yes'; expected true or false"),
        ("top_k", -1, "decode.sampling.top_k: must be 0 (no limit) or a number of tokens"),
        ("top_p", 0.0, "decode.sampling.top_p: must be within (0, 1] (1: no limit)"),
        ("top_p", 1.5, "decode.sampling.top_p: must be within (0, 1]"),
        ("temperature", 0.0, "decode.sampling.temperature: must be positive"),
        ("temperature", -1.0, "decode.sampling.temperature: must be positive"),
        ("seed", 1.5, "decode.sampling.seed: got 1.5; expected a whole number"),
    ],
)
def test_bad_sampling_values_are_refused_naming_the_key(raw, key, value, expected):
    raw["decode"]["sampling"][key] = value
    assert expected in refused(raw)


def test_sampling_needs_beam_one_and_takes_n_best_as_samples(raw):
    raw["decode"]["sampling"]["enabled"] = True
    assert refused(copy.deepcopy(raw)) == (
        "decode.sampling.enabled: sampling draws one token a step and needs decode.beam=1, not 5; "
        "set decode.beam=1, or turn sampling off"
    )
    raw["decode"].update(beam=1, n_best=8)  # 8 samples per input
    assert P.from_dict(copy.deepcopy(raw)).decode.n_best == 8
    raw["decode"]["sampling"]["enabled"] = False
    assert refused(raw).startswith("decode.n_best: must be within [1, decode.beam=1]")


def test_a_negative_ngram_ban_is_refused_naming_its_key(raw):
    raw["decode"]["no_repeat_ngram_size"] = 3
    assert P.from_dict(copy.deepcopy(raw)).decode.no_repeat_ngram_size == 3
    raw["decode"]["no_repeat_ngram_size"] = -1
    assert refused(copy.deepcopy(raw)) == "decode.no_repeat_ngram_size: must be non-negative (0: off)"
    raw["decode"]["no_repeat_ngram_size"] = 0
    raw["backtranslation"]["decode"]["no_repeat_ngram_size"] = -2
    assert refused(raw).startswith("backtranslation.decode.no_repeat_ngram_size: must be non-negative")


def test_an_ensemble_lists_each_model_once_and_no_empty_path(raw):
    raw["decode"]["ensemble"] = "data/parents/a"  # `-S decode.ensemble=dir` lists one
    assert P.from_dict(copy.deepcopy(raw)).decode.ensemble == ("data/parents/a",)
    raw["decode"]["ensemble"] = ["data/parents/a", "data/parents/b", "data/parents/a"]
    assert refused(copy.deepcopy(raw)) == "decode.ensemble: lists data/parents/a twice; list each model once"
    raw["decode"]["ensemble"] = [" "]
    assert refused(copy.deepcopy(raw)) == "decode.ensemble: holds an empty path; list model directories"
    raw["decode"]["ensemble"] = []
    raw["backtranslation"]["decode"]["ensemble"] = ["  ", "x"]
    assert refused(raw).startswith("backtranslation.decode.ensemble: holds an empty path")


@pytest.mark.parametrize("key, value", [("top_k", 10), ("top_p", 0.9), ("temperature", 0.7)])
def test_a_sampling_value_with_sampling_off_is_refused_as_having_no_effect(raw, key, value):
    raw["decode"]["sampling"][key] = value
    assert refused(copy.deepcopy(raw)).startswith(
        f"decode.sampling.{key}: {value} has no effect while decode.sampling.enabled is false: set that true"
    )
    raw["decode"]["beam"] = 1
    raw["decode"]["sampling"]["enabled"] = True
    assert getattr(P.from_dict(raw).decode.sampling, key) == value


# --- backtranslation: its switch, sources and the reverse model's sections ---------------------


@pytest.fixture
def bt_raw() -> dict:
    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    raw["backtranslation"].update(enabled=True, mono=["news"])
    raw["data"]["sources"] = {"news": {"tgt": "news.en"}}
    return raw


def test_back_translation_is_off_by_default():
    bt = P.load(REPO / "params.yaml").backtranslation
    assert not bt.enabled and bt.mono == ()


def test_on_with_a_monolingual_source_loads_and_may_weigh_the_synthetic_pairs(bt_raw):
    bt_raw["train"]["source_weights"] = {"backtranslated": 0.5}
    p = P.from_dict(bt_raw)
    assert p.backtranslation.mono == ("news",) and p.train.source_weights == {"backtranslated": 0.5}
    bt_raw["backtranslation"].update(enabled=False, mono=[])
    assert "train.source_weights.backtranslated" in refused(bt_raw)  # off: no such source


@pytest.mark.parametrize(
    "change, expected",
    [
        ({"mono": []}, "backtranslation.enabled: true needs target-language text"),
        ({"enabled": False}, "backtranslation.mono: is only read with backtranslation.enabled: true"),
        ({"mono": ["news", "news"]}, "backtranslation.mono: news is listed twice"),
        ({"mono": ["multi30k-val"]}, "backtranslation.mono: multi30k-val is a val or test set"),
        ({"max_lines": 0}, "backtranslation.max_lines: must be null (all) or at least 1"),
    ],
)
def test_bad_switch_or_sources_are_refused(bt_raw, change, expected):
    bt_raw["backtranslation"].update(change)
    assert refused(bt_raw).startswith(expected)


def test_sampling_with_a_beam_names_the_back_translation_key(bt_raw):
    bt_raw["backtranslation"]["decode"]["beam"] = 5
    assert refused(bt_raw).startswith("backtranslation.decode.sampling.enabled: sampling draws one token")


@pytest.mark.parametrize(
    "section, key, value, expected",
    [
        ("model", "n_heads", 3, "backtranslation.reverse.model.d_model: 256 is not divisible"),
        ("train", "lr", 0, "backtranslation.reverse.train.lr: must be positive"),
        ("bpe", "vocab_size", 3, "backtranslation.reverse.bpe.vocab_size: must exceed"),
        ("train", "init_from", "data/model", "backtranslation.reverse.train.init_from: must be null"),
    ],
)
def test_the_reverse_models_settings_are_checked_under_their_own_keys(bt_raw, section, key, value, expected):
    bt_raw["backtranslation"]["reverse"][section][key] = value
    assert refused(bt_raw).startswith(expected)


def test_tagged_back_translation_cannot_fine_tune_a_parent_whose_vocabulary_lacks_the_tag(bt_raw):
    bt_raw["train"]["init_from"] = "data/parent"
    assert refused(bt_raw).startswith("backtranslation.tag: marks synthetic sources with <BT>")
    bt_raw["backtranslation"]["tag"] = False
    assert P.from_dict(bt_raw).train.init_from == "data/parent"


def test_a_back_translation_sampling_value_that_cannot_take_effect_is_refused(bt_raw):
    bt_raw["backtranslation"]["decode"]["sampling"].update(enabled=False, top_k=5)
    bt_raw["backtranslation"]["decode"]["beam"] = 5
    assert refused(bt_raw).startswith("backtranslation.decode.sampling.top_k: 5 has no effect")


def test_a_source_of_one_side_is_for_back_translation_only(bt_raw):
    bt_raw["data"]["train"] = ["news"]
    assert refused(bt_raw).startswith("data.sources.news: has only tgt: one side is monolingual text")


@pytest.mark.parametrize(
    "change, expected",
    [
        ({"preset": "huge"}, "distill.student.preset: 'huge' is no preset; use one of base, tiny, or none"),
        (
            {"model": {"d_model": 384}},
            "distill.student.model.d_model: 384, but distill.student.preset tiny sets 256; set "
            "distill.student.preset: none",
        ),
    ],
)
def test_a_student_preset_that_does_not_exist_or_a_shape_it_overrides_is_refused(raw, change, expected):
    raw["distill"]["enabled"] = True
    student = raw["distill"]["student"]
    student.update({k: v for k, v in change.items() if k != "model"})
    student["model"].update(change.get("model", {}))
    assert refused(raw).startswith(expected)


def test_teacher_seeds_list_each_seed_once_and_not_data_models_own(raw):
    raw["distill"]["teacher_seeds"] = [2, 3]
    assert P.from_dict(copy.deepcopy(raw)).distill.teacher_seeds == (2, 3)
    raw["distill"]["teacher_seeds"] = 2  # what `dvc exp run -S distill.teacher_seeds=2` sets
    assert P.from_dict(copy.deepcopy(raw)).distill.teacher_seeds == (2,)
    raw["distill"]["teacher_seeds"] = True
    assert refused(copy.deepcopy(raw)) == "distill.teacher_seeds: got True; expected a list"
    raw["distill"]["teacher_seeds"] = [2, 2]
    assert refused(copy.deepcopy(raw)) == "distill.teacher_seeds: lists 2 twice; list it once"
    raw["distill"]["teacher_seeds"] = [raw["train"]["seed"]]
    assert refused(copy.deepcopy(raw)).endswith("train.seed's: that teacher is data/model; list other seeds")
    raw["distill"]["teachers"] = ["elsewhere/model"]  # data/model is not a teacher then: its seed is free
    assert P.from_dict(raw).distill.teacher_seeds == (raw["train"]["seed"],)

"""Params that a model directory saved, also from an older version: the settings added since read
as the old behaviour, and the refusals added since do not refuse what a model was trained with."""

import copy

import pytest
import yaml

from pipeline import params as P
from pipeline.errors import ParamsError
from tests.support.repo import REPO


@pytest.fixture
def raw() -> dict:
    return yaml.safe_load((REPO / "params.yaml").read_text())


def test_a_saved_model_from_before_the_refusals_still_loads(params):
    """Model directories written before issue 30 hold settings that were ignored: null them, as they were."""
    saved = params.to_dict()
    saved["model"].update(n_layers=3, encoder_layers=10, decoder_layers=2)
    saved["data"].update(heldout_val=1000, heldout_test=1000)
    old = P.from_saved(saved)
    assert (old.model.n_layers, old.model.n_encoder_layers, old.model.n_decoder_layers) == (None, 10, 2)
    assert (old.data.heldout_val, old.data.heldout_test) == (None, None)


def test_saved_params_from_before_sampling_load_with_sampling_off(raw):
    del raw["train"]["subword_sampling"], raw["train"]["subword_alpha"], raw["train"]["subword_nbest"]
    del raw["bpe"]["model_type"]
    old = P.from_saved(raw)
    assert (old.train.subword_sampling, old.bpe.model_type) == ("none", "bpe")


def test_params_saved_before_sources_and_new_settings_load_as_they_meant(params):
    saved = params.to_dict()
    del saved["clean"]["decontaminate"], saved["tracking"]["register_model"]
    del saved["train"]["source_weights"], saved["train"]["source_temperature"], saved["train"]["init_from"]
    del saved["data"]["workers"], saved["bpe"]["sample_lines"], saved["bpe"]["seed"]
    saved["data"].update(heldout_val=1000, heldout_test=1000)  # always set then, used or not
    for key in ("train", "val", "test", "sources"):
        del saved["data"][key]
    multi30k = {**saved, "data": {**saved["data"], "corpus": "multi30k", "multi30k_test": "test_2017_mscoco"}}
    old = P.from_saved(multi30k)
    assert old.clean.decontaminate is False  # it did not exist: the model was trained without it
    assert (old.data.workers, old.bpe.sample_lines, old.bpe.seed) == (1, 2**62, 1)  # one process, every line
    assert (old.train.source_weights, old.train.source_temperature, old.tracking.register_model) == (
        {},
        1.0,
        None,
    )
    assert old.train.init_from is None  # trained from scratch: there was no other way
    assert (old.data.train, old.data.val, old.data.test) == (
        ("multi30k-train",),
        ("multi30k-val",),
        ("multi30k-test_2017_mscoco",),
    )
    none = {"src": None, "tgt": None, "src_sha256": None, "tgt_sha256": None}
    bitext = {"train": {**none, "src": "a.ru", "tgt": "a.en"}, "val": none, "test": none}
    old = P.from_saved({**saved, "data": {**saved["data"], "corpus": "bitext", "bitext": bitext}})
    assert (old.data.train, old.data.val, old.data.test) == (("bitext-train",), (), ())
    assert (old.data.sources["bitext-train"].src, old.data.sources["bitext-train"].tgt) == ("a.ru", "a.en")
    assert P.from_saved(params.to_dict()) == params  # today's params pass unchanged
    with pytest.raises(ParamsError, match=r"data\.corpus: unknown key"):
        P.from_dict(multi30k)  # params.yaml itself gets no such help


def test_models_saved_before_sampling_load_with_it_off(raw):
    del raw["decode"]["sampling"]
    s = P.from_saved(raw).decode.sampling
    assert (s.enabled, s.top_k, s.top_p, s.temperature) == (False, 0, 1.0, 1.0)


def test_models_saved_before_ensembles_load_with_none(raw):
    del raw["decode"]["ensemble"], raw["backtranslation"]["decode"]["ensemble"]
    old = P.from_saved(raw)
    assert old.decode.ensemble == () and old.backtranslation.decode.ensemble == ()
    del raw["backtranslation"]
    assert P.from_saved(raw).backtranslation.decode.ensemble == ()


def test_models_saved_before_the_ngram_ban_load_without_it(raw):
    del raw["decode"]["no_repeat_ngram_size"], raw["backtranslation"]["decode"]["no_repeat_ngram_size"]
    old = P.from_saved(copy.deepcopy(raw))
    assert old.decode.no_repeat_ngram_size == 0 == old.backtranslation.decode.no_repeat_ngram_size
    del raw["backtranslation"]
    assert P.from_saved(raw).backtranslation.decode.no_repeat_ngram_size == 0


def test_a_model_saved_before_back_translation_loads_with_it_off(params):
    old = params.to_dict()
    del old["backtranslation"]
    loaded = P.from_saved(old)
    assert not loaded.backtranslation.enabled and loaded.model == params.model
    # a fine-tuned child, with the depths an older version saved: its reverse copy must load too
    old["train"]["init_from"] = "data/parent"
    old["model"].update(n_layers=3, encoder_layers=3, decoder_layers=3)
    loaded = P.from_saved(old)
    assert loaded.train.init_from == "data/parent" and loaded.backtranslation.reverse.train.init_from is None


def test_a_setting_added_since_reads_as_before_in_every_section_of_its_type(raw):
    """schema.since marks the settings added since models were first saved: a saved params without
    one reads as the old behaviour wherever its section's type appears, the reverse model's too."""
    for train in (raw["train"], raw["backtranslation"]["reverse"]["train"]):
        del train["ema_decay"], train["source_weights"]
    del (
        raw["clean"]["score"]["relative"],
        raw["decode"]["sampling"],
        raw["backtranslation"]["decode"]["ensemble"],
    )
    old = P.from_saved(raw)
    assert old.train.ema_decay == old.backtranslation.reverse.train.ema_decay == 0.0
    assert old.train.source_weights == {} and old.clean.score.relative is False
    assert not old.decode.sampling.enabled and old.backtranslation.decode.ensemble == ()
    with pytest.raises(P.ParamsError, match=r"^clean.score.relative: missing; every key must be set"):
        P.from_dict(raw)  # params.yaml itself must set them

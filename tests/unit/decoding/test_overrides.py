"""pipeline/decoding/overrides.py: the settings a call may change, read from the schema's fields."""

from __future__ import annotations

import dataclasses

import pytest

from pipeline import params as P
from pipeline.decoding import overrides
from pipeline.decoding.overrides import API_NAMES, SETTINGS, Overrides, settings_with
from pipeline.errors import UserError

BASE = P.load("params.yaml").decode


def test_every_overridable_field_is_a_keyword_of_the_type_checkers_declaration_too() -> None:
    names = [s.name for s in SETTINGS]
    assert names == list(Overrides.__annotations__)  # a field marked overridable but not declared fails
    assert {s.key for s in SETTINGS} >= {"beam", "sampling.enabled", "sampling.top_p", "no_repeat_ngram_size"}
    assert all(s.kind in (int, float, bool) and s.spec.help.endswith(".") for s in SETTINGS)


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.name)
def test_each_keyword_sets_its_own_key_and_no_other(setting: overrides.Setting) -> None:
    value = {bool: True, int: 3, float: 0.5}[setting.kind]
    given = {setting.name: value} | ({"sample": True} if setting.key.startswith("sampling.") else {})
    new = settings_with(BASE, API_NAMES, given)
    head, _, rest = setting.key.partition(".")
    got = getattr(getattr(new, head), rest) if rest else getattr(new, head)
    assert got == value
    untouched = {"sampling", "beam", head} if "sample" in given else {head}  # sampling: beam 1
    for f in dataclasses.fields(P.DecodeParams):
        if f.name not in untouched:
            assert getattr(new, f.name) == getattr(BASE, f.name), f.name


def test_none_leaves_the_models_setting_and_a_misspelt_keyword_is_refused() -> None:
    assert settings_with(BASE, API_NAMES, {s.name: None for s in SETTINGS}) == BASE
    with pytest.raises(TypeError, match="unexpected decode setting 'beam_size'"):
        settings_with(BASE, API_NAMES, {"beam_size": 2})


def test_sampling_values_need_sampling_and_bad_values_are_named_as_the_caller_wrote_them() -> None:
    with pytest.raises(UserError, match=r"^top_k: applies to sampling only; turn it on with sample=True$"):
        settings_with(BASE, API_NAMES, {"top_k": 5})
    with pytest.raises(UserError, match=r"^--top-p: must be within \(0, 1\]"):
        options = {name: "--" + name.replace("_", "-") for name in overrides.FIELDS}
        settings_with(BASE, options, {"sample": True, "top_p": 1.5})
    sampled = settings_with(BASE, API_NAMES, {"sample": True})
    assert sampled.beam == 1 and sampled.sampling.enabled

"""Params that a model directory or an export saved, also from an older version of the pipeline:
the settings added since take the value that keeps the old behaviour."""

from __future__ import annotations

import copy
import dataclasses
import typing
from typing import Any

from pipeline.params.loading import from_dict
from pipeline.params.schema import BEFORE, Params, SamplingParams

# Sections added since: a saved params without one had it off (each made by its function below).
ADDED_SECTIONS = ("backtranslation", "distill")


def from_saved(raw: Any) -> Params:
    """Params a model directory or export saved, also from an older version of the pipeline.

    A setting added since (a field declared with schema.since) takes the value that means "as
    before", in every section of its type; a section added since is off; and the data section of
    before several sources per split (data.corpus: multi30k or bitext) becomes the lists of names
    it meant.
    """
    if not isinstance(raw, dict):
        return from_dict(raw)
    raw = copy.deepcopy(raw)
    if isinstance(raw.get("data"), dict) and "corpus" in raw["data"]:
        raw["data"] = _data_before_sources(raw["data"])
    fill_added(Params, raw)
    _drop_ignored(raw)
    for section in ADDED_SECTIONS:  # after the above: they copy the sections as fixed
        if section not in raw:
            raw[section] = {"backtranslation": backtranslation_off, "distill": distill_off}[section](raw)
    return from_dict(raw)


def fill_added(cls: type, raw: dict[str, Any]) -> None:
    """Each key of `cls` that `raw` lacks and that was added since (its `before`), recursively
    through the sections `raw` has."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name not in raw and BEFORE in f.metadata:
            raw[f.name] = copy.deepcopy(f.metadata[BEFORE])
        inner = hints[f.name]
        if isinstance(inner, type) and dataclasses.is_dataclass(inner) and isinstance(raw.get(f.name), dict):
            fill_added(inner, raw[f.name])


def before_values(cls: type) -> dict[str, Any]:
    """A section as params saved before any of its settings existed read it."""
    return {f.name: copy.deepcopy(f.metadata[BEFORE]) for f in dataclasses.fields(cls)}


def backtranslation_off(raw: dict[str, Any]) -> dict[str, Any]:
    """A backtranslation section that is off, for params saved before it existed: the reverse
    model's sections are the forward's (unread while off; `raw` already has every key) and
    decoding greedy."""
    sections = _own_sections(raw)
    off = {"enabled": False, "mono": [], "max_lines": None, "seed": 1, "tag": True, "decode": _greedy()}
    return {**off, "reverse": {"bpe": copy.deepcopy(raw.get("bpe")), **sections}}


def distill_off(raw: dict[str, Any]) -> dict[str, Any]:
    """A distill section that is off, for params saved before it existed: the student's sections are
    the model's own (unread while off)."""
    student = {"preset": "none", **_own_sections(raw), "decode": _greedy(), "quantization": "int8"}
    return {"enabled": False, "teachers": [], "original": False, "decode": _greedy(), "student": student}


def _own_sections(raw: dict[str, Any]) -> dict[str, Any]:
    """Copies of raw's model and train, training from scratch: a second model's own, while it is off."""
    sections = {name: copy.deepcopy(raw.get(name)) for name in ("model", "train")}
    if isinstance(sections["train"], dict):
        sections["train"]["init_from"] = None
    return sections


def _greedy() -> dict[str, Any]:
    return {
        "beam": 1,
        "length_penalty": 1.0,
        "max_len_a": 1.2,
        "max_len_b": 10,
        "batch_tokens": 4096,
        "n_best": 1,
        "sampling": before_values(SamplingParams),
        "no_repeat_ngram_size": 0,
        "ensemble": [],
    }


def _drop_ignored(raw: dict[str, Any]) -> None:
    """Null the settings that older versions saved but ignored, which validate() now refuses."""
    model, data = raw.get("model"), raw.get("data")
    if isinstance(model, dict):
        stacks = ["encoder_layers", "decoder_layers"]
        if model.get("arch") == "decoder_only":
            model["encoder_layers"], stacks = None, ["decoder_layers"]
        if all(model.get(k) is not None for k in stacks):
            model["n_layers"] = None
    if isinstance(data, dict):
        for split in ("val", "test"):
            if data.get(split):
                data[f"heldout_{split}"] = None


def _data_before_sources(old: dict[str, Any]) -> dict[str, Any]:
    keep = ("src_lang", "tgt_lang", "mirror", "heldout_seed", "heldout_val", "heldout_test", "workers")
    data: dict[str, Any] = {k: old[k] for k in keep if k in old}
    if old["corpus"] == "multi30k":
        test = old.get("multi30k_test", "test_2016_flickr")
        return {
            **data,
            "train": ["multi30k-train"],
            "val": ["multi30k-val"],
            "test": [f"multi30k-{test}"],
            "sources": {},
        }
    sources = {
        f"bitext-{split}": {k: v for k, v in sides.items() if v is not None}
        for split, sides in (old.get("bitext") or {}).items()
        if sides.get("src") and sides.get("tgt")
    }
    splits = {
        split: [name] if (name := f"bitext-{split}") in sources else [] for split in ("train", "val", "test")
    }
    return {**data, **splits, "sources": sources}

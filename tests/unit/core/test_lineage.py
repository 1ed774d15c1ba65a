"""pipeline.lineage: which settings are a parent's architecture and vocabulary, how a mismatch is
refused, and what a parent's record and MLflow tags hold."""

from __future__ import annotations

import dataclasses
import json

import pytest

from pipeline import lineage
from pipeline import params as P
from pipeline.errors import ParamsError, UserError
from tests.support.repo import BASE


def with_model(**model: object) -> P.Params:
    return dataclasses.replace(BASE, model=dataclasses.replace(BASE.model, **model))


def test_dropout_is_no_part_of_the_architecture():
    lineage.check_architecture(
        with_model(dropout=0.3, attention_dropout=0.2, activation_dropout=0.1), BASE, "p"
    )


def test_each_stacks_depth_counts_however_it_is_spelled():
    same = with_model(n_layers=None, encoder_layers=3, decoder_layers=3)
    lineage.check_architecture(same, BASE, "p")
    with pytest.raises(ParamsError) as caught:
        lineage.check_architecture(with_model(decoder_layers=2), BASE, "p")
    assert "model.decoder_layers 2 here, null in the parent" in caught.value.message
    assert "-S model.decoder_layers=null" in caught.value.message


@pytest.mark.parametrize("key", lineage.ARCHITECTURE)
def test_every_architecture_key_is_compared(key):
    other = {
        "arch": "decoder_only",
        "norm": "post",
        "positions": "learned",
        "tie_embeddings": "none",
        "activation": "gelu",
        "output_bias": not BASE.model.output_bias,
        "scale_embeddings": not BASE.model.scale_embeddings,
    }.get(key, 2 * getattr(BASE.model, key))
    child = dataclasses.replace(BASE.model, **{key: other})
    with pytest.raises(ParamsError, match=rf"model\.{key} "):
        lineage.check_architecture(dataclasses.replace(BASE, model=child), BASE, "p")


def test_the_file_names_are_those_their_own_modules_write():
    from pipeline.interop import hf_import
    from pipeline.model import checkpoint
    from pipeline.tracking import run_file

    assert lineage.MODEL_FILE == checkpoint.MODEL_FILE
    assert lineage.RUN_FILE == run_file.RUN_FILE
    assert lineage.IMPORT_FILE == hf_import.SOURCE_FILE


def test_tags_name_the_parents_run_only_where_it_has_one():
    bare = lineage.Parent(path="data/p", model_sha256="ab" * 32)
    assert bare.tags() == {"parent": "data/p", "parent_model_sha256": "ab" * 32}
    tracked = dataclasses.replace(bare, mlflow_run_id="r1", imported_from="Helsinki-NLP/opus-mt-ru-en")
    assert tracked.tags()["parent_run_id"] == "r1"
    assert tracked.tags()["parent_imported_from"] == "Helsinki-NLP/opus-mt-ru-en"


def test_a_record_round_trips_and_a_damaged_one_is_refused(tmp_path):
    record = lineage.Parent(path="p", model_sha256="0" * 64, parent={"path": "q", "model_sha256": "1" * 64})
    (tmp_path / "parent.json").write_text(json.dumps(record.to_dict()))
    assert lineage.Parent.load(tmp_path / "parent.json") == record
    (tmp_path / "parent.json").write_text('{"path": "p"}')
    with pytest.raises(UserError, match="not a record of a parent model"):
        lineage.Parent.load(tmp_path / "parent.json")

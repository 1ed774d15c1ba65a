"""The pyfunc wrapper: what it accepts as input, what it translates, what it pins."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from mlflow.exceptions import MlflowException
from mlflow.models.utils import _enforce_params_schema

from pipeline.decoding.translator import Translator
from pipeline.errors import UserError
from pipeline.serving import pyfunc


@pytest.fixture(scope="module")
def model(model_dir: Path) -> pyfunc.TranslatorModel:
    wrapped = pyfunc.TranslatorModel()
    wrapped.load_context(SimpleNamespace(artifacts={pyfunc.ARTIFACT: str(model_dir)}))
    return wrapped


@pytest.mark.parametrize(
    "given",
    [
        ["a b", "", "c"],
        pd.Series(["a b", "", "c"]),
        pd.DataFrame({"text": ["a b", "", "c"], "other": [1, 2, 3]}),
        pd.DataFrame({"0": ["a b", None, "c"]}),  # one column of any name; a missing value is an empty line
    ],
)
def test_input_lines_from_a_list_a_series_or_a_column(given) -> None:
    assert pyfunc.input_lines(given) == ["a b", "", "c"]


def test_input_that_is_no_column_of_strings_is_refused_with_what_was_wrong() -> None:
    with pytest.raises(MlflowException, match="one column"):
        pyfunc.input_lines(pd.DataFrame({"a": ["x"], "b": ["y"]}))
    with pytest.raises(MlflowException, match="expected strings"):
        pyfunc.input_lines([1, 2])


def test_predict_translates_each_line_in_order(model: pyfunc.TranslatorModel, translator: Translator) -> None:
    lines = ["der hund läuft", "", "die katze springt über die straße"]
    assert model.predict(None, lines) == translator.translate(lines)
    assert model.predict(None, pd.DataFrame({"text": lines})) == translator.translate(lines)
    assert model.predict(None, lines)[1] == ""


def test_beam_and_n_best_are_inference_params(model: pyfunc.TranslatorModel, translator: Translator) -> None:
    lines = ["der hund", "ein kind"]
    assert model.predict(None, lines, {"beam": 1}) == translator.translate(lines, beam=1)
    nbest = model.predict(None, lines, {"beam": 3, "n_best": 3})
    assert [[t.text for t in h] for h in translator.translate_nbest(lines, 3, beam=3)] == nbest
    with pytest.raises(MlflowException, match="beam"):
        model.predict(None, lines, {"beam": 0})


def test_the_ngram_ban_is_an_inference_param(model: pyfunc.TranslatorModel, translator: Translator) -> None:
    lines = ["der hund springt über die straße", "ein kind läuft"]
    given = _enforce_params_schema({"no_repeat_ngram_size": 1}, pyfunc.signature().params)
    banned = model.predict(None, lines, given)
    assert banned == translator.translate(lines, no_repeat_ngram_size=1)
    assert banned != model.predict(None, lines, {})  # the test model repeats itself: the ban changed it
    with pytest.raises(MlflowException, match="no_repeat_ngram_size: must be non-negative"):
        model.predict(None, lines, {"no_repeat_ngram_size": -1})


def test_requirements_pin_every_third_party_import() -> None:
    pins = dict(r.split("==") for r in pyfunc.requirements())
    assert {"torch", "numpy", "sentencepiece", "PyYAML", "mlflow", "pandas"} <= set(pins)
    assert all(v and "+" not in v for v in pins.values())


def test_signature_takes_strings_and_search_params_defaulting_to_the_models() -> None:
    sig = pyfunc.signature()
    assert sig.inputs.to_dict() == [{"type": "string", "required": True}]
    defaults = {p.name: p.default for p in sig.params}
    assert defaults == {name: None for name in pyfunc.SEARCH_PARAMS} | {"n_best": 1}
    searched = {"beam", "length_penalty", "sample", "top_k", "top_p", "temperature", "seed"}
    assert set(pyfunc.SEARCH_PARAMS) == searched | {"no_repeat_ngram_size", "tgt_lang"}  # no batch_tokens


def test_a_length_penalty_reaches_the_search(model: pyfunc.TranslatorModel, monkeypatch) -> None:
    searched = model.translator.search_ids
    seen: list[float] = []

    def spy(seqs, s, stats=None):  # this tiny model's translations do not change with it: its settings do
        seen.append(s.length_penalty)
        return searched(seqs, s, stats)

    monkeypatch.setattr(model.translator, "search_ids", spy)
    for penalty in (0.0, 2.5):
        given = _enforce_params_schema({"length_penalty": penalty}, pyfunc.signature().params)
        model.predict(None, ["der hund"], given)
    assert seen == [0.0, 2.5]


def test_sampling_params_reach_the_translator(model: pyfunc.TranslatorModel, translator: Translator) -> None:
    lines = ["der hund", "ein kind läuft über die straße"]
    # As MLflow passes them: the signature's defaults (null: the model's setting) filled in.
    given = _enforce_params_schema({"sample": True, "top_k": 5, "seed": 2}, pyfunc.signature().params)
    assert given["beam"] is None
    sampled = model.predict(None, lines, given)
    assert sampled == translator.translate(lines, sample=True, top_k=5, seed=2)
    assert sampled == model.predict(None, lines, given)
    samples = model.predict(None, lines, {**given, "n_best": 4})
    assert [len(s) for s in samples] == [4, 4]
    with pytest.raises(MlflowException, match="needs beam=1, not 3"):
        model.predict(None, lines, {**given, "beam": 3})


def test_served_requests_over_the_limits_are_refused_naming_the_limit(
    model: pyfunc.TranslatorModel, translator: Translator, monkeypatch: pytest.MonkeyPatch
) -> None:
    limits = model.config
    big = ["der hund"] * (limits["max_request_lines"] + 1)
    long = ["der hund " * (limits["max_line_chars"] // 9 + 1)]
    assert len(model.predict(None, big)) == len(big)  # called from Python, no limit
    monkeypatch.setenv(pyfunc.SERVING_ENV, "true")
    with pytest.raises(MlflowException, match="no sentences"):
        model.predict(None, [])
    with pytest.raises(MlflowException, match="max_request_lines"):
        model.predict(None, big)
    with pytest.raises(MlflowException, match="max_line_chars"):
        model.predict(None, long)
    many = ["der hund " * 1000] * (limits["max_request_chars"] // 9000 + 1)
    with pytest.raises(MlflowException, match="max_request_chars"):
        model.predict(None, many)
    assert model.predict(None, ["der hund"]) == translator.translate(["der hund"])  # within limits


def test_serving_config_is_logged_with_the_model_and_checked_at_load(model_dir: Path) -> None:
    assert pyfunc.model_spec(model_dir, ["a"])["model_config"] == pyfunc.SERVING
    if importlib.util.find_spec("ctranslate2") is not None:  # tracking.serve_backend: ctranslate2
        spec = pyfunc.model_spec(model_dir, ["a"], backend="ctranslate2")
        assert spec["model_config"] == pyfunc.SERVING | {"backend": "ctranslate2"}
        assert any(r.startswith("ctranslate2==") for r in spec["pip_requirements"])
    assert pyfunc.serving_config({"batch_wait_ms": 0})["batch_wait_ms"] == 0
    with pytest.raises(UserError, match="unknown key 'batch'"):
        pyfunc.serving_config({"batch": 1})
    with pytest.raises(UserError, match="max_request_lines must be an integer >= 1"):
        pyfunc.serving_config({"max_request_lines": 0})
    with pytest.raises(UserError, match="batch_wait_ms must be an integer >= 0"):
        pyfunc.serving_config({"batch_wait_ms": 1.5})
    with pytest.raises(UserError, match="backend 'onnx' is none of torch, ctranslate2"):
        pyfunc.serving_config({"backend": "onnx"})
    with pytest.raises(UserError, match="quantization int8 needs backend ctranslate2"):
        pyfunc.serving_config({"quantization": "int8"})


def test_the_ctranslate2_backend_serves_the_models_conversion(model_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("ctranslate2")
    import shutil

    from pipeline.interop.ct2 import CT2Translator

    copy = shutil.copytree(model_dir, tmp_path / "model")  # the conversion is made beside it
    served = pyfunc.TranslatorModel()
    config = {"backend": "ctranslate2", "batch_wait_ms": 0}
    served.load_context(SimpleNamespace(artifacts={pyfunc.ARTIFACT: str(copy)}, model_config=config))
    assert isinstance(served.translator, CT2Translator) and served.translator.quantization == "float32"
    lines = ["der hund läuft", "", "die katze springt"]
    assert served.predict(None, lines) == CT2Translator.from_dir(copy).translate(lines)
    assert served.predict(None, lines, {"beam": 2}) == CT2Translator.from_dir(copy).translate(lines, beam=2)
    with pytest.raises(MlflowException, match="sample"):  # ctranslate2 does not sample here: a 400
        served.predict(None, lines, {"sample": True})


def test_concurrent_predicts_are_batched_and_answered_as_alone(
    model: pyfunc.TranslatorModel, translator: Translator
) -> None:
    from concurrent.futures import ThreadPoolExecutor

    requests = [["der hund läuft", "ein kind"], ["die katze"], ["ein mann", ""], ["zwei frauen"]] * 4
    with ThreadPoolExecutor(len(requests)) as pool:
        answers = list(pool.map(lambda r: model.predict(None, r), requests))
    assert answers == [translator.translate(r) for r in requests]


def test_a_served_model_decodes_together_more_requests_than_asyncios_default_threads(
    model_dir: Path, translator: Translator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As `mlflow models serve` runs it: uvicorn loads the model, then starts its event loop, and the
    scoring server hands each request's predict to `asyncio.to_thread`, whose default executor has
    min(32, cores + 4) threads. After the first request, 40 arriving together are decoded in one call."""
    import asyncio

    monkeypatch.setenv(pyfunc.SERVING_ENV, "true")
    config = {"batch_wait_ms": 1000}  # all 40 arrive within the wait
    served = pyfunc.TranslatorModel()
    served.load_context(SimpleNamespace(artifacts={pyfunc.ARTIFACT: str(model_dir)}, model_config=config))
    requests = [[f"der hund {i}"] for i in range(40)]

    async def serve() -> list:
        await asyncio.to_thread(served.predict, None, ["ein hund"])
        return await asyncio.gather(*(asyncio.to_thread(served.predict, None, r) for r in requests))

    answers = asyncio.run(serve())
    assert served.batcher.calls == 2  # the first request's, then the 40 together
    assert answers == [translator.translate(r) for r in requests]
    assert not pyfunc.widen_server_pool(4)  # no running loop here: nothing to widen


RELEASE = """
import gc, json, psutil
from pipeline.serving import pyfunc
rss = lambda: psutil.Process().memory_info().rss
before = rss()
chunks = [bytearray(64 * 1024) for _ in range(3_000)]  # 197 MB in the heap (under mmap's threshold)
grown = rss()
del chunks
gc.collect()
held = rss()
pyfunc.release_free_memory()
print(json.dumps({"before": before, "grown": grown, "held": held, "released": rss()}))
"""


def test_release_free_memory_gives_freed_heap_back_to_the_system() -> None:
    """In a fresh process whose glibc never trims the heap on its own (a huge M_TRIM_THRESHOLD), so
    that 197 MB freed stays resident until release_free_memory hands it back."""
    pytest.importorskip("psutil")
    if not hasattr(pyfunc._libc(), "malloc_trim"):
        pytest.skip("not glibc: release_free_memory does nothing here")
    import json
    import subprocess
    import sys

    env = {**os.environ, "MALLOC_TRIM_THRESHOLD_": str(2**30)}
    args = [sys.executable, "-c", RELEASE]
    done = subprocess.run(args, env=env, capture_output=True, text=True, check=True)
    rss = json.loads(done.stdout.splitlines()[-1])
    assert rss["grown"] - rss["before"] > 150e6, rss
    assert rss["held"] > rss["grown"] - 20e6, rss  # the premise: freed, yet still resident
    assert rss["released"] < rss["held"] - 150e6, rss

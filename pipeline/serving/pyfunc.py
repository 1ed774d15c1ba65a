"""The trained model as an MLflow pyfunc model: source sentences in, translations out.

`TranslatorModel` wraps `Translator` for `mlflow.pyfunc.load_model(...).predict`
and `mlflow models serve`: a list of strings or a one-column DataFrame in, one
translation per line out (with the inference param n_best > 1: a list of up to
n_best, best first); `beam`, `n_best`, `no_repeat_ngram_size` and sampling's `sample`,
`top_k`, `top_p`, `temperature` and `seed` are optional inference params (docs/sampling.md).
`model_spec` is what the score stage hands to `Tracker.log_model`: this file
as the model's code (MLflow's models from code: nothing pickled), the model
directory as an artifact, this package as code, its pinned requirements, a
signature, an input example and the serving config (`SERVING`, MLflow's model_config).
Concurrent requests are decoded together by a dynamic batcher (pipeline/serving/batcher.py);
served, the model widens the server's thread pool and bounds its own memory (widen_server_pool,
pipeline/onednn.py, release_free_memory).
Serving and the registry: docs/mlflow.md.
"""

from __future__ import annotations

import ast
import asyncio
import ctypes
import functools
import gc
import os
import sys
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata
from pathlib import Path
from typing import Any

import pandas as pd
from mlflow.exceptions import MlflowException
from mlflow.models import ModelSignature, set_model
from mlflow.pyfunc import PythonModel
from mlflow.types import ColSpec, DataType, ParamSchema, ParamSpec, Schema

from pipeline.decoding.overrides import SETTINGS
from pipeline.decoding.translator import QUANTIZATIONS, TextTranslator, Translator, one_line
from pipeline.errors import UserError
from pipeline.fingerprint import PACKAGE, module_closure
from pipeline.onednn import KERNELS, keep_kernels
from pipeline.serving.batcher import Batcher

INPUT_COLUMN = "text"  # the DataFrame column of source lines (a single column of any name works too)
ARTIFACT = "model_dir"  # the model directory (model.pt, sentencepiece model(s), params.yaml)

# The model_config the model is logged with (a load may override it, mlflow.pyfunc.load_model's
# model_config): how long the batcher waits for company, how many sentences one decode call
# takes, and, under `mlflow models serve` only, the largest request served (a bigger one is
# answered 400, naming the limit; in Python, spark_udf's batches of 10,000 rows stay welcome).
SERVING: dict[str, Any] = {
    "batch_wait_ms": 20,
    "batch_max_lines": 256,
    # Requests the server holds at once, each waiting in a thread for its batch (widen_server_pool).
    "max_concurrent_requests": 64,
    # oneDNN kernels kept, one per product shape (pipeline/onednn.py).
    "onednn_kernels": KERNELS,
    # Idle time after which freed memory goes back to the system (release_free_memory).
    "release_memory_after_ms": 1_000,
    "max_request_lines": 2_000,
    "max_request_chars": 200_000,
    "max_line_chars": 10_000,
    # What decodes: the model itself (torch), or its CTranslate2 conversion, made at load beside the
    # model directory (pipeline/interop/ct2.py; int8 and the others trade exactness for speed).
    "backend": "torch",
    "quantization": "float32",
}
BACKENDS = ("torch", "ctranslate2")
# Set to "true" by MLflow's scoring server when it loads the model (tests/system/test_mlflow.py
# serves a model and checks that the limits hold).
SERVING_ENV = "_MLFLOW_IS_IN_SERVING_ENVIRONMENT"


class TranslatorModel(PythonModel):
    """A model directory's Translator behind MLflow's pyfunc interface."""

    def load_context(self, context: Any) -> None:
        self.config = serving_config(getattr(context, "model_config", None))
        keep_kernels(self.config["onednn_kernels"])
        self.translator: TextTranslator
        if self.config["backend"] == "ctranslate2":
            from pipeline.interop.ct2 import CT2Translator

            model_dir = context.artifacts[ARTIFACT]
            self.translator = CT2Translator.from_dir(model_dir, "auto", self.config["quantization"])
        else:
            self.translator = Translator.from_dir(context.artifacts[ARTIFACT], device="auto")
        self.batcher: Batcher[Any] = Batcher(
            self._decode,
            self.config["batch_wait_ms"] / 1000,
            self.config["batch_max_lines"],
            on_idle=release_free_memory,
            idle_s=self.config["release_memory_after_ms"] / 1000,
        )
        self._widened = threading.Lock()  # held for good once the server's pool is widened

    # Typed with a DataFrame, what MLflow hands over after checking the input against the signature:
    # MLflow infers no schema from that hint, so `signature()` stands. A list[str] hint would make
    # MLflow replace it with one inferred from the hints, which has none of the search params.
    def predict(
        self, context: Any, model_input: pd.DataFrame, params: dict[str, Any] | None = None
    ) -> list[str] | list[list[str]]:
        """Lines -> one translation each (n_best 1) or a list of up to n_best (best first).

        Called directly, it takes what `input_lines` does: a list of strings will do.
        """
        lines = input_lines(model_input)
        if os.environ.get(SERVING_ENV) == "true":
            if self._widened.acquire(blocking=False):  # the first request: once
                widen_server_pool(self.config["max_concurrent_requests"])
            check_size(lines, self.config)
        params = params or {}
        # MLflow passes every param of the signature, None for "the model's setting".
        key = (params.get("n_best") or 1, *(params.get(name) for name in SEARCH_PARAMS))
        try:
            return self.batcher(lines, key)
        except UserError as e:  # a bad beam, n_best or sampling value: MLflow answers 400 with this message
            raise MlflowException.invalid_parameter_value(str(e)) from e

    def _decode(self, lines: list[str], key: Any) -> list[Any]:
        """The batcher's call: `lines` of requests sharing `key`, (n_best, *SEARCH_PARAMS values)."""
        n_best, *values = key
        given = dict(zip(SEARCH_PARAMS, values))
        if n_best == 1:
            return [one_line(t) for t in self.translator.translate(lines, **given)]
        hyps = self.translator.translate_nbest(lines, n_best, **given)
        return [[one_line(t.text) for t in h] for h in hyps]


def serving_config(given: dict[str, Any] | None) -> dict[str, Any]:
    """SERVING with `given`'s values; an unknown key, a count that is no positive integer, an unknown
    backend or quantization is a UserError naming it."""
    config = dict(SERVING)
    for name, value in (given or {}).items():
        if name not in SERVING:
            raise UserError(f"model_config: unknown key {name!r}; the keys are {', '.join(SERVING)}")
        if name in ("backend", "quantization"):
            allowed = BACKENDS if name == "backend" else QUANTIZATIONS
            if value not in allowed:
                raise UserError(f"model_config: {name} {value!r} is none of {', '.join(allowed)}")
            config[name] = value
            continue
        least = 0 if name in ("batch_wait_ms", "onednn_kernels", "release_memory_after_ms") else 1
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise UserError(f"model_config: {name} must be an integer >= {least}, got {value!r}")
        config[name] = value
    if config["quantization"] != "float32" and config["backend"] != "ctranslate2":
        raise UserError(
            f"model_config: quantization {config['quantization']} needs backend ctranslate2; "
            "the torch backend runs float32"
        )
    return config


def release_free_memory() -> None:
    """Hand the heap's free pages back to the system (glibc's malloc_trim; elsewhere, nothing).

    The batcher calls it once no request has come for `release_memory_after_ms`: a decoding call
    frees its tensors, but glibc keeps most of the freed heap for the next one, so an idle server
    held the high-water mark of its largest batch so far. Not after every batch: the next batch
    then faults its pages back in, which cost about a sixth of the decoding speed under a steady
    load (docs/mlflow.md).
    """
    trim = getattr(_libc(), "malloc_trim", None)
    if trim is not None:
        trim(0)


@functools.cache
def _libc() -> Any:
    return ctypes.CDLL(None)  # the C library this process runs on


def widen_server_pool(n: int) -> bool:
    """Let MLflow's scoring server hold `n` requests at once; -> whether it could.

    The server runs each request's `predict` in its event loop's default executor
    (`asyncio.to_thread`), which has min(32, cores + 4) threads: 6 on 2 cores. A request past that
    waits for a thread, that is for the batch ahead of it to be decoded, so the requests of more
    clients than threads that arrive together are decoded in two calls instead of one. Neither
    MLflow nor uvicorn has a setting for it, and uvicorn loads the model before it starts the loop:
    the first request, in one of those threads, finds the running loop (the only one in the process)
    and gives it a pool of `n` threads for the requests after it. Each thread waits on its batch, so
    a thread costs no CPU. Without a running loop (a model loaded by `mlflow.pyfunc.load_model`),
    this does nothing.
    """
    # type(), not isinstance: some of torch's module proxies warn when asked for their __class__
    loops = [o for o in gc.get_objects() if issubclass(type(o), asyncio.AbstractEventLoop) and o.is_running()]
    if len(loops) != 1:
        return False
    pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix="predict")
    loops[0].call_soon_threadsafe(loops[0].set_default_executor, pool)
    return True


def check_size(lines: list[str], config: dict[str, Any]) -> None:
    """Refuse (400) a request with no sentences or over the served limits, saying which and what to do."""
    if not lines:
        raise MlflowException.invalid_parameter_value(
            "the request holds no sentences; send at least one source sentence in `inputs`"
        )
    if len(lines) > config["max_request_lines"]:
        raise MlflowException.invalid_parameter_value(
            f"the request holds {len(lines):,} sentences; one request may hold at most "
            f"{config['max_request_lines']:,} (model_config max_request_lines): send it in parts"
        )
    longest = max(map(len, lines), default=0)
    if longest > config["max_line_chars"]:
        raise MlflowException.invalid_parameter_value(
            f"a sentence of the request holds {longest:,} characters; a sentence may hold at most "
            f"{config['max_line_chars']:,} (model_config max_line_chars): split it into sentences"
        )
    chars = sum(map(len, lines))
    if chars > config["max_request_chars"]:
        raise MlflowException.invalid_parameter_value(
            f"the request holds {chars:,} characters; one request may hold at most "
            f"{config['max_request_chars']:,} (model_config max_request_chars): send it in parts"
        )


def input_lines(model_input: Any) -> list[str]:
    """The source lines of a pyfunc input: a DataFrame (column `text`, or its only column), a
    Series, a list or an array of strings; a missing value is an empty line."""
    if isinstance(model_input, pd.DataFrame):
        if INPUT_COLUMN in model_input.columns:
            model_input = model_input[INPUT_COLUMN]
        elif len(model_input.columns) == 1:
            model_input = model_input.iloc[:, 0]
        else:
            raise MlflowException.invalid_parameter_value(
                f"expected one column of source lines (named {INPUT_COLUMN!r}); got columns "
                f"{list(model_input.columns)}"
            )
    if isinstance(model_input, str):
        model_input = [model_input]
    values = list(model_input)
    bad = [v for v in values if v is not None and not isinstance(v, str) and not pd.isna(v)]
    if bad:
        raise MlflowException.invalid_parameter_value(
            f"expected strings (source sentences); got {type(bad[0]).__name__} {bad[0]!r}"
        )
    return [v if isinstance(v, str) else "" for v in values]


# Inference params besides n_best, each a keyword of Translator.translate; None: the model's setting.
# The decode settings a request may change (overrides.SETTINGS; not a server's batch size), and for
# a model of several target languages, which one.
DATA_TYPES = {int: DataType.long, float: DataType.double, bool: DataType.boolean}
SEARCH_PARAMS = {s.name: DATA_TYPES[s.kind] for s in SETTINGS if s.spec.per_request} | {
    "tgt_lang": DataType.string
}


def signature() -> Any:
    """Strings in, strings out; n_best and SEARCH_PARAMS as params.

    Their default is null, the model's own decode settings, because MLflow fills in every
    default a request leaves out: a default beam of decode.beam would refuse `sample`.
    """
    specs = [ParamSpec(name, dtype, None) for name, dtype in SEARCH_PARAMS.items()]
    return ModelSignature(
        inputs=Schema([ColSpec(DataType.string)]),
        outputs=Schema([ColSpec(DataType.string)]),
        params=ParamSchema([*specs, ParamSpec("n_best", DataType.long, 1)]),
    )


def requirements() -> list[str]:
    """Pinned `dist==version` of every third-party package this module's code imports (ast)."""
    names = set()
    for path in module_closure(__name__):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module.split(".")[0])
    names -= {*sys.stdlib_module_names, PACKAGE.name, "__future__"}
    dists = metadata.packages_distributions()
    pins = {f"{d}=={metadata.version(d).split('+')[0]}" for name in names for d in dists.get(name, [])}
    return sorted(pins, key=str.lower)  # '+cpu' dropped: the torch build is the serving machine's choice


def model_spec(model_dir: str | Path, example: Sequence[str], backend: str = "torch") -> dict[str, Any]:
    """mlflow.pyfunc.log_model's arguments for the model in `model_dir`, served by `backend`
    (tracking.serve_backend, in the logged model_config; a load may override it)."""
    return {
        "python_model": str(Path(__file__).resolve()),  # this file: it sets the model below
        "artifacts": {ARTIFACT: str(Path(model_dir).resolve())},
        "code_paths": [str(PACKAGE)],
        "pip_requirements": requirements()
        + ([f"ctranslate2=={metadata.version('ctranslate2')}"] if backend == "ctranslate2" else []),
        "signature": signature(),
        "input_example": list(example),
        "model_config": serving_config({"backend": backend}),
    }


# MLflow runs this file to load the logged model (models from code): set_model names what it
# serves. Imported as a module of the package, as the score stage does, the file sets nothing.
if __name__ != "pipeline.serving.pyfunc":
    set_model(TranslatorModel())

"""Typed, validated params: one frozen dataclass per section of params.yaml (schema.py), built from
plain values with one-line refusals (coerce.py), validated (checks.py), loaded once at the CLI
boundary (loading.py), and read back from a model directory of an older version (saved.py).

Defaults live in params.yaml, nowhere else: a key missing from the file is an error, as is a key
the dataclass lacks. Import the package, not its modules: `from pipeline import params as P`.
"""

from pipeline.errors import ParamsError
from pipeline.params.checks import BT_SOURCE, DECODE_KEYS, check_decode, validate, validate_data
from pipeline.params.coerce import flatten
from pipeline.params.loading import from_dict, load
from pipeline.params.saved import from_saved
from pipeline.params.schema import (
    INDEX_PREFIXES,
    SECTIONS,
    STUDENT_PRESETS,
    BacktranslationParams,
    BpeParams,
    CleanParams,
    CorpusSpec,
    DataParams,
    DecodeParams,
    DistillParams,
    FilterRule,
    ModelParams,
    PairScoreParams,
    Params,
    Precision,
    ReverseParams,
    SamplingParams,
    StudentParams,
    TrackingParams,
    TrainParams,
    safe_name,
)

__all__ = [
    "BT_SOURCE",
    "DECODE_KEYS",
    "INDEX_PREFIXES",
    "SECTIONS",
    "STUDENT_PRESETS",
    "BacktranslationParams",
    "BpeParams",
    "CleanParams",
    "CorpusSpec",
    "DataParams",
    "DecodeParams",
    "DistillParams",
    "FilterRule",
    "ModelParams",
    "PairScoreParams",
    "Params",
    "ParamsError",
    "Precision",
    "ReverseParams",
    "SamplingParams",
    "StudentParams",
    "TrackingParams",
    "TrainParams",
    "check_decode",
    "flatten",
    "from_dict",
    "from_saved",
    "load",
    "safe_name",
    "validate",
    "validate_data",
]

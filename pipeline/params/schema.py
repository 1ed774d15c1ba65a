"""The params' schema: one frozen dataclass per section of params.yaml, and the names and shapes
their values take.

Defaults live in params.yaml, nowhere else: every field here is required (but a source spec's,
data.sources.NAME), so a key missing from the file is an error, as is a key the dataclass lacks.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, Literal

BEFORE = "before"  # a field's metadata: what params saved before the setting existed meant by its absence


def since(before: Any) -> dict[str, Any]:
    """The metadata of a setting added after models were first saved: params saved earlier lack its
    key, and meant `before` (the old behaviour), which saved.from_saved fills in. It is no default:
    params.yaml must still set the key."""
    return {BEFORE: before}


OVERRIDE = "override"  # a field's metadata: one call may change the setting (an Override)


@dataclass(frozen=True)
class Override:
    """A decode setting one call may change: `translate`'s option, Translator's keyword and the
    MLflow model's request param are made from it (pipeline/decoding/overrides.py)."""

    help: str
    name: str | None = None  # the keyword, where it is not the field's name
    per_request: bool = True  # False: a server's setting, no request param


def overridable(help: str, *, name: str | None = None, per_request: bool = True) -> dict[str, Any]:
    """The metadata of a decode setting a call may override (OVERRIDE); `help` says what it does."""
    return {OVERRIDE: Override(help, name, per_request)}


SOURCE_FORMATS = ("auto", "text", "tsv", "tmx", "sgm", "xml")

# A test set's name becomes a file name and a metric name (test.<name>.bleu): no dots, no slashes.
SET_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
# Names a split may give a set of the field's indexes by (pipeline/data/indexes.py resolves them)
INDEX_PREFIXES = ("mtdata:", "sacrebleu:")


def safe_name(name: str) -> str:
    """A set's `name` as split files and MLflow metric keys can hold it (no colon, no slash):
    mtdata:OPUS-ccmatrix-v1-eng-msa is the source mtdata-OPUS-ccmatrix-v1-eng-msa."""
    return re.sub(r"[^\w.-]+", "-", name)


LANG_CODE = re.compile(r"[A-Za-z]{2,3}(?:[_-][A-Za-z0-9]{2,8})*")  # ms, id, pt_BR, zh-Hant: a tag names it

Precision = Literal["auto", "fp32", "bf16", "fp16"]  # train.precision; auto: training.step.resolve_precision


@dataclass(frozen=True)
class CorpusSpec:
    """A corpus source of the user's own (data.sources.NAME); its keys may be left out.

    Exactly one of: `catalog` (a catalog set, e.g. to cap it with max_lines);
    `src` and `tgt` (a file per side); `file` (one file holding both sides: TSV,
    TMX or WMT XML). With `archive`, `src`/`tgt`/`file` are members of that
    tar/tgz/zip. `format` auto reads the (member) name: .tsv .tmx .sgm .xml, else
    text. `sha256` is the sum of `archive` or `file`; src_sha256/tgt_sha256 are
    the per-side files'. `tokenized: moses`: clean detokenizes the text (pipeline.data.detok).
    """

    catalog: str | None = None
    src: str | None = None
    tgt: str | None = None
    file: str | None = None
    archive: str | None = None
    format: Literal["auto", "text", "tsv", "tmx", "sgm", "xml"] = "auto"
    columns: tuple[int, int] = (0, 1)
    sha256: str | None = None
    src_sha256: str | None = None
    tgt_sha256: str | None = None
    max_lines: int | None = None
    tokenized: Literal["moses"] | None = None  # the files are Moses-tokenized: clean detokenizes them
    # Its pair, where it is not data.src_lang -> data.tgt_lang (a catalog set is read in that direction).
    # Train sources of several target languages turn target-language tags on (pipeline/data/tags.py).
    src_lang: str | None = None
    tgt_lang: str | None = None


@dataclass(frozen=True)
class DataParams:
    src_lang: str
    tgt_lang: str
    mirror: str | None
    train: tuple[str, ...]
    val: tuple[str, ...]
    test: tuple[str, ...]
    sources: dict[str, CorpusSpec]
    heldout_seed: int
    heldout_val: int | None  # set only when val is []: lines held out of train
    heldout_test: int | None  # set only when test is []
    workers: int = field(metadata=since(1))


FilterRule = Literal[
    "min_words", "boilerplate", "repeated", "untranslated", "numbers", "script", "langid", "score"
]


@dataclass(frozen=True)
class PairScoreParams:
    """clean.score: the score rule, for misaligned pairs that pass every other rule. Models of the
    project trained on trusted data score each pair by its cross-entropy, or with a reverse model by
    the dual conditional cross-entropy (pipeline/decoding/pair_scores.py); the worst are dropped."""

    # a model directory translating src -> tgt; null: no model to score with
    forward: str | None = field(metadata=since(None))
    # one translating tgt -> src: the score becomes the dual cross-entropy
    reverse: str | None = field(metadata=since(None))
    drop_worst: float = field(metadata=since(0.0))  # this share of the scored pairs, the least likely first
    max_score: float | None = field(metadata=since(None))  # ... and every pair scoring above this; null: none
    # each cross-entropy over the same model's with no input: how little the source explains the target
    relative: bool = field(metadata=since(False))
    batch_tokens: int = field(metadata=since(4000))


@dataclass(frozen=True)
class CleanParams:
    max_words: int
    max_ratio: float
    dedupe: bool
    decontaminate: bool = field(metadata=since(False))
    # Rules for web-crawled data (pipeline/data/filters.py), for the train sources: `filters` for the
    # catalog's sets and the user's own, `web_filters` for mtdata's (web-crawled and mined), and a
    # source's own list under its name in `source_filters`
    filters: tuple[FilterRule, ...] = field(metadata=since(()))
    web_filters: tuple[FilterRule, ...] = field(metadata=since(()))
    source_filters: dict[str, tuple[FilterRule, ...]] = field(metadata=since({}))
    min_words: int = field(metadata=since(1))  # the min_words rule: each side has at least this many words
    # the script rule: this share of a side's letters in its language's script
    min_script_ratio: float = field(metadata=since(0.5))
    score: PairScoreParams = field(metadata=since({}))  # the score rule's models and cut


@dataclass(frozen=True)
class BpeParams:
    joint: bool
    model_type: Literal["bpe", "unigram"] = field(metadata=since("bpe"))
    vocab_size: int | Literal["auto"]  # auto: from the training pairs (pipeline.stages.bpe.auto_vocab_size)
    character_coverage: float
    byte_fallback: bool
    sample_lines: int = field(metadata=since(2**62))
    seed: int = field(metadata=since(1))


@dataclass(frozen=True)
class ModelParams:
    arch: Literal["encoder_decoder", "decoder_only"]
    d_model: int
    n_heads: int
    d_ff: int
    n_layers: int | None  # the depth of each stack whose own depth is null
    encoder_layers: int | None
    decoder_layers: int | None
    norm: Literal["pre", "post"]
    positions: Literal["sinusoidal", "sinusoidal_marian", "learned"]
    max_positions: int
    tie_embeddings: Literal["all", "target", "none"]
    output_bias: bool
    scale_embeddings: bool
    activation: Literal["relu", "gelu", "swish"]
    dropout: float
    attention_dropout: float
    activation_dropout: float

    @property
    def n_encoder_layers(self) -> int:
        depth = self.n_layers if self.encoder_layers is None else self.encoder_layers
        assert depth is not None, "validate() refuses a stack with no depth"
        return depth

    @property
    def n_decoder_layers(self) -> int:
        depth = self.n_layers if self.decoder_layers is None else self.decoder_layers
        assert depth is not None, "validate() refuses a stack with no depth"
        return depth


@dataclass(frozen=True)
class TrainParams:
    device: Literal["auto", "cpu", "cuda"]
    precision: Precision
    # torch.compile of the training forward and loss; auto: where it was measured faster
    # (training.step.resolve_compile: bf16 on a CPU with a C++ compiler, docs/cpu-speed.md).
    compile: bool | Literal["auto"]
    seed: int
    max_tokens: int
    # A fresh segmentation of every training sentence each epoch (docs/low-resource.md).
    subword_sampling: Literal["none", "unigram", "bpe_dropout"] = field(metadata=since("none"))
    subword_alpha: float = field(metadata=since(0.1))
    subword_nbest: int = field(metadata=since(-1))
    source_weights: dict[str, float] = field(metadata=since({}))
    source_temperature: float = field(metadata=since(1.0))
    # A model directory to start from: its weights, architecture and vocabulary (docs/transfer.md).
    init_from: str | None = field(metadata=since(None))
    update_freq: int
    optimizer: Literal["adam", "adamw"]
    lr: float
    betas: tuple[float, float]
    eps: float
    weight_decay: float
    warmup_steps: int
    clip_norm: float
    label_smoothing: float
    max_epochs: int
    max_steps: int
    validate_every: int
    val_bleu: bool
    early_stop_metric: Literal["bleu", "loss"]
    patience: int
    keep_last: int
    average_last: int
    # 0: off; else the moving average of the weights validated and saved (ema.py)
    ema_decay: float = field(metadata=since(0.0))
    skip_bad_batches: bool
    log_every: int
    threads: int


@dataclass(frozen=True)
class SamplingParams:
    """decode.sampling: draw each token from the model's distribution, tempered, then cut to the
    top_k likeliest tokens and to the nucleus of top_p probability (docs/sampling.md)."""

    enabled: bool = field(
        metadata=since(False)
        | overridable(
            "Draw each token at random instead of searching (beam 1; see docs/sampling.md).", name="sample"
        )
    )
    top_k: int = field(  # 0: no limit
        metadata=since(0) | overridable("Sampling: draw among the k likeliest tokens; 0: all.")
    )
    top_p: float = field(  # 1: no limit
        metadata=since(1.0) | overridable("Sampling: draw within the nucleus of this probability; 1: all.")
    )
    temperature: float = field(
        metadata=since(1.0) | overridable("Sampling: <1 sharpens the model's distribution, >1 flattens it.")
    )
    seed: int = field(
        metadata=since(1) | overridable("Sampling: a line's samples depend on this and the line alone.")
    )


@dataclass(frozen=True)
class DecodeParams:
    """decode: how a model translates. The settings marked overridable are also `translate`'s
    options, Translator.translate's keywords and the MLflow model's request params."""

    beam: int = field(metadata=overridable("Beam size (1: greedy)."))
    length_penalty: float = field(
        metadata=overridable(
            "GNMT's alpha: hypotheses are ranked by log-probability / ((5 + length) / 6) ** alpha."
        )
    )
    max_len_a: float
    max_len_b: int
    batch_tokens: int = field(
        metadata=overridable("Sentences x beam x padded source length per batch.", per_request=False)
    )
    n_best: int  # with sampling: samples per input
    sampling: SamplingParams = field(metadata=since({}))
    # no output repeats an n-gram this long (steps.ban_repeated_ngrams); 0: off
    no_repeat_ngram_size: int = field(
        metadata=since(0)
        | overridable(
            "No output repeats an n-gram of this many tokens (as fairseq's, Hugging Face's and "
            "CTranslate2's option); 0: off."
        )
    )
    # Other model directories decoded together with the model, their probabilities averaged; read where
    # the settings come from params.yaml (decode, backtranslate), never from a model's own saved params
    ensemble: tuple[str, ...] = field(metadata=since(()))


@dataclass(frozen=True)
class TrackingParams:
    experiment: str
    # a Model Registry name: each training run adds a version
    register_model: str | None = field(metadata=since(None))
    # What the logged model decodes with when served: the model (torch) or its CTranslate2 conversion
    serve_backend: Literal["torch", "ctranslate2"] = field(metadata=since("torch"))


@dataclass(frozen=True)
class ReverseParams:
    """backtranslation.reverse: the reverse model's own vocabulary, architecture and training, so that
    changing the forward model's (bpe, model, train) retrains nothing of it."""

    bpe: BpeParams
    model: ModelParams
    train: TrainParams


@dataclass(frozen=True)
class BacktranslationParams:
    """Synthetic training pairs from target-language text, translated by a reverse model (Sennrich et
    al. 2016), tagged as synthetic (Caswell et al. 2019); docs/backtranslation.md."""

    enabled: bool
    mono: tuple[str, ...]  # catalog sets or data.sources keys: their data.tgt_lang side is read
    max_lines: int | None  # at most this many monolingual lines: a seeded sample
    seed: int
    tag: bool  # each synthetic source begins with BT_TAG, a piece of the vocabulary
    decode: DecodeParams  # how the reverse model translates: beam, or sampling (Edunov et al. 2018)
    reverse: ReverseParams


# The field's student shapes (Bergamot's, browsermt/students): a deep encoder and a shallow decoder.
# A preset sets these keys of distill.student.model; "none" takes the model section as written.
STUDENT_PRESETS: dict[str, dict[str, int | None]] = {
    "base": {
        "d_model": 512,
        "n_heads": 8,
        "d_ff": 2048,
        "n_layers": None,
        "encoder_layers": 6,
        "decoder_layers": 2,
    },
    "tiny": {
        "d_model": 256,
        "n_heads": 8,
        "d_ff": 1536,
        "n_layers": None,
        "encoder_layers": 6,
        "decoder_layers": 2,
    },
}


@dataclass(frozen=True)
class StudentParams:
    """distill.student: the student's own shape, training and decoding, so that changing the
    teacher's (model, train) retrains nothing of it (the teacher's translations change instead)."""

    preset: str  # a name of STUDENT_PRESETS, or "none": the model section's own shape
    model: ModelParams
    train: TrainParams
    decode: DecodeParams  # how the student translates the test sets
    # its CTranslate2 export's weights, decoded and scored beside it; none: no export
    quantization: Literal["int8", "int8_float32", "int16", "float32", "none"]

    @property
    def shaped_model(self) -> ModelParams:
        """The model it trains: the preset's shape over the model section."""
        shape = STUDENT_PRESETS.get(self.preset, {})
        return dataclasses.replace(self.model, **shape)  # type: ignore[arg-type]


@dataclass(frozen=True)
class DistillParams:
    """Sequence-level knowledge distillation (Kim & Rush 2016): the teachers translate the training
    sources with beam search, and a small student trains on that (docs/distillation.md)."""

    enabled: bool
    teachers: tuple[str, ...]  # model directories; empty: the run's own data/model with decode.ensemble
    # more teachers, trained by the teachers stage: data/model's settings with these seeds
    teacher_seeds: tuple[int, ...] = field(metadata=since(()))
    original: bool  # the student trains on the original pairs too, beside the distilled ones
    decode: DecodeParams  # how the teachers translate
    student: StudentParams


@dataclass(frozen=True)
class Params:
    data: DataParams
    clean: CleanParams
    bpe: BpeParams
    model: ModelParams
    train: TrainParams
    decode: DecodeParams
    tracking: TrackingParams
    backtranslation: BacktranslationParams
    distill: DistillParams

    def to_dict(self) -> dict[str, Any]:
        return to_plain(dataclasses.asdict(self))


SECTIONS = {f.name: f.type for f in dataclasses.fields(Params)}


def to_plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    return value

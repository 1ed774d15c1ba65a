"""Validation: values that are well-typed but invalid, sections that do not fit together, and
settings that cannot take effect (refused, since a sweep over one would change nothing)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from pipeline.errors import ParamsError, UserError
from pipeline.params.coerce import show_value
from pipeline.params.schema import (
    INDEX_PREFIXES,
    LANG_CODE,
    SET_NAME,
    STUDENT_PRESETS,
    BacktranslationParams,
    BpeParams,
    CleanParams,
    CorpusSpec,
    DataParams,
    DecodeParams,
    DistillParams,
    ModelParams,
    Params,
    SamplingParams,
    TrainParams,
    safe_name,
)
from pipeline.tokens import N_SPECIAL


def _check(ok: bool, key: str, message: str) -> None:
    if not ok:
        raise ParamsError(f"{key}: {message}")


def validate(p: Params) -> None:
    """Refuse values that are well-typed but invalid or inconsistent, a section at a time."""
    validate_data(p.data)
    validate_clean(p.clean)
    _check_source_filters(p.clean, p.data)
    validate_bpe(p.bpe)
    validate_model(p.model, p.bpe)
    # with back-translation on, its synthetic pairs are one more train source (weights may name it)
    trained = (*p.data.train, BT_SOURCE) if p.backtranslation.enabled else p.data.train
    validate_train(p.train, dataclasses.replace(p.data, train=trained), p.bpe)
    check_decode(p.decode)
    check_sampling_takes_effect(p.decode.sampling)
    validate_backtranslation(p.backtranslation, p.data, p.train.init_from)
    validate_distill(p.distill, p.data, p.bpe, p.train.seed)


BT = "backtranslation"
BT_SOURCE = "backtranslated"  # the train source the synthetic pairs are (train.source_weights names it)


def validate_backtranslation(b: BacktranslationParams, d: DataParams, init_from: str | None) -> None:
    """Back-translation's switch and sources, how the reverse model translates, and the reverse
    model's own sections, checked by the forward's validators and named by their own keys."""
    _check(
        b.enabled == bool(b.mono),
        f"{BT}.enabled" if b.enabled else f"{BT}.mono",
        "true needs target-language text to translate: list sources in backtranslation.mono"
        if b.enabled
        else "is only read with backtranslation.enabled: true; set that, or empty this list",
    )
    _check(
        not (b.enabled and b.tag and init_from is not None),
        f"{BT}.tag",
        "marks synthetic sources with <BT>, a piece a parent's vocabulary (train.init_from) lacks; "
        "set backtranslation.tag: false to fine-tune a parent on back-translated pairs",
    )
    _check(
        not b.enabled or BT_SOURCE not in d.train,
        "data.train",
        f"{BT_SOURCE!r} names the synthetic pairs of back-translation; rename that source",
    )
    for i, name in enumerate(b.mono):
        _check(name not in b.mono[:i], f"{BT}.mono", f"{name} is listed twice")
        _check(
            name not in (*d.val, *d.test),
            f"{BT}.mono",
            f"{name} is a val or test set (data.val, data.test); its text cannot become training data",
        )
    _check(b.max_lines is None or b.max_lines >= 1, f"{BT}.max_lines", "must be null (all) or at least 1")
    _check_decode_at(BT, b.decode)
    r = b.reverse
    reverse_data = dataclasses.replace(d, src_lang=d.tgt_lang, tgt_lang=d.src_lang)
    try:
        validate_bpe(r.bpe)
        validate_model(r.model, r.bpe)
        validate_train(r.train, reverse_data, r.bpe)
    except ParamsError as e:  # "model.d_model: ..." is backtranslation.reverse.model.d_model here
        raise ParamsError(f"{BT}.reverse.{e}") from None
    _check(
        r.train.init_from is None,
        f"{BT}.reverse.train.init_from",
        "must be null: the reverse model trains from scratch",
    )


def validate_distill(dist: DistillParams, d: DataParams, b: BpeParams, seed: int) -> None:
    """The teachers' list, seeds and decoding, and the student's preset and own sections, checked by
    the forward's validators and named by their own keys. The student reads the teacher's vocabulary."""
    for i, path in enumerate(dist.teachers):
        _check(bool(path.strip()), "distill.teachers", "holds an empty path; list model directories")
        _check(path not in dist.teachers[:i], "distill.teachers", f"lists {path} twice; list each model once")
    for i, n in enumerate(dist.teacher_seeds):
        _check(n not in dist.teacher_seeds[:i], "distill.teacher_seeds", f"lists {n} twice; list it once")
        _check(
            n != seed or bool(dist.teachers),
            "distill.teacher_seeds",
            f"lists {n}, train.seed's: that teacher is data/model; list other seeds",
        )
    _check_decode_at("distill", dist.decode)
    _check(
        not dist.decode.ensemble,
        "distill.decode.ensemble",
        "must be []: list the teachers in distill.teachers (or in decode.ensemble, beside data/model)",
    )
    s = dist.student
    presets = ", ".join(STUDENT_PRESETS)
    _check(
        s.preset in (*STUDENT_PRESETS, "none"),
        "distill.student.preset",
        f"{s.preset!r} is no preset; use one of {presets}, or none for distill.student.model's own shape",
    )
    shape = {key: getattr(s.model, key) for key in STUDENT_PRESETS["tiny"]}
    if s.preset != "none" and shape != STUDENT_PRESETS[s.preset] and shape not in STUDENT_PRESETS.values():
        key, value = next((k, v) for k, v in shape.items() if v != STUDENT_PRESETS[s.preset][k])
        raise ParamsError(
            f"distill.student.model.{key}: {show_value(value)}, but distill.student.preset {s.preset} sets "
            f"{show_value(STUDENT_PRESETS[s.preset][key])}; set distill.student.preset: none to train the "
            "model section's own shape"
        )
    _check_decode_at("distill.student", s.decode)
    _check(not s.decode.ensemble, "distill.student.decode.ensemble", "must be []: the student decodes alone")
    if not dist.enabled:  # its model and train read the teacher's vocabulary (bpe): checked when on
        return
    try:
        validate_model(s.shaped_model, b)
        # the student's train sources: the distilled pairs (pipeline.stages.student.SOURCE), and the originals
        validate_train(s.train, dataclasses.replace(d, train=("distilled", *d.train)), b)
    except ParamsError as e:  # "model.d_model: ..." is distill.student.model.d_model here
        raise ParamsError(f"distill.student.{e}") from None
    _check(
        s.train.init_from is None,
        "distill.student.train.init_from",
        "must be null: the student trains from scratch on its teachers' translations",
    )


def _check_decode_at(section: str, dec: DecodeParams) -> None:
    """check_decode for a decode section that lives under `section`, named by its own keys."""
    check_decode(dec, {name: f"{section}.{key}" for name, key in DECODE_KEYS.items()})
    try:
        check_sampling_takes_effect(dec.sampling)
    except ParamsError as e:  # "decode.sampling.top_k: ..." is SECTION.decode.sampling.top_k here
        raise ParamsError(f"{section}.{e}") from None


def validate_clean(c: CleanParams) -> None:
    _check(c.max_words >= 1, "clean.max_words", "must be at least 1")
    _check(c.max_ratio >= 1.0, "clean.max_ratio", "must be at least 1.0")
    _check(
        c.min_words >= 1,
        "clean.min_words",
        f"must be at least 1 (got {c.min_words}); to keep pairs of any "
        "length, leave min_words out of clean.filters",
    )
    _check(
        0.0 < c.min_script_ratio <= 1.0,
        "clean.min_script_ratio",
        f"must be in (0, 1] (got "
        f"{c.min_script_ratio}); to check no script, leave script out of clean.filters",
    )
    score = c.score
    listed = [*c.filters, *c.web_filters, *(r for rules in c.source_filters.values() for r in rules)]
    _check(
        score.forward is not None or "score" not in listed,
        "clean.score.forward",
        "is null, but a list in clean names the score rule; name a model directory trained on "
        "trusted data (docs/cleaning.md), or leave score out of clean's lists",
    )
    _check(
        score.forward is None or "score" in listed,
        "clean.score.forward",
        "names a model, but no list in clean names the score rule; add score to clean.filters (the "
        "catalog's sets and your own), clean.web_filters (mtdata's) or a source's clean.source_filters",
    )
    _check(
        score.reverse is None or score.forward is not None,
        "clean.score.reverse",
        "is only read with clean.score.forward; name the forward model too",
    )
    _check(
        0.0 <= score.drop_worst < 1.0, "clean.score.drop_worst", f"must be in [0, 1) (got {score.drop_worst})"
    )
    _check(
        score.max_score is None or score.max_score > 0.0,
        "clean.score.max_score",
        f"must be above 0, or null (got {score.max_score})",
    )
    _check(
        score.forward is None or score.drop_worst > 0.0 or score.max_score is not None,
        "clean.score.drop_worst",
        "is 0 and clean.score.max_score null, so the score rule would drop nothing; set either",
    )
    _check(score.batch_tokens >= 1, "clean.score.batch_tokens", "must be at least 1")


def _check_source_filters(c: CleanParams, d: DataParams) -> None:
    """clean.source_filters names train sources, as data.train spells them or as the files do."""
    known = {*d.train, *map(safe_name, d.train)}
    for name in c.source_filters:
        _check(
            name in known,
            f"clean.source_filters.{name}",
            f"is not a train source (data.train: {', '.join(d.train)}); name one of them",
        )


def validate_bpe(b: BpeParams) -> None:
    _check(
        b.vocab_size == "auto" or b.vocab_size > N_SPECIAL + 2,
        "bpe.vocab_size",
        f"must exceed the {N_SPECIAL} special tokens plus 2, or be auto (sized from the training pairs)",
    )
    _check(0.9 <= b.character_coverage <= 1.0, "bpe.character_coverage", "must be within [0.9, 1.0]")
    _check(
        b.sample_lines >= 2,
        "bpe.sample_lines",
        "must be at least 2 (a joint model takes both sides of a pair)",
    )


def validate_model(m: ModelParams, b: BpeParams) -> None:
    """The model's sizes and rates, and the embedding ties its architecture and vocabulary allow."""
    for name in ("d_model", "n_heads", "d_ff", "max_positions"):
        _check(getattr(m, name) >= 1, f"model.{name}", "must be at least 1")
    _check(m.n_layers is None or m.n_layers >= 1, "model.n_layers", "must be null or at least 1")
    _check(
        m.d_model % m.n_heads == 0,
        "model.d_model",
        f"{m.d_model} is not divisible by model.n_heads={m.n_heads}",
    )
    for name in ("dropout", "attention_dropout", "activation_dropout"):
        _check(0.0 <= getattr(m, name) < 1.0, f"model.{name}", "must be within [0, 1)")
    check_depths(m)
    _check(
        not (m.arch == "decoder_only" and m.tie_embeddings == "target"),
        "model.tie_embeddings",
        "'target' is 'all' for model.arch: decoder_only (one embedding table reads both sides): "
        "use all or none",
    )
    _check(
        not (m.tie_embeddings == "all" and not b.joint),
        "model.tie_embeddings",
        "'all' ties source and target embeddings, which needs bpe.joint: true; use 'target' or 'none'",
    )
    _check(
        not (m.arch == "decoder_only" and not b.joint),
        "model.arch",
        "decoder_only reads source and target with one embedding table; it needs bpe.joint: true",
    )


def validate_train(t: TrainParams, d: DataParams, b: BpeParams) -> None:
    """The training's settings, and those that must agree with the data's sources or the subword model."""
    _check(t.max_tokens >= 1, "train.max_tokens", "must be at least 1")
    check_source_draws(t, d.train)
    check_subword_sampling(t, b)
    _check(
        t.init_from is None or bool(t.init_from.strip()),
        "train.init_from",
        "must be null (train from scratch) or the path of a model directory",
    )
    _check(t.update_freq >= 1, "train.update_freq", "must be at least 1")
    _check(t.lr > 0, "train.lr", "must be positive")
    _check(all(0.0 <= x < 1.0 for x in t.betas), "train.betas", "each must be within [0, 1)")
    _check(t.eps > 0, "train.eps", "must be positive")
    _check(t.weight_decay >= 0, "train.weight_decay", "must be non-negative")
    _check(t.warmup_steps >= 0, "train.warmup_steps", "must be non-negative")
    _check(t.clip_norm >= 0, "train.clip_norm", "must be non-negative (0: no clipping)")
    _check(0.0 <= t.label_smoothing < 1.0, "train.label_smoothing", "must be within [0, 1)")
    _check(t.max_epochs >= 1, "train.max_epochs", "must be at least 1")
    for name in ("max_steps", "validate_every", "average_last", "threads"):
        _check(getattr(t, name) >= 0, f"train.{name}", "must be non-negative (0: off)")
    _check(t.patience >= 0, "train.patience", "must be non-negative (0: no early stopping)")
    _check(t.keep_last >= 1, "train.keep_last", "must be at least 1")
    _check(
        t.average_last <= t.keep_last,
        "train.average_last",
        f"cannot average more checkpoints than train.keep_last={t.keep_last} keeps",
    )
    _check(
        t.ema_decay == 0.0 or 0.0 < t.ema_decay < 1.0,
        "train.ema_decay",
        "must be 0 (off) or within (0, 1), e.g. 0.999: the weight of the running average at each update",
    )
    _check(t.log_every >= 1, "train.log_every", "must be at least 1")
    _check(
        not (t.early_stop_metric == "bleu" and not t.val_bleu),
        "train.early_stop_metric",
        "'bleu' needs train.val_bleu: true; use 'loss'",
    )


def check_subword_sampling(t: TrainParams, b: BpeParams) -> None:
    """Subword sampling's settings, and that the kind of sampling fits the kind of subword model
    (bpe.model_type; with train.init_from the parent's model, which the train stage checks)."""
    trains_its_own = t.init_from is None
    _check(
        0.0 < t.subword_alpha <= 1.0,
        "train.subword_alpha",
        "must be within (0, 1]: unigram's smoothing of the sampled distribution, or bpe_dropout's chance "
        "to drop a merge (0.1 in Provilkov et al. 2020); subword_sampling: none turns sampling off",
    )
    _check(
        t.subword_nbest >= -1,
        "train.subword_nbest",
        "must be -1 (sample among every segmentation) or a number of best segmentations to sample among",
    )
    if t.subword_sampling == "unigram":
        _check(
            b.model_type == "unigram" or not trains_its_own,
            "train.subword_sampling",
            "unigram samples a unigram model's segmentations, but bpe.model_type is bpe; use "
            "subword_sampling: bpe_dropout for a BPE model, or set bpe.model_type: unigram",
        )
        _check(
            t.subword_nbest not in (0, 1),
            "train.subword_nbest",
            f"{t.subword_nbest} leaves one segmentation to sample from (no sampling); use -1 (all) or 2 "
            "or more, or subword_sampling: none",
        )
    _check(
        t.subword_sampling == "unigram" or t.subword_nbest == -1,
        "train.subword_nbest",
        f"{t.subword_nbest} has no effect with subword_sampling: {t.subword_sampling} (only unigram "
        "sampling draws among the n best): set subword_sampling: unigram, or set this to -1",
    )
    if t.subword_sampling == "bpe_dropout":
        _check(
            b.model_type == "bpe" or not trains_its_own,
            "train.subword_sampling",
            "bpe_dropout drops the merges of a BPE model, but bpe.model_type is unigram; use "
            "subword_sampling: unigram for a unigram model, or set bpe.model_type: bpe",
        )


def validate_data(d: DataParams) -> None:
    """The data section: the splits' names, and each source spec's shape (names resolve in download)."""
    _check(d.src_lang != d.tgt_lang, "data.tgt_lang", "must differ from data.src_lang")
    _check(bool(d.train), "data.train", "needs at least one source (a catalog set or a data.sources name)")
    for split in ("train", "val", "test"):
        names = getattr(d, split)
        for i, name in enumerate(names):
            _check(name not in names[:i], f"data.{split}", f"{name} is listed twice")
    for split in ("val", "test"):
        for name in getattr(d, split):
            _check(
                name not in d.train,
                f"data.{split}",
                f"{name} is also in data.train; a set held out for {split} cannot be trained on",
            )
    for name in d.test:
        _check(
            (bool(SET_NAME.match(name)) or name.startswith(INDEX_PREFIXES))
            and name not in ("train", "val", "heldout"),
            "data.test",
            f"{name!r} cannot name a test set: use letters, digits, _ and - (it names files and metrics), "
            "and not train, val or heldout",
        )
    for name, spec in d.sources.items():
        _check_source(name, spec)
    _check_heldout(d)
    for split in ("train", "val", "test"):
        for name in getattr(d, split):
            one = d.sources.get(name)
            _check(
                one is None or not (bool(one.src) ^ bool(one.tgt)),
                f"data.sources.{name}",
                f"has only {'src' if one and one.src else 'tgt'}: one side is monolingual text, for "
                f"backtranslation.mono; give both src and tgt to use it in data.{split}",
            )
    _check(d.workers >= 0, "data.workers", "must be 0 (every core) or a number of processes")


# --- settings that cannot take effect: refused, since a sweep over one would change nothing ---------


def check_depths(m: ModelParams) -> None:
    """Each stack's depth is its own key, or n_layers where that is null; n_layers must size some stack."""
    for name in ("encoder_layers", "decoder_layers"):
        value = getattr(m, name)
        _check(value is None or value >= 1, f"model.{name}", "must be null (use n_layers) or at least 1")
    if m.arch == "decoder_only":
        _check(
            m.encoder_layers is None,
            "model.encoder_layers",
            f"{m.encoder_layers} has no effect with model.arch: decoder_only (it has no encoder): null it, "
            "and size the model with model.decoder_layers or model.n_layers",
        )
        _check(
            m.n_layers is None or m.decoder_layers is None,
            "model.n_layers",
            f"{m.n_layers} has no effect while model.decoder_layers is set ({m.decoder_layers}) with "
            "model.arch: decoder_only: set that, or null it",
        )
        _check(
            m.n_layers is not None or m.decoder_layers is not None,
            "model.n_layers",
            "null sizes no stack: set it, or set model.decoder_layers",
        )
        return
    both = m.encoder_layers is not None and m.decoder_layers is not None
    _check(
        m.n_layers is None or not both,
        "model.n_layers",
        f"{m.n_layers} has no effect while model.encoder_layers and model.decoder_layers are both set "
        f"({m.encoder_layers}, {m.decoder_layers}): set those, or null them",
    )
    _check(
        m.n_layers is not None or both,
        "model.n_layers",
        "null sizes no stack: set it, or set model.encoder_layers and model.decoder_layers",
    )


def check_source_draws(t: TrainParams, train: tuple[str, ...]) -> None:
    """train.source_weights names train sources; a temperature needs two sources to share out."""
    for name, weight in t.source_weights.items():
        key = f"train.source_weights.{name}"
        _check(weight >= 0, key, "must be non-negative (0: leave the source out)")
        _check(
            name in train,
            key,
            "the back-translated pairs, a train source only with backtranslation.enabled: true; set that, "
            "or drop this weight"
            if name == BT_SOURCE
            else f"no train source of that name, so it has no effect; the train sources (data.train) are "
            f"{', '.join(train)}",
        )
    _check(t.source_temperature > 0, "train.source_temperature", "must be positive (1: natural proportions)")
    _check(
        len(train) > 1 or t.source_temperature == 1.0,
        "train.source_temperature",
        f"{t.source_temperature} has no effect with one train source ({', '.join(train)}): set it to 1.0, "
        "or list more sources in data.train",
    )


def _check_heldout(d: DataParams) -> None:
    """data.heldout_val/test size a split held out of train: set when that split is [], null otherwise."""
    for split in ("val", "test"):
        key, count, sets = f"data.heldout_{split}", getattr(d, f"heldout_{split}"), getattr(d, split)
        if sets:
            _check(
                count is None,
                key,
                f"{count} has no effect while data.{split} lists sets ({', '.join(sets)}): null it, or set "
                f"data.{split}: [] to hold {count} {split} lines out of train",
            )
        else:
            _check(
                count is not None,
                key,
                f"null, but data.{split} is [] ({split} lines held out of train): set how many, e.g. 1000",
            )
            _check(count is None or count >= 1, key, "must be at least 1")


def _check_source(name: str, s: CorpusSpec) -> None:
    key = f"data.sources.{name}"
    _check(bool(SET_NAME.match(name)), key, "a source name uses letters, digits, _ and - only")
    for side in ("src_lang", "tgt_lang"):
        lang = getattr(s, side)
        _check(
            lang is None or bool(LANG_CODE.fullmatch(lang)),
            f"{key}.{side}",
            f"{lang!r} is no language code: use one like ms, id or pt_BR (or null: data.{side})",
        )
    kinds = [
        k for k, given in (("catalog", s.catalog), ("src/tgt", s.src or s.tgt), ("file", s.file)) if given
    ]
    _check(
        len(kinds) == 1,
        key,
        f"give exactly one of: catalog (a set name), src and tgt (a file per side), file (both sides in one "
        f"TSV, TMX or XML file); got {' and '.join(kinds) or 'none'}",
    )
    if s.src or s.tgt:  # one of them alone: monolingual text, for backtranslation.mono (validate_data)
        _check(
            s.format not in ("tsv", "tmx", "xml"), f"{key}.format", f"{s.format} holds both sides: use file"
        )
    if s.file:
        _check(
            s.format not in ("text", "sgm"), f"{key}.format", f"{s.format} holds one side: use src and tgt"
        )
    if s.catalog:
        extra = [k for k in ("archive", "sha256", "src_sha256", "tgt_sha256", "tokenized") if getattr(s, k)]
        _check(
            not extra,
            key,
            f"{', '.join(extra)}: not with catalog (its files, sums and tokenization are in the catalog)",
        )
    if s.archive or s.file:
        _check(
            not (s.src_sha256 or s.tgt_sha256),
            key,
            "src_sha256/tgt_sha256 are for separate files; give the sha256 of the archive or file as sha256",
        )
    else:
        _check(
            s.sha256 is None, f"{key}.sha256", "is the sum of archive or file; use src_sha256 and tgt_sha256"
        )
    _check(
        min(s.columns) >= 0 and s.columns[0] != s.columns[1],
        f"{key}.columns",
        "two different columns, from 0",
    )
    _check(s.max_lines is None or s.max_lines >= 1, f"{key}.max_lines", "must be null (all) or at least 1")


DECODE_KEYS = {f.name: f"decode.{f.name}" for f in dataclasses.fields(DecodeParams)} | {
    f"sampling.{f.name}": f"decode.sampling.{f.name}" for f in dataclasses.fields(SamplingParams)
}


def check_decode(
    dec: DecodeParams, names: Mapping[str, str] | None = None, error: type[UserError] = ParamsError
) -> None:
    """Refuse decode settings that are invalid or inconsistent, wherever they came from.

    Each message names the setting as the user gave it: its params key (DECODE_KEYS), or what
    `names` maps the field to (a command-line option, a keyword argument). A command passes
    error=UserError: exit 2 is for params.yaml.
    """
    key = {**DECODE_KEYS, **(names or {})}

    def check(ok: bool, field: str, message: str) -> None:
        if not ok:
            raise error(f"{key[field]}: {message}")

    check(dec.beam >= 1, "beam", "must be at least 1 (1 is greedy)")
    if dec.sampling.enabled:
        check(dec.n_best >= 1, "n_best", "must be at least 1 (with sampling: samples per input)")
    else:
        check(1 <= dec.n_best <= dec.beam, "n_best", f"must be within [1, {key['beam']}={dec.beam}]")
    check(dec.length_penalty >= 0, "length_penalty", "must be non-negative")
    limits = "max_len_a and max_len_b"
    check(dec.max_len_a >= 0 and dec.max_len_b >= 0, "max_len_a", f"{limits} must be non-negative")
    check(dec.max_len_a > 0 or dec.max_len_b > 0, "max_len_b", f"{limits} cannot both be 0")
    check(dec.batch_tokens >= 1, "batch_tokens", "must be at least 1")
    check(dec.no_repeat_ngram_size >= 0, "no_repeat_ngram_size", "must be non-negative (0: off)")
    check_sampling(dec, key, check)
    check(
        all(path.strip() for path in dec.ensemble), "ensemble", "holds an empty path; list model directories"
    )
    repeated = sorted({path for path in dec.ensemble if dec.ensemble.count(path) > 1})
    check(not repeated, "ensemble", f"lists {repeated[0] if repeated else ''} twice; list each model once")


# Each sampling value that changes nothing: what the key is set to while sampling is off.
NO_SAMPLING_EFFECT = {"top_k": 0, "top_p": 1.0, "temperature": 1.0}


def check_sampling_takes_effect(s: SamplingParams) -> None:
    """params.yaml: a top_k, top_p or temperature that would change the draws needs sampling on
    (a sweep that sets one and forgets decode.sampling.enabled would silently beam-search)."""
    for name, neutral in NO_SAMPLING_EFFECT.items():
        value = getattr(s, name)
        _check(
            s.enabled or value == neutral,
            f"decode.sampling.{name}",
            f"{value} has no effect while decode.sampling.enabled is false: set that true "
            f"(and decode.beam: 1), or set this to {neutral}",
        )


def check_sampling(
    dec: DecodeParams, key: Mapping[str, str], check: Callable[[bool, str, str], None]
) -> None:
    """decode.sampling's values, and that sampling goes with beam 1 (a beam has nothing to rank)."""
    s = dec.sampling
    check(s.top_k >= 0, "sampling.top_k", "must be 0 (no limit) or a number of tokens")
    check(0 < s.top_p <= 1, "sampling.top_p", "must be within (0, 1] (1: no limit)")
    check(s.temperature > 0, "sampling.temperature", "must be positive (1: the model's own distribution)")
    check(
        not s.enabled or dec.beam == 1,
        "sampling.enabled",
        f"sampling draws one token a step and needs {key['beam']}=1, not {dec.beam}; "
        f"set {key['beam']}=1, or turn sampling off",
    )

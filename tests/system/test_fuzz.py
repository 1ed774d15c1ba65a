"""Fuzzing with hypothesis: arbitrary text through clean, the line files, sentencepiece and translate.

Each test runs its cases through `run_cases`, which counts them and records
"<what>: tried N cases" as the test's `fuzz` property; tests/conftest.py
prints these at the end of the run (with or without -s). Hypothesis's own
numbers: `pytest tests/test_fuzz.py --hypothesis-show-statistics`.

The text strategy mixes any code point but surrogates (which UTF-8 cannot
encode, so no file can hold them) with the characters that break pipelines:
controls, every separator str.splitlines() splits on, BOM and zero-width
characters, bidi marks, combining marks, right-to-left and other scripts,
emoji sequences, compatibility characters, and sentencepiece's own symbols.
"""

from __future__ import annotations

import dataclasses
import io
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sentencepiece as spm
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline import files, tokens
from pipeline.data import formats
from pipeline.data.text import normalize
from pipeline.data.vocab import Vocab
from pipeline.decoding.translator import Translator
from pipeline.model import checkpoint
from pipeline.model.transformer import build_model
from pipeline.stages import translate as translate_stage
from pipeline.stages.bpe import train_bpe
from tests.support.corpora import clean_split
from tests.support.models import WORDS, bpe_params, tiny_model_params, train_spm
from tests.support.repo import BASE

NASTY = [
    "\x00",
    "\x07",
    "\x1b",
    "\x7f",
    "\x9b",  # controls that are deleted
    "\t",
    "\x0b",
    "\x0c",
    "\r",
    "\n",
    "\r\n",  # word and line breaks
    "\x1c",
    "\x1d",
    "\x1e",
    "\x1f",
    "\x85",
    "\u2028",
    "\u2029",  # what str.splitlines() also splits on
    "\u00a0",
    "\u2009",
    "\u3000",  # Unicode spaces
    "\ufeff",
    "\u200b",
    "\u00ad",
    "\u2060",  # BOM, zero-width space, soft hyphen, word joiner
    "\u200c",
    "\u200d",  # ZWNJ and ZWJ, which clean keeps
    "\u200e",
    "\u200f",
    "\u202e",
    "\u2066",
    "\u2069",  # bidi marks, override and isolates
    "\u0301",
    "\u0308",
    "\u0327",
    "e\u0301",
    "\u1100\u1161",  # combining marks, Hangul jamo
    # Hebrew, Arabic, Persian (with ZWNJ), Devanagari, CJK, Hangul
    "\u05e9\u05dc\u05d5\u05dd",
    "\u0645\u0631\u062d\u0628\u0627",
    "\u0646\u0645\u06cc\u200c\u0634\u0648\u062f",
    "\u0928\u092e\u0938\u094d\u0924\u0947",
    "日本語",
    "한국어",
    "\U0001f600",
    "\U0001f469\u200d\U0001f4bb",
    "\U0001f1e9\U0001f1ea",
    "\U0001f44d\U0001f3fd",  # emoji
    "ﬁ",
    "①",
    "\u212b",
    "…",
    "ａ",  # compatibility characters
    "\u2581",
    "<sep>",
    "<s>",
    "</s>",
    "<unk>",
    "<pad>",
    " ⁇ ",  # sentencepiece's own symbols
    "\U0010ffff",
    "\ufffd",
    "\ue000",  # a noncharacter, the replacement character, private use
]
CHARS = st.characters(exclude_categories=("Cs",))  # any code point but surrogates
TEXT = st.lists(st.one_of(CHARS, st.sampled_from(NASTY), st.just(" ")), max_size=40).map("".join)
LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"  # every character str.splitlines() splits on

CLEAN = dataclasses.replace(BASE.clean, max_words=6, max_ratio=3.0, dedupe=True)


def run_cases(
    record_property: Callable[[str, Any], None],
    what: str,
    strategy: st.SearchStrategy,
    check: Callable[[Any], None],
    max_examples: int,
) -> None:
    """Run `check` on up to max_examples generated cases; record how many ran."""
    tried = 0

    def cases(case: Any) -> None:
        nonlocal tried
        tried += 1
        check(case)

    # Hypothesis keys its example database by the function's name and source: give each its own.
    cases.__name__ = cases.__qualname__ = "fuzz_" + re.sub(r"\W+", "_", what)
    run = settings(
        max_examples=max_examples,
        deadline=None,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.large_base_example,
        ],
    )(given(strategy)(cases))
    try:
        run()
    finally:
        record_property("fuzz", f"{what}: tried {tried} cases")


def one_line(text: str) -> bool:
    return not any(c in LINE_BREAKS for c in text)


# --- clean ----------------------------------------------------------------------------------


def test_normalize_gives_one_clean_line_for_any_text(record_property) -> None:
    def check(text: str) -> None:
        out = normalize(text)
        assert one_line(out) and out.splitlines() in ([], [out])
        assert out == out.strip() and "  " not in out
        assert normalize(out) == out

    run_cases(record_property, "normalize", TEXT, check, 500)


def test_clean_keeps_eval_lines_and_filters_train_in_step(record_property, tmp_path: Path) -> None:
    def check(pairs: list[tuple[str, str]]) -> None:
        # lines as download writes them: no LF inside (anything else, CR and U+2028 included, may be)
        pairs = [(s.replace("\n", " "), t.replace("\n", " ")) for s, t in pairs]
        src, tgt = [s for s, _ in pairs], [t for _, t in pairs]
        normalized = [(normalize(s), normalize(t)) for s, t in pairs]

        # val/test: one output line per input line, each a single line once written and read back
        out_src, out_tgt, stats = clean_split(tmp_path / "val", src, tgt, CLEAN, train=False)
        assert list(zip(out_src, out_tgt)) == normalized and stats["lines_out"] == len(pairs)

        # train: what is kept is a subsequence of the normalized pairs, none empty, all counted (a last
        # pair that is always kept, since the stage refuses a train split it would drop whole)
        sentinel = ("zz always kept", "zz always kept")
        kept_src, kept_tgt, stats = clean_split(
            tmp_path / "train", [*src, sentinel[0]], [*tgt, sentinel[1]], CLEAN, train=True
        )
        *kept, last = zip(kept_src, kept_tgt)
        assert last == sentinel and all(s and t for s, t in kept)
        assert len(kept) + 1 == stats["lines_out"] == len(pairs) + 1 - sum(stats["dropped"].values())
        rest = iter(normalized)
        assert all(pair in rest for pair in kept)  # in order
        if CLEAN.dedupe:
            assert len(set(kept)) == len(kept)

    run_cases(record_property, "clean", st.lists(st.tuples(TEXT, TEXT), max_size=8), check, 150)


# --- the line files stages hand each other ----------------------------------------------------


def test_raw_lines_survive_download_decoding_and_the_line_files(record_property, tmp_path: Path) -> None:
    """Any line download can produce (anything but LF: a stray CR, U+2028, ...) reads back as itself."""

    def check(lines: list[str]) -> None:
        files.write_lines(tmp_path / "lines", lines)
        assert files.read_lines(tmp_path / "lines") == lines

        # download's policy: CRLF ends a line (so one CR before an LF goes), a leading BOM goes
        expected = [line.removesuffix("\r") for line in lines]
        expected[0] = expected[0].removeprefix("\ufeff")
        assert formats.text_lines("".join(line + "\n" for line in lines).encode(), "f") == expected

    raw_line = TEXT.map(lambda s: s.replace("\n", ""))
    run_cases(record_property, "raw line files", st.lists(raw_line, min_size=1, max_size=8), check, 200)


# --- sentencepiece with byte fallback -----------------------------------------------------------


def _clean_dir(root: Path) -> Path:
    """Training text in a few scripts, as clean writes it."""
    lines = [
        "der hund läuft über die straße",
        "the dog runs over the street",
        "ein kind spielt im park",
        "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
        "日本語 の 文",
        "€ 5 , 10 %",
    ] * 20
    clean_dir = root / "clean"
    clean_dir.mkdir(parents=True)
    for side in ("src", "tgt"):
        files.write_lines(clean_dir / f"train.{side}", lines)
    return clean_dir


BYTE_FALLBACK = bpe_params(True, 400, byte_fallback=True)


@pytest.fixture(scope="module")
def pipeline_vocab(tmp_path_factory) -> Vocab:
    """A byte-fallback model made exactly as the bpe stage makes it."""
    root = tmp_path_factory.mktemp("spm")
    return train_bpe(BYTE_FALLBACK, _clean_dir(root), root / "bpe")


@pytest.fixture(scope="module")
def identity_vocab(tmp_path_factory) -> Vocab:
    """The same, but with sentencepiece's normalization off (the change proposed for bpe.py)."""
    root = tmp_path_factory.mktemp("spm_identity")
    real = spm.SentencePieceTrainer.train

    def train(*args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("normalization_rule_name", "identity")
        return real(*args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(spm.SentencePieceTrainer, "train", train)
        return train_bpe(BYTE_FALLBACK, _clean_dir(root), root / "bpe")


def restricted(text: str) -> str:
    """normalize(text), with U+2581 replaced by a space and "<sep>" broken up (see the tests below)."""
    line = normalize(text).replace("\u2581", " ").replace("<sep>", "<sep >")
    return normalize(line)


def spm_view(vocab: Vocab, text: str) -> str:
    """Text as sentencepiece's own normalizer leaves it (its nmt_nfkc rule), spaces plain and single."""
    sp = spm.SentencePieceProcessor(model_file=str(vocab.model_files()[0]))
    return re.sub(" +", " ", sp.normalize(text).replace("\u2581", " ")).strip(" ")


def test_byte_fallback_loses_nothing_beyond_sentencepieces_normalization(record_property, pipeline_vocab):
    """With byte fallback no character becomes <unk>: decoding gives back the text as sentencepiece's
    normalizer left it, and the text itself whenever that normalizer changes nothing.

    Restricted as in the next test (no U+2581, no literal "<sep>").
    """
    exact = 0

    def check(text: str) -> None:
        nonlocal exact
        line = restricted(text)
        (ids,) = pipeline_vocab.encode_src([line])
        assert tokens.UNK not in ids
        out = pipeline_vocab.decode_src(ids)
        assert out == spm_view(pipeline_vocab, line)
        exact += out == line

    run_cases(record_property, "sentencepiece (pipeline's bpe) round trip", TEXT, check, 300)
    record_property("fuzz", f"  ... of which came back unchanged: {exact}")


def test_identity_normalization_round_trips_normalized_text_exactly(record_property, identity_vocab):
    """decode(encode(normalize(s))) == normalize(s) for any s, but for two legitimate exceptions.

    U+2581 (▁) is sentencepiece's own marker for a space, so it always decodes as a space: it is
    replaced by a space here. "<sep>" is the separator token (see
    test_literal_sep_in_the_text_is_not_the_separator_token): it is broken up here.
    """

    def check(text: str) -> None:
        line = restricted(text)
        (ids,) = identity_vocab.encode_src([line])
        assert tokens.UNK not in ids
        assert identity_vocab.decode_src(ids) == line

    run_cases(record_property, "sentencepiece (identity rule) round trip", TEXT, check, 300)


def test_pipeline_bpe_keeps_what_clean_keeps(pipeline_vocab) -> None:
    lines = [
        "\u0646\u0645\u06cc\u200c\u0634\u0648\u062f",
        "ﬁ …",
        "ａｂｃ ①",
    ]  # Persian with ZWNJ; NFC, not NFKC
    assert [normalize(line) for line in lines] == lines
    assert [pipeline_vocab.decode_src(ids) for ids in pipeline_vocab.encode_src(lines)] == lines


def test_literal_sep_in_the_text_is_not_the_separator_token(pipeline_vocab) -> None:
    (ids,) = pipeline_vocab.encode_src(["a <sep> b"])
    assert tokens.SEP not in ids
    assert pipeline_vocab.decode_src(ids) == "a <sep> b"


# --- translate ------------------------------------------------------------------------------


def make_learned_model_dir(path: Path, arch: str) -> Path:
    """A random model with a short learned position table, so that long lines must be truncated."""
    path.mkdir(parents=True)
    size = train_spm(path / "spm.model")
    model_params = tiny_model_params(
        arch=arch, n_layers=1, positions="learned", max_positions=24, tie_embeddings="none"
    )
    decode_params = dataclasses.replace(
        BASE.decode, beam=2, n_best=1, batch_tokens=400, max_len_a=1.0, max_len_b=3
    )
    params = dataclasses.replace(BASE, model=model_params, decode=decode_params)
    torch.manual_seed(0)
    model = build_model(params.model, size, size)
    checkpoint.save(path / checkpoint.MODEL_FILE, checkpoint.model_payload(model, params, size, size, step=0))
    return path


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models on one thread: on a busy machine torch's thread pool makes each call ~50x slower."""
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)


@pytest.fixture(scope="module")
def translators(tmp_path_factory, one_thread) -> dict[str, Translator]:
    root = tmp_path_factory.mktemp("translate")
    return {
        arch: Translator.from_dir(make_learned_model_dir(root / arch, arch), device="cpu")
        for arch in ("encoder_decoder", "decoder_only")
    }


BLANK = st.sampled_from(["", " ", "\t", " \u3000 \u00a0", "\u200b", "\x00", "\r", "\ufeff", "\u2028"])
LONG = st.one_of(
    st.builds(lambda word, n: " ".join([word] * n), st.sampled_from(WORDS), st.integers(30, 500)),
    st.builds(lambda n: "ü" * n, st.integers(100, 2000)),  # one long word
)


def test_translate_gives_one_line_per_line_for_any_input(record_property, translators) -> None:
    lines_st = st.lists(st.one_of(TEXT, BLANK, LONG), max_size=6)

    def check(case: tuple[str, list[str]]) -> None:
        arch, lines = case
        out = translators[arch].translate(lines)
        assert len(out) == len(lines)
        assert all(one_line(o) for o in out)
        assert all(o == "" for line, o in zip(lines, out) if not normalize(line))

    cases = st.tuples(st.sampled_from(sorted(translators)), lines_st)
    run_cases(record_property, "Translator.translate", cases, check, 150)


@pytest.mark.parametrize("arch", ["encoder_decoder", "decoder_only"])
def test_lines_beyond_the_position_table_are_truncated_with_a_warning(translators, arch, caplog) -> None:
    lines = ["ein hund " * 400, "", "der mann", "ü" * 5000]
    with caplog.at_level("WARNING", logger="pipeline.decoding.batches"):
        out = translators[arch].translate(lines)
    assert len(out) == 4 and out[1] == ""
    expected = "2 of 4 inputs exceed the model's length limit (model.max_positions=24) and were truncated"
    assert expected in caplog.text


def test_translate_stream_keeps_the_line_count_of_any_bytes(record_property, translators) -> None:
    """The command's reader: any bytes (bad UTF-8, CR, NUL, no final LF) give one line out per line in."""
    render = translate_stage.renderer(translators["encoder_decoder"], n_best=1, beam=1, batch_tokens=None)

    def check(data: bytes) -> None:
        out = io.BytesIO()
        translate_stage.translate_stream(render, io.BytesIO(data), out, interactive=False)
        n_in = data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)
        assert out.getvalue().count(b"\n") == n_in
        out.getvalue().decode("utf-8")  # always valid UTF-8

    special = st.sampled_from([b"\n", b"\r\n", b"\xff\xfe", b"\xc3", b"\x00"])
    chunks = st.one_of(st.binary(max_size=30), special)
    run_cases(record_property, "translate_stream", st.lists(chunks, max_size=8).map(b"".join), check, 100)

"""Stage bpe: train sentencepiece BPE on the training split only.

Output (one directory, written atomically): spm.model + spm.vocab when
bpe.joint, else src.model/src.vocab and tgt.model/tgt.vocab.

Determinism, as measured with sentencepiece 0.2.3: BPE training has no random
step when every sentence is used (input_sentence_size=0, so nothing is
sampled or shuffled), and the learned pieces are the same for any num_threads.
But the model file records its TrainerSpec, num_threads and input paths
included, so the thread count is fixed here and the sentences are streamed
through `sentence_iterator` (no temp-file path lands in the model). The same
corpus then gives a byte-identical model on any machine.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from pathlib import Path

import click
import sentencepiece as spm

from pipeline import tokens
from pipeline.data.vocab import JOINT_MODEL, SRC_MODEL, TGT_MODEL, Vocab
from pipeline.errors import UserError
from pipeline.files import atomic_path
from pipeline.params import BpeParams
from pipeline.stages.options import clean_option, load_params, params_option

# Recorded in the model file, so it must not depend on the machine (see above).
_TRAIN_THREADS = 4


def train_bpe(bpe: BpeParams, clean_dir: Path, out_dir: Path) -> Vocab:
    """Train the model(s) on clean_dir/train.{src,tgt}; write out_dir atomically."""
    src, tgt = clean_dir / "train.src", clean_dir / "train.tgt"
    for path in (src, tgt):
        if not path.is_file():
            raise UserError(f"{path}: missing; run the clean stage first (`python -m pipeline clean`)")
    with atomic_path(out_dir) as tmp:
        tmp.mkdir()
        if bpe.joint:
            _train_one(bpe, [src, tgt], tmp / JOINT_MODEL, "the joint model")
        else:
            _train_one(bpe, [src], tmp / SRC_MODEL, "the source model")
            _train_one(bpe, [tgt], tmp / TGT_MODEL, "the target model")
        Vocab.load(tmp)  # checks the special ids before the output lands
    return Vocab.load(out_dir)


def _train_one(bpe: BpeParams, inputs: list[Path], model_path: Path, what: str) -> None:
    """Train one BPE model on the lines of `inputs`; write model_path and its .vocab."""
    buffer = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=_lines(inputs),
            model_writer=buffer,
            model_type="bpe",
            vocab_size=bpe.vocab_size,
            character_coverage=bpe.character_coverage,
            byte_fallback=bpe.byte_fallback,
            pad_id=tokens.PAD,
            unk_id=tokens.UNK,
            bos_id=tokens.BOS,
            eos_id=tokens.EOS,
            pad_piece=tokens.PAD_PIECE,
            unk_piece=tokens.UNK_PIECE,
            bos_piece=tokens.BOS_PIECE,
            eos_piece=tokens.EOS_PIECE,
            # A control symbol keeps id 4 but never matches text: a literal "<sep>" in a
            # sentence stays text, not the decoder-only model's source/target boundary.
            control_symbols=[tokens.SEP_PIECE],
            # clean.py has already normalized (NFC, whitespace); sentencepiece's default
            # nmt_nfkc would fold what clean deliberately keeps (ZWNJ, compatibility chars).
            normalization_rule_name="identity",
            input_sentence_size=0,
            shuffle_input_sentence=False,
            num_threads=_TRAIN_THREADS,
            minloglevel=1,  # warnings (e.g. skipped over-long sentences) still show
        )
    except RuntimeError as e:
        raise _user_error(e, bpe, inputs, what) from None
    model_path.write_bytes(buffer.getvalue())
    sp = spm.SentencePieceProcessor(model_proto=buffer.getvalue())
    assert sp.piece_to_id(tokens.SEP_PIECE) == tokens.SEP, "sentencepiece gave <sep> an unexpected id"
    _write_vocab(sp, model_path.with_suffix(".vocab"))


def _lines(paths: list[Path]) -> Iterator[str]:
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for line in f:
                yield line.rstrip("\n")


def _write_vocab(sp: spm.SentencePieceProcessor, path: Path) -> None:
    """The human-readable `piece<TAB>score` list, as spm_train writes it."""
    rows = (f"{sp.id_to_piece(i)}\t{sp.get_score(i):g}\n" for i in range(sp.get_piece_size()))
    path.write_text("".join(rows), encoding="utf-8")


def _user_error(e: RuntimeError, bpe: BpeParams, inputs: list[Path], what: str) -> Exception:
    message = str(e)
    too_high = re.search(r"Vocabulary size too high.*?<=\s*(\d+)", message)
    if too_high:
        most = int(too_high.group(1))
        return UserError(
            f"bpe.vocab_size={bpe.vocab_size} is too large for the training text of {what} "
            f"({', '.join(map(str, inputs))}): at most {most} pieces fit; "
            f"set bpe.vocab_size to {most} or less in params.yaml"
        )
    if "sentences_.empty()" in message:
        files = ", ".join(map(str, inputs))
        return UserError(f"{files}: no training sentences; check the clean stage's output")
    return e


@click.command("bpe")
@params_option
@clean_option
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Where to write the sentencepiece model(s).",
)
def command(params_file: Path, clean_dir: Path, out_dir: Path) -> None:
    """Train sentencepiece BPE on the training split."""
    bpe = load_params(params_file).bpe
    vocab = train_bpe(bpe, clean_dir, out_dir)
    kind = "joint" if vocab.joint else "separate"
    click.echo(f"bpe: {kind} vocabulary, {vocab.src_size} src / {vocab.tgt_size} tgt pieces -> {out_dir}")

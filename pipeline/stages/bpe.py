"""Stage bpe: train sentencepiece (bpe.model_type: BPE or unigram) on a seeded sample of the train split.

Output (one directory, written atomically): spm.model + spm.vocab when
bpe.joint, else src.model/src.vocab and tgt.model/tgt.vocab; with bpe.vocab_size:
auto, also AUTO_FILE, the size AUTO_VOCAB chose for the training pairs (docs/low-resource.md).
With train.init_from, the parent's model(s) instead, copied (`copy_parent`, docs/transfer.md).

The sample (`sample_pairs`): at most bpe.sample_lines lines a model (a joint model gets
both sides of half as many pairs), shared equally among the train sources (clean's
stats.json), all lines when the split is smaller. Fed in corpus order, every source side
before the other, through `sentence_iterator`, with input_sentence_size=0 so that
sentencepiece samples nothing again. BPE training then has no random step and the same
pieces for any num_threads (sentencepiece 0.2.3): it runs on every core, and the model
records RECORDED_THREADS, so its bytes are the machine's own. Unigram training is not (its
EM sums over threads): it runs on RECORDED_THREADS.
"""

from __future__ import annotations

import bisect
import dataclasses
import io
import random
import re
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path

import click
import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2

from pipeline import files, lineage, tokens
from pipeline import params as P
from pipeline.data import artifacts
from pipeline.data.pool import cores
from pipeline.data.vocab import JOINT_MODEL, SRC_MODEL, TGT_MODEL, Vocab
from pipeline.errors import UserError
from pipeline.files import atomic_path
from pipeline.params import BpeParams
from pipeline.stages.options import clean_option, directory, load_params, params_option

# What the model file says of num_threads, whatever the trainer ran on: the value models were
# trained with before the trainer used every core, so their bytes stay the same.
RECORDED_THREADS = 4

# bpe.vocab_size: auto -> pieces per model by training pairs: (fewer than this many pairs, pieces).
# Measured below 10k (docs/low-resource.md, "A rule for your corpus"): on en-ms's 6.5k pairs 4k
# pieces beat 2k and the literature's 1k (val chrF 16.4, 15.5, 12.1). 10k-200k: the 8k that Multi30k
# (29k pairs) and ru-en (46k) train with. Above: the literature's 16k-32k for WMT-sized corpora.
AUTO_VOCAB = ((10_000, 4_000), (200_000, 8_000), (1_000_000, 16_000))
AUTO_VOCAB_ABOVE = 32_000  # 1M pairs or more
AUTO_FILE = "vocab_size.json"


def auto_vocab_size(pairs: int) -> int:
    """The pieces per model that bpe.vocab_size: auto gives a training split of `pairs` pairs."""
    return next((size for below, size in AUTO_VOCAB if pairs < below), AUTO_VOCAB_ABOVE)


def _resolved(bpe: BpeParams, src: Path, pairs: int) -> BpeParams:
    """`bpe` with vocab_size: auto replaced by the size AUTO_VOCAB gives `pairs` training pairs."""
    if bpe.vocab_size != "auto":
        return bpe
    if not pairs:
        raise UserError(
            f"bpe.vocab_size: auto sizes the vocabulary from the training pairs, but {src} has none; "
            "check data.train and the clean stage's output, or give bpe.vocab_size a number"
        )
    return dataclasses.replace(bpe, vocab_size=auto_vocab_size(pairs))


def train_bpe(bpe: BpeParams, clean_dir: Path, out_dir: Path) -> Vocab:
    """Train the model(s) on clean_dir/train.{src,tgt}; write out_dir atomically."""
    src, tgt = clean_dir / "train.src", clean_dir / "train.tgt"
    for path in (src, tgt):
        if not path.is_file():
            raise UserError(f"{path}: missing; run the clean stage first (`python -m pipeline clean`)")
    corpora = _train_corpora(clean_dir, _count_lines(src), _count_lines(tgt))
    chosen = _resolved(bpe, src, sum(c.lines for c in corpora))
    tags = _tags(clean_dir)
    with atomic_path(out_dir) as tmp:
        tmp.mkdir()
        if chosen != bpe:
            files.write_json(
                tmp / AUTO_FILE,
                {"vocab_size": chosen.vocab_size, "training_pairs": sum(c.lines for c in corpora)},
            )
        bpe = chosen
        if bpe.joint:
            picked = sample_pairs([c.lines for c in corpora], bpe.sample_lines // 2, bpe.seed)
            _train_one(bpe, [src, tgt], picked, tmp / JOINT_MODEL, "the joint model", tags)
        else:
            picked = sample_pairs([c.lines for c in corpora], bpe.sample_lines, bpe.seed)
            _train_one(bpe, [src], picked, tmp / SRC_MODEL, "the source model", tags)
            _train_one(bpe, [tgt], picked, tmp / TGT_MODEL, "the target model")
        Vocab.load(tmp)  # checks the special ids before the output lands
    return Vocab.load(out_dir)


def copy_parent(params: P.Params, out_dir: Path) -> Vocab:
    """train.init_from's sentencepiece model(s) and piece map into out_dir, with PARENT_FILE; atomically.

    A child reads with its parent's vocabulary: bpe.joint must be the parent's, and the settings that
    say how to train one (bpe.model_type, vocab_size, ...) are ignored. The architecture is checked
    here too, though no output depends on it, so that a mismatch stops the first stage it can.
    """
    init_from = params.train.init_from
    assert init_from is not None, "only called with train.init_from set"
    parent, parent_params = lineage.read(init_from)
    lineage.check_vocabulary(params, parent_params, init_from)
    lineage.check_architecture(params, parent_params, init_from)
    vocab = Vocab.load_parent(init_from)
    with atomic_path(out_dir) as tmp:
        tmp.mkdir()
        for model_file in vocab.model_files():
            shutil.copy2(model_file, tmp / model_file.name)
        files.write_json(tmp / lineage.PARENT_FILE, parent.to_dict())
        Vocab.load(tmp)
    return Vocab.load(out_dir)


def sample_pairs(sizes: Sequence[int], budget: int, seed: int) -> list[int] | None:
    """Line numbers (sorted) of at most `budget` pairs of sources of `sizes` lines in a row; None: all.

    Each source gets an equal share; one smaller than its share gives all its lines and the rest
    is shared among the others. Within a source the lines are random.Random(seed).sample's.
    """
    if sum(sizes) <= budget:
        return None
    shares = [0] * len(sizes)
    left = budget
    by_size = sorted(range(len(sizes)), key=sizes.__getitem__)
    for done, i in enumerate(by_size):
        shares[i] = min(sizes[i], left // (len(sizes) - done))
        left -= shares[i]
    rng = random.Random(seed)
    picked: list[int] = []
    start = 0
    for size, share in zip(sizes, shares):
        chosen = range(size) if share == size else sorted(rng.sample(range(size), share))
        picked += [start + i for i in chosen]
        start += size
    return picked


def _tags(clean_dir: Path) -> list[str]:
    """The target-language tags the source lines carry (clean's stats.json has them from download)."""
    stats = artifacts.read_record(clean_dir / artifacts.CLEAN_STATS) or {}
    return list(stats.get("tags", []))


def _train_one(
    bpe: BpeParams,
    inputs: list[Path],
    picked: list[int] | None,
    model_path: Path,
    what: str,
    tags: Sequence[str] = (),
) -> None:
    """Train one BPE model on the lines `picked` (None: all) of each of `inputs`; write it and its .vocab.
    Each of `tags` becomes a piece of its own (a user-defined symbol: it matches in text)."""
    buffer = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=_lines(inputs, picked),
            model_writer=buffer,
            model_type=bpe.model_type,
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
            user_defined_symbols=list(tags),
            # clean.py has already normalized (NFC, whitespace); sentencepiece's default
            # nmt_nfkc would fold what clean deliberately keeps (ZWNJ, compatibility chars).
            normalization_rule_name="identity",
            input_sentence_size=0,
            shuffle_input_sentence=False,
            # A unigram model's EM sums over threads' shares, so its pieces and scores change with the
            # thread count (measured, sentencepiece 0.2.3): it trains on a fixed number instead.
            num_threads=cores() if bpe.model_type == "bpe" else RECORDED_THREADS,
            minloglevel=1,  # warnings (e.g. skipped over-long sentences) still show
        )
    except RuntimeError as e:
        raise _user_error(e, bpe, inputs, what) from None
    model = _record_threads(buffer.getvalue())
    model_path.write_bytes(model)
    sp = spm.SentencePieceProcessor(model_proto=model)
    assert sp.piece_to_id(tokens.SEP_PIECE) == tokens.SEP, "sentencepiece gave <sep> an unexpected id"
    _write_vocab(sp, model_path.with_suffix(".vocab"))


def _record_threads(model: bytes) -> bytes:
    """The model with RECORDED_THREADS as its TrainerSpec.num_threads (see the module docstring)."""
    proto = sentencepiece_model_pb2.ModelProto()  # type: ignore[attr-defined]
    proto.ParseFromString(model)
    proto.trainer_spec.num_threads = RECORDED_THREADS
    return proto.SerializeToString()


def _lines(paths: list[Path], picked: list[int] | None) -> Iterator[str]:
    """The lines numbered `picked` (all if None) of each file in turn."""
    for path in paths:
        start = 0
        for lines in files.line_chunks(path):
            if picked is None:
                yield from lines
            else:
                lo, hi = bisect.bisect_left(picked, start), bisect.bisect_left(picked, start + len(lines))
                yield from (lines[i - start] for i in picked[lo:hi])
            start += len(lines)


def _count_lines(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(block.count(b"\n") for block in iter(lambda: f.read(files.CHUNK), b""))


def _train_corpora(clean_dir: Path, n_src: int, n_tgt: int) -> list[artifacts.Corpus]:
    """The train corpora and their lines (clean's stats.json); one corpus if it lists none."""
    if n_src != n_tgt:
        raise UserError(
            f"{clean_dir}/train.src has {n_src} lines but train.tgt has {n_tgt}; run the clean stage again"
        )
    return artifacts.train_corpora(clean_dir / artifacts.CLEAN_STATS, n_src, clean_dir / "train.src", "clean")


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
@directory(
    "out",
    required=True,
    help="Where to write the sentencepiece model(s).",
)
def command(params_file: Path, clean_dir: Path, out_dir: Path) -> None:
    """Train sentencepiece BPE on the training split (with train.init_from: copy the parent's)."""
    params = load_params(params_file)
    init_from = params.train.init_from
    vocab = train_bpe(params.bpe, clean_dir, out_dir) if init_from is None else copy_parent(params, out_dir)
    kind = "joint" if vocab.joint else "separate"
    made = "vocabulary" if init_from is None else f"vocabulary copied from {init_from} (train.init_from)"
    click.echo(f"bpe: {kind} {made}, {vocab.src_size} src / {vocab.tgt_size} tgt pieces -> {out_dir}")

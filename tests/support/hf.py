"""Hugging Face Marian checkpoints built locally (no hub), and a trained model of ours to export."""

from __future__ import annotations

import dataclasses
import io
import json
import random
from pathlib import Path
from typing import Any

import sentencepiece as spm
import torch
import yaml

from pipeline.model import checkpoint
from pipeline.model.transformer import build_model
from pipeline.tokens import BOS, EOS
from tests.support.models import tiny_model_params, train_spm
from tests.support.repo import BASE

SRC_WORDS = "der die das ein eine hund katze mann frau kind läuft springt über straße groß weiß".split()
TGT_WORDS = "the a dog cat man woman child runs jumps over street big white small".split()


def train_marian_spm(path: Path, words: list[str], vocab_size: int = 40, seed: int = 0) -> list[str]:
    """A sentencepiece model with the ids Marian trains its own with (</s> 0, <unk> 1, no <s>, as
    OPUS-MT's); its pieces."""
    rng = random.Random(seed)
    lines = [" ".join(rng.choices(words, k=rng.randint(2, 8))) for _ in range(300)]
    buffer = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_writer=buffer,
        vocab_size=vocab_size,
        eos_id=0,
        unk_id=1,
        bos_id=-1,
        minloglevel=2,
    )
    path.write_bytes(buffer.getvalue())
    sp = spm.SentencePieceProcessor(model_file=str(path))
    return [sp.id_to_piece(i) for i in range(2, sp.get_piece_size())]


def marian_pairs(n: int, seed: int = 0) -> list[tuple[str, str]]:
    """Word-by-word "translations" of random SRC_WORDS sentences: a task a tiny model half learns."""
    rng = random.Random(seed)
    lexicon = dict(zip(SRC_WORDS, TGT_WORDS * 2))
    sentences = [rng.choices(SRC_WORDS, k=rng.randint(1, 6)) for _ in range(n)]
    return [(" ".join(words), " ".join(lexicon[w] for w in words)) for words in sentences]


def _train_marian(model, tokenizer, steps: int, seed: int) -> None:
    """A few Adam steps on marian_pairs: outputs then differ between inputs and mostly end in EOS,
    which random weights (each step repeating its input token) never do."""
    rng = random.Random(seed)
    pairs = marian_pairs(256, seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3)
    model.train()
    for _ in range(steps):
        batch = rng.sample(pairs, 16)
        enc = tokenizer(
            [s for s, _ in batch], text_target=[t for _, t in batch], return_tensors="pt", padding=True
        )
        enc["labels"][enc["labels"] == tokenizer.pad_token_id] = -100
        model(**enc).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval()


def make_marian_dir(
    path: Path,
    *,
    activation: str = "swish",
    seed: int = 0,
    joint: bool = False,
    steps: int = 100,
    **config: Any,
) -> Path:
    """An OPUS-MT-shaped directory: a tiny MarianMTModel (random, then `steps` updates on
    marian_pairs), its tokenizer files, vocab.json as OPUS-MT's (</s> 0, <unk> 1, the pieces of both
    sentencepiece models, <pad> last); a random final_logits_bias, so that its mapping is tested."""
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    path.mkdir(parents=True)
    src_pieces = train_marian_spm(path / "source.spm", SRC_WORDS + ([] if not joint else TGT_WORDS))
    if joint:
        (path / "target.spm").write_bytes((path / "source.spm").read_bytes())
        tgt_pieces = src_pieces
    else:
        tgt_pieces = train_marian_spm(path / "target.spm", TGT_WORDS, vocab_size=36)
    pieces = ["</s>", "<unk>", *dict.fromkeys(src_pieces + tgt_pieces), "<pad>"]
    (path / "vocab.json").write_text(json.dumps({p: i for i, p in enumerate(pieces)}), encoding="utf-8")
    pad = len(pieces) - 1
    settings = dict(
        vocab_size=len(pieces),
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        activation_function=activation,
        scale_embedding=True,
        pad_token_id=pad,
        decoder_start_token_id=pad,
        eos_token_id=0,
        forced_eos_token_id=0,
        max_position_embeddings=64,
        dropout=0.0,
        attention_dropout=0.0,
        bad_words_ids=[[pad]],
    )
    torch.manual_seed(seed)
    model = MarianMTModel(MarianConfig(**(settings | config)))
    tokenizer = MarianTokenizer(
        str(path / "source.spm"),
        str(path / "target.spm"),
        str(path / "vocab.json"),
        source_lang="de",
        target_lang="en",
    )
    _train_marian(model, tokenizer, steps, seed)
    with torch.no_grad():
        model.final_logits_bias.normal_(0, 0.5)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def make_trained_model_dir(path: Path, steps: int = 150, seed: int = 0, **model: Any) -> Path:
    """A model directory as train writes it: params.yaml's model (at test size, `model` applied, dropout
    off) on a joint spm.model, after `steps` Adam updates on marian_pairs, so that its outputs vary."""
    path.mkdir(parents=True)
    pairs = marian_pairs(256, seed)
    rng = random.Random(seed)
    lines = [s for pair in pairs for s in pair]
    train_spm(path / "spm.model", 60, lines=lines, model_type="unigram")
    sp = spm.SentencePieceProcessor(model_file=str(path / "spm.model"))
    params = dataclasses.replace(BASE, model=tiny_model_params(max_positions=64, **model))
    torch.manual_seed(seed)
    net = build_model(params.model, sp.get_piece_size(), sp.get_piece_size())
    optimizer = torch.optim.Adam(net.parameters(), lr=3e-3)
    for _ in range(steps):
        batch = rng.sample(pairs, 16)
        src = _pad([[*sp.encode(s), EOS] for s, _ in batch])
        tgt = _pad([[BOS, *sp.encode(t), EOS] for _, t in batch])
        net(src, tgt[:, :-1], tgt[:, 1:], 0.1).backward()
        optimizer.step()
        optimizer.zero_grad()
    payload = checkpoint.model_payload(
        net.eval(), params, sp.get_piece_size(), sp.get_piece_size(), step=steps
    )
    checkpoint.save(path / checkpoint.MODEL_FILE, payload)
    (path / "params.yaml").write_text(yaml.safe_dump(params.to_dict(), sort_keys=False), encoding="utf-8")
    return path


def _pad(seqs: list[list[int]]) -> torch.Tensor:
    width = max(map(len, seqs))
    return torch.tensor([s + [0] * (width - len(s)) for s in seqs])


# Output tokens at most, EOS included (ours: max_len_b real tokens, then EOS forced). Far enough that
# the best beams end before it: at the limit transformers' forced EOS scores 0, not log p(EOS).
MAX_NEW = 30


def hf_translate(hf_dir: Path, lines: list[str], beam: int, no_repeat_ngram_size: int = 0) -> list[str]:
    """transformers' generate() on a saved model directory: greedy or beam, length penalty 0."""
    import transformers

    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(hf_dir).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(hf_dir)
    batch = tokenizer(lines, return_tensors="pt", padding=True)
    found = model.generate(
        **batch,
        num_beams=beam,
        do_sample=False,
        max_new_tokens=MAX_NEW,
        length_penalty=0.0,
        early_stopping=True,
        no_repeat_ngram_size=no_repeat_ngram_size,
    )
    return tokenizer.batch_decode(found, skip_special_tokens=True)


def our_translate(model_dir: Path, lines: list[str], beam: int, no_repeat_ngram_size: int = 0) -> list[str]:
    """Our search with generate()'s settings above: length penalty 0, MAX_NEW tokens with the EOS."""
    from pipeline.decoding.search import translate_ids
    from pipeline.decoding.translator import Translator

    translator = Translator.from_dir(model_dir, workers=1)
    settings = dataclasses.replace(
        translator.settings,
        beam=beam,
        length_penalty=0.0,
        max_len_a=0.0,
        max_len_b=MAX_NEW - 1,
        batch_tokens=4000,
        n_best=1,
        no_repeat_ngram_size=no_repeat_ngram_size,
    )
    found = translate_ids(translator.model, translator.vocab.encode_src(lines), settings, device="cpu")
    return [translator.vocab.decode_tgt(hyps[0].tokens) for hyps in found]

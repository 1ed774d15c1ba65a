"""A model directory as a transformers model: MarianMTModel (post-LN) or Pegasus (pre-LN).

    python -m pipeline export-hf --model data/model --out data/hf

AutoModelForSeq2SeqLM and AutoTokenizer (MarianTokenizer) load the result and compute
our model's function. Post-LN is Marian's architecture (shared, tied or separate
embeddings); a pre-LN model (our default) with one shared embedding becomes
PegasusForConditionalGeneration, transformers' pre-LN encoder-decoder with a final
LayerNorm per stack and sinusoidal positions from 0, with the Marian tokenizer. Both lay
positions out as sin | cos halves: a model with ours (interleaved) is exported with its
residual dimensions reordered, the same function. Ids stay ours. A README.md model card
goes with it. What is refused and why: docs/huggingface.md.
"""

from __future__ import annotations

import json
import shutil
import types
from pathlib import Path
from typing import Any

import torch
import yaml

from pipeline import params as P
from pipeline.data.vocab import PIECE_MAP, Vocab
from pipeline.errors import UserError
from pipeline.files import atomic_path, write_text
from pipeline.interop import hf_weights
from pipeline.model import checkpoint
from pipeline.model.transformer import Transformer
from pipeline.tokens import BOS, BOS_PIECE, EOS, PAD, SEP, SEP_PIECE
from pipeline.tracking.metadata import git_commit
from pipeline.tracking.run_file import RUN_FILE, RunFile

ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "swish": "swish"}  # ours -> transformers' ACT2FN names
CARD = "README.md"


def _transformers() -> types.ModuleType:
    """Import transformers on use: it is an optional extra."""
    try:
        import transformers
    except ImportError:
        raise UserError("transformers is not installed; install it with `pip install -e '.[hf]'`") from None
    return transformers


def architecture(cfg: P.ModelParams) -> str:
    """ "marian" or "pegasus" for our model settings; a one-line refusal names the setting otherwise."""
    if cfg.arch != "encoder_decoder":
        raise UserError(f"model.arch={cfg.arch}: export-hf exports encoder-decoder models only")
    if cfg.positions == "learned":
        raise UserError(
            "model.positions=learned: Marian and Pegasus compute sinusoidal positions; export-hf needs "
            "model.positions sinusoidal or sinusoidal_marian"
        )
    if cfg.tie_embeddings != "all" and cfg.norm == "pre":
        raise UserError(
            f"model.tie_embeddings={cfg.tie_embeddings}: a pre-LN model exports as Pegasus, which has one "
            "embedding for source, target and output; export-hf needs tie_embeddings: all (bpe.joint: true), "
            "or model.norm: post (Marian)"
        )
    return "marian" if cfg.norm == "post" else "pegasus"


def hf_config(kind: str, cfg: P.ModelParams, src_vocab: int, tgt_vocab: int) -> Any:
    """MarianConfig or PegasusConfig of the same shape, with our special ids."""
    transformers = _transformers()
    settings = dict(
        vocab_size=src_vocab,
        d_model=cfg.d_model,
        encoder_layers=cfg.n_encoder_layers,
        decoder_layers=cfg.n_decoder_layers,
        encoder_attention_heads=cfg.n_heads,
        decoder_attention_heads=cfg.n_heads,
        encoder_ffn_dim=cfg.d_ff,
        decoder_ffn_dim=cfg.d_ff,
        activation_function=ACTIVATIONS[cfg.activation],
        scale_embedding=cfg.scale_embeddings,
        max_position_embeddings=cfg.max_positions,
        dropout=cfg.dropout,
        attention_dropout=cfg.attention_dropout,
        activation_dropout=cfg.activation_dropout,
        pad_token_id=PAD,
        eos_token_id=EOS,
        forced_eos_token_id=EOS,
        decoder_start_token_id=BOS,
        tie_word_embeddings=cfg.tie_embeddings != "none",
    )
    if kind == "marian":
        shared = cfg.tie_embeddings == "all"
        return transformers.MarianConfig(
            **settings, share_encoder_decoder_embeddings=shared, decoder_vocab_size=tgt_vocab
        )
    return transformers.PegasusConfig(**settings)


def generation_config(cfg: P.ModelParams, decode: P.DecodeParams) -> Any:
    """Our search's fixed rules for generate(): PAD, BOS and SEP never output, EOS forced at the end;
    and the model's beam and n-gram ban (decode.no_repeat_ngram_size: transformers' option of that name)."""
    return _transformers().GenerationConfig(
        decoder_start_token_id=BOS,
        pad_token_id=PAD,
        eos_token_id=EOS,
        forced_eos_token_id=EOS,
        bad_words_ids=[[PAD], [BOS], [SEP]],
        num_beams=decode.beam,
        no_repeat_ngram_size=decode.no_repeat_ngram_size,
        max_length=cfg.max_positions,
    )


def hf_state(model: Transformer) -> dict[str, torch.Tensor]:
    """Our weights under transformers' names; interleaved positions turned into halves."""
    cfg = model.cfg
    state = {k: v.detach().float() for k, v in model.state_dict().items()}
    out = hf_weights.to_hf(state, cfg)
    if cfg.tie_embeddings == "all":
        out["model.shared.weight"] = state["out_weight"]
    out["model.encoder.embed_tokens.weight"] = state["src_embed.tokens.weight"]
    out["model.decoder.embed_tokens.weight"] = state["tgt_embed.tokens.weight"]
    out["lm_head.weight"] = state["out_weight"]
    bias = state.get("out_bias", torch.zeros(state["out_weight"].size(0)))
    out["final_logits_bias"] = bias.reshape(1, -1)
    if cfg.positions == "sinusoidal":
        out = hf_weights.permute_residual(out, hf_weights.interleaved_to_halves(cfg.d_model))
    return out


def build_hf_model(model: Transformer, vocab: Vocab, decode: P.DecodeParams) -> Any:
    """The transformers model computing `model`'s function (eval mode)."""
    transformers = _transformers()
    kind = architecture(model.cfg)
    config = hf_config(kind, model.cfg, vocab.src_size, vocab.tgt_size)
    cls = transformers.MarianMTModel if kind == "marian" else transformers.PegasusForConditionalGeneration
    hf = cls(config).eval()
    missing, unexpected = hf.load_state_dict(hf_state(model), strict=False)
    computed = [k for k in missing if k.endswith("embed_positions.weight")]  # sinusoids, made at init
    assert not unexpected and sorted(missing) == sorted(computed), (missing, unexpected)
    hf.generation_config = generation_config(model.cfg, decode)
    return hf


def _write_ids(path: Path, pieces: list[str]) -> None:
    if len(set(pieces)) != len(pieces):
        raise UserError("the vocabulary has a piece twice; MarianTokenizer's vocab.json cannot hold it")
    path.write_text(json.dumps({p: i for i, p in enumerate(pieces)}, ensure_ascii=False), encoding="utf-8")


def write_tokenizer(vocab: Vocab, out: Path, params: P.Params) -> None:
    """source.spm, target.spm and vocab.json (our ids; target_vocab.json too for separate vocabularies)
    as MarianTokenizer reads them, and its config."""
    transformers = _transformers()
    spm_files = [f for f in vocab.model_files() if f.name != PIECE_MAP]
    source, target = (spm_files[0], spm_files[0]) if len(spm_files) == 1 else spm_files[:2]
    staging = out / ".tokenizer"
    staging.mkdir()
    shutil.copy(source, staging / "source.spm")
    shutil.copy(target, staging / "target.spm")
    _write_ids(staging / "vocab.json", vocab.src_pieces(range(vocab.src_size)))
    separate = not vocab.joint
    if separate:
        _write_ids(staging / "target_vocab.json", vocab.tgt_pieces(range(vocab.tgt_size)))
    tokenizer = transformers.MarianTokenizer(
        str(staging / "source.spm"),
        str(staging / "target.spm"),
        str(staging / "vocab.json"),
        target_vocab_file=str(staging / "target_vocab.json") if separate else None,
        separate_vocabs=separate,
        source_lang=params.data.src_lang,
        target_lang=params.data.tgt_lang,
        model_max_length=params.model.max_positions,
        # Marian's tokenizer knows </s>, <unk> and <pad>; ours are special too, so that
        # batch_decode(skip_special_tokens=True) drops the decoder's start <s> (an OPUS-MT import's
        # sentencepiece models have no <s> piece to hide it).
        bos_token=BOS_PIECE,
        sep_token=SEP_PIECE,
    )
    tokenizer.save_pretrained(out)
    shutil.rmtree(staging)


def export_hf(model_dir: Path, out_dir: Path, metrics: Path | None = None) -> Path:
    """Write model_dir's model as a transformers directory at out_dir, atomically, with a model card."""
    _transformers()
    model_dir, out_dir = Path(model_dir), Path(out_dir)
    path = model_dir / checkpoint.MODEL_FILE
    obj = checkpoint.load(path)
    architecture(P.from_saved(obj["params"]).model)  # refuse before building anything
    model, params = checkpoint.restore_model(obj, path)
    assert isinstance(model, Transformer)  # architecture() refused the decoder-only model
    vocab = Vocab.load(model_dir)
    hf = build_hf_model(model.eval(), vocab, params.decode)
    scores = _read_metrics(metrics, model_dir)
    with atomic_path(out_dir) as tmp:
        tmp.mkdir()
        hf.save_pretrained(tmp)
        write_tokenizer(vocab, tmp, params)
        write_text(tmp / CARD, model_card(params, type(hf).__name__, model_dir, scores, out_dir.name))
    return out_dir


# --- the model card ---------------------------------------------------------------------------


def _read_metrics(given: Path | None, model_dir: Path) -> dict[str, Any] | None:
    """reports/metrics.json as given; else beside the model, or in reports/ of the repository above it."""
    if given is not None and not given.is_file():
        raise UserError(f"{given}: no such metrics file; run the score stage or leave out --metrics")
    candidates = (
        [given]
        if given
        else [model_dir / "metrics.json", model_dir.parent.parent / "reports" / "metrics.json"]
    )
    for candidate in candidates:
        if candidate is not None and candidate.is_file():
            found = json.loads(candidate.read_text(encoding="utf-8"))
            return found if isinstance(found, dict) else None
    return None


def _score_rows(scores: dict[str, Any]) -> list[str]:
    sets = [("val", scores["val"])] if isinstance(scores.get("val"), dict) else []
    sets += sorted((scores.get("test") or {}).items())
    rows = ["| set | lines | BLEU | chrF | chrF++ | TER |", "|---|---:|---:|---:|---:|---:|"]
    for name, m in sets:
        cells = [m.get(k, "") for k in ("n_lines", "bleu", "chrf", "chrfpp", "ter")]
        rows.append(f"| {name} | " + " | ".join(str(c) for c in cells) + " |")
    signatures: dict[str, str] = next((m["signature"] for _, m in sets if m.get("signature")), {})
    rows += ["", "sacreBLEU signatures:", ""] + [f"- {k}: `{v}`" for k, v in signatures.items()]
    return rows


def model_card(
    params: P.Params, hf_class: str, model_dir: Path, scores: dict[str, Any] | None, name: str = "DIR"
) -> str:
    """README.md of the export: what the model is, its data, params, scores and where it came from."""
    d = params.data
    commit = git_commit(model_dir.resolve().parent)
    run = RunFile.read_or_empty(model_dir / RUN_FILE).run_id
    lines = [
        f"# {d.src_lang}→{d.tgt_lang} Transformer ({hf_class})",
        "",
        "Trained (or imported) with the nmt-pipeline and exported by `python -m pipeline export-hf`.",
        "",
        "```python",
        "from transformers import AutoModelForSeq2SeqLM, AutoTokenizer",
        f'tok = AutoTokenizer.from_pretrained("{name}")',
        f'model = AutoModelForSeq2SeqLM.from_pretrained("{name}")',
        'batch = tok(["..."], return_tensors="pt")',
        "print(tok.batch_decode(model.generate(**batch), skip_special_tokens=True))",
        "```",
        "",
        "## Data",
        "",
        f"train: {', '.join(d.train)}; val: {', '.join(d.val) or f'{d.heldout_val} lines held out'}; "
        f"test: {', '.join(d.test) or f'{d.heldout_test} lines held out'}",
        "",
        "## Scores",
        "",
        *(_score_rows(scores) if scores else ["No reports/metrics.json was found beside the model."]),
        "",
        "## Source",
        "",
        f"- pipeline commit: {commit or 'unknown (not in a git checkout)'} (HEAD of the checkout at export)",
        f"- MLflow run: {run or 'none'}",
        "",
        "## Params",
        "",
        "```yaml",
        yaml.safe_dump(params.to_dict(), sort_keys=False).rstrip(),
        "```",
    ]
    return "\n".join(lines) + "\n"

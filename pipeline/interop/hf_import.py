"""A transformers MarianMTModel directory (OPUS-MT) as a model directory of this pipeline.

    python -m pipeline import-hf Helsinki-NLP/opus-mt-ru-en --out data/opus-mt-ru-en

The result is what the train stage writes (model.pt, params.yaml, the sentencepiece
models) plus vocab.json: Marian's two sentencepiece models share one id space, which
pipeline.data.vocab reads through that piece map. Ids are moved into ours at import
(PAD, UNK, BOS, EOS, SEP first): rows of the embedding and of the output bias are
permuted, nothing else changes. Marian starts the decoder with its pad token; our
BOS gets the pad token's embedding row, so the first step sees the same vector. BOS
and SEP as outputs (Marian has no such tokens) get an output bias of BANNED_BIAS,
which keeps them out of the softmax: the logits of every Marian token, and so greedy
and beam search, are transformers' own. The mapping, and what is refused:
docs/huggingface.md.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch
import yaml

from pipeline import params as P
from pipeline.data.vocab import PIECE_MAP, SRC_MODEL, TGT_MODEL, PieceMap
from pipeline.errors import UserError
from pipeline.files import atomic_path, write_json, write_text
from pipeline.interop import hf_weights
from pipeline.model import checkpoint
from pipeline.model.transformer import build_model
from pipeline.tokens import BOS, BOS_PIECE, EOS, EOS_PIECE, N_SPECIAL, PAD, PAD_PIECE, SEP, SEP_PIECE, UNK

# exp(-100) is below float32's resolution next to any real logit: no probability mass, exactly
BANNED_BIAS = -100.0
SOURCE_FILE = "import.json"  # where the model came from
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "swish": "swish", "silu": "swish"}
# Settings of older transformers configs (BART's) that Marian checkpoints still carry, and the
# value this importer can represent.
LEGACY = {
    "normalize_before": False,
    "add_final_layer_norm": False,
    "normalize_embedding": False,
    "static_position_embeddings": True,
    "add_bias_logits": False,
}


# --- the source directory ----------------------------------------------------------


def resolve(source: str) -> Path:
    """A local directory as is; otherwise a Hub name, fetched with huggingface_hub (needs network)."""
    path = Path(source)
    if path.is_dir():
        return path
    if path.exists() or source.count("/") != 1:
        raise UserError(f"{source}: not a directory; give an OPUS-MT directory or a Hub name (org/name)")
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise UserError(
            f"{source}: no such directory, and fetching it from the Hub needs huggingface_hub "
            "(`pip install -e '.[hf]'`); or give a local OPUS-MT directory"
        ) from None
    try:
        return Path(snapshot_download(source, allow_patterns=["*.json", "*.spm", "*.safetensors", "*.bin"]))
    except Exception as e:  # noqa: BLE001 - any failure to fetch (offline, unknown name) is the user's to fix
        raise UserError(
            f"{source}: no such directory, and fetching it from the Hub failed ({type(e).__name__}); this "
            "needs network access to huggingface.co, or give a local OPUS-MT directory"
        ) from None


def _read_json(path: Path, what: str) -> Any:
    if not path.is_file():
        raise UserError(f"{path}: missing; an OPUS-MT directory holds {what}")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UserError(f"{path}: not valid JSON ({e})") from None


def read_weights(src: Path) -> dict[str, torch.Tensor]:
    """model.safetensors (preferred) or pytorch_model.bin, the latter with weights_only=True."""
    if (src / "model.safetensors").is_file():
        try:
            from safetensors.torch import load_file
        except ImportError:
            raise UserError(
                "safetensors is not installed; install it with `pip install -e '.[hf]'`"
            ) from None

        try:
            return load_file(str(src / "model.safetensors"))
        except Exception as e:  # noqa: BLE001 - safetensors raises its own types for a damaged file
            raise UserError(f"{src / 'model.safetensors'}: unreadable ({e})") from None
    if (src / "pytorch_model.bin").is_file():
        try:
            return torch.load(src / "pytorch_model.bin", map_location="cpu", weights_only=True)
        except Exception as e:  # noqa: BLE001 - pickle, zip and torch errors alike mean "not loadable"
            raise UserError(
                f"{src / 'pytorch_model.bin'}: refused or unreadable with weights_only=True "
                f"({type(e).__name__}); only tensors are loaded"
            ) from None
    raise UserError(f"{src}: no model.safetensors or pytorch_model.bin; an OPUS-MT directory holds one")


# --- what the config says ----------------------------------------------------------------


def _refuse(field: str, value: Any, why: str) -> UserError:
    return UserError(f"config.json: {field}={value!r} {why}; import-hf cannot represent it")


def model_settings(config: dict[str, Any]) -> dict[str, Any]:
    """Our model section for a Marian config; a one-line refusal names any field we cannot express."""
    if config.get("model_type") != "marian":
        raise UserError(
            f"config.json: model_type={config.get('model_type')!r} is not a Marian model; import-hf reads "
            "MarianMTModel checkpoints (OPUS-MT, Helsinki-NLP/opus-mt-*)"
        )
    get = config.get
    for field, (ours, theirs) in {
        "decoder_attention_heads": ("encoder_attention_heads", get("decoder_attention_heads")),
        "decoder_ffn_dim": ("encoder_ffn_dim", get("decoder_ffn_dim")),
    }.items():
        if theirs != get(ours):
            raise _refuse(field, theirs, f"differs from {ours}={get(ours)!r} (one size for both stacks)")
    if get("decoder_vocab_size") not in (None, get("vocab_size")):
        raise _refuse("decoder_vocab_size", get("decoder_vocab_size"), "differs from vocab_size")
    for field in ("share_encoder_decoder_embeddings", "tie_word_embeddings"):
        if not get(field, True):
            raise _refuse(field, get(field), "(only one embedding for source, target and output)")
    for field, want in LEGACY.items():
        if get(field, want) != want:
            raise _refuse(field, get(field), f"(only {want} is supported)")
    if get("decoder_start_token_id") != get("pad_token_id"):
        raise _refuse("decoder_start_token_id", get("decoder_start_token_id"), "is not pad_token_id")
    activation = get("activation_function", "gelu")
    if activation not in ACTIVATIONS:
        raise _refuse("activation_function", activation, f"is none of {', '.join(ACTIVATIONS)}")
    d_model, heads = get("d_model"), get("encoder_attention_heads")
    if not isinstance(d_model, int) or not isinstance(heads, int) or d_model % heads:
        raise _refuse("d_model", d_model, f"is not divisible by encoder_attention_heads={heads!r}")
    layers = get("encoder_layers"), get("decoder_layers")
    return {
        "arch": "encoder_decoder",
        "d_model": d_model,
        "n_heads": heads,
        "d_ff": get("encoder_ffn_dim"),
        "n_layers": layers[0],
        "encoder_layers": None,
        "decoder_layers": None if layers[1] == layers[0] else layers[1],
        "norm": "post",
        "positions": "sinusoidal_marian",
        "max_positions": get("max_position_embeddings"),
        "tie_embeddings": "all",
        "output_bias": True,
        "scale_embeddings": bool(get("scale_embedding", False)),
        "activation": ACTIVATIONS[activation],
        "dropout": get("dropout", 0.1),
        "attention_dropout": get("attention_dropout", 0.0),
        "activation_dropout": get("activation_dropout", 0.0),
    }


# --- the vocabulary ------------------------------------------------------------------------


def read_vocab(src: Path, config: dict[str, Any], rows: int) -> dict[str, int]:
    """Marian's vocab.json (piece -> id), checked against the config and the embedding's rows."""
    tokenizer = (
        _read_json(src / "tokenizer_config.json", "tokenizer_config.json")
        if (src / "tokenizer_config.json").is_file()
        else {}
    )
    if tokenizer.get("separate_vocabs") or (src / "target_vocab.json").is_file():
        raise UserError(f"{src}: separate source and target vocabularies (separate_vocabs) are not supported")
    for name in ("source.spm", "target.spm"):
        if not (src / name).is_file():
            raise UserError(f"{src / name}: missing; an OPUS-MT directory holds source.spm and target.spm")
    vocab = _read_json(src / "vocab.json", "vocab.json")
    if not isinstance(vocab, dict) or sorted(vocab.values()) != list(range(len(vocab))):
        raise UserError(f"{src / 'vocab.json'}: its ids must be 0..n-1, each once")
    if len(vocab) != rows or rows != config.get("vocab_size"):
        raise UserError(
            f"{src / 'vocab.json'}: {len(vocab)} pieces, but the weights' embedding has {rows} rows and "
            f"config.vocab_size is {config.get('vocab_size')}: they come from different models"
        )
    for field, piece in (("pad_token_id", PAD_PIECE), ("eos_token_id", EOS_PIECE)):
        if vocab.get(piece) != config.get(field):
            raise UserError(
                f"{src / 'vocab.json'}: {piece} has id {vocab.get(piece)}, but config.{field} is "
                f"{config.get(field)}: they come from different models"
            )
    for piece in ("<unk>",):
        if piece not in vocab:
            raise UserError(f"{src / 'vocab.json'}: no {piece} piece")
    clashes = [p for p in (BOS_PIECE, SEP_PIECE) if p in vocab] + [p for p in vocab if _language_token(p)][:3]
    if clashes:
        raise UserError(
            f"{src / 'vocab.json'}: holds {', '.join(clashes)}; multilingual (>>xx<<) models and pieces that "
            "clash with this pipeline's <s>/<sep> are not supported"
        )
    return vocab


def _language_token(piece: str) -> bool:
    return piece.startswith(">>") and piece.endswith("<<")


def our_ids(vocab: dict[str, int]) -> tuple[dict[str, int], torch.Tensor]:
    """Our piece map, and per our id the Marian id whose rows it takes (-1: none, SEP)."""
    specials = {
        PAD: vocab[PAD_PIECE],
        UNK: vocab["<unk>"],
        BOS: vocab[PAD_PIECE],
        EOS: vocab[EOS_PIECE],
        SEP: -1,
    }
    taken = {vocab[PAD_PIECE], vocab["<unk>"], vocab[EOS_PIECE]}
    rest = sorted((i, p) for p, i in vocab.items() if i not in taken)
    index = [specials[i] for i in range(N_SPECIAL)] + [i for i, _ in rest]
    ours = {PAD_PIECE: PAD, "<unk>": UNK, BOS_PIECE: BOS, EOS_PIECE: EOS, SEP_PIECE: SEP}
    ours.update({p: N_SPECIAL + k for k, (_, p) in enumerate(rest)})
    return ours, torch.tensor(index)


def _take_rows(t: torch.Tensor, index: torch.Tensor, fill: float) -> torch.Tensor:
    """t's rows in our id order; rows of no Marian id (-1) filled with `fill`."""
    out = t.index_select(0, index.clamp(min=0)).clone()
    out[index < 0] = fill
    return out


# --- the weights -------------------------------------------------------------------------------


def convert(
    state: dict[str, torch.Tensor], cfg: P.ModelParams, index: torch.Tensor
) -> dict[str, torch.Tensor]:
    """Marian's state dict -> ours, ids in our order."""
    embedding = state.get("model.shared.weight", state.get("model.encoder.embed_tokens.weight"))
    if embedding is None:
        raise UserError(
            "weights: no model.shared.weight (the shared embedding); not a MarianMTModel checkpoint"
        )
    bias = state.get("final_logits_bias", torch.zeros(1, embedding.size(0))).reshape(-1)
    try:
        ours = hf_weights.from_hf({k: v.float() for k, v in state.items()}, cfg)
    except KeyError as e:
        raise UserError(
            f"weights: no {e.args[0]}; config.json's layer counts or sizes do not match the weights"
        ) from None
    tokens = _take_rows(embedding.float(), index, 0.0)
    ours.update({"src_embed.tokens.weight": tokens, "tgt_embed.tokens.weight": tokens, "out_weight": tokens})
    out_bias = _take_rows(bias.float(), index, BANNED_BIAS)
    out_bias[BOS] = BANNED_BIAS  # BOS borrows the pad token's row as an input, not as an output
    ours["out_bias"] = out_bias
    return ours


# --- the whole import ----------------------------------------------------------------------------


def import_hf(source: str, out_dir: Path, base: P.Params) -> Path:
    """Convert `source` (a local OPUS-MT directory or a Hub name) into `out_dir`, atomically."""
    src = resolve(source)
    config = _read_json(src / "config.json", "config.json")
    settings = model_settings(config)
    state = read_weights(src)
    embeddings = [
        state[k] for k in ("model.shared.weight", "model.encoder.embed_tokens.weight") if k in state
    ]
    rows = embeddings[0].size(0) if embeddings else -1
    vocab = read_vocab(src, config, rows)
    pieces, index = our_ids(vocab)
    size = len(pieces)
    tokenizer = _optional_json(src / "tokenizer_config.json")
    params = _params(base, settings, size, tokenizer)
    model = build_model(params.model, size, size)
    checkpoint.load_weights(model, convert(state, params.model, index), src)
    with atomic_path(out_dir) as tmp:
        tmp.mkdir()
        checkpoint.save(
            tmp / checkpoint.MODEL_FILE, checkpoint.model_payload(model, params, size, size, step=0)
        )
        write_text(tmp / "params.yaml", yaml.safe_dump(params.to_dict(), sort_keys=False))
        shutil.copy(src / "source.spm", tmp / SRC_MODEL)
        shutil.copy(src / "target.spm", tmp / TGT_MODEL)
        PieceMap(pieces).write(tmp / PIECE_MAP)
        write_json(tmp / SOURCE_FILE, {"source": source, "name_or_path": config.get("_name_or_path")})
    return out_dir


def _optional_json(path: Path) -> dict[str, Any]:
    found = _read_json(path, path.name) if path.is_file() else {}
    return found if isinstance(found, dict) else {}


def _params(base: P.Params, model: dict[str, Any], size: int, tokenizer: dict[str, Any]) -> P.Params:
    """`base` with the imported model, one vocabulary of `size` pieces and the pair's languages;
    typed and validated as params.yaml is."""
    raw = base.to_dict()
    raw["model"] = model
    raw["bpe"] |= {"joint": True, "vocab_size": size}
    raw["train"]["init_from"] = None  # an imported model has no parent of ours
    langs = tokenizer.get("source_lang"), tokenizer.get("target_lang")
    if all(isinstance(lang, str) and lang for lang in langs) and langs[0] != langs[1]:
        raw["data"] |= {"src_lang": langs[0], "tgt_lang": langs[1]}
    return P.from_dict(raw)

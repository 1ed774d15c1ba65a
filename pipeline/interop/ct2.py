"""CTranslate2: export a model directory, and translate with the exported model.

    python -m pipeline export-ct2 --model data/model --out data/ct2 [--quantization int8]
    python -m pipeline translate --backend ctranslate2 --model data/model [--quantization int8]

The export writes CTranslate2's TransformerSpec layer by layer, positions as
our own table and the vocabulary in our id order; the decoder-only model is
refused. By default CTranslate2 runs its own search (its speed, its scores);
`exact=True` (`translate --exact-search`) reproduces pipeline/decoding/beam.py.
How each part maps, and where the two searches can still differ:
docs/ctranslate2.md.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import shutil
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from pipeline import params as P
from pipeline.data.vocab import Vocab
from pipeline.decoding.batches import fit_to_model
from pipeline.decoding.steps import BANNED, Hypothesis, SearchStats, length_penalty
from pipeline.decoding.translator import QUANTIZATIONS, TextTranslator
from pipeline.devices import pick_device
from pipeline.errors import UserError
from pipeline.files import atomic_path, write_json
from pipeline.model import checkpoint
from pipeline.model.transformer import DecoderLayer, EncoderLayer, Transformer
from pipeline.params import DecodeParams
from pipeline.tokens import EOS

log = logging.getLogger(__name__)

INFO_FILE = "pipeline.json"
FORMAT = "nmt-pipeline-ct2/1"
SINUSOID_ROWS = 1024  # sinusoidal models: positions exported (an input or output longer is cut)
LN_EPS = 1e-5  # nn.LayerNorm's default, which the model uses
NO_EARLY_EXIT = 1e-9  # a length penalty CT2 treats as nonzero, and that changes no float32 score
# CTranslate2 can sample, but from one process-wide seed (ctranslate2.set_random_seed), so a
# sentence's samples would depend on its batch; ours depend on the sentence alone.
NO_SAMPLING = "CTranslate2's random seed is process-wide, so samples would depend on batching"


def _ctranslate2() -> types.ModuleType:
    """Import ctranslate2 on use: it is an optional extra."""
    try:
        import ctranslate2
    except ImportError:
        raise UserError(
            "ctranslate2 is not installed; install it with `pip install 'nmt-pipeline[ct2]'`"
        ) from None
    return ctranslate2


# --- the spec, layer by layer ---------------------------------------------------------


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().float().numpy().copy()


def _set_linear(spec, linear: nn.Linear) -> None:
    spec.weight = _np(linear.weight)
    if linear.bias is not None:
        spec.bias = _np(linear.bias)


def _set_norm(spec, norm: nn.LayerNorm) -> None:
    spec.gamma, spec.beta = _np(norm.weight), _np(norm.bias)


def _set_attention(spec, attn, residual) -> None:
    """CT2 self-attention: linear[0] fused QKV, [1] out; cross: [0] Q, [1] fused KV, [2] out."""
    if attn.self_attention:
        _set_linear(spec.linear[0], attn.qkv)
    else:
        _set_linear(spec.linear[0], attn.q)
        _set_linear(spec.linear[1], attn.kv)
    _set_linear(spec.linear[-1], attn.out)
    _set_norm(spec.layer_norm, residual.norm)


def _set_ffn(spec, ffn, residual) -> None:
    _set_linear(spec.linear_0, ffn.up)
    _set_linear(spec.linear_1, ffn.down)
    _set_norm(spec.layer_norm, residual.norm)


def position_rows(cfg: P.ModelParams) -> int:
    """Rows of the exported position table: the learned table, or SINUSOID_ROWS of ours."""
    return cfg.max_positions if cfg.positions == "learned" else max(cfg.max_positions, SINUSOID_ROWS)


def _set_embeddings(spec, embedder, cfg: P.ModelParams) -> None:
    embeddings = spec.embeddings[0] if isinstance(spec.embeddings, list) else spec.embeddings
    embeddings.weight = _np(embedder.tokens.weight)
    spec.scale_embeddings = cfg.scale_embeddings  # True: x sqrt(D), as ours
    if cfg.positions == "learned":
        spec.position_encodings.encodings = _np(embedder.positions.table.weight)
    else:
        spec.position_encodings.encodings = _np(embedder.positions._table(position_rows(cfg)))


def check_expressible(cfg: P.ModelParams) -> None:
    """Refuse, naming the param, what CT2's TransformerSpec cannot express."""
    if cfg.arch != "encoder_decoder":
        raise UserError(
            f"model.arch={cfg.arch}: the CTranslate2 export supports encoder_decoder only (a decoder-only "
            "model would need CT2's Generator and our padding-aware positions); use --backend torch"
        )


def build_spec(model: Transformer, src_pieces: Sequence[str], tgt_pieces: Sequence[str]):
    """Our encoder-decoder as a CTranslate2 TransformerSpec, its vocabularies the pieces in id order.

    Not yet validated or optimized (quantized).
    """
    _ctranslate2()
    from ctranslate2.specs import common_spec, transformer_spec

    cfg = model.cfg
    check_expressible(cfg)
    activation = {
        "relu": common_spec.Activation.RELU,
        "gelu": common_spec.Activation.GELU,
        "swish": common_spec.Activation.SWISH,
    }[cfg.activation]
    spec = transformer_spec.TransformerSpec.from_config(
        (cfg.n_encoder_layers, cfg.n_decoder_layers),
        cfg.n_heads,
        pre_norm=cfg.norm == "pre",
        activation=activation,
    )
    _set_embeddings(spec.encoder, model.src_embed, cfg)
    for layer_spec, layer in zip(spec.encoder.layer, model.encoder):
        assert isinstance(layer, EncoderLayer)
        _set_attention(layer_spec.self_attention, layer.self_attn, layer.sub[0])
        _set_ffn(layer_spec.ffn, layer.ffn, layer.sub[1])
    _set_embeddings(spec.decoder, model.tgt_embed, cfg)
    for layer_spec, layer in zip(spec.decoder.layer, model.decoder):
        assert isinstance(layer, DecoderLayer)
        _set_attention(layer_spec.self_attention, layer.self_attn, layer.sub[0])
        _set_attention(layer_spec.attention, layer.cross_attn, layer.sub[1])
        _set_ffn(layer_spec.ffn, layer.ffn, layer.sub[2])
    if cfg.norm == "pre":  # each stack ends in a LayerNorm (post-LN: nn.Identity)
        assert isinstance(model.encoder_norm, nn.LayerNorm) and isinstance(model.decoder_norm, nn.LayerNorm)
        _set_norm(spec.encoder.layer_norm, model.encoder_norm)
        _set_norm(spec.decoder.layer_norm, model.decoder_norm)
    spec.decoder.projection.weight = _np(model.out_weight)
    if model.out_bias is not None:
        spec.decoder.projection.bias = _np(model.out_bias)
    spec.register_source_vocabulary(list(src_pieces))
    spec.register_target_vocabulary(list(tgt_pieces))
    spec.config.layer_norm_epsilon = LN_EPS
    spec.config.add_source_eos = True  # our source is its pieces, then EOS (batching.collate_src)
    spec.config.decoder_start_token = tgt_pieces[model.start_token]
    return spec


# --- export ------------------------------------------------------------------------


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def export(model_dir: Path, out_dir: Path, quantization: str = "float32") -> Path:
    """Convert model_dir (model.pt + sentencepiece model(s)) into a CTranslate2 directory, atomically."""
    _ctranslate2()
    if quantization not in QUANTIZATIONS:
        raise UserError(f"quantization {quantization!r}: choose one of {', '.join(QUANTIZATIONS)}")
    model_dir, out_dir = Path(model_dir), Path(out_dir)
    path = model_dir / checkpoint.MODEL_FILE
    obj = checkpoint.load(path)
    check_expressible(P.from_saved(obj["params"]).model)
    model, params = checkpoint.restore_model(obj, path)
    assert isinstance(model, Transformer)  # check_expressible refused the decoder-only model
    vocab = Vocab.load(model_dir)
    pieces = vocab.src_pieces(range(vocab.src_size)), vocab.tgt_pieces(range(vocab.tgt_size))
    spec = build_spec(model.eval(), *pieces)
    spec.validate()
    spec.optimize(quantization=quantization)
    info = {
        "format": FORMAT,
        "quantization": quantization,
        "position_rows": position_rows(params.model),
        "model_sha256": _digest(path),
        "params": params.to_dict(),
    }
    with atomic_path(out_dir) as tmp:
        tmp.mkdir()
        spec.save(str(tmp))
        for f in vocab.model_files():
            shutil.copy(f, tmp / f.name)
        write_json(tmp / INFO_FILE, info)
    return out_dir


def cache_dir(model_dir: Path, quantization: str) -> Path:
    """Where translate keeps an on-the-fly conversion: beside the model directory, not in it,

    because data/model is a DVC output and a file added inside it would change its hash.
    """
    model_dir = Path(model_dir)
    return model_dir.with_name(f"{model_dir.name}.ct2-{quantization}")


def is_exported(path: Path) -> bool:
    return (Path(path) / INFO_FILE).is_file() and (Path(path) / "model.bin").is_file()


def _read_info(ct2_dir: Path) -> dict[str, Any]:
    info = json.loads((ct2_dir / INFO_FILE).read_text(encoding="utf-8"))
    if info.get("format") != FORMAT:
        raise UserError(f"{ct2_dir}: not a CTranslate2 export of this pipeline; re-export with export-ct2")
    return info


def resolve(model_dir: Path, quantization: str | None) -> Path:
    """An exported directory as given, or model_dir's cached conversion, made (or remade) if needed."""
    model_dir = Path(model_dir)
    if is_exported(model_dir):
        info = _read_info(model_dir)
        if quantization is not None and quantization != info["quantization"]:
            raise UserError(
                f"{model_dir} was exported with quantization {info['quantization']}, not {quantization}; "
                "drop --quantization or export again with it"
            )
        return model_dir
    quantization = quantization or "float32"
    cached = cache_dir(model_dir, quantization)
    fresh = (
        is_exported(cached)
        and (model_dir / checkpoint.MODEL_FILE).is_file()
        and (_read_info(cached).get("model_sha256") == _digest(model_dir / checkpoint.MODEL_FILE))
    )
    if not fresh:
        log.info(f"converting {model_dir} to CTranslate2 ({quantization}) in {cached}")
        export(model_dir, cached, quantization)
    return cached


# --- translating -------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Limits:
    """The exported model's limits, as fit_to_model reads them from a model (batches.ModelLimits)."""

    cfg: P.ModelParams


@dataclasses.dataclass
class _Found:
    """One hypothesis as CT2 returned it, in our ids."""

    tokens: list[int]
    total: float  # sum of log-probs, the EOS included
    complete: bool  # ended in EOS (else cut at max_len, to rescore)


class CT2Translator(TextTranslator):
    """The ctranslate2 backend: a TextTranslator over a ctranslate2.Translator."""

    def __init__(
        self,
        ct2_dir: Path,
        device: str = "auto",
        settings: DecodeParams | None = None,
        threads: int = 0,
        exact: bool = False,
    ):
        ct2 = _ctranslate2()
        self.exact = exact
        self.ct2_dir = ct2_dir = Path(ct2_dir)
        info = _read_info(ct2_dir)
        self.params = P.from_saved(info["params"])
        self.settings = settings or dataclasses.replace(self.params.decode, ensemble=())
        if self.settings.ensemble:
            raise UserError(
                "decode.ensemble: the CTranslate2 backend decodes one model; decode ensembles with the "
                "torch backend"
            )
        self.quantization = info["quantization"]
        self.vocab = Vocab.load(ct2_dir)
        # fit_to_model reads only cfg; the exported table bounds sinusoidal lengths as a learned one does.
        cfg = dataclasses.replace(self.params.model, positions="learned", max_positions=info["position_rows"])
        self._limits = _Limits(cfg)
        self._tgt_ids = {p: i for i, p in enumerate(self.vocab.tgt_pieces(range(self.vocab.tgt_size)))}
        self._banned = [[p] for p in self.vocab.tgt_pieces(BANNED)]
        self.device = pick_device(device, ct2.get_cuda_device_count() > 0, runtime="CTranslate2")
        self.translator = ct2.Translator(
            str(ct2_dir), device=self.device, intra_threads=threads or torch.get_num_threads()
        )

    @classmethod
    def from_dir(
        cls,
        model_dir: str | Path,
        device: str = "auto",
        quantization: str | None = None,
        settings: DecodeParams | None = None,
        exact: bool = False,
    ) -> CT2Translator:
        """A model directory (converted on first use) or an export-ct2 directory."""
        return cls(resolve(Path(model_dir), quantization), device, settings, exact=exact)

    def search_ids(
        self, seqs: Sequence[Sequence[int]], s: DecodeParams, stats: SearchStats | None = None
    ) -> list[list[Hypothesis]]:
        """Source ids (without EOS) -> per input its n_best hypotheses, in input order."""
        if s.sampling.enabled:
            raise UserError(
                f"decode.sampling.enabled: the ctranslate2 backend does not sample ({NO_SAMPLING}); "
                "use the torch backend"
            )
        stats = stats if stats is not None else SearchStats()
        fitted = [fit_to_model(self._limits, q, s.max_len_a, s.max_len_b) if q else ([], 0) for q in seqs]
        truncated = sum(len(f[0]) < len(q) for f, q in zip(fitted, seqs))
        if truncated:
            log.warning(
                f"{truncated} of {len(seqs)} inputs exceed the exported position table and were truncated"
            )
        results: list[list[Hypothesis]] = [[Hypothesis([], 0.0)] for _ in seqs]
        if not self.exact:
            todo = [i for i, (src, _) in enumerate(fitted) if src]
            found = self._decode_native([fitted[i][0] for i in todo], [fitted[i][1] for i in todo], s)
            for i, hyps in zip(todo, found):
                results[i] = hyps
            stats.batches += 1 if todo else 0
            stats.add(seqs, fitted, results, truncated)
            return results
        groups: dict[int, list[int]] = {}
        for i, (src, max_len) in enumerate(fitted):
            if src:
                groups.setdefault(max_len, []).append(i)
        for max_len, group in sorted(groups.items()):
            candidates = self._decode([fitted[i][0] for i in group], max_len, s)
            for i, unranked in zip(group, candidates):
                results[i] = self._rank(unranked, s)
            stats.batches += 1
        stats.add(seqs, fitted, results, truncated)
        return results

    def _decode_native(
        self, sources: list[list[int]], max_lens: list[int], s: DecodeParams
    ) -> list[list[Hypothesis]]:
        """CT2's own search, one call -> per sentence its n_best, cut to its max_len, CT2's scores."""
        if not sources:
            return []
        results = self.translator.translate_batch(
            [self.vocab.src_pieces(src) for src in sources],
            beam_size=s.beam,
            num_hypotheses=s.n_best,
            length_penalty=s.length_penalty,
            return_scores=True,
            max_decoding_length=max(max_lens) + 1,
            min_decoding_length=0,
            max_input_length=0,
            suppress_sequences=self._banned,
            no_repeat_ngram_size=s.no_repeat_ngram_size,
            max_batch_size=max(s.batch_tokens // s.beam, 1),
            batch_type="tokens",
        )
        return [
            [Hypothesis([self._tgt_ids[p] for p in h][:n], score) for h, score in zip(r.hypotheses, r.scores)]
            for r, n in zip(results, max_lens)
        ]

    def _decode(self, sources: list[list[int]], max_len: int, s: DecodeParams) -> list[list[_Found]]:
        """CT2's search over sentences of one max_len -> every finished hypothesis, raw scores."""
        pieces = [self.vocab.src_pieces(src) for src in sources]
        beam = s.beam
        results = self.translator.translate_batch(
            pieces,
            beam_size=beam,
            patience=1,
            num_hypotheses=beam,
            length_penalty=NO_EARLY_EXIT if beam > 1 else 0.0,
            return_scores=True,
            return_end_token=True,
            max_decoding_length=max_len + 1,
            min_decoding_length=0,
            max_input_length=0,
            suppress_sequences=self._banned,
            no_repeat_ngram_size=s.no_repeat_ngram_size,
            max_batch_size=max(s.batch_tokens // beam, 1),
            batch_type="tokens",
        )
        found = [[self._found(h, sc, max_len) for h, sc in zip(r.hypotheses, r.scores)] for r in results]
        # CT2 renormalizes what the n-gram ban leaves; our scores keep the model's own log-probs
        self._rescore(pieces, found, every=s.no_repeat_ngram_size > 0)
        return found

    def _found(self, hypothesis: list[str], score: float, max_len: int) -> _Found:
        tokens = [self._tgt_ids[p] for p in hypothesis]
        if tokens and tokens[-1] == EOS:
            return _Found(tokens[:-1], score, True)
        return _Found(tokens[:max_len], score, False)

    def _rescore(self, pieces: list[list[str]], found: list[list[_Found]], every: bool) -> None:
        """Score hypotheses cut at max_len (or `every` one) as ours are: the model's log-probs of their
        tokens, then EOS (CT2 appends it)."""
        cut = [(i, h) for i, hyps in enumerate(found) for h in hyps if every or not h.complete]
        if not cut:
            return
        targets = [self.vocab.tgt_pieces(h.tokens) for _, h in cut]
        scored = self.translator.score_batch([pieces[i] for i, _ in cut], targets, max_input_length=0)
        for (_, h), r in zip(cut, scored):
            h.total = float(sum(r.log_probs))

    @staticmethod
    def _rank(found: list[_Found], s: DecodeParams) -> list[Hypothesis]:
        """GNMT-normalized, distinct, best first, n_best of them."""
        best: dict[tuple[int, ...], float] = {}
        for h in found:
            key = tuple(h.tokens)
            best[key] = max(best.get(key, float("-inf")), h.total)
        alpha = s.length_penalty
        hyps = [Hypothesis(list(k), t / length_penalty(len(k) + 1, alpha)) for k, t in best.items()]
        return sorted(hyps, key=lambda h: -h.score)[: s.n_best]

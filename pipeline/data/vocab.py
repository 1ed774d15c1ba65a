"""The subword vocabulary: one joint sentencepiece model, or one per side, or (an imported
OPUS-MT model's) two models over one id space that `vocab.json` maps pieces to.

Ids never include BOS/EOS: the model's input code adds them (see data.py), so
an encoded sentence is exactly its subword pieces. With a piece map, a piece the
map lacks is UNK, as in Marian and transformers' MarianTokenizer (docs/huggingface.md).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2

from pipeline import tokens
from pipeline.errors import ParamsError, UserError

JOINT_MODEL = "spm.model"
SRC_MODEL, TGT_MODEL = "src.model", "tgt.model"
PIECE_MAP = "vocab.json"  # beside src.model and tgt.model: piece -> id, one id space for both

_SPECIALS = {
    tokens.PAD_PIECE: tokens.PAD,
    tokens.UNK_PIECE: tokens.UNK,
    tokens.BOS_PIECE: tokens.BOS,
    tokens.EOS_PIECE: tokens.EOS,
    tokens.SEP_PIECE: tokens.SEP,
}
# Dropped from decoded text. UNK stays: sentencepiece writes it as " ⁇ ", and a
# hypothesis should show that a word was unknown rather than silently lose it.
_DROP_ON_DECODE = frozenset({tokens.PAD, tokens.BOS, tokens.EOS, tokens.SEP})


class Vocab:
    """Encoder/decoder for both sides; `joint` when both share one id space."""

    def __init__(
        self,
        src_model: Path,
        tgt_model: Path | None = None,
        threads: int = -1,
        piece_map: Path | None = None,
    ) -> None:
        """`threads`: sentencepiece's threads for a batch of lines (-1: one per core). `piece_map`
        (vocab.json, with both models): ids come from it, not from the models."""
        self._files = [Path(src_model)] + ([Path(tgt_model)] if tgt_model is not None else [])
        self._map: PieceMap | None = None
        if piece_map is not None:
            self._files.append(Path(piece_map))
            self._map = PieceMap.load(Path(piece_map))
            self._src = _load(Path(src_model), threads)
            self._tgt = _load(Path(tgt_model or src_model), threads)
            return
        self._src = _load_checked(Path(src_model), threads)
        self._tgt = self._src if tgt_model is None else _load_checked(Path(tgt_model), threads)

    @classmethod
    def from_files(cls, src_model: Path, tgt_model: Path | None = None) -> Vocab:
        """A joint vocab from one model file, or a separate one from two."""
        return cls(src_model, tgt_model)

    @classmethod
    def load(cls, bpe_dir: str | Path, threads: int = -1) -> Vocab:
        """Find spm.model (joint) or src.model + tgt.model (separate) in `bpe_dir`."""
        bpe_dir = Path(bpe_dir)
        joint = bpe_dir / JOINT_MODEL
        src, tgt = bpe_dir / SRC_MODEL, bpe_dir / TGT_MODEL
        if joint.is_file() and (src.is_file() or tgt.is_file()):
            raise UserError(
                f"{bpe_dir}: holds both {JOINT_MODEL} and {SRC_MODEL}/{TGT_MODEL}, so it is unclear "
                f"which to use; delete the stale one(s) and rerun the bpe stage"
            )
        if joint.is_file():
            return cls(joint, threads=threads)
        if src.is_file() and tgt.is_file():
            mapped = bpe_dir / PIECE_MAP
            return cls(src, tgt, threads, piece_map=mapped if mapped.is_file() else None)
        raise UserError(
            f"{bpe_dir}: no sentencepiece model found; expected {JOINT_MODEL} (bpe.joint: true) "
            f"or {SRC_MODEL} and {TGT_MODEL} (bpe.joint: false); run `python -m pipeline bpe` first"
        )

    @classmethod
    def load_parent(cls, init_from: str) -> Vocab:
        """train.init_from's vocabulary (a model directory's), or a ParamsError naming the key."""
        try:
            return cls.load(init_from)
        except UserError as e:
            raise ParamsError(
                f"train.init_from: {init_from} holds no vocabulary of this pipeline ({e.message})"
            ) from e

    @property
    def joint(self) -> bool:
        return len(self._files) == 1 or self._map is not None

    @property
    def src_size(self) -> int:
        return len(self._map.pieces) if self._map else self._src.get_piece_size()

    @property
    def tgt_size(self) -> int:
        return len(self._map.pieces) if self._map else self._tgt.get_piece_size()

    def model_files(self) -> list[Path]:
        """The file(s) this vocab was loaded from (models, piece map), to copy beside a checkpoint."""
        return list(self._files)

    def differing_files(self, other_dir: Path) -> list[str]:
        """The vocabulary files that `other_dir` (a bpe or model directory) lacks, has besides these,
        or holds otherwise, sorted: none where it reads and writes the same ids as this vocabulary."""
        ours = {path.name: path for path in self.model_files()}
        names = (JOINT_MODEL, SRC_MODEL, TGT_MODEL, PIECE_MAP)
        theirs = {name for name in names if (other_dir / name).is_file()}
        return sorted(set(ours) ^ theirs) or sorted(
            name for name, path in ours.items() if path.read_bytes() != (other_dir / name).read_bytes()
        )

    def encode_src(self, lines: Sequence[str]) -> list[list[int]]:
        return self._encode(self._src, lines)

    def encode_tgt(self, lines: Sequence[str]) -> list[list[int]]:
        return self._encode(self._tgt, lines)

    def nbest(self, side: str, line: str, n: int) -> list[tuple[list[int], float]]:
        """The line's n best segmentations (ids, score) by sentencepiece (a unigram model's)."""
        sp = self._src if side == "src" else self._tgt
        found = sp.nbest_encode(line, nbest_size=n, return_type="proto")
        return [
            ([self._id(piece.piece, piece.id) for piece in best.pieces], best.score) for best in found.nbests
        ]

    def pieces(self, side: str) -> dict[str, tuple[int, float]]:
        """The model's normal pieces (not special, unknown, unused or byte ones): piece -> (id, score)."""
        sp = self._src if side == "src" else self._tgt
        special = (sp.is_unknown, sp.is_control, sp.is_unused, sp.is_byte)
        return {
            sp.id_to_piece(i): (self._id(sp.id_to_piece(i), i), sp.get_score(i))
            for i in range(sp.get_piece_size())
            if not any(kind(i) for kind in special)
        }

    def _id(self, piece: str, model_id: int) -> int:
        """A piece's id: the model's own, or with a piece map the map's (UNK where it lacks the piece)."""
        return model_id if self._map is None else self._map.ids.get(piece, tokens.UNK)

    @property
    def model_type(self) -> str:
        """bpe or unigram: what the bpe stage trained (both sides' models share bpe.model_type)."""
        proto = sentencepiece_model_pb2.ModelProto()  # type: ignore[attr-defined]
        proto.ParseFromString(self._src.serialized_model_proto())
        return "unigram" if proto.trainer_spec.model_type == proto.trainer_spec.UNIGRAM else "bpe"

    def decode_src(self, ids: Iterable[int]) -> str:
        return self._decode(self._src, ids)

    def decode_tgt(self, ids: Iterable[int]) -> str:
        """Detokenized text of target ids; PAD, BOS, EOS and SEP are dropped."""
        return self._decode(self._tgt, ids)

    def src_pieces(self, ids: Iterable[int]) -> list[str]:
        return self._pieces(self._src, ids)

    def tgt_pieces(self, ids: Iterable[int]) -> list[str]:
        return self._pieces(self._tgt, ids)

    def _encode(self, sp: spm.SentencePieceProcessor, lines: Sequence[str]) -> list[list[int]]:
        if self._map is None:
            return sp.encode(list(lines), out_type=int)
        ids = self._map.ids
        return [[ids.get(p, tokens.UNK) for p in pieces] for pieces in sp.encode(list(lines), out_type=str)]

    def _decode(self, sp: spm.SentencePieceProcessor, ids: Iterable[int]) -> str:
        kept = [int(i) for i in ids if int(i) not in _DROP_ON_DECODE]
        if self._map is None:
            return sp.decode(kept)
        return sp.decode_pieces([self._map.pieces[i] for i in kept])

    def _pieces(self, sp: spm.SentencePieceProcessor, ids: Iterable[int]) -> list[str]:
        if self._map is None:
            return [sp.id_to_piece(int(i)) for i in ids]
        return [self._map.pieces[int(i)] for i in ids]


class PieceMap:
    """vocab.json: every piece of both sides -> its id, the ids 0..n-1 with this pipeline's specials."""

    def __init__(self, ids: dict[str, int]):
        self.ids = ids
        self.pieces = sorted(ids, key=ids.__getitem__)  # id -> piece

    @classmethod
    def load(cls, path: Path) -> PieceMap:
        try:
            ids = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise UserError(
                f"{path}: not a readable piece map ({type(e).__name__}); import the model again"
            ) from e
        if not isinstance(ids, dict) or sorted(ids.values()) != list(range(len(ids))):
            raise UserError(f"{path}: its ids must be 0..n-1, each once; import the model again")
        for piece, want in _SPECIALS.items():
            if ids.get(piece) != want:
                raise UserError(
                    f"{path}: special token {piece} has id {ids.get(piece)}, but this pipeline needs {want}; "
                    "write it with `python -m pipeline import-hf`"
                )
        return cls(ids)

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(self.ids, ensure_ascii=False, indent=0) + "\n", encoding="utf-8")


def _load(path: Path, threads: int = -1) -> spm.SentencePieceProcessor:
    if not path.is_file():
        raise UserError(f"{path}: no such sentencepiece model; run `python -m pipeline bpe` first")
    try:
        return spm.SentencePieceProcessor(model_file=str(path), num_threads=threads)
    except (RuntimeError, OSError) as e:
        raise UserError(
            f"{path}: not a readable sentencepiece model ({e}); rerun `python -m pipeline bpe`"
        ) from e


def _load_checked(path: Path, threads: int = -1) -> spm.SentencePieceProcessor:
    """Load a model and refuse one whose special tokens differ from pipeline.tokens."""
    sp = _load(path, threads)
    for piece, want in _SPECIALS.items():
        got = sp.piece_to_id(piece)
        # piece_to_id maps an absent piece to unk_id, so check the reverse too.
        if got != want or sp.id_to_piece(want) != piece:
            raise UserError(
                f"{path}: special token {piece} has id {got}, but this pipeline needs {want}; "
                f"the model was not trained by `python -m pipeline bpe`, so retrain it with that command"
            )
    return sp

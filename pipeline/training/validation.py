"""What a validation measures: the val split's loss per token and its greedy BLEU.

`ValSplit` scores the model under training on data/bin's val split, with the
training's precision, and leaves every random number generator as it found it,
so that validating never changes what the training does next. What is done
with the scores (best step, patience, checkpoints) is the loop's.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import sacrebleu
import torch

from pipeline import params as P
from pipeline.data.batching import ParallelData, collate, token_batches
from pipeline.data.vocab import Vocab
from pipeline.decoding.beam import beam_ids
from pipeline.training.epochs import fitting_ids
from pipeline.training.state import rng_state, set_rng_state
from pipeline.training.step import UpdateStep

# Greedy validation's output limit; fixed here so that decode.* never invalidates training.
VAL_MAX_LEN_A, VAL_MAX_LEN_B = 1.2, 10


class ValSplit:
    """data/bin's val split (the sentences that fit the model), scored for the model `update` trains."""

    def __init__(
        self, params: P.Params, bin_dir: Path, vocab: Vocab, update: UpdateStep, say: Callable[[str], None]
    ):
        self.params, self.vocab, self.update = params, vocab, update
        self.data = ParallelData.load(bin_dir, "val")
        self.ids = fitting_ids(self.data, "val", params.model, bin_dir, say)
        self._refs: list[str] | None = None

    def evaluate(self) -> tuple[float, float | None]:
        """(val NLL per token, greedy BLEU or None); leaves every RNG as it found it."""
        model, device = self.update.model, self.update.device
        saved = rng_state(device)
        try:
            loss = self.loss()
            bleu = self.bleu() if self.params.train.val_bleu else None
        finally:
            model.train()
            set_rng_state(saved, device)
        return loss, bleu

    @torch.no_grad()
    def loss(self) -> float:
        """The val split's negative log-likelihood per target token, without label smoothing."""
        model, ids, data = self.update.model, self.ids, self.data
        model.eval()
        batches = token_batches(
            data.src.lengths[ids],
            data.tgt.lengths[ids],
            self.params.train.max_tokens,
            shuffle=False,
            seed=0,
            epoch=0,
        )
        total, tokens = 0.0, 0
        for b in batches:
            batch = collate(data, ids[b]).to(self.update.device)
            with self.update.autocast():
                total += float(model(batch.src, batch.tgt_in, batch.tgt_out, smoothing=0.0))
            tokens += batch.n_tgt_tokens
        return total / tokens

    def bleu(self) -> float:
        """Greedy decoding's BLEU against the val references, as data/bpe decodes both."""
        seqs = [self.data.src[i].tolist() for i in self.ids]
        with self.update.autocast():
            hyps = beam_ids(
                self.update.model,
                seqs,
                beam=1,
                length_penalty=1.0,
                max_len_a=VAL_MAX_LEN_A,
                max_len_b=VAL_MAX_LEN_B,
                batch_tokens=self.params.train.max_tokens,
                device=self.update.device,
            )
        texts = [self.vocab.decode_tgt(h[0].tokens) for h in hyps]
        if self._refs is None:
            self._refs = [self.vocab.decode_tgt(self.data.tgt[i].tolist()) for i in self.ids]
        return sacrebleu.corpus_bleu(texts, [self._refs]).score

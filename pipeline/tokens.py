"""Special tokens: their ids, shared by the BPE training and the model.

sentencepiece is trained with exactly these ids (see bpe.py), so an id means
the same thing in the vocabulary, the binarized data and the model.
"""

PAD, UNK, BOS, EOS, SEP = 0, 1, 2, 3, 4
PAD_PIECE, UNK_PIECE, BOS_PIECE, EOS_PIECE, SEP_PIECE = "<pad>", "<unk>", "<s>", "</s>", "<sep>"
N_SPECIAL = 5

"""Corpus data: fetching, text normalization, the subword vocabulary, binarized batches."""

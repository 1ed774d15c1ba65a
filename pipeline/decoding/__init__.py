"""Decoding: beam search, sampling, ensembles, the Translator, pair scores."""

"""Decoding: beam search, the Translator, the CTranslate2 backend, attention heatmaps."""

"""A reproducible Transformer NMT pipeline: download, clean, BPE, binarize, train, decode, score, report."""

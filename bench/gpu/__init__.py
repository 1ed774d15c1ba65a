"""Helpers of bench/gpu_check.py: model FLOPs and GPU peaks, the timed update, synthetic corpora."""

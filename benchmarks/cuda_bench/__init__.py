"""The pieces of benchmarks/cuda_models.py (Keel's cuda backend against PyTorch on one GPU): the
shapes and FLOP counts, the Keel runs, the PyTorch baselines, the op profile parser and the report.
Kept apart so the host-side arithmetic and parsing are tested on a CPU without torch
(tests/benchmarks/test_cuda_models.py)."""

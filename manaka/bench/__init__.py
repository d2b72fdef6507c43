"""``python -m manaka.bench SUITE``: benchmarks, each suite in its own module.

Shared timing and reporting rules live in :mod:`manaka.bench.timing`. Results go to
``--out DIR`` (default ``./bench_results``), never over the committed ``bench/results/``
unless that folder is named.
"""
# name -> one line for `python -m manaka.bench --help`; each name is a module of this package.
SUITES = {
    "ops": "each fused op beside its materialising NumPy version (--device cuda: beside PyTorch)",
    "step": "the training step at the seed shapes beside PyTorch eager; fused vs split policy head",
    "step_torch": "the step as mk.Trainer, manaka.torch.Network (eager, compiled) and plain PyTorch",
    "gemm": "the CPU GEMMs of one step at the seed shapes (to compare builds of cpu/gemm.c)",
    "pipeline": "positions/s of the batch producers, and the data wait during training",
}

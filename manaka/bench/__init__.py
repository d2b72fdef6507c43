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
    "play": "a model's USI engine against the heuristic player and Fairy-Stockfish at fixed nodes: W/D/L, Elo",
    "strength": "held-out top-1 / value BCE on engine games: manaka's recipe beside baselines and a ResNet",
}


def testing_hooks(what: str):
    """manaka._testing, the extension of test hooks (csrc/python/testing/) through which
    the gemm suite and the policy-head comparison time single entries of an op table. It
    is built and installed with manaka, but kept out of the shipped _core and never
    imported by the package itself; an install without it gets this error, naming `what`
    needed it."""
    try:
        from manaka import _testing
    except ImportError as e:
        raise ImportError(f"{what} needs manaka._testing, the test-hook extension setup.py builds "
                          f"beside manaka._core, and this install has none that loads ({e}); "
                          "rebuild manaka (pip install ., or python setup.py build_ext --inplace)") from e
    return _testing

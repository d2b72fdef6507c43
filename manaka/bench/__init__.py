"""``python -m manaka.bench SUITE``: benchmarks, each suite in its own module.

Suites: ops (the fused ops beside their materialising versions), step (the training
step), pipeline (the batch producers). Shared timing and reporting rules live in
:mod:`manaka.bench.timing`.
"""
SUITES = ("ops", "step", "pipeline")

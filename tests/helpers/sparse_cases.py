"""The sparse pair-table update's cases, shared by its CPU tests (against the float64
reference) and its CUDA tests (against the CPU): hyperparameters, a schedule, a pair table
that small batches name only a few rows of, and batches whose rows come back after gaps."""
import manaka as mk
import model_cases as cases

HYPER = dict(lr=3e-2, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1)
SCHEDULE = dict(warmup_steps=3, schedule="cosine", total_steps=14, min_lr=1e-3)


def sparse_config():
    """A pair table of 820 rows that batches of 3 positions name only a few of, irregularly."""
    return cases.config(hidden=(8,), num_tokens=40, T=4)


def batches(cfg, n, seed=0):
    """n batches; every third one repeats the first batch's tokens, so some rows come back
    after gaps of different lengths while most stay untouched."""
    out = [cases.batch(cfg, B=3, seed=seed + i, empty_fraction=0.3) for i in range(n)]
    for i in range(3, n, 3):
        out[i] = mk.Batch(out[0].tokens, out[i].legal, out[i].counts, out[i].target, out[i].value)
    return out

"""Bad batches for the tests of batch checking (host batches, batches in place, batches on a
GPU): a copy of a model_cases.batch of model_cases.config()'s sizes with one bad entry per
rule of mk_batch_check, or several at once."""
import numpy as np

import manaka as mk


def corrupt(batch, field):
    """A copy of `batch` with one bad entry in `field` (every rule of mk_batch_check)."""
    t, lg, c, tg, v = (x.copy() for x in (batch.tokens, batch.legal, batch.counts, batch.target, batch.value))
    pi = None if batch.policy_target is None else batch.policy_target.copy()
    if field == "tokens":
        t[3, 1, 2] = 11  # num_tokens
    elif field == "tokens_low":
        t[1, 0, 4] = -2
    elif field == "counts":
        c[2] = 0
    elif field == "counts_high":
        c[4] = lg.shape[1] + 1
    elif field == "legal":
        lg[1, c[1] - 1] = 17  # num_moves, in the last legal slot
    elif field == "target":
        tg[5] = c[5]
    elif field == "value":
        v[0] = np.nan
    elif field == "value_high":
        v[3] = 1.5
    elif field == "soft_entry":
        pi[2, 0] = -0.25
    elif field == "soft_nan":
        pi[4, c[4] - 1] = np.inf
    elif field == "soft_sum":
        pi[1, :c[1]] *= 1.01
    return mk.Batch(t, lg, c, tg, v, pi)


BAD_FIELDS = ["tokens", "tokens_low", "counts", "counts_high", "legal", "target", "value",
              "value_high", "soft_entry", "soft_nan", "soft_sum"]
# Several faults at once: the first in the host check's order is the one reported.
FAULT_PAIRS = [("counts_high", "tokens"), ("tokens", "tokens_low"), ("counts", "legal"),
               ("value", "target"), ("soft_entry", "soft_sum"), ("soft_nan", "value_high")]


def corrupt_all(batch, fields):
    for field in fields:
        batch = corrupt(batch, field)
    return batch

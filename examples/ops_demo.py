"""The three fused ops at the seed shapes (docs/design.md §5), with their timings."""
import time

import numpy as np

import manaka as mk

rng = np.random.default_rng(0)
B, T, V, D, K, P, W, M, L = 1024, 40, 2344, 256, 4, 16, 300, 2187, 600
counts = np.clip(np.round(rng.lognormal(np.log(90), 0.6, B)), 1, 593).astype(np.int32)
indices = rng.integers(0, M, (B, L), dtype=np.int32)
tokens = rng.integers(0, V, (B, 2, T), dtype=np.int32)
tokens[rng.random(tokens.shape) < 0.2] = -1
hidden = rng.standard_normal((B, W), dtype=np.float32)
table = rng.standard_normal((M, W), dtype=np.float32) * 0.05
emb = rng.standard_normal((V, D), dtype=np.float32) * 0.1
pair_table = rng.standard_normal((V * (V + 1) // 2, P), dtype=np.float32) * 0.01

print(mk.build_info())
for name, fn in [
    ("gather_dot", lambda: mk.ops.gather_dot(hidden, table, indices, counts)),
    ("power_sums", lambda: mk.ops.power_sums(emb, tokens, K)),
    ("pair_sums", lambda: mk.ops.pair_sums(pair_table, tokens)),
]:
    out = fn()
    start = time.perf_counter()
    fn()
    print(f"{name:<12} -> {out.shape} in {(time.perf_counter() - start) * 1e3:.2f} ms")

"""The shogi recipe's training step with and without the move kinds, side by side: the
recipe's model and trainer for the encodings `capture-defended-check-escape` and
`capture-defended-check-escape-mover-supported`, alternating steps on the same 4 batches of
512 real positions (the records given, default /work/exp/h0.hcpe), one thread; medians of 12
steps each after 2 of warm-up. Usage: python tools/recipe_step_time.py [RECORDS]"""
import sys
import time, numpy as np, manaka as mk
from manaka.shogi import recipe as R
from manaka.bench import pair_update
mk.set_num_threads(1)
arms = {}
for moves in ("capture-defended-check-escape", "capture-defended-check-escape-mover-supported"):
    r = R.recipe(moves=moves)
    m = mk.Model(R.model_config(r), seed=0)
    t = mk.Trainer(m, **{**R.trainer_settings(r), "schedule": "constant"})
    b = pair_update.record_batches(sys.argv[1] if len(sys.argv) > 1 else "/work/exp/h0.hcpe", 512, 4, moves=moves)
    arms[moves] = (t, b, [])
for rnd in range(14):
    for k, (t, b, times) in arms.items():
        t0 = time.perf_counter(); t.step(b[rnd % 4]).loss; dt = time.perf_counter() - t0
        if rnd >= 2: times.append(dt * 1e3)
for k, (t, b, times) in arms.items():
    print(f"{k}: median {np.median(times):.1f} ms/step ({512e3/np.median(times):,.0f} positions/s), 1 thread")
base, new = (np.median(v[2]) for v in arms.values())
print(f"ratio {new/base:.3f}")

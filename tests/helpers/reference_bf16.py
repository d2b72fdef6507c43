"""NumPy twin of the bf16 AdamW moments (csrc/core/bf16.h, csrc/core/hash.h, csrc/cpu/adamw.c):
the counter hash in uint64 arithmetic, stochastic and nearest rounding to bf16, and one
AdamW update in float32 with the C code's operation order, so tests can demand the same
bits. Independent of the C code: written from the contract in backend.h."""

import numpy as np

U64 = np.uint64
GOLDEN, MIX1, MIX2 = U64(0x9E3779B97F4A7C15), U64(0xBF58476D1CE4E5B9), U64(0x94D049BB133111EB)
STEP_SALT = 0x6D6B2D6266313621  # "mk-bf16!"


def hash64(seed, i):
    """splitmix64's finaliser of (seed, i), elementwise over i (uint64, wrapping)."""
    with np.errstate(over="ignore"):
        z = U64(seed) + (np.asarray(i, dtype=U64) + U64(1)) * GOLDEN
        z = (z ^ (z >> U64(30))) * MIX1
        z = (z ^ (z >> U64(27))) * MIX2
        return z ^ (z >> U64(31))


def uniform01(seed, i):
    """backend.h's mk_uniform01: the hash's top 24 bits as a float in [0, 1)."""
    return (hash64(seed, i) >> U64(40)).astype(np.float32) * np.float32(1.0 / 16777216.0)


def step_seed(step):
    """The rounding seed of the 1-based AdamW step `step`."""
    return int(hash64(STEP_SALT, step))


def rounding_noise(seed, i):
    return (hash64(seed, i) & U64(0xFFFFFFFF)).astype(np.uint32)


def to_float(h):
    return (np.asarray(h, np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def _special(bits):
    """bf16 of inf / NaN (NaN made quiet), as uint32, and the mask where it applies."""
    mask = (bits & np.uint32(0x7F800000)) == np.uint32(0x7F800000)
    quiet = np.where(bits & np.uint32(0x007FFFFF), np.uint32(0x40), np.uint32(0))
    return (bits >> np.uint32(16)) | quiet, mask


def stochastic(f, noise):
    """Round float32 f to bf16 bits, adding the low 16 bits of `noise` below the cut."""
    bits = np.asarray(f, np.float32).view(np.uint32)
    special, mask = _special(bits)
    with np.errstate(over="ignore"):
        rounded = (bits + (np.asarray(noise, np.uint32) & np.uint32(0xFFFF))) >> np.uint32(16)
    return np.where(mask, special, rounded).astype(np.uint16)


def nearest(f):
    """Round float32 f to the nearest bf16 (ties to even), as bits."""
    bits = np.asarray(f, np.float32).view(np.uint32)
    special, mask = _special(bits)
    with np.errstate(over="ignore"):
        rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    return np.where(mask, special, rounded).astype(np.uint16)


def adamw_args(lr, betas, eps, weight_decay, t):
    """The trainer's mk_adamw_args of 1-based step t, as float32 (bias corrections in double)."""
    b1, b2 = betas
    return tuple(np.float32(x) for x in (lr, b1, b2, eps, weight_decay, 1.0 - b1 ** t, 1.0 - b2 ** t))


def adamw_f32(p, g, m, v, args):
    """One AdamW update in float32 with adamw.c's operation order (no contraction);
    returns new (p, m, v) as float32."""
    lr, b1, b2, eps, wd, bc1, bc2 = (np.float32(a) for a in args)
    one = np.float32(1)
    decay, c1, c2 = one - lr * wd, one - b1, one - b2
    step_size, inv_bc2_sqrt = lr / bc1, one / np.sqrt(bc2)
    p, g, m, v = (np.asarray(a, np.float32) for a in (p, g, m, v))
    m = flush_denormal(b1 * m + c1 * g)
    v = flush_denormal(b2 * v + c2 * g * g)
    p = p * decay - step_size * m / (np.sqrt(v) * inv_bc2_sqrt + eps)
    return p, m, v


def flush_denormal(x):
    """Moments below FLT_MIN in magnitude are stored as 0 (core/pair_gap.h)."""
    x = np.asarray(x, np.float32)
    return np.where(np.abs(x) < np.finfo(np.float32).tiny, np.float32(0), x)


def adamw_bf16(p, g, m16, v16, args, seed):
    """The same with bf16 moments (bits in uint16): widen, update, round each moment with
    element i's noise (low half for m, high half for v). Returns (p, m16, v16)."""
    p, m, v = adamw_f32(p, g, to_float(m16), to_float(v16), args)
    noise = rounding_noise(seed, np.arange(p.size, dtype=np.uint64)).reshape(p.shape)
    return p, stochastic(m, noise), stochastic(v, noise >> np.uint32(16))


# ------------------------------------------------------------------ the sparse pair-table update
# Twins of core/pair_gap.h with its operation order (float64 window, float32 rows), for the
# backend entries pair_gap_advance / pair_catch_up (tests/conformance/test_backend_ops.py).

GAP_DECAY, GAP_DRIFT, GAP_DRIFT_C, GAP_M1, GAP_R2 = range(5)


def gap_reset():
    return np.array([1.0, 0.0, 0.0, 1.0, 1.0])


def gap_advance(e, decay, step_size, inv_bc2_sqrt, beta1, sqrt_beta2):
    """mk_gap_advance on entries e [n, 5] (float64, a new array)."""
    e = np.array(e, np.float64)
    m1, r2 = e[:, GAP_M1] * beta1, e[:, GAP_R2] * sqrt_beta2
    q, c = step_size * m1, r2 * inv_bc2_sqrt
    e[:, GAP_M1], e[:, GAP_R2] = m1, r2
    e[:, GAP_DECAY] *= decay
    e[:, GAP_DRIFT] = e[:, GAP_DRIFT] * decay + q
    with np.errstate(divide="ignore"):
        e[:, GAP_DRIFT_C] = np.where(q != 0, e[:, GAP_DRIFT_C] * decay + q / c, e[:, GAP_DRIFT_C] * decay)
    return e


def gap_apply(e, drift, eps, p, m, v):
    """mk_gap_row_of + mk_gap_apply: rows p, m, v [n, P] float32 caught up by their entries
    e [n, 5]; returns new (p, m, v)."""
    f32 = np.float32
    decay, m_scale = e[:, GAP_DECAY].astype(f32)[:, None], e[:, GAP_M1].astype(f32)[:, None]
    v_scale = (e[:, GAP_R2] * e[:, GAP_R2]).astype(f32)[:, None]
    W = e[:, GAP_DRIFT] if drift else np.zeros(len(e))
    with np.errstate(divide="ignore", invalid="ignore"):
        c = np.where(drift & (e[:, GAP_DRIFT] > 0) & (e[:, GAP_DRIFT_C] > 0),
                     e[:, GAP_DRIFT] / e[:, GAP_DRIFT_C], 0.0)
    W, c = W.astype(f32)[:, None], c.astype(f32)[:, None]
    p, m, v = (np.asarray(a, f32) for a in (p, m, v))
    out = p * decay
    out = np.where(W != 0, out - (W * m) / (np.sqrt(v) * c + f32(eps)), out)
    return out, flush_denormal(m * m_scale), flush_denormal(v * v_scale)

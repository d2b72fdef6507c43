"""Integer arrays a user hands in are narrowed to int32 with a range check, never wrapped:
NumPy's cast turns 2**32 into 0, 2**32 + 1 into 1, -2**40 into 0 and uint64 2**64 - 1
into the empty-slot sentinel -1, which the model's checks would then accept."""
import numpy as np
import pytest

import manaka as mk
from manaka import ops

import model_cases as cases

# (dtype, value): each wraps to something in range under a plain astype(np.int32).
WRAPPING = [(np.int64, 2**32), (np.int64, 2**32 + 1), (np.uint64, 2**64 - 1), (np.int64, -2**40),
            (np.uint64, 2**32), (np.uint32, 2**32 - 1)]
FIELDS = ["tokens", "legal", "counts", "target"]


def fields(cfg, unsigned=False):
    """A valid batch's arrays; `unsigned`: without -1 (empty token slots, legal padding), so
    that an unsigned copy holds the same values."""
    b = cases.batch(cfg, empty_fraction=0.0 if unsigned else 0.25)
    legal = np.where(b.legal < 0, 0, b.legal) if unsigned else b.legal
    return {"tokens": b.tokens, "legal": legal, "counts": b.counts, "target": b.target, "value": b.value}


@pytest.mark.parametrize("dtype,value", WRAPPING)
@pytest.mark.parametrize("field", FIELDS)
def test_batch_refuses_values_outside_int32(field, dtype, value):
    cfg = cases.config()
    arrays = fields(cfg, unsigned=np.dtype(dtype).kind == "u")
    bad = arrays[field].astype(dtype)  # in range: every valid value survives the dtype change
    flat = bad.reshape(-1)
    flat[len(flat) // 2] = np.array(value, dtype)
    arrays[field] = bad
    with pytest.raises(ValueError, match=rf"Batch: {field} holds {value} at flat position {len(flat) // 2}"):
        mk.Batch(**arrays)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.uint16, np.int64, np.uint64, np.uint32])
def test_batch_accepts_every_integer_dtype_in_range(dtype):
    cfg = cases.config()
    arrays = fields(cfg, unsigned=np.dtype(dtype).kind == "u")
    want = mk.Batch(**arrays)
    for f in FIELDS:
        arrays[f] = arrays[f].astype(dtype)
    got = mk.Batch(**arrays)
    for f in FIELDS:
        assert getattr(got, f).dtype == np.int32
        np.testing.assert_array_equal(getattr(got, f), getattr(want, f))
    model = mk.Model(cfg)
    np.testing.assert_array_equal(model.forward(got)[0], model.forward(want)[0])


@pytest.mark.parametrize("dtype,value", WRAPPING)
def test_ops_refuse_values_outside_int32(dtype, value):
    rng = np.random.default_rng(0)
    emb = rng.standard_normal((10, 4), dtype=np.float32)
    tokens = np.zeros((3, 2, 5), dtype)
    tokens[1, 1, 2] = np.array(value, dtype)
    for call in (lambda: ops.power_sums(emb, tokens, 2), lambda: ops.pair_sums(np.zeros((55, 4), np.float32), tokens),
                 lambda: ops.gather_dot(np.zeros((3, 4), np.float32), emb, tokens[:, 1], np.ones(3, np.int64)),
                 lambda: ops.gather_dot(np.zeros((3, 4), np.float32), emb, np.zeros((3, 5), np.int64),
                                        tokens[:, 1, 2].copy())):
        with pytest.raises(ValueError, match=f"holds {value}"):
            call()


@pytest.mark.parametrize("dtype,value", [(np.uint64, 2**64 - 1), (np.int64, 2**40), (np.uint64, 2**32)])
def test_pair_index_refuses_tokens_outside_int32(dtype, value):
    a = np.array([1, value], dtype)
    with pytest.raises(ValueError, match=rf"pair_index: a holds {value}"):
        ops.pair_index(a, np.array([0, 0], dtype))
    assert ops.pair_index(np.array([3], dtype), np.array([2], dtype))[0] == ops.pair_index(3, 2)

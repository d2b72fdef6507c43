"""Every bad input to an op raises a clear exception that names the argument."""
import os
import subprocess
import sys

import numpy as np
import pytest

import manaka as mk
from op_inputs import legal_batch, tokens
from paths import ROOT


@pytest.fixture
def gd(rng):
    hidden, table, indices, counts = legal_batch(rng, 4, 6, 5, 7)
    grad = rng.standard_normal((4, 6), dtype=np.float32)
    return dict(hidden=hidden, table=table, indices=indices, counts=counts, grad=grad)


def call_gather_dot(a):
    return mk.ops.gather_dot(a["hidden"], a["table"], a["indices"], a["counts"])


def call_gather_dot_backward(a):
    return mk.ops.gather_dot_backward(a["grad"], a["hidden"], a["table"], a["indices"], a["counts"])


GATHER_CASES = [  # (argument, replacement, exception, message pattern)
    ("hidden", lambda a: a["hidden"].astype(np.float64), TypeError, "hidden must have dtype float32, got float64"),
    ("hidden", lambda a: None, TypeError, "hidden is required"),
    ("hidden", lambda a: a["hidden"].tolist(), TypeError, "hidden must be a NumPy array, got list"),
    ("hidden", lambda a: a["hidden"][None], ValueError, "hidden must have 2 dimensions, got 3"),
    ("hidden", lambda a: a["hidden"][:3], ValueError, r"indices.shape\[0\] must equal hidden.shape\[0\]"),
    ("table", lambda a: a["table"][:, :4], ValueError, r"table.shape\[1\] must equal hidden.shape\[1\]"),
    ("table", lambda a: a["table"].astype(np.float16), TypeError, "table must have dtype float32"),
    ("indices", lambda a: a["indices"].astype(np.float32), TypeError, "indices must have an integer dtype"),
    ("indices", lambda a: np.where(a["indices"] >= 0, 7, -1), ValueError, r"indices\[\d+, \d+\] = 7 is out of range"),
    ("indices", lambda a: np.full_like(a["indices"], 2**40, dtype=np.int64), ValueError, "outside the int32 range"),
    ("counts", lambda a: np.full(4, 7, np.int32), ValueError, r"counts\[0\] = 7 is outside \[0, L = 6\]"),
    ("counts", lambda a: np.array([1, -1, 0, 2]), ValueError, r"counts\[1\] = -1 is outside"),
    ("counts", lambda a: np.ones(3, np.int32), ValueError, r"counts.shape\[0\] must equal"),
    ("counts", lambda a: np.ones((4, 1), np.int32), ValueError, "counts must have 1 dimension"),
]


@pytest.mark.parametrize("name,bad,exc,pattern", GATHER_CASES)
@pytest.mark.parametrize("call", [call_gather_dot, call_gather_dot_backward])
def test_gather_dot_bad_inputs(gd, name, bad, exc, pattern, call):
    gd[name] = bad(gd)
    with pytest.raises(exc, match=pattern):
        call(gd)


def test_gather_dot_index_error_gives_position(rng):
    hidden, table, indices, _ = legal_batch(rng, 3, 4, 2, 5, "full")
    indices[2, 1] = 5
    with pytest.raises(ValueError, match=r"indices\[2, 1\] = 5 is out of range for a table of 5 rows"):
        mk.ops.gather_dot(hidden, table, indices)


@pytest.mark.parametrize("bad,exc,pattern", [
    (lambda g: g[:, :5], ValueError, r"grad.shape\[1\] must equal indices.shape\[1\]"),
    (lambda g: g.astype(np.float64), TypeError, "grad must have dtype float32"),
    (lambda g: g[0], ValueError, "grad must have 2 dimensions"),
])
def test_gather_dot_backward_bad_grad(gd, bad, exc, pattern):
    gd["grad"] = bad(gd["grad"])
    with pytest.raises(exc, match=pattern):
        call_gather_dot_backward(gd)


@pytest.fixture
def ps(rng):
    emb = rng.standard_normal((9, 4), dtype=np.float32)
    tok = tokens(rng, 3, 2, 5, 9)
    return emb, tok


@pytest.mark.parametrize("value,exc,pattern", [(0, ValueError, "orders must be >= 1, got 0"),
                                               (-2, ValueError, "orders must be >= 1"),
                                               (2.0, TypeError, "orders must be an int"),
                                               (True, TypeError, "orders must be an int")])
def test_power_sums_bad_orders(ps, value, exc, pattern):
    with pytest.raises(exc, match=pattern):
        mk.ops.power_sums(ps[0], ps[1], value)


@pytest.mark.parametrize("token,pattern", [(9, r"tokens\[1, 0, 2\] = 9 is out of range"),
                                           (-2, r"tokens\[1, 0, 2\] = -2 is out of range")])
def test_power_sums_bad_tokens(ps, token, pattern):
    emb, tok = ps
    tok[1, 0, 2] = token
    with pytest.raises(ValueError, match=pattern):
        mk.ops.power_sums(emb, tok, 2)
    with pytest.raises(ValueError, match=pattern):
        mk.ops.power_sums_backward(np.zeros((3, 2, 2, 4), np.float32), emb, tok)


def test_power_sums_bad_shapes(ps):
    emb, tok = ps
    with pytest.raises(ValueError, match="tokens must have 3 dimensions"):
        mk.ops.power_sums(emb, tok[0], 2)
    with pytest.raises(TypeError, match="emb must have dtype float32"):
        mk.ops.power_sums(emb.astype(np.float64), tok, 2)
    with pytest.raises(ValueError, match=r"grad.shape\[3\] must equal emb.shape\[1\]"):
        mk.ops.power_sums_backward(np.zeros((3, 2, 2, 5), np.float32), emb, tok)
    with pytest.raises(ValueError, match=r"grad.shape\[0\] must equal tokens.shape\[0\]"):
        mk.ops.power_sums_backward(np.zeros((2, 2, 2, 4), np.float32), emb, tok)
    with pytest.raises(ValueError, match=r"grad.shape\[2\] \(orders\) must be >= 1"):
        mk.ops.power_sums_backward(np.zeros((3, 2, 0, 4), np.float32), emb, tok)


def test_pair_sums_bad_inputs(rng):
    tok = tokens(rng, 2, 2, 5, 4)
    table = rng.standard_normal((10, 3), dtype=np.float32)  # V = 4
    with pytest.raises(ValueError, match="pair_table.shape\\[0\\] is 11, which is not V \\(V \\+ 1\\) / 2"):
        mk.ops.pair_sums(rng.standard_normal((11, 3), dtype=np.float32), tok)
    tok[0, 1, 3] = 4
    with pytest.raises(ValueError, match=r"tokens\[0, 1, 3\] = 4 is out of range.*vocabulary size V"):
        mk.ops.pair_sums(table, tok)
    with pytest.raises(ValueError, match=r"tokens\[0, 1, 3\] = 4"):
        mk.ops.pair_sums_backward(np.zeros((2, 2, 3), np.float32), tok, 10)
    tok[0, 1, 3] = 1
    with pytest.raises(ValueError, match="num_pairs is 12, which is not"):
        mk.ops.pair_sums_backward(np.zeros((2, 2, 3), np.float32), tok, 12)
    with pytest.raises(TypeError, match="num_pairs must be an int"):
        mk.ops.pair_sums_backward(np.zeros((2, 2, 3), np.float32), tok, 10.0)
    with pytest.raises(ValueError, match=r"grad.shape\[1\] must equal tokens.shape\[1\]"):
        mk.ops.pair_sums_backward(np.zeros((2, 1, 3), np.float32), tok, 10)
    with pytest.raises(TypeError, match="pair_table is required"):
        mk.ops.pair_sums(None, tok)


def test_set_num_threads_rejects_negative():
    with pytest.raises(ValueError, match="n must be >= 0"):
        mk.set_num_threads(-1)


def test_set_num_threads_refuses_a_team_no_machine_starts_and_non_ints():
    # 100,000 was accepted and the next op crashed (a segfault) when the threads could not be
    # started; 2**31 wrapped to a negative int and silently meant the default
    before = mk.get_num_threads()
    try:
        for n in (4097, 100_000, 2**31):
            with pytest.raises(ValueError, match=f"^set_num_threads: n must be at most 4096 .*got {n}$"):
                mk.set_num_threads(n)
        with pytest.raises(ValueError, match=rf"^set_num_threads: n must be in \[0, 4096\] \(0 = default\), got {2**70}$"):
            mk.set_num_threads(2**70)
        for bad in (True, 1.5, "2", None):
            with pytest.raises(TypeError, match=f"^set_num_threads: n must be an int, got {type(bad).__name__}$"):
                mk.set_num_threads(bad)
        assert mk.get_num_threads() == before  # a refused count changes nothing
        mk.set_num_threads(np.int64(3))
        assert mk.get_num_threads() == 3
    finally:
        mk.set_num_threads(before)


def test_gpu_and_cpu_arrays_cannot_be_mixed(rng):
    class FakeGpuArray:  # looks like a device array; must never be touched by the CPU path
        __cuda_array_interface__ = {"shape": (4, 5), "typestr": "<f4", "data": (0, False), "version": 3}

    hidden, table, indices, counts = legal_batch(rng, 4, 6, 5, 7)
    with pytest.raises(TypeError, match="table is a CPU array but other arguments are on the GPU"):
        mk.ops.gather_dot(FakeGpuArray(), table, indices, counts)


def test_huge_unsigned_indices_are_refused_not_wrapped(rng):
    hidden, table, indices, counts = legal_batch(rng, 2, 3, 4, 5, "full")
    big = indices.astype(np.uint64)
    big[1, 2] = 2**64 - 1  # would read as -1 (the padding sentinel) if it wrapped
    with pytest.raises(ValueError, match=r"indices holds 18446744073709551615 at flat position 5"):
        mk.ops.gather_dot(hidden, table, big, counts)


def test_a_bad_count_is_reported_before_any_index(rng):
    hidden, table, indices, _ = legal_batch(rng, 3, 4, 2, 5, "full")
    indices[0, 0] = 99
    with pytest.raises(ValueError, match=r"counts\[2\] = 9 is outside"):
        mk.ops.gather_dot(hidden, table, indices, np.array([4, 4, 9]))


# A hang holds the GIL (Ctrl-C cannot stop it), so the call runs in a child process with
# a time limit: num_pairs near 2^62 must not overflow the search for V (a doubling search did).
_HUGE_NUM_PAIRS = r"""
import numpy as np, manaka as mk
tok, grad = np.zeros((1, 2, 3), np.int32), np.zeros((1, 2, 2), np.float32)
V = 2**31  # the largest vocabulary (int32 tokens): V (V + 1) / 2 rows
for n in (2**62, 2**63 - 1, 2**62 + 12345, V * (V + 1) // 2 + 1, (V + 1) * (V + 2) // 2):
    try:
        mk.ops.pair_sums_backward(grad, tok, n)
    except ValueError as e:
        assert "above the largest pair table" in str(e) and str(n) in str(e), e
    else:
        raise AssertionError(n)
for n in (V * (V + 1) // 2 - 1, 2**60 + 7):  # in range, but no V fits
    try:
        mk.ops.pair_sums_backward(grad, tok, n)
    except ValueError as e:
        assert "which is not V (V + 1) / 2" in str(e), e
    else:
        raise AssertionError(n)
try:  # the largest table is a valid shape, too big to allocate: a clean error
    mk.ops.pair_sums_backward(grad, tok, V * (V + 1) // 2)
except (MemoryError, ValueError) as e:
    assert "V (V + 1) / 2" not in str(e), e
print("ok")
"""


def test_huge_num_pairs_is_refused_quickly_not_a_hang():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    out = subprocess.run([sys.executable, "-c", _HUGE_NUM_PAIRS], capture_output=True, text=True,
                         timeout=120, env=env, cwd=ROOT)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]


@pytest.mark.parametrize("V", [0, 1, 2, 3, 4, 1000, 2**20, 2**31 - 1])  # 2**31: the child above
def test_pair_vocab_is_found_exactly_up_to_the_largest(V):
    n = V * (V + 1) // 2
    tok = np.zeros((1, 2, 3), np.int32)
    for wrong in (n - 1, n + 1):
        if wrong > 0 and wrong != (V + 1) * (V + 2) // 2 and wrong != (V - 1) * V // 2:
            with pytest.raises(ValueError, match="num_pairs is"):
                mk.ops.pair_sums_backward(np.zeros((1, 2, 1), np.float32), tok, wrong)
    if V in (1, 2, 3, 4, 1000):  # a table small enough to build: V was found
        got = mk.ops.pair_sums_backward(np.zeros((1, 2, 1), np.float32), tok, n)
        assert got.shape == (n, 1)


class _DLPackOnCPU:
    """A CPU object speaking DLPack that NumPy cannot view, as torch's bfloat16 tensors or
    conjugate views are (their __dlpack__ raises), or whose device it cannot tell (meta)."""

    def __init__(self, device_error=None):
        self.device_error = device_error

    def __dlpack_device__(self):
        if self.device_error:
            raise ValueError(self.device_error)
        return (1, 0)

    def __dlpack__(self, **kwargs):
        raise BufferError("Can't export tensors with the conjugate bit set")


@pytest.mark.parametrize("device_error, pattern", [
    (None, "hidden .*cannot be read as a NumPy array through DLPack: Can't export"),
    ("Unknown device type meta for Dlpack", "hidden .*has no DLPack device manaka can read: Unknown device type meta"),
])
def test_a_dlpack_object_numpy_cannot_view_is_a_type_error_naming_it(gd, device_error, pattern):
    """NumPy's own errors ("Unsupported dtype in DLTensor.", BufferError, ValueError) named no argument."""
    with pytest.raises(TypeError, match=f"gather_dot: {pattern}"):
        call_gather_dot({**gd, "hidden": _DLPackOnCPU(device_error)})


def test_a_bfloat16_torch_tensor_is_a_type_error_naming_it(gd):
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match="gather_dot: table .*cannot be read as a NumPy array.*Unsupported dtype"):
        call_gather_dot({**gd, "table": torch.from_numpy(gd["table"]).bfloat16()})

"""csrc/cuda's kernels, run on the CPU by the emulator in tools/cuda_emu (every CUDA thread
a std::thread, barriers and warp shuffles emulated), against tests/helpers/reference.py. This runs
the real kernel source on machines without a GPU; tests/cuda/test_cuda_ops.py runs the same
checks on a GPU, where it also tests what emulation cannot (memory model, alignment
faults, launch limits)."""
import ctypes
import os
import shutil
import sys

import numpy as np
import pytest

import emu_build
import op_inputs
import reference as ref
from assertions import assert_close
from op_inputs import legal_indices as legal
from paths import ROOT

pytestmark = pytest.mark.skipif(shutil.which("g++") is None or shutil.which("gcc") is None,
                                reason="no g++/gcc to build the CPU emulation of the CUDA kernels")

P, I64, SIZE = ctypes.c_void_p, ctypes.c_int64, ctypes.c_size_t


class Fault(ctypes.Structure):  # mk_fault in csrc/core/check.h
    _fields_ = [("kind", ctypes.c_int), ("index", I64), ("slot", I64), ("count", I64), ("value", I64),
                ("real", ctypes.c_double)]


class Check(ctypes.Structure):  # mk_check in csrc/core/check.h
    _fields_ = [("tokens", P), ("n_tokens", I64), ("V", I64), ("legal", P), ("counts", P), ("B", I64),
                ("L", I64), ("M", I64), ("min_count", I64), ("target", P), ("value", P),
                ("policy_target", P)]


FAULT_NONE, FAULT_TOKEN, FAULT_COUNT, FAULT_LEGAL, FAULT_NARROW = 0, 1, 2, 3, 8  # MK_FAULT_*


# The op table's entries (stream first; the backward passes end with work, work_bytes), then
# the launchers with the stream last.
SIGNATURES = {
    "mk_gather_dot_cuda": [P, P, P, P, P, I64, I64, I64, P],
    "mk_gather_dot_backward_cuda": [P, P, P, P, P, P, I64, I64, I64, I64, P, P, P, P, SIZE],
    "mk_power_sums_cuda": [P, P, P, I64, I64, I64, I64, P],
    "mk_power_sums_backward_cuda": [P, P, P, P, I64, I64, I64, I64, I64, P, P, SIZE],
    "mk_pair_sums_cuda": [P, P, P, I64, I64, I64, P],
    "mk_pair_sums_backward_cuda": [P, P, P, I64, I64, I64, I64, P, P, SIZE],
    "mk_gather_dot_backward_cuda_ws": [P, P, P, P, P, I64, I64, I64, I64, P, P, P, P, SIZE, P],
    "mk_power_sums_backward_cuda_ws": [P, P, P, I64, I64, I64, I64, I64, P, P, SIZE, P],
    "mk_pair_sums_backward_cuda_ws": [P, P, I64, I64, I64, I64, P, P, SIZE, P],
    "mk_gather_dot_backward_cuda_ws_bytes": [I64, I64, I64, ctypes.POINTER(SIZE)],
    "mk_power_sums_backward_cuda_ws_bytes": [I64, I64, I64, ctypes.POINTER(SIZE)],
    "mk_pair_sums_backward_cuda_ws_bytes": [I64, I64, I64, ctypes.POINTER(SIZE)],
    "mk_find_fault_cuda": [ctypes.POINTER(Check), ctypes.POINTER(Fault), P, SIZE, P],
    "mk_narrow_to_int32_cuda": [P, ctypes.c_int, ctypes.c_int, I64, P, ctypes.POINTER(Fault), P],
}


@pytest.fixture(scope="module")
def emu():
    lib = ctypes.CDLL(emu_build.library())
    for name, args in SIGNATURES.items():
        getattr(lib, name).argtypes = args
        getattr(lib, name).restype = ctypes.c_int
    lib.mk_error.restype = ctypes.c_char_p
    return lib


def header_prototypes():
    """{name: [ctypes argument types]} of every mk_status function declared in csrc/core/manaka.h
    and csrc/cuda/*.h, read from the declarations (comments stripped), and of every entry x of
    the op table as mk_x_cuda (csrc/core/backend_ops.def, which backend_cuda.h expands)."""
    import glob
    import re

    from backend_table import c_argtypes, declared_ops

    text = ""
    for path in [os.path.join(ROOT, "csrc", "core", "manaka.h"), *glob.glob(os.path.join(ROOT, "csrc", "cuda", "*.h"))]:
        with open(path) as f:
            text += re.sub(r"/\*.*?\*/|//[^\n]*", " ", f.read(), flags=re.S)
    pointers = {"mk_fault": ctypes.POINTER(Fault), "mk_check": ctypes.POINTER(Check),
                "size_t": ctypes.POINTER(SIZE)}
    found = {name: c_argtypes(params, pointers)
             for name, params in re.findall(r"\bmk_status\s+(\w+)\s*\(([^)]*)\)\s*;", text)}
    found.update({f"mk_{name}_cuda": c_argtypes(params, pointers) for _, name, params in declared_ops()})
    return found


def test_prototypes_and_struct_match_the_c_declarations():
    """SIGNATURES against the headers' declarations, and Fault and Check against the layout
    the compiler gave mk_fault and mk_check (mk_emu_layout): a C change fails here, not as
    garbage arguments in a kernel test."""
    declared = header_prototypes()
    for name, args in SIGNATURES.items():
        assert declared.get(name) == args, f"{name}: SIGNATURES has {args}, the header {declared.get(name)}"
    lib = ctypes.CDLL(emu_build.library())
    lib.mk_emu_layout.restype = ctypes.c_char_p
    layout = {}
    for line in lib.mk_emu_layout().decode().splitlines():
        name, size, *fields = line.split()
        layout[name] = (int(size), {f.split("=")[0]: int(f.split("=")[1]) for f in fields})
    for name, mirror in (("mk_fault", Fault), ("mk_check", Check)):
        mine = {f: getattr(mirror, f).offset for f, _ in mirror._fields_}
        assert layout[name] == (ctypes.sizeof(mirror), mine), name


def ptr(a):
    return None if a is None else a.ctypes.data


def call(lib, name, *args):
    """A launcher that takes the stream last, on the legacy default stream."""
    status = getattr(lib, name)(*[ptr(a) if isinstance(a, np.ndarray) or a is None else a for a in args], None)
    assert status == 0, lib.mk_error().decode()


def entry(lib, name, *args):
    """An op table entry (stream first) on the legacy default stream; a backward pass with
    work = NULL, work_bytes = 0, so that it takes its scratch from the workspace pool (and
    GatherDot's with rows = NULL: every row of the table written)."""
    work = ((None,) if "gather_dot_backward" in name else ()) + ((None, 0) if "backward" in name else ())
    status = getattr(lib, name)(None, *[ptr(a) if isinstance(a, np.ndarray) or a is None else a for a in args],
                                *work)
    assert status == 0, lib.mk_error().decode()


def all_rows(op):
    """The arguments after a _ws launcher's outputs: GatherDot's row mask, NULL (every row)."""
    return [None] if op == "gather_dot" else []


def unwritten(shape):
    """Output buffers start as NaN: an element a kernel forgets to write shows up."""
    return np.full(shape, np.nan, np.float32)


def misaligned(a):
    """A copy of `a` whose data starts 4 bytes past a 16-byte boundary (no float4 loads)."""
    buf = np.empty(a.size + 4, a.dtype)
    offset = (-(buf.ctypes.data // 4) % 4 + 1) % 4
    out = buf[offset:offset + a.size].reshape(a.shape)
    out[...] = a
    assert out.ctypes.data % 16 != 0
    return out


@pytest.mark.parametrize("W, aligned", [(300, True), (300, False), (5, True), (12292, True), (12291, True)])
@pytest.mark.parametrize("with_counts", [True, False])
def test_gather_dot(emu, W, aligned, with_counts):
    rng = np.random.default_rng(W)
    B, L, M = 5, 37, 20
    hidden = rng.standard_normal((B, W)).astype(np.float32)
    table = rng.standard_normal((M, W)).astype(np.float32)
    if not aligned:
        hidden, table = misaligned(hidden), misaligned(table)
    indices, counts = legal(rng, B, L, M)
    if not with_counts:
        indices, counts = np.abs(indices), None
    logits = unwritten((B, L))
    entry(emu, "mk_gather_dot_cuda", hidden, table, indices, counts, B, L, W, logits)
    assert_close(logits, ref.gather_dot(hidden, table, indices, counts))


@pytest.mark.parametrize("W, collide", [(300, None), (33, 2), (8, 1)])
def test_gather_dot_backward(emu, W, collide):
    variant = "mk_gather_dot_backward_cuda"
    rng = np.random.default_rng(W)
    B, L, M = 6, 23, 30
    hidden = rng.standard_normal((B, W)).astype(np.float32)
    table = rng.standard_normal((M, W)).astype(np.float32)
    indices, counts = legal(rng, B, L, M, collide=collide)
    grad = rng.standard_normal((B, L)).astype(np.float32)
    gh, gt = unwritten((B, W)), unwritten((M, W))
    entry(emu, variant, grad, hidden, table, indices, counts, B, L, W, M, gh, gt)
    want_h, want_t = ref.gather_dot_backward(grad, hidden, table, indices, counts)
    assert_close(gh, want_h)
    assert_close(gt, want_t)
    gt2 = unwritten((M, W))
    entry(emu, variant, grad, hidden, table, indices, counts, B, L, W, M, None, gt2)
    assert gt2.tobytes() == gt.tobytes()


def test_gather_dot_backward_empty_batch_zeroes_the_table(emu):
    W, M = 8, 4
    gt = unwritten((M, W))
    z = np.zeros((0, 5), np.float32)
    entry(emu, "mk_gather_dot_backward_cuda", z, np.zeros((0, W), np.float32), np.ones((M, W), np.float32),
         np.zeros((0, 5), np.int32), None, 0, 5, W, M, None, gt)
    assert np.all(gt == 0)


@pytest.mark.parametrize("K", [1, 4, 8, 9])
@pytest.mark.parametrize("D", [256, 5, 300])
def test_power_sums(emu, K, D):
    rng = np.random.default_rng(K * 1000 + D)
    B, S, T, V = 3, 2, 13, 20
    emb = (rng.standard_normal((V, D)) * 0.5).astype(np.float32)
    tokens = op_inputs.tokens(rng, B, S, T, V, empty=0.3)
    tokens[0, 0] = -1
    out = unwritten((B, S, K, D))
    entry(emu, "mk_power_sums_cuda", emb, tokens, B * S, T, D, K, out)
    assert_close(out, ref.power_sums(emb, tokens, K))


@pytest.mark.parametrize("K, D", [(1, 40), (4, 256), (9, 7)])
def test_power_sums_backward(emu, K, D):
    rng = np.random.default_rng(K + D)
    B, S, T, V = 4, 2, 11, 7
    emb = (rng.standard_normal((V, D)) * 0.5).astype(np.float32)
    tokens = op_inputs.tokens(rng, B, S, T, V, empty=0.3)
    tokens[..., 0] = 3  # one token in every row: a long bucket
    grad = rng.standard_normal((B, S, K, D)).astype(np.float32)
    out = unwritten((V, D))
    entry(emu, "mk_power_sums_backward_cuda", grad, emb, tokens, B * S, T, D, K, V, out)
    assert_close(out, ref.power_sums_backward(grad, emb, tokens))


@pytest.mark.parametrize("Pw, T, V", [(16, 40, 25), (3, 6, 4), (300, 9, 6), (16, 1, 5), (16, 2, 3)])
def test_pair_sums(emu, Pw, T, V):
    rng = np.random.default_rng(Pw + T)
    B, S = 2, 2
    table = rng.standard_normal((V * (V + 1) // 2, Pw)).astype(np.float32)
    tokens = op_inputs.tokens(rng, B, S, T, V, empty=0.3)
    out = unwritten((B, S, Pw))
    entry(emu, "mk_pair_sums_cuda", table, tokens, B * S, T, Pw, out)
    assert_close(out, ref.pair_sums(table, tokens))


@pytest.mark.parametrize("Pw, T, V", [(16, 40, 25), (3, 6, 4), (300, 9, 6), (16, 1, 5)])
def test_pair_sums_backward(emu, Pw, T, V):
    rng = np.random.default_rng(Pw + T + V)
    B, S = 2, 2
    num_pairs = V * (V + 1) // 2
    tokens = op_inputs.tokens(rng, B, S, T, V, empty=0.3)
    grad = rng.standard_normal((B, S, Pw)).astype(np.float32)
    out = unwritten((num_pairs, Pw))
    entry(emu, "mk_pair_sums_backward_cuda", grad, tokens, B * S, T, Pw, num_pairs, out)
    assert_close(out, ref.pair_sums_backward(grad, tokens, num_pairs))


def backward_case(op, rng):
    """One deterministic backward: (inputs, output shapes, size-query arguments), with
    repeated keys and empty slots so every part of the bucket sort has work."""
    if op == "gather_dot":
        B, L, M, W = 5, 11, 9, 6
        indices, counts = legal(rng, B, L, M, collide=4)
        inputs = [rng.standard_normal((B, L)).astype(np.float32), rng.standard_normal((B, W)).astype(np.float32),
                  rng.standard_normal((M, W)).astype(np.float32), indices, counts, B, L, W, M]
        return inputs, [(B, W), (M, W)], (B, L, M)
    if op == "power_sums":
        rows, T, D, K, V = 6, 7, 5, 3, 8
        tokens = op_inputs.tokens(rng, rows, 1, T, V, empty=0.3).reshape(rows, T)
        inputs = [rng.standard_normal((rows, K, D)).astype(np.float32), rng.standard_normal((V, D)).astype(np.float32),
                  tokens, rows, T, D, K, V]
        return inputs, [(V, D)], (rows, T, V)
    rows, T, Pw, V = 6, 7, 3, 5
    num_pairs = V * (V + 1) // 2
    tokens = op_inputs.tokens(rng, rows, 1, T, V, empty=0.3).reshape(rows, T)
    return [rng.standard_normal((rows, Pw)).astype(np.float32), tokens, rows, T, Pw, num_pairs], \
        [(num_pairs, Pw)], (rows, T, num_pairs)


def ws_bytes(lib, op, args):
    out = ctypes.c_size_t()
    assert getattr(lib, f"mk_{op}_backward_cuda_ws_bytes")(*args, ctypes.byref(out)) == 0, lib.mk_error().decode()
    return out.value


CANARY = 0xCD


@pytest.mark.parametrize("op", ["gather_dot", "power_sums", "pair_sums"])
@pytest.mark.parametrize("offset", [0, 3, 100])
def test_backward_on_caller_scratch_equals_the_pool_path_and_stays_inside_it(emu, op, offset):
    """The _ws launcher on exactly ws_bytes of scratch, starting at any alignment, gives the
    bits of the table entry on the pool's scratch, and writes nothing outside
    [work, work + ws_bytes)."""
    inputs, shapes, size_args = backward_case(op, np.random.default_rng(offset))
    need = ws_bytes(emu, op, size_args)
    assert need > 0
    buf = np.full(offset + need + 512, CANARY, np.uint8)
    want = [unwritten(s) for s in shapes]
    entry(emu, f"mk_{op}_backward_cuda", *inputs, *want)
    got = [unwritten(s) for s in shapes]
    status = getattr(emu, f"mk_{op}_backward_cuda_ws")(
        *[ptr(a) if isinstance(a, np.ndarray) or a is None else a for a in inputs + got + all_rows(op)],
        buf.ctypes.data + offset, need, None)
    assert status == 0, emu.mk_error().decode()
    for a, b in zip(got, want):
        assert a.tobytes() == b.tobytes()
    assert np.all(buf[:offset] == CANARY) and np.all(buf[offset + need:] == CANARY)


@pytest.mark.parametrize("op", ["gather_dot", "power_sums", "pair_sums"])
@pytest.mark.parametrize("short", [1, "all"])
def test_backward_refuses_too_little_scratch_and_writes_nothing(emu, op, short):
    inputs, shapes, size_args = backward_case(op, np.random.default_rng(7))
    need = ws_bytes(emu, op, size_args)
    buf = np.full(need, CANARY, np.uint8)
    given, work = (need - 1, buf.ctypes.data) if short == 1 else (0, None)
    out = [unwritten(s) for s in shapes]
    status = getattr(emu, f"mk_{op}_backward_cuda_ws")(
        *[ptr(a) if isinstance(a, np.ndarray) or a is None else a for a in inputs + out + all_rows(op)],
        work, given, None)
    assert status == 1  # MK_ERR_VALUE
    assert f"{op}_backward: the scratch given holds {given} bytes" in emu.mk_error().decode()
    assert f"needs {need}" in emu.mk_error().decode()
    assert all(np.all(np.isnan(o)) for o in out)  # not even grad_hidden
    assert np.all(buf == CANARY)


def test_scratch_sizes_follow_entries_and_keys(emu):
    """More entries or more keys never need less; the gather and pair queries count their
    own entries (B * L, rows * T (T - 1) / 2); a key-less op needs none."""
    assert ws_bytes(emu, "gather_dot", (4, 6, 0)) == 0
    assert ws_bytes(emu, "pair_sums", (4, 6, 0)) == 0
    assert ws_bytes(emu, "gather_dot", (4, 6, 10)) == ws_bytes(emu, "gather_dot", (6, 4, 10))
    assert ws_bytes(emu, "pair_sums", (3, 5, 10)) == ws_bytes(emu, "power_sums", (3, 10, 10)) == \
        ws_bytes(emu, "gather_dot", (3, 10, 10))  # 30 entries over 10 keys each
    small = ws_bytes(emu, "gather_dot", (4, 6, 10))
    assert ws_bytes(emu, "gather_dot", (400, 6, 10)) > small < ws_bytes(emu, "gather_dot", (4, 6, 10000))
    out = ctypes.c_size_t()
    assert emu.mk_gather_dot_backward_cuda_ws_bytes(1 << 20, 1 << 12, 10, ctypes.byref(out)) == 1
    assert "at most 2^31 - 1 entries" in emu.mk_error().decode()


def first_legal_error(indices, counts, M):
    """check.h's order: every count first (outside [0, L]: slot -1), then the legal slots
    row-major."""
    B, L = indices.shape
    for b in range(B):
        if counts is not None and not 0 <= counts[b] <= L:
            return (b, -1, counts[b])
    for b in range(B):
        for l in range(L if counts is None else counts[b]):
            if not 0 <= indices[b, l] < M:
                return (b, l, indices[b, l])
    return None


def find_fault(emu, **arrays):
    """mk_find_fault_cuda over the given arrays (mk_check's fields), with the ops' pool as
    scratch."""
    check = Check(**{k: ptr(v) if isinstance(v, np.ndarray) else v for k, v in arrays.items()})
    fault = Fault(kind=-1)
    call(emu, "mk_find_fault_cuda", ctypes.byref(check), ctypes.byref(fault), None, 0)
    return fault


def test_check_legal_finds_the_first_bad_position(emu):
    rng = np.random.default_rng(0)
    B, L, M = 7, 9, 10
    for trial in range(30):
        indices, counts = legal(rng, B, L, M)
        for _ in range(trial % 4):
            b, l = rng.integers(0, B), rng.integers(0, L)
            indices[b, l] = rng.choice([-5, M, M + 3, 0])
        if trial % 5 == 0:
            counts[rng.integers(0, B)] = rng.choice([-1, L + 1])
        for c in (counts, None):
            want = first_legal_error(indices, c, M)
            bad = find_fault(emu, legal=indices, counts=c, B=B, L=L, M=M, min_count=0)
            if want is None:
                assert bad.kind == FAULT_NONE
            elif want[1] < 0:
                assert (bad.kind, bad.index, bad.value) == (FAULT_COUNT, want[0], want[2])
            else:
                assert (bad.kind, bad.index, bad.slot, bad.value) == (FAULT_LEGAL, *want)
                assert bad.count == (L if c is None else c[want[0]])


def test_check_tokens_finds_the_first_bad_token(emu):
    rng = np.random.default_rng(1)
    V = 6
    for trial in range(20):
        tokens = rng.integers(-1, V, size=(3, 2, 5)).astype(np.int32)
        for _ in range(trial % 3):
            tokens.flat[rng.integers(0, tokens.size)] = rng.choice([-2, V, 100])
        flat = tokens.ravel()
        bad_at = np.nonzero((flat < -1) | (flat >= V))[0]
        bad = find_fault(emu, tokens=tokens, n_tokens=tokens.size, V=V)
        assert bad.kind == (FAULT_TOKEN if len(bad_at) else FAULT_NONE)
        if len(bad_at):
            assert (bad.index, bad.value) == (bad_at[0], flat[bad_at[0]])


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int64, np.uint8, np.uint16, np.uint32, np.uint64])
def test_narrow_to_int32(emu, dtype):
    rng = np.random.default_rng(2)
    info = np.iinfo(dtype)
    lo, hi = max(info.min, -2**31), min(info.max, 2**31 - 1)
    src = rng.integers(lo, hi, size=37, endpoint=True, dtype=dtype)
    dst = np.full(37, 12345, np.int32)
    bad = Fault()
    call(emu, "mk_narrow_to_int32_cuda", src, np.dtype(dtype).itemsize, int(info.min < 0), 37, dst,
         ctypes.byref(bad))
    assert bad.kind == FAULT_NONE and np.array_equal(dst, src.astype(np.int64))
    if info.max > 2**31 - 1:
        src[[5, 20]] = info.max
        if info.min < 0:
            src[3] = info.min
        call(emu, "mk_narrow_to_int32_cuda", src, np.dtype(dtype).itemsize, int(info.min < 0), 37, dst,
             ctypes.byref(bad))
        first = 3 if info.min < 0 else 5
        assert bad.kind == FAULT_NARROW and bad.index == first
        assert bad.value == np.int64(src[first].astype(np.int64))


def test_gpu_test_files_pass_on_the_emulated_device():
    """tests/cuda/test_cuda_ops.py and tests/cuda/test_device_array.py against manaka._cuda built on
    the emulator: the real binding (argument parsing, DeviceArray, DLPack/CAI, index
    checks and their messages, narrowing, out=) over the real kernels."""
    import subprocess

    run = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "cuda_emu", "run_gpu_tests.py")],
                         capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-3000:]
    summary = run.stdout.strip().splitlines()[-1]
    passed = int(summary.split(" passed")[0].split()[-1])
    assert passed >= 60, summary


def test_staging_ring_serves_every_device(emu):
    """The pinned staging ring (staging_ring.cu) reuses one event per slot, and a GPU refuses to
    record an event on a stream of another device than the one it was made on: a copy for
    a second device (a model made under CuPy's Device(1), say) after the ring's first use
    must get its slot's event made for that device, on every slot, back and forth."""
    emu.mk_cuda_stage_to_device.argtypes = [P, P, SIZE, P]
    emu.mk_cuda_stage_to_device.restype = ctypes.c_int
    rng = np.random.default_rng(0)
    try:
        for device in (0, 1, 0):
            emu.mk_emu_set_device(device)
            for _ in range(70):  # more copies than the ring has slots (64)
                src, dst = rng.random(1000, dtype=np.float32), unwritten(1000)
                status = emu.mk_cuda_stage_to_device(ptr(dst), ptr(src), src.nbytes, None)
                assert status == 0, emu.mk_error().decode()
                emu.mk_emu_synchronize()
                np.testing.assert_array_equal(dst, src)
    finally:
        emu.mk_emu_set_device(0)


@pytest.mark.parametrize("mb", [1, 65, 200], ids=lambda mb: f"{mb}MB")
def test_a_staged_copy_never_reads_its_source_after_returning(emu, mb):
    """The caller may reuse its host array once to_device returns (a batch's copy waits on
    the copy stream for step n - 1, long after). With copies from pinned memory made
    asynchronous, as on a GPU, a source that is itself pinned (a torch pin_memory tensor's
    NumPy view) and larger than the 64 MB ring must still be read before the return. (Its
    pieces wrap round the ring: a region rewritten while its copy is pending fails too.)"""
    emu.mk_cuda_stage_to_device.argtypes = [P, P, SIZE, P]
    emu.mk_cuda_stage_to_device.restype = ctypes.c_int
    emu.mk_emu_alloc_pinned.restype = P
    emu.mk_emu_alloc_pinned.argtypes = [SIZE]
    emu.mk_emu_free_pinned.argtypes = [P]
    n = (mb << 20) // 4 + 3
    raw = emu.mk_emu_alloc_pinned(n * 4)
    assert raw
    src = np.ctypeslib.as_array((ctypes.c_float * n).from_address(raw))
    want = np.random.default_rng(mb).random(n, dtype=np.float32)
    src[...] = want
    dst = unwritten(n)
    emu.mk_emu_defer_pinned(1)
    try:
        status = emu.mk_cuda_stage_to_device(ptr(dst), ptr(src), src.nbytes, None)
        assert status == 0, emu.mk_error().decode()
        src[...] = -1.0  # the caller's next batch
        emu.mk_emu_synchronize()
        np.testing.assert_array_equal(dst, want)
    finally:
        emu.mk_emu_defer_pinned(0)
        emu.mk_emu_synchronize()
        emu.mk_emu_free_pinned(raw)

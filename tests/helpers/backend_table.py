"""Calls the entries of any backend's op table (csrc/core/backend.h) from Python, for the
conformance suite (tests/conformance/test_backend_ops.py).

A table arrives as a 'manaka.mk_backend' capsule (manaka._testing.backend_table("cpu")
hands out _core's, manaka._cuda.backend_table() the CUDA one); each entry is read from it at
the offset the compiler gave it (manaka._testing.backend_layout(), generated from
csrc/core/backend_ops.def) and called through ctypes with the prototype parsed from that
same file, the one declaration the C struct and every backend's prototypes are generated
from; a failing entry's message is read from the mk_error() of the library that holds the
table. The structs the entries take are mirrored here and checked against the compiled
layout (check_layout), so a field added in C fails the suite instead of shifting every
argument after it.

Device memory is only ever touched through the table's own alloc / to_device / to_host,
so the same case runs unchanged on the CPU, the staged CPU and a GPU (real or emulated)."""
import ctypes
import os
import re

import numpy as np

import manaka
from manaka import _testing  # the test hooks (csrc/python/testing/)
from paths import ROOT

P, I32, I64, F32, U64, SIZE, F64 = (ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_float,
                                    ctypes.c_uint64, ctypes.c_size_t, ctypes.c_double)
CAPSULE = b"manaka.mk_backend"
MK_OK, MK_ERR_VALUE = 0, 1
MK_STAT_LOSS, MK_STAT_POLICY_LOSS, MK_STAT_VALUE_LOSS, MK_STAT_ACCURACY = 0, 1, 2, 3
MK_STAT_LR, MK_STAT_FINITE, MK_STAT_COUNT = 4, 5, 8


class Batch(ctypes.Structure):  # mk_batch, batch.h
    _fields_ = [("B", I64), ("S", I64), ("T", I64), ("L", I64), ("tokens", P), ("legal", P),
                ("counts", P), ("target", P), ("value", P), ("policy_target", P),
                ("on_device", I32), ("checked_V", I64), ("checked_M", I64)]


class Fault(ctypes.Structure):  # mk_fault, check.h
    _fields_ = [("kind", I32), ("index", I64), ("slot", I64), ("count", I64), ("value", I64),
                ("real", ctypes.c_double)]


class StepShapes(ctypes.Structure):  # mk_step_shapes, backend.h
    _fields_ = [("B", I64), ("L", I64), ("M", I64), ("rows", I64), ("T", I64), ("V", I64), ("C", I64),
                ("D", I64)]


class AdamwArgs(ctypes.Structure):  # mk_adamw_args, backend.h
    _fields_ = [(name, F32) for name in ("lr", "beta1", "beta2", "eps", "weight_decay",
                                          "bias_correction1", "bias_correction2")]


class GemmCall(ctypes.Structure):  # mk_gemm_call, backend.h
    _fields_ = [("trans_a", I32), ("trans_b", I32), ("M", I64), ("N", I64), ("K", I64),
                ("alpha", F32), ("beta", F32), ("A", P), ("B", P), ("C", P), ("lda", I64),
                ("ldb", I64), ("ldc", I64)]


MIRRORS = {"mk_batch": Batch, "mk_fault": Fault, "mk_step_shapes": StepShapes,
           "mk_adamw_args": AdamwArgs, "mk_gemm_call": GemmCall}

ST, ARGS = ctypes.c_int, ctypes.POINTER(AdamwArgs)  # mk_status is an int
OUT_PTR = ctypes.POINTER(ctypes.c_void_p)
SCALARS = {"int64_t": I64, "size_t": SIZE, "int": I32, "float": F32, "uint64_t": U64, "double": F64}
OPS_DEF = os.path.join(ROOT, "csrc", "core", "backend_ops.def")


def c_argtypes(params, pointers):
    """The ctypes types of a C parameter list ("const float *x, int64_t n"): scalars by
    SCALARS, `T **` as a pointer to a pointer, `T *` as pointers.get(T) or a plain pointer
    (a type the map lacks comes back as its C name, so a comparison fails)."""
    types = []
    for param in ([] if params.strip() in ("", "void") else params.split(",")):
        words = param.replace("*", " * ").split()
        stars = words.count("*")
        base = [w for w in words[:-1] if w not in ("const", "*")][-1]
        if stars >= 2:
            types.append(OUT_PTR)
        elif stars:
            types.append(pointers.get(base, P))
        else:
            types.append(SCALARS.get(base, base))
    return types


def declared_ops(path=OPS_DEF):
    """[(return type, entry, parameter list)] of every MK_OP in csrc/core/backend_ops.def,
    in its order (comments stripped): the one declaration of the table's entries."""
    with open(path) as f:
        text = re.sub(r"/\*.*?\*/|//[^\n]*", " ", f.read(), flags=re.S)
    ops = re.findall(r"\bMK_OP\(\s*(\w+)\s*,\s*(\w+)\s*,\s*\(([^()]*)\)\s*\)", text)
    if len(ops) != text.count("MK_OP("):
        raise ValueError(f"{path}: an MK_OP this parser cannot read (parameters hold parentheses?)")
    return ops


def prototypes(path=OPS_DEF):
    """{entry: (return type, argument types)}: mk_status is an int, void returns None."""
    pointers = {"mk_adamw_args": ARGS, "mk_batch": ctypes.POINTER(Batch),
                "mk_fault": ctypes.POINTER(Fault), "mk_step_shapes": ctypes.POINTER(StepShapes),
                "mk_gemm_call": ctypes.POINTER(GemmCall),
                "size_t": ctypes.POINTER(SIZE)}
    return {name: ({"mk_status": ST, "void": None}[ret], c_argtypes(params, pointers))
            for ret, name, params in declared_ops(path)}


# The prototype of every entry, from the declaration file.
PROTOTYPES = prototypes()


def layout():
    return _testing.backend_layout()


def entries():
    """The table's entries in the order of the struct (by offset)."""
    _, fields = layout()["mk_backend"]
    named = {"name", "host_memory"}
    return sorted((f for f in fields if f not in named), key=fields.get)


def check_layout():
    """Every mirror matches the compiled struct, and the table is name, host_memory, then
    one function pointer per entry with nothing else in it. Returns a list of problems."""
    problems = []
    lay = layout()
    for name, mirror in MIRRORS.items():
        size, fields = lay[name]
        mine = {f[0]: getattr(mirror, f[0]).offset for f in mirror._fields_}
        if ctypes.sizeof(mirror) != size or mine != fields:
            problems.append(f"{name}: C has size {size}, fields {fields}; the ctypes mirror has "
                            f"size {ctypes.sizeof(mirror)}, fields {mine}")
    size, fields = lay["mk_backend"]
    names = entries()
    first = fields[names[0]]
    want = {e: first + i * ctypes.sizeof(P) for i, e in enumerate(names)}
    if {e: fields[e] for e in names} != want or size != first + len(names) * ctypes.sizeof(P):
        problems.append(f"mk_backend is not a run of function pointers after name, host_memory: {fields}")
    if fields["name"] != 0 or fields["host_memory"] != ctypes.sizeof(P):
        problems.append(f"mk_backend starts with {fields}, not name, host_memory")
    missing, extra = set(names) - set(PROTOTYPES), set(PROTOTYPES) - set(names)
    if missing or extra:
        problems.append(f"prototypes missing for {sorted(missing)}, stale for {sorted(extra)}")
    return problems


class BackendError(RuntimeError):
    def __init__(self, entry, status, message):
        super().__init__(f"{entry} returned status {status}: {message}")
        self.status = status


class Buffer:
    """`nbytes` of the backend's memory, holding an array of `shape` and `dtype`."""

    def __init__(self, ptr, shape, dtype):
        self.ptr, self.shape, self.dtype = ptr, tuple(shape), np.dtype(dtype)
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


class Backend:
    """One op table: `call(entry, *args)` runs an entry and raises BackendError on a
    failing status (`status(entry, *args)` returns it instead); put / empty / get move
    arrays through the table's own memory entries; close() frees what they made.

    Arguments: a Buffer passes its device pointer, None passes NULL, anything else goes
    to ctypes as is."""

    def __init__(self, label, capsule):
        get = ctypes.pythonapi.PyCapsule_GetPointer
        get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
        self.label, self._capsule = label, capsule  # the capsule keeps its extension loaded
        self.address = get(capsule, CAPSULE)
        # Every table writes its failures into _core's message, the CUDA one included
        # (csrc/python/common/engine_link.h).
        self._error = ctypes.CDLL(manaka._core.__file__).mk_error
        self._error.restype = ctypes.c_char_p
        _, fields = layout()["mk_backend"]
        self.host_memory = ctypes.c_int.from_address(self.address + fields["host_memory"]).value
        self.entries = {}
        for entry in entries():
            fn = ctypes.c_void_p.from_address(self.address + fields[entry]).value
            restype, argtypes = PROTOTYPES[entry]
            self.entries[entry] = ctypes.CFUNCTYPE(restype, *argtypes)(fn)
        self._buffers = []

    def status(self, entry, *args):
        return self.entries[entry](*[a.ptr if isinstance(a, Buffer) else a for a in args])

    def call(self, entry, *args):
        st = self.status(entry, *args)
        if PROTOTYPES[entry][0] is not None and st != MK_OK:
            raise BackendError(entry, st, self.error())
        return st

    def error(self):
        return (self._error() or b"").decode()

    def alloc(self, nbytes):
        out = ctypes.c_void_p()
        self.call("alloc", None, max(int(nbytes), 1), ctypes.byref(out))
        return out.value

    def put(self, array):
        """A device copy of `array` (None stays None: a NULL argument)."""
        if array is None:
            return None
        array = np.ascontiguousarray(array)
        buf = Buffer(self.alloc(array.nbytes), array.shape, array.dtype)
        self._buffers.append(buf)
        if array.nbytes:
            self.call("to_device", None, buf, array.ctypes.data, array.nbytes)
        return buf

    def empty(self, shape, dtype=np.float32):
        """An output buffer that starts as NaN (all bits set for integers), so an element an
        entry forgets to write shows up."""
        dtype = np.dtype(dtype)
        fill = np.nan if dtype.kind == "f" else -1
        return self.put(np.full(shape, fill, dtype))

    def get(self, buf):
        out = np.empty(buf.shape, buf.dtype)
        if out.nbytes:
            self.call("to_host", None, out.ctypes.data, buf, out.nbytes)
        return out

    def scratch(self, **shapes):
        """(scratch buffer or None, its size) for mk_step_shapes fields given as keywords."""
        size = SIZE()
        self.call("scratch_bytes", ctypes.byref(StepShapes(**shapes)), ctypes.byref(size))
        if size.value == 0:
            return None, 0
        return self.put(np.zeros(size.value, np.uint8)), size.value

    def close(self):
        while self._buffers:
            self.entries["free"](None, self._buffers.pop().ptr)


def cuda_table():
    """The CUDA table's capsule, or a string saying why there is none."""
    from manaka import cuda

    reason = cuda.why_cannot_train()
    if reason:
        return reason
    return cuda.backend_table()


def table(name):
    """A Backend for "cpu", "cpu_staged" or "cuda"; a string saying why when unavailable."""
    capsule = cuda_table() if name == "cuda" else _testing.backend_table(name)
    return capsule if isinstance(capsule, str) else Backend(name, capsule)

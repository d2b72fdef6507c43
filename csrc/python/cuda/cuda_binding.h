/* Shared by the files of manaka._cuda (cuda_*.c): the DeviceArray type and the parsing of
 * GPU arguments. The CUDA runtime is reached only through csrc/cuda/runtime.h.
 *
 * Argument rules on the GPU (the CPU rules of binding.h where they can hold):
 * - an argument is a manaka.DeviceArray, any object with __dlpack__/__dlpack_device__
 *   (asked for the legacy default stream, the one every manaka kernel runs on; preferred
 *   when both protocols are there, since PyTorch's __cuda_array_interface__ is v2 and
 *   names no stream), or any object with __cuda_array_interface__ (versions 0-3; a v3
 *   `stream` is waited for before use; masks are refused);
 * - float arrays must be float32 (TypeError naming the argument: converting would hide a
 *   copy and a change of precision); index arrays may have any integer dtype, narrowed
 *   to int32 on the device with a range check (ValueError, never a wrap-around), as on
 *   the CPU;
 * - arrays must be C-contiguous (ValueError): a strided copy on the device is the
 *   caller's decision (x.contiguous(), cupy.ascontiguousarray);
 * - every array must live on the current CUDA device;
 * - parsing (shapes, dtypes, strides) never touches the device, so malformed interfaces
 *   are reported the same way on a machine without a GPU. */
#ifndef MANAKA_CUDA_BINDING_H
#define MANAKA_CUDA_BINDING_H

#include "python/common/engine_link.h"
#include "core/checked.h"
#include "dlpack.h"
#include "cuda/runtime.h"

#define MK_MAX_DIMS 8

typedef struct {
    const char *name;    /* NumPy's name: "float32" */
    const char *typestr; /* the array interface's: "<f4" */
    int itemsize;
    int npy_type;
    uint8_t dl_code;
} mk_dtype;

extern const mk_dtype mk_float32, mk_int32;
/* The dtype with this array-interface typestr / DLPack type / NumPy type number, or NULL. */
const mk_dtype *mk_dtype_from_typestr(const char *typestr);
const mk_dtype *mk_dtype_from_dlpack(DLDataType t);
const mk_dtype *mk_dtype_from_npy(int npy_type);

/* ------------------------------------------------------------------ DeviceArray */
typedef struct {
    PyObject_HEAD
    void *ptr;
    int ndim;
    int64_t shape[MK_MAX_DIMS];
    const mk_dtype *dtype;
    int device;
    int readonly;
    int owns;        /* ptr came from mk_cuda_malloc: freed with the array */
    PyObject *owner; /* from_ptr: kept alive as long as the array */
} mk_device_array;

extern PyTypeObject mk_DeviceArray_Type;
#define mk_DeviceArray_Check(op) PyObject_TypeCheck(op, &mk_DeviceArray_Type)
int64_t mk_shape_size(int ndim, const int64_t *shape);
/* 0 when the shape's element count is at most MK_MAX_ELEMENTS (../checked.h), else -1 with
 * a ValueError naming `where` and `name`: a shape from the caller (DeviceArray's shape,
 * a __cuda_array_interface__ or DLPack tensor) is checked once, so mk_shape_size and
 * the byte counts made from it cannot wrap. */
int mk_shape_check(int ndim, const int64_t *shape, const char *where, const char *name);
/* A new, uninitialised array on the current device (NULL with an exception). */
mk_device_array *mk_device_array_empty(int ndim, const int64_t *shape, const mk_dtype *dtype);
int mk_init_device_array(PyObject *module);

/* ------------------------------------------------------------------ GPU arguments */
typedef struct {
    const char *name; /* the argument's name, for messages */
    void *ptr;
    int ndim;
    int64_t shape[MK_MAX_DIMS];
    const mk_dtype *dtype;   /* NULL: a dtype manaka has no use for */
    char typestr[32];        /* as the producer spelled it, for messages */
    int readonly;
    int device;              /* -1 until known (CAI: found at attach) */
    int has_stream;          /* CAI v3: wait for `stream` before use */
    void *stream;
    const char *source;      /* "DeviceArray", "__cuda_array_interface__", "__dlpack__" */
    PyObject *ref;           /* keeps the producer alive while the op runs */
    DLManagedTensor *dl;     /* a consumed DLPack tensor: its deleter runs at release */
    int32_t *narrowed;       /* an index array's int32 copy (mk_gpu_narrow), freed at release */
} mk_gpu_array;

/* Reads obj's layout without touching the device, for a consumer on `stream` (a
 * cudaStream_t; MK_LEGACY_STREAM, where the ops run): a DLPack producer is asked to order
 * its data before it. 0, or -1 with TypeError/ValueError naming `op` and `name`. Checks
 * structure and C-contiguity only (not dtype or ndim). */
#define MK_LEGACY_STREAM ((void *)1)
int mk_gpu_parse(PyObject *obj, const char *op, const char *name, void *stream,
                 mk_gpu_array *out);
/* dtype and ndim, with the CPU path's messages. */
int mk_gpu_expect(mk_gpu_array *a, const char *op, const mk_dtype *dtype, int ndim);
/* An integer dtype (any width) and ndim, with the CPU path's messages. */
int mk_gpu_expect_index(mk_gpu_array *a, const char *op, int ndim);
/* After attach: an index array that is not int32 is narrowed to an int32 copy on the
 * device (ptr and dtype then describe the copy); ValueError for a value that does not fit. */
int mk_gpu_narrow(mk_gpu_array *a, const char *op);
/* The current device, once a usable one is known to be there: 0, or -1 with a
 * RuntimeError naming `op` that says why there is none. */
int mk_gpu_current_device(const char *op, int *device);
/* Checks that the array lives on `device` and orders its producer's stream before
 * `stream` (the one manaka's kernels will use). Touches the device. */
int mk_gpu_attach(mk_gpu_array *a, const char *op, int device, void *stream);
/* Drops what parse took (the reference, the DLPack tensor). Safe on a zeroed struct. */
void mk_gpu_release(mk_gpu_array *a);

/* PyInit__cuda's helpers. */
int mk_init_cuda_ops(PyObject *module);
/* backend_table, cublas_path, allow_tf32 (cuda_backend.c) */
int mk_init_cuda_backend(PyObject *module);
/* device_batch and its _DeviceBatch type (cuda_batch.c) */
int mk_init_cuda_batch(PyObject *module);
#endif

/* mk_backend: the table of primitives the network and its training step are written over.
 *
 * model.c and trainer.c call only these entries, so the same code runs on every backend:
 * the CPU table lives in cpu/backend_cpu.c, a CUDA table (cuBLAS + kernels) plugs in the
 * same way. Rules every implementation follows:
 *
 * - Every primitive takes `stream` first. The CPU ignores it; CUDA launches on it. Calls on
 *   one stream are ordered, so the caller never synchronises between primitives.
 * - Pointers marked "device" point into memory from `alloc`; the caller never dereferences
 *   them on the host (only the backend does). When `host_memory` is 1, device memory IS host
 *   memory (the CPU), and callers may hand host pointers where device ones are expected.
 * - Float data is float32, indices int32, matrices row-major and C-contiguous unless an
 *   explicit leading dimension (ld*) is given.
 * - Inputs are already validated (batch.c checks host batches' ranges on the host,
 *   batch_check device batches' on the device); primitives trust them, return MK_OK, or an
 *   mk_fail() status (never abort).
 * - Primitives that need device scratch take it from the caller as `work, work_bytes`:
 *   at least scratch_bytes() for the step's shapes (one region, shared by all of them
 *   since they run one after another on the stream; contents undefined before and after).
 *   Given too little, a primitive fails with MK_ERR_VALUE before writing anything. So the
 *   CUDA backend allocates nothing during a step (the CPU still keeps small per-thread
 *   host buffers of its own). The fused ops' backward passes alone also take no scratch
 *   (NULL, 0) and then find their own (backend_ops.def), for the public ops.
 *
 * Adding a backend (e.g. csrc/cuda): fill an mk_backend with every entry, by name
 * (mk_backend_check names a missing one), set host_memory = 0, and return it from
 * mk_backend_get (backend_registry.c) or, from another extension, hand it over as a
 * MK_BACKEND_CAPSULE; tests/conformance/test_backend_ops.py then holds each entry to its NumPy
 * reference. Adding an entry: one MK_OP line in backend_ops.def, which says what else.
 * With host_memory = 0, model.c stages each host batch into device memory with to_device on
 * a copy stream (staging.c) and reads results back with to_host; the Python layer
 * cannot view parameters in place. GEMM
 * is row-major here: with column-major cuBLAS, compute C^T = op(B)^T op(A)^T, i.e. call
 * cublasSgemm with the operands (and M, N) swapped and the same leading dimensions.
 */
#ifndef MANAKA_BACKEND_H
#define MANAKA_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "batch.h"
#include "hash.h"
#include "manaka.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Layout of the small stats buffer the loss writes on the device (float32 each). The
 * finite flag lets AdamW skip an update without the host reading the loss first: a GPU
 * backend can run step after step with no synchronisation and still never apply a
 * non-finite update (see trainer.c). */
enum {
    MK_STAT_LOSS = 0,        /* policy_loss + value_weight * value_loss */
    MK_STAT_POLICY_LOSS = 1, /* mean_b cross-entropy */
    MK_STAT_VALUE_LOSS = 2,  /* mean_b BCE(sigmoid(z), value) */
    MK_STAT_ACCURACY = 3,    /* mean_b [argmax logits == target] */
    MK_STAT_LR = 4,          /* learning rate of the step (written by the trainer) */
    MK_STAT_FINITE = 5,      /* 1.0 if the loss is finite, else 0.0 */
    MK_STAT_COUNT = 8,       /* buffer size, padded */
};

/* The shapes of a training step's primitives that take scratch memory (`work`), for
 * scratch_bytes: gather_dot_backward over legal moves [B, L] out of M; power_sums_backward,
 * pair_sums_backward and pair_sums_backward_adamw(_bf16) over tokens [rows, T] out of V
 * (num_pairs = mk_num_pairs(V)); move_pair_sums_backward over the side to move's tokens
 * [B, T] out of V and legal moves [B, L]; move_hidden_backward over the same with C move
 * classes and D units (D = 0: the model has no MoveHidden). */
typedef struct {
    int64_t B, L, M;
    int64_t rows, T, V;
    int64_t C, D;
} mk_step_shapes;

/* Scratch of batch_check (its answer: one first-fault key per rule, copied back at once). */
#define MK_BATCH_CHECK_WORK_BYTES 64

/* Scalars of one AdamW update, computed on the host from the step count (no device read). */
typedef struct {
    float lr, beta1, beta2, eps, weight_decay;
    float bias_correction1; /* 1 - beta1^t */
    float bias_correction2; /* 1 - beta2^t */
} mk_adamw_args;

/* One GEMM of a gemm_batch: the parameters of `gemm`, C = alpha op(A) op(B) + beta C. */
typedef struct {
    int trans_a, trans_b;
    int64_t M, N, K;
    float alpha, beta;
    const float *A, *B;
    float *C;
    int64_t lda, ldb, ldc;
} mk_gemm_call;

/* The most calls one gemm_batch takes (a layer's backward: dW and dx of each input block). */
#define MK_GEMM_BATCH_MAX 16

typedef struct mk_backend {
    const char *name;
    int host_memory; /* 1: device memory is host memory (parameters can be viewed in place) */

    /* Every entry, as backend_ops.def declares it: `ret (*name)(params);`. */
#define MK_OP(ret, name, params) ret(*name) params;
#include "backend_ops.def"
#undef MK_OP
} mk_backend;

enum {
    MK_BACKEND_NUM_ENTRIES = 0
#define MK_OP(ret, name, params) +1
#include "backend_ops.def"
#undef MK_OP
};

/* MK_OK if every entry is set, else MK_ERR_RUNTIME naming the first missing one. */
mk_status mk_backend_check(const mk_backend *backend);

/* The backend called `name` ("cpu", and "cuda" in a CUDA build), or NULL with mk_error set. */
const mk_backend *mk_backend_get(const char *name);

/* Name of the PyCapsule through which an extension (manaka._cuda) hands its table to
 * manaka._core's Model. */
#define MK_BACKEND_CAPSULE "manaka.mk_backend"

/* The CPU backend's table (cpu/backend_cpu.c), and the same table with host_memory = 0
 * ("cpu_staged", for tests of the device-memory path). */
extern const mk_backend mk_backend_cpu;
extern const mk_backend mk_backend_cpu_staged;

/* A uniform in [0, 1): the top 24 bits of mk_hash64(seed, i) (hash.h), so any backend
 * fills any element in parallel and gets the same float. */
MK_HOST_DEVICE static inline float mk_uniform01(uint64_t seed, uint64_t i) {
    return (float)(mk_hash64(seed, i) >> 40) * (1.0f / 16777216.0f);
}

#ifdef __cplusplus
}
#endif
#endif /* MANAKA_BACKEND_H */

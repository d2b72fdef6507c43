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
 *   host buffers of its own).
 *
 * Adding a backend (e.g. csrc/cuda): fill an mk_backend with every entry, by name
 * (mk_backend_check names a missing one), set host_memory = 0, and return it from
 * mk_backend_get (backend_registry.c) or, from another extension, hand it over as a
 * MK_BACKEND_CAPSULE; tests/test_backend_ops.py then holds each entry to its NumPy
 * reference. Adding an entry: list it in MK_BACKEND_ENTRIES too, and give it a case there.
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
 * (num_pairs = mk_num_pairs(V)). */
typedef struct {
    int64_t B, L, M;
    int64_t rows, T, V;
} mk_step_shapes;

/* Scratch of batch_check (its answer: one first-fault key per rule, copied back at once). */
#define MK_BATCH_CHECK_WORK_BYTES 64

/* Scalars of one AdamW update, computed on the host from the step count (no device read). */
typedef struct {
    float lr, beta1, beta2, eps, weight_decay;
    float bias_correction1; /* 1 - beta1^t */
    float bias_correction2; /* 1 - beta2^t */
} mk_adamw_args;

typedef struct mk_backend {
    const char *name;
    int host_memory; /* 1: device memory is host memory (parameters can be viewed in place) */

    /* ------------------------------------------------------------ memory */
    /* *out = `bytes` bytes of device memory, aligned to 64 bytes, contents undefined. */
    mk_status (*alloc)(void *stream, size_t bytes, void **out);
    void (*free)(void *stream, void *ptr); /* NULL is a no-op */
    /* host -> device and device -> host copies, ordered on the stream; to_host returns
     * once the data is on the host. */
    mk_status (*to_device)(void *stream, void *dst, const void *src, size_t bytes);
    mk_status (*to_host)(void *stream, void *dst, const void *src, size_t bytes);
    /* device -> device, ordered on the stream (the trainer files each step's stats). */
    mk_status (*copy)(void *stream, void *dst, const void *src, size_t bytes);
    /* dst[i] = value, i < n. */
    mk_status (*fill)(void *stream, float *dst, float value, int64_t n);
    /* dst[i] = bound * (2 u(seed, i) - 1) with u = mk_uniform01 below: the same bits on
     * every backend, so a seed gives the same model on the CPU and the GPU. */
    mk_status (*fill_uniform)(void *stream, float *dst, int64_t n, float bound, uint64_t seed);
    /* Waits until everything queued on the stream is done (used only for profiling). */
    mk_status (*synchronize)(void *stream);

    /* ------------------------------------------------------------ dense algebra */
    /* C[M, N] = alpha * op(A) @ op(B) + beta * C, op(X) = X or X^T (trans_* != 0), row-major:
     * A is [M, K] (or [K, M] when transposed) with row stride lda, likewise B and C.
     * beta = 0 overwrites C without reading it. */
    mk_status (*gemm)(void *stream, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                      float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                      float beta, float *C, int64_t ldc);
    /* y[r, c] = act(y[r, c] + bias[c]), act = relu if `relu` else identity; y [rows, cols]. */
    mk_status (*bias_act)(void *stream, float *y, const float *bias, int64_t rows, int64_t cols,
                          int relu);
    /* The backward of bias_act given its output y: if relu, dy[r, c] = 0 where y[r, c] <= 0
     * (in place); then dbias[c] = sum_r dy[r, c] (overwritten). */
    mk_status (*bias_act_backward)(void *stream, float *dy, const float *y, int64_t rows,
                                   int64_t cols, int relu, float *dbias);
    /* out[i] = 1 / (1 + exp(-x[i])). */
    mk_status (*sigmoid)(void *stream, const float *x, int64_t n, float *out);

    /* ------------------------------------------------------------ the fused ops (manaka.h) */
    mk_status (*gather_dot)(void *stream, const float *hidden, const float *table,
                            const int32_t *indices, const int32_t *counts, int64_t B, int64_t L,
                            int64_t W, float *logits);
    /* grad_hidden or grad_table may be NULL: that half is skipped (the fused policy head
     * below already produces grad_hidden, so its step asks for grad_table only). */
    mk_status (*gather_dot_backward)(void *stream, const float *grad, const float *hidden,
                                     const float *table, const int32_t *indices,
                                     const int32_t *counts, int64_t B, int64_t L, int64_t W,
                                     int64_t M, float *grad_hidden, float *grad_table,
                                     void *work, size_t work_bytes);
    mk_status (*power_sums)(void *stream, const float *emb, const int32_t *tokens, int64_t rows,
                            int64_t T, int64_t D, int64_t K, float *out);
    mk_status (*power_sums_backward)(void *stream, const float *grad, const float *emb,
                                     const int32_t *tokens, int64_t rows, int64_t T, int64_t D,
                                     int64_t K, int64_t V, float *grad_emb, void *work,
                                     size_t work_bytes);
    mk_status (*pair_sums)(void *stream, const float *pair_table, const int32_t *tokens,
                           int64_t rows, int64_t T, int64_t P, float *out);
    mk_status (*pair_sums_backward)(void *stream, const float *grad, const int32_t *tokens,
                                    int64_t rows, int64_t T, int64_t P, int64_t num_pairs,
                                    float *grad_pair_table, void *work, size_t work_bytes);

    /* ------------------------------------------------------------ losses */
    /* Masked softmax cross-entropy over the first counts[b] slots of logits [B, L]:
     *   lse_b = log sum_{l < n_b} exp(logits[b, l])
     *   hard (soft == NULL): row_loss[b] = lse_b - logits[b, target[b]]
     *   soft:                row_loss[b] = sum_{l < n_b} soft[b, l] (lse_b - logits[b, l])
     *   row_correct[b] = 1 if the first argmax over l < n_b equals target[b], else 0
     *   dlogits[b, l] = grad_scale * (softmax_b[l] - y_b[l]) for l < n_b, 0 beyond,
     *   with y_b the one-hot of target[b] or soft[b]. dlogits may be NULL (no gradient). */
    mk_status (*softmax_xent)(void *stream, const float *logits, const int32_t *counts,
                              const int32_t *target, const float *soft, int64_t B, int64_t L,
                              float grad_scale, float *dlogits, float *row_loss,
                              float *row_correct);
    /* Value head loss on logits z [B] and targets t [B] in [0, 1], computed stably as
     *   row_loss[b] = BCE(sigmoid(z), t) = max(z, 0) - t z + log(1 + exp(-|z|))
     *   dz[b] = grad_scale * (sigmoid(z[b]) - t[b])   (dz may be NULL) */
    mk_status (*value_bce)(void *stream, const float *z, const float *t, int64_t B,
                           float grad_scale, float *dz, float *row_loss);
    /* stats[MK_STAT_*] from the per-row results (sums accumulated in double precision):
     * policy = mean(row_policy), value = mean(row_value), loss = policy + value_weight value,
     * accuracy = mean(row_correct), finite = isfinite(loss); stats[MK_STAT_LR] is untouched. */
    mk_status (*loss_stats)(void *stream, const float *row_policy, const float *row_value,
                            const float *row_correct, int64_t B, float value_weight,
                            float *stats);

    /* ------------------------------------------------------------ optimizer */
    /* AdamW (PyTorch semantics) over n contiguous parameters, skipped entirely when `stats`
     * is not NULL and stats[MK_STAT_FINITE] == 0:
     *   p *= 1 - lr wd;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
     *   p -= lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps) */
    mk_status (*adamw)(void *stream, float *p, const float *g, float *m, float *v, int64_t n,
                       const mk_adamw_args *args, const float *stats);
    /* PairSums backward fused with AdamW on the pair table [V (V + 1) / 2, P]: the same
     * result as pair_sums_backward(grad, tokens, rows, T, P, num_pairs, g) followed by
     * adamw(p, g, m, v, num_pairs * P, args, stats) (bitwise, on the CPU), without ever
     * writing or reading the dense gradient: at the seed shapes that gradient is 176 MB
     * zeroed, scattered into and streamed back every step. */
    mk_status (*pair_sums_backward_adamw)(void *stream, const float *grad, const int32_t *tokens,
                                          int64_t rows, int64_t T, int64_t P, int64_t V,
                                          float *p, float *m, float *v, const mk_adamw_args *args,
                                          const float *stats, void *work, size_t work_bytes);
    /* The two updates above with the moments m, v stored as bf16 (bf16.h), for
     * pair_state_dtype="bf16": each element reads m, v as float, runs exactly the fp32
     * update, and writes them back stochastically rounded,
     *   noise = mk_rounding_noise(seed, i)      (i: element index from p's start)
     *   m[i] = mk_float_to_bf16_stochastic(m', noise), v[i] = ...(v', noise >> 16),
     * so the result is a pure function of (inputs, seed): the same bits on every backend,
     * and the fused entry gives the same bits as pair_sums_backward + adamw_bf16. */
    mk_status (*adamw_bf16)(void *stream, float *p, const float *g, uint16_t *m, uint16_t *v,
                            int64_t n, const mk_adamw_args *args, const float *stats,
                            uint64_t seed);
    mk_status (*pair_sums_backward_adamw_bf16)(void *stream, const float *grad,
                                               const int32_t *tokens, int64_t rows, int64_t T,
                                               int64_t P, int64_t V, float *p, uint16_t *m,
                                               uint16_t *v, const mk_adamw_args *args,
                                               const float *stats, uint64_t seed,
                                               void *work, size_t work_bytes);

    /* ------------------------------------------------------------ sparse pair-table update */
    /* pair_update "sparse" / "lazy" (core/pair_gap.h holds the math): the pair table
     * [V (V + 1) / 2, P] with fp32 moments m, v (float *), or bf16 ones (uint16_t *) when
     * `bf16`; stamps [V (V + 1) / 2] int32, each row's step relative to the trainer's
     * window; gaps [MK_GAP_WINDOW][MK_GAP_FIELDS] double, the entry of every stamp.
     *
     * pair_catch_up: every row named by a pair (i < j, both tokens >= 0) of tokens
     * [rows, T] -- every row of the table when tokens is NULL -- whose stamp is not `now`
     * is caught up over its gap with mk_gap_apply (`drift` 0 leaves the drift out) and
     * stamped `now`. bf16 moments are read as float and rounded back stochastically with
     * mk_rounding_noise(seed, element index). A row's result depends only on its own
     * values and its entry: the same for any thread count or order. */
    mk_status (*pair_catch_up)(void *stream, const int32_t *tokens, int64_t rows, int64_t T,
                               int64_t P, int64_t V, float *p, void *m, void *v, int bf16,
                               int32_t *stamps, const double *gaps, int64_t now, int drift,
                               float eps, uint64_t seed);
    /* PairSums backward fused with AdamW (as pair_sums_backward_adamw / _bf16, the same
     * bits per row) on the rows some pair of tokens names only, each stamped `now`; the
     * other rows, their moments and stamps are not read or written. Skipped entirely when
     * stats[MK_STAT_FINITE] == 0. The caller has caught those rows up (pair_catch_up). */
    mk_status (*pair_sums_backward_adamw_sparse)(void *stream, const float *grad,
                                                 const int32_t *tokens, int64_t rows, int64_t T,
                                                 int64_t P, int64_t V, float *p, void *m,
                                                 void *v, int bf16, int32_t *stamps,
                                                 int64_t now, const mk_adamw_args *args,
                                                 const float *stats, uint64_t seed, void *work,
                                                 size_t work_bytes);
    /* After a step: gaps entries 0 .. n - 1 advanced by it (mk_gap_advance with these
     * constants), unless stats[MK_STAT_FINITE] == 0 (its update was skipped); entry n reset
     * (mk_gap_reset) either way. n < MK_GAP_WINDOW. */
    mk_status (*pair_gap_advance)(void *stream, double *gaps, int64_t n, double decay,
                                  double step_size, double inv_bc2_sqrt, double beta1,
                                  double sqrt_beta2, const float *stats);

    /* ------------------------------------------------------------ fused policy head */
    /* The fused policy head: GatherDot, softmax_xent and GatherDot's grad_hidden in one
     * pass per position, so the logits never go to device memory. Per position b with
     * n_b = counts[b] >= 1 and x_b[l] = sum_w q[b, w] table[legal[b, l], w] (l < n_b):
     *   row_loss[b], row_correct[b], dlogits[b, :]   exactly as softmax_xent on x_b
     *                                                (dlogits 0 at l >= n_b; never NULL:
     *                                                the grad_table scatter reads it)
     *   dq[b, w] = sum_{l < n_b} dlogits[b, l] table[legal[b, l], w]
     *                                                (GatherDot's grad_hidden of dlogits)
     * q [B, W], table [M, W], legal [B, L] (padded slots never read), soft [B, L] or NULL
     * (hard targets), dq [B, W]. The step then needs only gather_dot_backward's
     * grad_table (grad_hidden = NULL). */
    mk_status (*policy_head)(void *stream, const float *q, const float *table,
                             const int32_t *legal, const int32_t *counts, const int32_t *target,
                             const float *soft, int64_t B, int64_t L, int64_t W,
                             float grad_scale, float *dlogits, float *dq, float *row_loss,
                             float *row_correct);

    /* ------------------------------------------------------------ batches (staging.c) */
    /* A second stream whose work may run concurrently with the model's (a GPU: created
     * non-blocking, so it does not serialise with the legacy default stream), for batch
     * copies; and events to order the two. The CPU runs everything at once: its streams
     * and events are tokens and every call below is a no-op. */
    mk_status (*stream_create)(void **out);
    void (*stream_destroy)(void *stream); /* after finishing its work; NULL is a no-op */
    mk_status (*event_create)(void **out);
    void (*event_destroy)(void *event);
    /* The event completes once the work queued on `stream` so far has. */
    mk_status (*event_record)(void *stream, void *event);
    /* Work queued on `stream` from now on waits for the event's last record. */
    mk_status (*stream_wait_event)(void *stream, void *event);
    /* The host waits for the event's last record to complete. */
    mk_status (*event_synchronize)(void *event);
    /* mk_find_fault (check.h) over mk_batch_rules (batch.h) for a batch whose arrays are in
     * this backend's memory (it passed mk_batch_check_shape), run on `stream`: *fault
     * receives the same first fault, so mk_batch_fault_status words it like the host
     * check. Returns once the answer is on the host (a GPU: one small device -> host read). `work` is device
     * scratch of MK_BATCH_CHECK_WORK_BYTES for that answer (the caller's, not the step's:
     * the check runs on its own stream beside a step), so checking allocates nothing. */
    mk_status (*batch_check)(void *stream, const mk_batch *batch, int64_t V, int64_t M,
                             int with_targets, mk_fault *fault, void *work,
                             size_t work_bytes);

    /* ------------------------------------------------------------ scratch */
    /* *bytes = the scratch (`work`) the primitives above need for `shapes`: model.c carves
     * it once in its arena, which grows only with a larger batch, so a step allocates
     * nothing. Never smaller for larger shapes: the scratch sized for the arena's capacity
     * serves every batch within it. A host-only query (no stream, nothing launched); 0
     * when nothing needs any. */
    mk_status (*scratch_bytes)(const mk_step_shapes *shapes, size_t *bytes);
} mk_backend;

/* Every entry of the table, for mk_backend_check: adding an entry without listing it here
 * fails the static assertion in backend.c. */
#define MK_BACKEND_ENTRIES(X)                                                                  \
    X(alloc) X(free) X(to_device) X(to_host) X(copy) X(fill) X(fill_uniform) X(synchronize) \
    X(gemm) X(bias_act) X(bias_act_backward) X(sigmoid) X(gather_dot) X(gather_dot_backward)  \
    X(power_sums) X(power_sums_backward) X(pair_sums) X(pair_sums_backward) X(softmax_xent)   \
    X(value_bce) X(loss_stats) X(adamw) X(pair_sums_backward_adamw) X(adamw_bf16)            \
    X(pair_sums_backward_adamw_bf16) X(pair_catch_up)                            \
    X(pair_sums_backward_adamw_sparse) X(pair_gap_advance) X(policy_head) X(stream_create) X(stream_destroy)        \
    X(event_create) X(event_destroy) X(event_record) X(stream_wait_event)                  \
    X(event_synchronize) X(batch_check)                                                      \
    X(scratch_bytes)
#define MK_BACKEND_COUNT_ENTRY(name) +1
enum { MK_BACKEND_NUM_ENTRIES = 0 MK_BACKEND_ENTRIES(MK_BACKEND_COUNT_ENTRY) };

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

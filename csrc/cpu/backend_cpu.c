/* The CPU backend's op table: host memory, and thin adapters that give the fused ops of
 * manaka.h the table's stream-first signature. */
#include <stdlib.h>
#include <string.h>

#include "backend_cpu.h"
#include "threads.h"

static mk_status cpu_alloc(void *stream, size_t bytes, void **out) {
    (void)stream;
    if (bytes > SIZE_MAX - 63) /* rounding up would wrap to a tiny block */
        return mk_fail(MK_ERR_NOMEM, "cpu backend: cannot allocate %zu bytes", bytes);
    size_t rounded = (bytes + 63) / 64 * 64; /* aligned_alloc wants a multiple of the alignment */
    *out = aligned_alloc(64, rounded ? rounded : 64);
    if (!*out) return mk_fail(MK_ERR_NOMEM, "cpu backend: cannot allocate %zu bytes", bytes);
    return MK_OK;
}
static void cpu_free(void *stream, void *ptr) {
    (void)stream;
    free(ptr);
}
static mk_status cpu_memcpy(void *stream, void *dst, const void *src, size_t bytes) {
    (void)stream;
    if (bytes && dst != src) memcpy(dst, src, bytes);
    return MK_OK;
}
static mk_status cpu_fill(void *stream, float *dst, float value, int64_t n) {
    (void)stream;
#pragma omp parallel for simd schedule(static) num_threads(mk_get_num_threads()) \
    if (n >= MK_PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++) dst[i] = value;
    return MK_OK;
}
static mk_status cpu_fill_uniform(void *stream, float *dst, int64_t n, float bound,
                                  uint64_t seed) {
    (void)stream;
#pragma omp parallel for schedule(static) num_threads(mk_get_num_threads()) \
    if (n >= MK_PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++) dst[i] = bound * (2.0f * mk_uniform01(seed, (uint64_t)i) - 1.0f);
    return MK_OK;
}
static mk_status cpu_synchronize(void *stream) {
    (void)stream; /* every CPU primitive has finished when it returns */
    return MK_OK;
}

static mk_status cpu_gather_dot(void *stream, const float *hidden, const float *table,
                                const int32_t *indices, const int32_t *counts, int64_t B,
                                int64_t L, int64_t W, float *logits) {
    (void)stream;
    return mk_gather_dot_cpu(hidden, table, indices, counts, B, L, W, logits);
}
static mk_status cpu_gather_dot_backward(void *stream, const float *grad, const float *hidden,
                                         const float *table, const int32_t *indices,
                                         const int32_t *counts, int64_t B, int64_t L, int64_t W,
                                         int64_t M, float *grad_hidden, float *grad_table,
                                         void *work, size_t work_bytes) {
    (void)stream, (void)work, (void)work_bytes; /* no scratch on the CPU */
    return mk_gather_dot_backward_cpu(grad, hidden, table, indices, counts, B, L, W, M,
                                      grad_hidden, grad_table);
}
static mk_status cpu_power_sums(void *stream, const float *emb, const int32_t *tokens,
                                int64_t rows, int64_t T, int64_t D, int64_t K, float *out) {
    (void)stream;
    return mk_power_sums_cpu(emb, tokens, rows, T, D, K, out);
}
static mk_status cpu_power_sums_backward(void *stream, const float *grad, const float *emb,
                                         const int32_t *tokens, int64_t rows, int64_t T,
                                         int64_t D, int64_t K, int64_t V, float *grad_emb,
                                         void *work, size_t work_bytes) {
    (void)stream, (void)work, (void)work_bytes; /* no scratch: it sums in a stack block */
    return mk_power_sums_backward_cpu(grad, emb, tokens, rows, T, D, K, V, grad_emb);
}
static mk_status cpu_pair_sums(void *stream, const float *pair_table, const int32_t *tokens,
                               int64_t rows, int64_t T, int64_t P, float *out) {
    (void)stream;
    return mk_pair_sums_cpu(pair_table, tokens, rows, T, P, out);
}
static mk_status cpu_pair_sums_backward(void *stream, const float *grad, const int32_t *tokens,
                                        int64_t rows, int64_t T, int64_t P, int64_t num_pairs,
                                        float *grad_pair_table, void *work, size_t work_bytes) {
    (void)stream, (void)work, (void)work_bytes; /* allocates its own scratch (public op) */
    return mk_pair_sums_backward_cpu(grad, tokens, rows, T, P, num_pairs, grad_pair_table);
}

/* Streams and events: every CPU primitive has finished when it returns, so there is
 * nothing to order; a stream is NULL (like the model's) and an event a non-NULL token. */
static char cpu_event_token;
static mk_status cpu_stream_create(void **out) {
    *out = NULL;
    return MK_OK;
}
static void cpu_stream_destroy(void *stream) { (void)stream; }
static mk_status cpu_event_create(void **out) {
    *out = &cpu_event_token;
    return MK_OK;
}
static void cpu_event_destroy(void *event) { (void)event; }
static mk_status cpu_event_record(void *stream, void *event) {
    (void)stream;
    (void)event;
    return MK_OK;
}
static mk_status cpu_event_synchronize(void *event) {
    (void)event;
    return MK_OK;
}
/* The backend's memory is host memory: the host check reads it directly. */
static mk_status cpu_batch_check(void *stream, const mk_batch *batch, int64_t V, int64_t M,
                                 int with_targets, mk_fault *fault, void *work,
                                 size_t work_bytes) {
    (void)stream, (void)work, (void)work_bytes;
    mk_check rules = mk_batch_rules(batch, V, M, with_targets);
    mk_find_fault(&rules, fault);
    return MK_OK;
}

#define CPU_ENTRIES \
    .alloc = cpu_alloc, \
    .free = cpu_free, \
    .to_device = cpu_memcpy, \
    .to_host = cpu_memcpy, \
    .copy = cpu_memcpy, \
    .fill = cpu_fill, \
    .fill_uniform = cpu_fill_uniform, \
    .synchronize = cpu_synchronize, \
    .gemm = mk_gemm_cpu, \
    .bias_act = mk_bias_act_cpu, \
    .bias_act_backward = mk_bias_act_backward_cpu, \
    .sigmoid = mk_sigmoid_cpu, \
    .gather_dot = cpu_gather_dot, \
    .gather_dot_backward = cpu_gather_dot_backward, \
    .power_sums = cpu_power_sums, \
    .power_sums_backward = cpu_power_sums_backward, \
    .pair_sums = cpu_pair_sums, \
    .pair_sums_backward = cpu_pair_sums_backward, \
    .softmax_xent = mk_softmax_xent_cpu, \
    .value_bce = mk_value_bce_cpu, \
    .loss_stats = mk_loss_stats_cpu, \
    .adamw = mk_adamw_cpu, \
    .pair_sums_backward_adamw = mk_pair_sums_backward_adamw_cpu, \
    .adamw_bf16 = mk_adamw_bf16_cpu, \
    .pair_sums_backward_adamw_bf16 = mk_pair_sums_backward_adamw_bf16_cpu, \
    .pair_catch_up = mk_pair_catch_up_cpu, \
    .pair_sums_backward_adamw_sparse = mk_pair_sums_backward_adamw_sparse_cpu, \
    .pair_gap_advance = mk_pair_gap_advance_cpu, \
    .policy_head = mk_policy_head_cpu, \
    .stream_create = cpu_stream_create, \
    .stream_destroy = cpu_stream_destroy, \
    .event_create = cpu_event_create, \
    .event_destroy = cpu_event_destroy, \
    .event_record = cpu_event_record, \
    .stream_wait_event = cpu_event_record, /* the same no-op */ \
    .event_synchronize = cpu_event_synchronize, \
    .batch_check = cpu_batch_check, \
    .scratch_bytes = mk_scratch_bytes_cpu,

const mk_backend mk_backend_cpu = {.name = "cpu", .host_memory = 1, CPU_ENTRIES};

/* The same table flagged as device memory: model.c then stages batches with to_device and
 * reads results with to_host, the path a GPU backend takes, so tests exercise that path
 * (and the device-side non-finite guard) on any machine. Not a user-facing device. */
const mk_backend mk_backend_cpu_staged = {.name = "cpu_staged", .host_memory = 0, CPU_ENTRIES};

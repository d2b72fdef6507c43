/* The CPU backend's op table, and its entries for memory (host memory), streams and
 * events (tokens: nothing to order) and the batch check (the host check). */
#define _DEFAULT_SOURCE /* madvise under -std=c11 */
#include <stdlib.h>
#include <string.h>
#ifdef __linux__
#include <sys/mman.h>
#endif

#include "backend_cpu.h"
#include "threads.h"

/* Blocks of at least this many bytes (the parameters, gradients, moments and activation
 * arena at any real size) are aligned to 2 MiB and asked to be backed by transparent huge
 * pages. The pair table alone is 176 MB read at random rows: with 4 KiB pages nearly every
 * row costs a TLB miss and a page walk. Where THP is set to `madvise` (a common default)
 * nothing is huge unless asked. Only the placement changes, never a value. */
#define MK_HUGE_MIN_BYTES ((size_t)4 << 20)
#define MK_HUGE_PAGE ((size_t)2 << 20)

mk_status mk_alloc_cpu(void *stream, size_t bytes, void **out) {
    (void)stream;
    if (bytes > SIZE_MAX - MK_HUGE_PAGE) /* rounding up would wrap to a tiny block */
        return mk_fail(MK_ERR_NOMEM, "cpu backend: cannot allocate %zu bytes", bytes);
    const size_t align = bytes >= MK_HUGE_MIN_BYTES ? MK_HUGE_PAGE : 64;
    size_t rounded = (bytes + align - 1) / align * align; /* aligned_alloc wants a multiple */
    *out = aligned_alloc(align, rounded ? rounded : align);
    if (!*out) return mk_fail(MK_ERR_NOMEM, "cpu backend: cannot allocate %zu bytes", bytes);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (align == MK_HUGE_PAGE) (void)madvise(*out, rounded, MADV_HUGEPAGE); /* advice only */
#endif
    return MK_OK;
}
void mk_free_cpu(void *stream, void *ptr) {
    (void)stream;
    free(ptr);
}
/* Device memory is host memory: every copy is a memcpy. */
static mk_status copy_bytes(void *dst, const void *src, size_t bytes) {
    if (bytes && dst != src) memcpy(dst, src, bytes);
    return MK_OK;
}
mk_status mk_to_device_cpu(void *stream, void *dst, const void *src, size_t bytes) {
    (void)stream;
    return copy_bytes(dst, src, bytes);
}
mk_status mk_to_host_cpu(void *stream, void *dst, const void *src, size_t bytes) {
    (void)stream;
    return copy_bytes(dst, src, bytes);
}
mk_status mk_copy_cpu(void *stream, void *dst, const void *src, size_t bytes) {
    (void)stream;
    return copy_bytes(dst, src, bytes);
}
mk_status mk_fill_cpu(void *stream, float *dst, float value, int64_t n) {
    (void)stream;
#pragma omp parallel for simd schedule(static) num_threads(mk_threads_for(n))
    for (int64_t i = 0; i < n; i++) dst[i] = value;
    return MK_OK;
}
mk_status mk_fill_uniform_cpu(void *stream, float *dst, int64_t n, float bound, uint64_t seed) {
    (void)stream;
#pragma omp parallel for schedule(static) num_threads(mk_threads_for(n))
    for (int64_t i = 0; i < n; i++) dst[i] = bound * (2.0f * mk_uniform01(seed, (uint64_t)i) - 1.0f);
    return MK_OK;
}
mk_status mk_synchronize_cpu(void *stream) {
    (void)stream; /* every CPU primitive has finished when it returns */
    return MK_OK;
}

/* Streams and events: every CPU primitive has finished when it returns, so there is
 * nothing to order; a stream is NULL (like the model's) and an event a non-NULL token. */
static char cpu_event_token;
mk_status mk_stream_create_cpu(void **out) {
    *out = NULL;
    return MK_OK;
}
void mk_stream_destroy_cpu(void *stream) { (void)stream; }
mk_status mk_event_create_cpu(void **out) {
    *out = &cpu_event_token;
    return MK_OK;
}
void mk_event_destroy_cpu(void *event) { (void)event; }
mk_status mk_event_record_cpu(void *stream, void *event) {
    (void)stream;
    (void)event;
    return MK_OK;
}
mk_status mk_stream_wait_event_cpu(void *stream, void *event) {
    (void)stream;
    (void)event;
    return MK_OK;
}
mk_status mk_event_synchronize_cpu(void *event) {
    (void)event;
    return MK_OK;
}
/* The backend's memory is host memory: the host check reads it directly. */
mk_status mk_batch_check_cpu(void *stream, const mk_batch *batch, int64_t V, int64_t M,
                             int with_targets, mk_fault *fault, void *work, size_t work_bytes) {
    (void)stream, (void)work, (void)work_bytes;
    mk_check rules = mk_batch_rules(batch, V, M, with_targets);
    mk_find_fault(&rules, fault);
    return MK_OK;
}

/* Every entry x is mk_x_cpu (backend_cpu.h). */
const mk_backend mk_backend_cpu = {
    .name = "cpu",
    .host_memory = 1,
#define MK_OP(ret, name, params) .name = mk_##name##_cpu,
#include "core/backend_ops.def"
#undef MK_OP
};

/* The same table flagged as device memory: model.c then stages batches with to_device and
 * reads results with to_host, the path a GPU backend takes, so tests exercise that path
 * (and the device-side non-finite guard) on any machine. Not a user-facing device. */
const mk_backend mk_backend_cpu_staged = {
    .name = "cpu_staged",
    .host_memory = 0,
#define MK_OP(ret, name, params) .name = mk_##name##_cpu,
#include "core/backend_ops.def"
#undef MK_OP
};

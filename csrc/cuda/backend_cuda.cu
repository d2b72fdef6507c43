/* The CUDA backend's table: the same entries as the CPU's (../backend.h), so model.c runs
 * unchanged on the GPU. The fused ops' launchers take the stream last (they are also the
 * public C API of csrc/cuda); the table adapts them to the stream-first convention and
 * calls their _ws forms, which take the step's scratch instead of allocating. */
#include "backend_cuda.h"
#include "common.cuh"

static mk_status gather_dot(void *s, const float *hidden, const float *table,
                            const int32_t *indices, const int32_t *counts, int64_t B, int64_t L,
                            int64_t W, float *logits) {
    return mk_gather_dot_cuda(hidden, table, indices, counts, B, L, W, logits, s);
}
static mk_status gather_dot_backward(void *s, const float *grad, const float *hidden,
                                     const float *table, const int32_t *indices,
                                     const int32_t *counts, int64_t B, int64_t L, int64_t W,
                                     int64_t M, float *grad_hidden, float *grad_table,
                                     void *work, size_t work_bytes) {
    return mk_gather_dot_backward_cuda_ws(grad, hidden, table, indices, counts, B, L, W, M,
                                          grad_hidden, grad_table, work, work_bytes, s);
}
static mk_status power_sums(void *s, const float *emb, const int32_t *tokens, int64_t rows,
                            int64_t T, int64_t D, int64_t K, float *out) {
    return mk_power_sums_cuda(emb, tokens, rows, T, D, K, out, s);
}
static mk_status power_sums_backward(void *s, const float *grad, const float *emb,
                                     const int32_t *tokens, int64_t rows, int64_t T, int64_t D,
                                     int64_t K, int64_t V, float *grad_emb, void *work,
                                     size_t work_bytes) {
    return mk_power_sums_backward_cuda_ws(grad, emb, tokens, rows, T, D, K, V, grad_emb, work,
                                          work_bytes, s);
}
static mk_status pair_sums(void *s, const float *pair_table, const int32_t *tokens, int64_t rows,
                           int64_t T, int64_t P, float *out) {
    return mk_pair_sums_cuda(pair_table, tokens, rows, T, P, out, s);
}
static mk_status pair_sums_backward(void *s, const float *grad, const int32_t *tokens,
                                    int64_t rows, int64_t T, int64_t P, int64_t num_pairs,
                                    float *grad_pair_table, void *work, size_t work_bytes) {
    return mk_pair_sums_backward_cuda_ws(grad, tokens, rows, T, P, num_pairs, grad_pair_table,
                                         work, work_bytes, s);
}

/* Every scratch user is a bucket sort, and they run one after another on the step's
 * stream: the largest of them is enough for all. */
extern "C" mk_status mk_scratch_bytes_cuda(const mk_step_shapes *sh, size_t *bytes) {
    size_t gather = 0, power = 0, pair = 0;
    mk_status st;
    *bytes = 0;
    if ((st = mk_gather_dot_backward_cuda_ws_bytes(sh->B, sh->L, sh->M, &gather)) != MK_OK ||
        (st = mk_power_sums_backward_cuda_ws_bytes(sh->rows, sh->T, sh->V, &power)) != MK_OK ||
        (st = mk_pair_sums_backward_cuda_ws_bytes(sh->rows, sh->T, mk_num_pairs(sh->V), &pair)) !=
            MK_OK)
        return st;
    *bytes = gather > power ? gather : power;
    if (pair > *bytes) *bytes = pair;
    return MK_OK;
}

/* By name, not by position: entries of the same type (to_device / to_host / copy,
 * event_record / stream_wait_event) cannot be swapped unnoticed. constexpr, so that the
 * static assertions below see every entry set at compile time (mk_backend_check also
 * checks at run time, as for any table). Designated initialisers must follow the order
 * of the struct in C++: a misplaced one fails to compile. */
extern "C" constexpr mk_backend mk_backend_cuda = {
    .name = "cuda",
    .host_memory = 0,
    .alloc = mk_alloc_cuda,
    .free = mk_free_cuda,
    .to_device = mk_to_device_cuda,
    .to_host = mk_to_host_cuda,
    .copy = mk_copy_cuda,
    .fill = mk_fill_cuda,
    .fill_uniform = mk_fill_uniform_cuda,
    .synchronize = mk_synchronize_cuda,
    .gemm = mk_gemm_cuda,
    .bias_act = mk_bias_act_cuda,
    .bias_act_backward = mk_bias_act_backward_cuda,
    .sigmoid = mk_sigmoid_cuda,
    .gather_dot = gather_dot,
    .gather_dot_backward = gather_dot_backward,
    .power_sums = power_sums,
    .power_sums_backward = power_sums_backward,
    .pair_sums = pair_sums,
    .pair_sums_backward = pair_sums_backward,
    .softmax_xent = mk_softmax_xent_cuda,
    .value_bce = mk_value_bce_cuda,
    .loss_stats = mk_loss_stats_cuda,
    .adamw = mk_adamw_cuda,
    .pair_sums_backward_adamw = mk_pair_sums_backward_adamw_cuda,
    .adamw_bf16 = mk_adamw_bf16_cuda,
    .pair_sums_backward_adamw_bf16 = mk_pair_sums_backward_adamw_bf16_cuda,
    .pair_catch_up = mk_pair_catch_up_cuda,
    .pair_sums_backward_adamw_sparse = mk_pair_sums_backward_adamw_sparse_cuda,
    .pair_gap_advance = mk_pair_gap_advance_cuda,
    .policy_head = mk_policy_head_cuda,
    .stream_create = mk_stream_create_cuda,
    .stream_destroy = mk_stream_destroy_cuda,
    .event_create = mk_event_create_cuda,
    .event_destroy = mk_event_destroy_cuda,
    .event_record = mk_event_record_cuda,
    .stream_wait_event = mk_stream_wait_event_cuda,
    .event_synchronize = mk_event_synchronize_cuda,
    .batch_check = mk_batch_check_cuda,
    .scratch_bytes = mk_scratch_bytes_cuda,
};
/* (Through a function parameter: compared directly, g++ warns that a function's address is
 * never NULL, which is the point but not a warning to leave in the build.) */
template <typename F> static constexpr bool mk_entry_set(F entry) { return entry != nullptr; }
#define MK_CUDA_ENTRY_SET(entry) \
    static_assert(mk_entry_set(mk_backend_cuda.entry), "the CUDA table does not set " #entry);
MK_BACKEND_ENTRIES(MK_CUDA_ENTRY_SET)
#undef MK_CUDA_ENTRY_SET

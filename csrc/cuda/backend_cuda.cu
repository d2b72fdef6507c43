/* The CUDA backend's table: the same entries as the CPU's (core/backend_ops.def), so
 * model.c runs unchanged on the GPU; entry x is mk_x_cuda (backend_cuda.h). */
#include "backend_cuda.h"
#include "common.cuh"

/* Every scratch user is a bucket sort (move_pair_sums_backward's also holds its merged
 * [B, L] classes, move_hidden_backward's the offsets of its legal slots), and they run one
 * after another on the step's stream: the largest of them is enough for all. */
extern "C" mk_status mk_scratch_bytes_cuda(const mk_step_shapes *sh, size_t *bytes) {
    size_t gather = 0, power = 0, pair = 0, moves = 0, hidden = 0;
    mk_status st;
    *bytes = 0;
    if ((st = mk_gather_dot_backward_cuda_ws_bytes(sh->B, sh->L, sh->M, &gather)) != MK_OK ||
        (st = mk_power_sums_backward_cuda_ws_bytes(sh->rows, sh->T, sh->V, &power)) != MK_OK ||
        (st = mk_pair_sums_backward_cuda_ws_bytes(sh->rows, sh->T, mk_num_pairs(sh->V), &pair)) !=
            MK_OK ||
        /* the step's move pairs: the side to move's T tokens of each of the B positions */
        (st = mk_move_pair_sums_backward_cuda_ws_bytes(sh->B, sh->T, sh->L, sh->V, &moves)) !=
            MK_OK ||
        /* MoveHidden over the same tokens and moves (D = 0: none) */
        (st = mk_move_hidden_backward_cuda_ws_bytes(sh->B, sh->T, sh->L, sh->D, &hidden)) != MK_OK)
        return st;
    if (pair) pair += MK_ROWS_WORD_BYTES; /* pair_grad_rows' count word */
    *bytes = gather > power ? gather : power;
    if (pair > *bytes) *bytes = pair;
    if (moves > *bytes) *bytes = moves;
    if (hidden > *bytes) *bytes = hidden;
    return MK_OK;
}

/* By name, generated from backend_ops.def like the struct itself (so in its order, as C++'s
 * designated initialisers must be): an entry without its mk_x_cuda fails to load. */
extern "C" constexpr mk_backend mk_backend_cuda = {
    .name = "cuda",
    .host_memory = 0,
#define MK_OP(ret, name, params) .name = mk_##name##_cuda,
#include "core/backend_ops.def"
#undef MK_OP
};

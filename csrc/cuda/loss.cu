/* The losses on the GPU: masked softmax cross-entropy (one warp per position, so a row's
 * max, sum and argmax are warp reductions in a fixed order), the value BCE, and the
 * reduction of per-row results into the stats buffer (one block, double precision, fixed
 * order): every number is reproducible run to run. */
#include "backend_cuda.h"
#include "common.cuh"

#define XENT_WARPS 4

__global__ void softmax_xent_kernel(const float *logits, const int32_t *counts,
                                    const int32_t *target, const float *soft, int64_t B,
                                    int64_t L, float grad_scale, float *dlogits,
                                    float *row_loss, float *row_correct) {
    int64_t b = blockIdx.x * (int64_t)XENT_WARPS + threadIdx.y;
    if (b >= B) return;
    int lane = threadIdx.x;
    const float *x = logits + b * L;
    const float *pi = soft ? soft + b * L : NULL;
    int n = counts[b], t = target[b];

    float top = -INFINITY;
    int best = INT32_MAX;
    for (int l = lane; l < n; l += 32)
        if (x[l] > top) top = x[l], best = l; /* a lane's indices rise, so '>' keeps the first */
    mk_warp_argmax(top, best);

    float sum = 0.0f;
    for (int l = lane; l < n; l += 32) sum += expf(x[l] - top);
    sum = mk_warp_sum(sum);
    float lse = top + logf(sum);

    float loss;
    if (pi) {
        float part = 0.0f;
        for (int l = lane; l < n; l += 32) part += pi[l] * (lse - x[l]);
        loss = mk_warp_sum(part);
    } else {
        loss = lse - x[t];
    }
    if (lane == 0) {
        row_loss[b] = loss;
        row_correct[b] = best == t ? 1.0f : 0.0f;
    }
    if (dlogits) {
        float *d = dlogits + b * L;
        for (int l = lane; l < L; l += 32)
            d[l] = l < n ? mk_xent_grad(x[l], lse, pi, t, l, grad_scale) : 0.0f;
    }
}

mk_status mk_softmax_xent_cuda(void *stream, const float *logits, const int32_t *counts,
                               const int32_t *target, const float *soft, int64_t B, int64_t L,
                               float grad_scale, float *dlogits, float *row_loss,
                               float *row_correct) {
    mk_status status = MK_OK;
    if (B == 0) return MK_OK;
    dim3 block(32, XENT_WARPS);
    unsigned int blocks = (unsigned int)((B + XENT_WARPS - 1) / XENT_WARPS);
    softmax_xent_kernel<<<blocks, block, 0, MK_STREAM(stream)>>>(
        logits, counts, target, soft, B, L, grad_scale, dlogits, row_loss, row_correct);
    MK_CUDA_LAUNCHED("softmax_xent_kernel");
done:
    return status;
}

__global__ void value_bce_kernel(const float *z, const float *t, int64_t B, float grad_scale,
                                 float *dz, float *row_loss) {
    MK_GRID_STRIDE(b, B) {
        float x = z[b];
        row_loss[b] = fmaxf(x, 0.0f) - t[b] * x + log1pf(expf(-fabsf(x)));
        if (dz) dz[b] = grad_scale * (1.0f / (1.0f + expf(-x)) - t[b]);
    }
}

mk_status mk_value_bce_cuda(void *stream, const float *z, const float *t, int64_t B,
                            float grad_scale, float *dz, float *row_loss) {
    mk_status status = MK_OK;
    if (B == 0) return MK_OK;
    value_bce_kernel<<<mk_blocks_for(B, 256), 256, 0, MK_STREAM(stream)>>>(z, t, B, grad_scale,
                                                                          dz, row_loss);
    MK_CUDA_LAUNCHED("value_bce_kernel");
done:
    return status;
}

#define STATS_THREADS 256

__global__ void loss_stats_kernel(const float *row_policy, const float *row_value,
                                  const float *row_correct, int64_t B, float value_weight,
                                  float *stats) {
    __shared__ double sums[3][STATS_THREADS];
    double policy = 0.0, value = 0.0, correct = 0.0;
    for (int64_t b = threadIdx.x; b < B; b += STATS_THREADS) {
        policy += row_policy[b];
        value += row_value[b];
        correct += row_correct[b];
    }
    sums[0][threadIdx.x] = policy;
    sums[1][threadIdx.x] = value;
    sums[2][threadIdx.x] = correct;
    __syncthreads();
    for (int half = STATS_THREADS / 2; half > 0; half >>= 1) { /* fixed tree: reproducible */
        if (threadIdx.x < half)
            for (int k = 0; k < 3; k++) sums[k][threadIdx.x] += sums[k][threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        double p = sums[0][0] / (double)B, v = sums[1][0] / (double)B;
        float loss = (float)(p + (double)value_weight * v);
        stats[MK_STAT_LOSS] = loss;
        stats[MK_STAT_POLICY_LOSS] = (float)p;
        stats[MK_STAT_VALUE_LOSS] = (float)v;
        stats[MK_STAT_ACCURACY] = (float)(sums[2][0] / (double)B);
        stats[MK_STAT_FINITE] = isfinite(loss) ? 1.0f : 0.0f;
    }
}

mk_status mk_loss_stats_cuda(void *stream, const float *row_policy, const float *row_value,
                             const float *row_correct, int64_t B, float value_weight,
                             float *stats) {
    mk_status status = MK_OK;
    loss_stats_kernel<<<1, STATS_THREADS, 0, MK_STREAM(stream)>>>(row_policy, row_value,
                                                                   row_correct, B, value_weight,
                                                                   stats);
    MK_CUDA_LAUNCHED("loss_stats_kernel");
done:
    return status;
}

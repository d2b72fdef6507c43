/* manaka's per-device workspace pools; see workspace.cuh. */
#include <mutex>

#include "workspace.cuh"

#define MAX_DEVICES 64

static cudaMemPool_t pools[MAX_DEVICES];
static std::once_flag created[MAX_DEVICES];

static void create_pool(int device) {
    cudaMemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    cudaMemPool_t pool = NULL;
    if (cudaMemPoolCreate(&pool, &props) != cudaSuccess) {
        (void)cudaGetLastError(); /* not supported here: the default pool will do */
        return;
    }
    uint64_t keep = UINT64_MAX;
    if (cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep) != cudaSuccess)
        (void)cudaGetLastError(); /* still a working pool, only less thrifty */
    pools[device] = pool;
}

static cudaError_t workspace_alloc(void **ptr, size_t bytes, cudaStream_t stream) {
    int device = 0;
    cudaError_t err = cudaGetDevice(&device);
    if (err != cudaSuccess) return err;
    MK_CUDA_COUNT_ALLOC();
    if (device >= 0 && device < MAX_DEVICES) {
        std::call_once(created[device], create_pool, device);
        if (pools[device]) return cudaMallocFromPoolAsync(ptr, bytes, pools[device], stream);
    }
    return cudaMallocAsync(ptr, bytes, stream);
}

static cudaError_t workspace_free(void *ptr, cudaStream_t stream) {
    return ptr ? cudaFreeAsync(ptr, stream) : cudaSuccess; /* either pool: freed to its owner */
}

mk_status mk_work_alloc(void **work, size_t bytes, cudaStream_t stream) {
    *work = NULL;
    if (bytes) MK_CUDA_RETURN_IF(workspace_alloc(work, bytes, stream));
    return MK_OK;
}

mk_status mk_work_free(void *work, mk_status status, cudaStream_t stream) {
    cudaError_t err = workspace_free(work, stream);
    if (err != cudaSuccess && status == MK_OK)
        return mk_cuda_error(err, "workspace_free", __FILE__, __LINE__);
    return status;
}

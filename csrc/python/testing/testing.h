/* manaka._testing: test and benchmark hooks that run entries of a backend's op table on
 * host arrays (backend_probe.c, gemm_probe.c, policy_head_probe.c) or report the compiled
 * layout of the table and its structs (backend_layout.c), and a second, trivial game for
 * _core's record-file row source (toy_records.c). A separate extension so that the
 * shipped manaka._core holds none of them; the package never imports it (tests and the
 * gemm / policy_head benchmarks do).
 *
 * It links no engine code and no argument conversion: both are _core's, reached by name
 * (python/common/engine_link.h says how and why), and every op table is _core's own or
 * another extension's capsule. */
#ifndef MANAKA_TESTING_H
#define MANAKA_TESTING_H
#include "python/common/binding.h"
#include "python/common/engine_link.h"

/* The device buffers of one hook call: made by the backend's alloc, filled from the
 * host, and freed together. */
#define MK_PROBE_BUFFERS 13 /* the most one hook uses: backend_policy_head, split, table_grad */
typedef struct {
    const mk_backend *be;
    void *dev[MK_PROBE_BUFFERS];
    int n;
} mk_probe_buffers;
/* A buffer of `bytes` copied from `host` (NULL: uninitialised); nothing if *st is not
 * MK_OK on entry, NULL with *st set on failure (one buffer too many included). */
void *mk_probe_put(mk_probe_buffers *pb, const void *host, size_t bytes, mk_status *st);
void mk_probe_free(mk_probe_buffers *pb);

/* Called by PyInit__testing; each adds its functions: 0, or -1 with an exception. */
int mk_init_backend_probe(PyObject *module);
int mk_init_backend_layout(PyObject *module);
int mk_init_policy_head_probe(PyObject *module);
int mk_init_gemm_probe(PyObject *module);
int mk_init_toy_records(PyObject *module);
#endif

/* A no-op CUDA driver library for CPU machines: build it as libcuda.so.1 and put its folder on
 * LD_LIBRARY_PATH, and the real cuda-bindings load it as their driver.
 *
 * Every entry point cuguard's compiled build and its tests reach is here and succeeds with a
 * plausible handle (streams, events, graphs and nodes are small heap blocks; device pointers count
 * up). One device; the primary context and the thread's current context (a small stack, for
 * cuCtxCreate/cuCtxPopCurrent) are kept per thread. Nothing runs on any device: this is for
 * exercising call paths, never results. `stub_live()` says how many streams, events, graphs,
 * allocations and created contexts exist, so tests can check that what was created was released.
 * Entry points not here are reported as not found by cuGetProcAddress, and the bindings raise
 * when one is called.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef void *ptr_t;
typedef unsigned long long u64;

#define OK 0
#define NOT_FOUND 500
#define INVALID_VALUE 1
#define INVALID_CONTEXT 201

/* stub_fail(name, code): the next call of `name` returns `code` (tests of the failure paths);
 * stub_fail_later(name, skip, code): the call after the next `skip` calls of `name` does. */
static char fail_name[64];
static int fail_code, fail_skip;
void stub_fail_later(const char *name, int skip, int code) {
    strncpy(fail_name, name, sizeof fail_name - 1);
    fail_code = code;
    fail_skip = skip;
}
void stub_fail(const char *name, int code) { stub_fail_later(name, 0, code); }
static int failing(const char *name) {
    if (fail_code && strcmp(fail_name, name) == 0) {
        if (fail_skip > 0) { fail_skip--; return 0; }
        int code = fail_code;
        fail_code = 0;
        return code;
    }
    return 0;
}
#define FAIL(name) do { int code_ = failing(name); if (code_) return code_; } while (0)

static long live_streams, live_events, live_graphs, live_allocs, live_contexts, live_nodes, live_execs;
static u64 next_ptr = 0x7f0000000000ULL;
static char primary_block[64];
static __thread ptr_t stack[32];
static __thread int depth;

long stub_live(void) { return live_streams + live_events + live_graphs + live_allocs + live_contexts + live_execs; }
long stub_live_streams(void) { return live_streams; }
long stub_live_events(void) { return live_events; }
long stub_live_allocs(void) { return live_allocs; }
long stub_live_nodes(void) { return live_nodes; }

static ptr_t block(long *counter) { (*counter)++; return calloc(1, 16); }
static CUresult release(ptr_t p, long *counter) {
    if (p == NULL) return INVALID_VALUE;
    (*counter)--; free(p); return OK;
}

CUresult cuInit(unsigned int flags) { return OK; }
CUresult cuDriverGetVersion(int *v) { *v = 13000; return OK; }
CUresult cuDeviceGet(int *dev, int ordinal) { if (ordinal != 0) return 101; *dev = 0; return OK; }
CUresult cuDeviceGetCount(int *n) { *n = 1; return OK; }
CUresult cuDeviceGetName(char *name, int len, int dev) { strncpy(name, "cuguard no-op stub", len); return OK; }
CUresult cuDeviceGetAttribute(int *value, int attribute, int dev) {
    /* compute capability 9.0; every other attribute 1 */
    *value = attribute == 75 ? 9 : attribute == 76 ? 0 : 1;
    return OK;
}
CUresult cuDevicePrimaryCtxRetain(ptr_t *ctx, int dev) { *ctx = primary_block; return OK; }
CUresult cuDevicePrimaryCtxRelease(int dev) { return OK; }
CUresult cuCtxGetCurrent(ptr_t *ctx) { FAIL("cuCtxGetCurrent"); *ctx = depth ? stack[depth - 1] : NULL; return OK; }
CUresult cuCtxSetCurrent(ptr_t ctx) {
    FAIL("cuCtxSetCurrent");
    if (ctx == NULL) { if (depth) depth--; return OK; }
    if (depth) stack[depth - 1] = ctx; else stack[depth++] = ctx;
    return OK;
}
CUresult cuCtxGetDevice(int *dev) { if (!depth) return INVALID_CONTEXT; *dev = 0; return OK; }
CUresult cuCtxSynchronize(void) { return OK; }
/* cuCtxCreate of every version writes the new context through its first argument. */
CUresult cuCtxCreate(ptr_t *ctx) {
    *ctx = block(&live_contexts);
    if (depth < 32) stack[depth++] = *ctx;
    return OK;
}
CUresult cuCtxPushCurrent(ptr_t ctx) { if (depth < 32) stack[depth++] = ctx; return OK; }
CUresult cuCtxPopCurrent(ptr_t *ctx) { if (ctx) *ctx = depth ? stack[depth - 1] : NULL; if (depth) depth--; return OK; }
CUresult cuCtxDestroy(ptr_t ctx) {
    for (int i = 0; i < depth; i++) if (stack[i] == ctx) stack[i] = NULL;
    return release(ctx, &live_contexts);
}

CUresult cuStreamCreate(ptr_t *s, unsigned int flags) { FAIL("cuStreamCreate"); *s = block(&live_streams); return OK; }
CUresult cuStreamCreateWithPriority(ptr_t *s, unsigned int flags, int priority) { return cuStreamCreate(s, flags); }
CUresult cuStreamDestroy(ptr_t s) { FAIL("cuStreamDestroy"); return release(s, &live_streams); }
CUresult cuStreamSynchronize(ptr_t s) { FAIL("cuStreamSynchronize"); return s ? OK : INVALID_VALUE; }
CUresult cuStreamQuery(ptr_t s) { return OK; }
/* No stream ever captures here; the thread's capture mode is only recorded. */
/* stub_capturing(status): what cuStreamIsCapturing answers from now on (1: a capture is active). */
static int capture_status;
static long capture_queries;
void stub_capturing(int status) { capture_status = status; }
long stub_capture_queries(void) { return capture_queries; }
CUresult cuStreamIsCapturing(ptr_t s, int *status) {
    FAIL("cuStreamIsCapturing");
    capture_queries++;
    *status = capture_status;
    return OK;
}
static int capture_mode;
int stub_capture_mode(void) { return capture_mode; }
CUresult cuThreadExchangeStreamCaptureMode(int *mode) {
    FAIL("cuThreadExchangeStreamCaptureMode");
    int old = capture_mode;
    capture_mode = *mode;
    *mode = old;
    return OK;
}
CUresult cuStreamGetFlags(ptr_t s, unsigned int *flags) { *flags = 0; return OK; }
CUresult cuStreamWaitEvent(ptr_t s, ptr_t e, unsigned int flags) { return OK; }
CUresult cuStreamGetCtx(ptr_t s, ptr_t *ctx) { *ctx = primary_block; return OK; }

CUresult cuEventCreate(ptr_t *e, unsigned int flags) { FAIL("cuEventCreate"); *e = block(&live_events); return OK; }
CUresult cuEventDestroy(ptr_t e) { FAIL("cuEventDestroy"); return release(e, &live_events); }
CUresult cuEventRecord(ptr_t e, ptr_t s) { FAIL("cuEventRecord"); return e ? OK : INVALID_VALUE; }
CUresult cuEventQuery(ptr_t e) { FAIL("cuEventQuery"); return e ? OK : INVALID_VALUE; }
CUresult cuEventSynchronize(ptr_t e) { return OK; }

CUresult cuMemAllocAsync(u64 *p, size_t size, ptr_t s) { FAIL("cuMemAllocAsync"); live_allocs++; *p = next_ptr; next_ptr += 256; return OK; }
CUresult cuMemFreeAsync(u64 p, ptr_t s) { FAIL("cuMemFreeAsync"); if (!p) return INVALID_VALUE; live_allocs--; return OK; }
CUresult cuMemAlloc(u64 *p, size_t size) { return cuMemAllocAsync(p, size, NULL); }
CUresult cuMemFree(u64 p) { return cuMemFreeAsync(p, NULL); }
CUresult cuMemGetInfo(size_t *free_bytes, size_t *total) { *free_bytes = 1 << 30; *total = 1 << 30; return OK; }
/* Copies move nothing (device pointers are not memory here); they check their arguments and count. */
static long copies;
long stub_copies(void) { return copies; }
CUresult cuMemcpyHtoDAsync(u64 dst, const void *src, size_t n, ptr_t s) {
    FAIL("cuMemcpyHtoDAsync"); if (!dst || !src) return INVALID_VALUE; copies++; return OK;
}
CUresult cuMemcpyDtoHAsync(void *dst, u64 src, size_t n, ptr_t s) {
    FAIL("cuMemcpyDtoHAsync"); if (!dst || !src) return INVALID_VALUE; copies++; return OK;
}
CUresult cuMemcpyHtoD(u64 dst, const void *src, size_t n) {
    FAIL("cuMemcpyHtoD"); if (!depth || !stack[depth - 1]) return INVALID_CONTEXT;
    if (!dst || !src) return INVALID_VALUE; copies++; return OK;
}
CUresult cuMemcpyDtoH(void *dst, u64 src, size_t n) {
    FAIL("cuMemcpyDtoH"); if (!depth || !stack[depth - 1]) return INVALID_CONTEXT;
    if (!dst || !src) return INVALID_VALUE; copies++; return OK;
}
CUresult cuMemHostAlloc(void **p, size_t size, unsigned int flags) { live_allocs++; *p = calloc(1, size ? size : 1); return OK; }
CUresult cuMemFreeHost(void *p) { if (!p) return INVALID_VALUE; live_allocs--; free(p); return OK; }

CUresult cuModuleLoadData(ptr_t *m, const void *image) { *m = calloc(1, 16); return OK; }
CUresult cuModuleUnload(ptr_t m) { free(m); return OK; }
static char function_block[16];
CUresult cuModuleGetFunction(ptr_t *f, ptr_t m, const char *name) { *f = function_block; return OK; }
CUresult cuFuncGetParamCount(ptr_t f, size_t *count) { *count = 0; return OK; }
CUresult cuFuncGetParamInfo(ptr_t f, size_t index, size_t *offset, size_t *size) { return INVALID_VALUE; }
CUresult cuLaunchKernel(ptr_t f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, ptr_t s, void **params, void **extra) {
    FAIL("cuLaunchKernel");
    return (f && gx && gy && gz && bx && by && bz) ? OK : INVALID_VALUE;
}

typedef struct { size_t n, cap; ptr_t *nodes; } graph_t;
CUresult cuGraphCreate(ptr_t *g, unsigned int flags) { live_graphs++; *g = calloc(1, sizeof(graph_t)); return OK; }
CUresult cuGraphDestroy(ptr_t g) {
    if (!g) return INVALID_VALUE;
    graph_t *graph = g;
    for (size_t i = 0; i < graph->n; i++) free(graph->nodes[i]);
    live_nodes -= (long)graph->n;
    free(graph->nodes);
    return release(g, &live_graphs);
}
CUresult cuGraphAddEmptyNode(ptr_t *node, ptr_t g, const ptr_t *deps, size_t n) {
    FAIL("cuGraphAddEmptyNode");
    if (!g || (n && !deps)) return INVALID_VALUE;
    graph_t *graph = g;
    if (graph->n == graph->cap) {
        graph->cap = graph->cap ? 2 * graph->cap : 16;
        graph->nodes = realloc(graph->nodes, graph->cap * sizeof(ptr_t));
    }
    live_nodes++;
    *node = graph->nodes[graph->n++] = calloc(1, 16);
    return OK;
}
CUresult cuGraphGetNodes(ptr_t g, ptr_t *nodes, size_t *count) {
    graph_t *graph = g;
    if (nodes) for (size_t i = 0; i < graph->n && i < *count; i++) nodes[i] = graph->nodes[i];
    *count = graph->n;
    return OK;
}
/* Edges are not kept: a graph reports none. */
/* cuGraphGetEdges takes edge data from CUDA 12.3 on (cuGraphGetEdges_v2); cuda-bindings 12.x also calls
 * the older form, without it, asking for version 10000 (cuGetProcAddress below hands out the form the
 * version asked for). */
CUresult cuGraphGetEdges(ptr_t g, ptr_t *from, ptr_t *to, void *data, size_t *count) { *count = 0; return OK; }
CUresult cuGraphGetEdges_v1(ptr_t g, ptr_t *from, ptr_t *to, size_t *count) { *count = 0; return OK; }
CUresult cuGraphInstantiateWithFlags(ptr_t *exe, ptr_t g, unsigned long long flags) {
    FAIL("cuGraphInstantiate");
    if (!g) return INVALID_VALUE;
    *exe = block(&live_execs);
    return OK;
}
CUresult cuGraphLaunch(ptr_t exe, ptr_t s) { FAIL("cuGraphLaunch"); return exe ? OK : INVALID_VALUE; }
CUresult cuGraphExecDestroy(ptr_t exe) { FAIL("cuGraphExecDestroy"); return release(exe, &live_execs); }
CUresult cuUserObjectCreate(ptr_t *obj, void *p, void (*destroy)(void *), unsigned initial, unsigned flags) {
    *obj = calloc(1, 16);
    return OK;
}
CUresult cuUserObjectRelease(ptr_t obj, unsigned count) { return OK; }
CUresult cuGraphRetainUserObject(ptr_t g, ptr_t obj, unsigned count, unsigned flags) { return OK; }
CUresult cuGraphReleaseUserObject(ptr_t g, ptr_t obj, unsigned count) { return OK; }

CUresult cuGetErrorName(int code, const char **text) { *text = "CUDA_ERROR_STUB"; return OK; }
CUresult cuGetErrorString(int code, const char **text) { *text = "an error of the no-op driver"; return OK; }

typedef struct { const char *name; void *fn; } entry_t;
#define E(f) {#f, (void *)f}
static const entry_t table[] = {
    E(cuInit), E(cuDriverGetVersion), E(cuDeviceGet), E(cuDeviceGetCount), E(cuDeviceGetName),
    E(cuDeviceGetAttribute), E(cuDevicePrimaryCtxRetain), E(cuDevicePrimaryCtxRelease), E(cuCtxGetCurrent),
    E(cuCtxSetCurrent), E(cuCtxGetDevice), E(cuCtxSynchronize), E(cuCtxCreate), E(cuCtxPushCurrent),
    E(cuCtxPopCurrent), E(cuCtxDestroy), E(cuStreamCreate), E(cuStreamCreateWithPriority), E(cuStreamDestroy),
    E(cuStreamSynchronize), E(cuStreamQuery), E(cuStreamGetFlags), E(cuStreamWaitEvent), E(cuStreamGetCtx),
    E(cuStreamIsCapturing), E(cuThreadExchangeStreamCaptureMode),
    E(cuEventCreate), E(cuEventDestroy), E(cuEventRecord), E(cuEventQuery), E(cuEventSynchronize),
    E(cuMemAllocAsync), E(cuMemFreeAsync), E(cuMemAlloc), E(cuMemFree), E(cuMemGetInfo), E(cuMemcpyHtoDAsync),
    E(cuMemcpyDtoHAsync), E(cuMemcpyHtoD), E(cuMemcpyDtoH), E(cuMemHostAlloc), E(cuMemFreeHost), E(cuModuleLoadData),
    E(cuModuleUnload), E(cuModuleGetFunction), E(cuFuncGetParamCount), E(cuFuncGetParamInfo), E(cuLaunchKernel),
    E(cuGraphCreate), E(cuGraphDestroy), E(cuGraphAddEmptyNode), E(cuGraphGetNodes), E(cuGraphGetEdges),
    E(cuGraphInstantiateWithFlags), E(cuGraphLaunch), E(cuGraphExecDestroy), E(cuUserObjectCreate),
    E(cuUserObjectRelease), E(cuGraphRetainUserObject), E(cuGraphReleaseUserObject), E(cuGetErrorName),
    E(cuGetErrorString), {NULL, NULL},
};

/* The versioned names the real library exports (cuda.h maps cuStreamDestroy to cuStreamDestroy_v2...). */
static void *lookup(const char *name) {
    for (int i = 0; table[i].name; i++)
        if (strcmp(table[i].name, name) == 0) return table[i].fn;
    char base[128];
    strncpy(base, name, sizeof base - 1);
    base[sizeof base - 1] = 0;
    char *v = strstr(base, "_v");
    if (v) { *v = 0; for (int i = 0; table[i].name; i++) if (strcmp(table[i].name, base) == 0) return table[i].fn; }
    return NULL;
}

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, u64 flags, int *status) {
    *pfn = version < 12030 && strcmp(symbol, "cuGraphGetEdges") == 0 ? (void *)cuGraphGetEdges_v1 : lookup(symbol);
    if (status) *status = *pfn ? 0 : 1; /* CU_GET_PROC_ADDRESS_SUCCESS / SYMBOL_NOT_FOUND */
    return *pfn ? OK : NOT_FOUND;
}
CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, u64 flags) {
    return cuGetProcAddress_v2(symbol, pfn, version, flags, NULL);
}
/* Versioned exports, for loaders that dlsym them directly. */
CUresult cuStreamDestroy_v2(ptr_t s) { return cuStreamDestroy(s); }
CUresult cuEventDestroy_v2(ptr_t e) { return cuEventDestroy(e); }
CUresult cuCtxDestroy_v2(ptr_t c) { return cuCtxDestroy(c); }
CUresult cuCtxPopCurrent_v2(ptr_t *c) { return cuCtxPopCurrent(c); }
CUresult cuCtxPushCurrent_v2(ptr_t c) { return cuCtxPushCurrent(c); }
CUresult cuDevicePrimaryCtxRelease_v2(int dev) { return cuDevicePrimaryCtxRelease(dev); }
CUresult cuMemFree_v2(u64 p) { return cuMemFree(p); }
CUresult cuMemAlloc_v2(u64 *p, size_t size) { return cuMemAlloc(p, size); }
CUresult cuMemGetInfo_v2(size_t *f, size_t *t) { return cuMemGetInfo(f, t); }

/* cuguard.fastpath._native: the driver calls of cuguard's hot operations, made from C.
 *
 * Headerless: no CUDA header is included. The driver's entry points are taken,
 * at setup(), from the PyCapsules that cuda-bindings' `cuda.bindings.cydriver`
 * exports for `cimport` (its `__pyx_capi__` dictionary): each capsule holds a
 * C function pointer and is named by the function's C signature, which is
 * checked against the signature this file was written for. The handle types
 * below are the driver's opaque pointer types, which is all these calls need.
 *
 * Nothing here raises for a driver failure: every function returns the status
 * (and, for creating calls, the name of the call that failed), and cuguard's
 * Python layers raise. The only exceptions raised here are Python ones: a
 * handle that int() refuses (TypeError), a host object without the buffer
 * protocol, or the bindings' own error when they cannot find a driver entry
 * point (their `except ?<status>` functions set a Python exception and return
 * a status; whichever status they use, an exception set means it was theirs).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

typedef int CUresult;
typedef void *CUcontext;
typedef void *CUstream;
typedef void *CUevent;
typedef void *CUgraph;
typedef void *CUgraphNode;
typedef void *CUfunction;
typedef void *CUgraphExec;
typedef unsigned long long CUdeviceptr;

typedef CUresult (*ctx_get_current_t)(CUcontext *);
typedef CUresult (*create_t)(void **, unsigned int);
typedef CUresult (*destroy_t)(void *);
typedef CUresult (*event_record_t)(CUevent, CUstream);
typedef CUresult (*mem_alloc_async_t)(CUdeviceptr *, size_t, CUstream);
typedef CUresult (*mem_free_async_t)(CUdeviceptr, CUstream);
typedef CUresult (*launch_kernel_t)(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int,
                                    unsigned int, unsigned int, CUstream, void **, void **);
typedef CUresult (*graph_add_empty_t)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t);
typedef CUresult (*graph_instantiate_t)(CUgraphExec *, CUgraph, unsigned long long);
typedef CUresult (*graph_launch_t)(CUgraphExec, CUstream);
typedef CUresult (*memcpy_htod_async_t)(CUdeviceptr, const void *, size_t, CUstream);
typedef CUresult (*memcpy_dtoh_async_t)(void *, CUdeviceptr, size_t, CUstream);
typedef CUresult (*memcpy_htod_t)(CUdeviceptr, const void *, size_t);
typedef CUresult (*memcpy_dtoh_t)(void *, CUdeviceptr, size_t);

static ctx_get_current_t p_cuCtxGetCurrent;
static create_t p_cuEventCreate;
static destroy_t p_cuEventDestroy;
static event_record_t p_cuEventRecord;
static destroy_t p_cuEventQuery;
static create_t p_cuStreamCreate;
static destroy_t p_cuStreamDestroy;
static mem_alloc_async_t p_cuMemAllocAsync;
static mem_free_async_t p_cuMemFreeAsync;
static launch_kernel_t p_cuLaunchKernel;
static graph_add_empty_t p_cuGraphAddEmptyNode;
static graph_instantiate_t p_cuGraphInstantiate;
static graph_launch_t p_cuGraphLaunch;
static destroy_t p_cuGraphExecDestroy;
static destroy_t p_cuStreamSynchronize;
static memcpy_htod_async_t p_cuMemcpyHtoDAsync;
static memcpy_dtoh_async_t p_cuMemcpyDtoHAsync;
static memcpy_htod_t p_cuMemcpyHtoD;
static memcpy_dtoh_t p_cuMemcpyDtoH;

/* The cuda-bindings handle types the creating calls return (CUstream, CUevent, ...). */
static PyObject *t_stream, *t_event, *t_deviceptr, *t_graphnode;
static int ready;

/* Interned call names, returned as the second item of a failed creating call. */
static PyObject *n_ctx, *n_event_create, *n_stream_create, *n_alloc, *n_graph_add, *n_instantiate, *n_htod, *n_dtoh;

typedef struct {
    const char *name;
    const char *signature;
    void **slot;
} entry_t;

static entry_t entries[] = {
    {"cuCtxGetCurrent", "CUresult (CUcontext *)", (void **)&p_cuCtxGetCurrent},
    {"cuEventCreate", "CUresult (CUevent *, unsigned int)", (void **)&p_cuEventCreate},
    {"cuEventDestroy", "CUresult (CUevent)", (void **)&p_cuEventDestroy},
    {"cuEventRecord", "CUresult (CUevent, CUstream)", (void **)&p_cuEventRecord},
    {"cuEventQuery", "CUresult (CUevent)", (void **)&p_cuEventQuery},
    {"cuStreamCreate", "CUresult (CUstream *, unsigned int)", (void **)&p_cuStreamCreate},
    {"cuStreamDestroy", "CUresult (CUstream)", (void **)&p_cuStreamDestroy},
    {"cuMemAllocAsync", "CUresult (CUdeviceptr *, size_t, CUstream)", (void **)&p_cuMemAllocAsync},
    {"cuMemFreeAsync", "CUresult (CUdeviceptr, CUstream)", (void **)&p_cuMemFreeAsync},
    {"cuLaunchKernel",
     "CUresult (CUfunction, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, "
     "unsigned int, CUstream, void **, void **)",
     (void **)&p_cuLaunchKernel},
    {"cuGraphAddEmptyNode", "CUresult (CUgraphNode *, CUgraph, CUgraphNode const *, size_t)",
     (void **)&p_cuGraphAddEmptyNode},
    /* cuda-bindings maps cuGraphInstantiate to the driver's cuGraphInstantiateWithFlags (12.x and 13.x). */
    {"cuGraphInstantiate", "CUresult (CUgraphExec *, CUgraph, unsigned PY_LONG_LONG)", (void **)&p_cuGraphInstantiate},
    {"cuGraphLaunch", "CUresult (CUgraphExec, CUstream)", (void **)&p_cuGraphLaunch},
    {"cuGraphExecDestroy", "CUresult (CUgraphExec)", (void **)&p_cuGraphExecDestroy},
    {"cuStreamSynchronize", "CUresult (CUstream)", (void **)&p_cuStreamSynchronize},
    {"cuMemcpyHtoDAsync", "CUresult (CUdeviceptr, void const *, size_t, CUstream)", (void **)&p_cuMemcpyHtoDAsync},
    {"cuMemcpyDtoHAsync", "CUresult (void *, CUdeviceptr, size_t, CUstream)", (void **)&p_cuMemcpyDtoHAsync},
    {"cuMemcpyHtoD", "CUresult (CUdeviceptr, void const *, size_t)", (void **)&p_cuMemcpyHtoD},
    {"cuMemcpyDtoH", "CUresult (void *, CUdeviceptr, size_t)", (void **)&p_cuMemcpyDtoH},
    {NULL, NULL, NULL},
};

/* A handle's address: an int, or any object whose type has __int__ (the cuda-bindings handle types). */
static int
address(PyObject *obj, void **out)
{
    if (PyLong_CheckExact(obj)) {
        *out = PyLong_AsVoidPtr(obj);
        return (*out == NULL && PyErr_Occurred()) ? -1 : 0;
    }
    PyNumberMethods *nb = Py_TYPE(obj)->tp_as_number;
    if (nb == NULL || nb->nb_int == NULL) {
        PyErr_Format(PyExc_TypeError, "a driver handle or an int is needed, not %.100s", Py_TYPE(obj)->tp_name);
        return -1;
    }
    PyObject *value = nb->nb_int(obj);
    if (value == NULL)
        return -1;
    *out = PyLong_AsVoidPtr(value);
    Py_DECREF(value);
    return (*out == NULL && PyErr_Occurred()) ? -1 : 0;
}

/* A driver status, or NULL when the bindings raised (a failed status with an exception set: their loader's). */
static PyObject *
status(CUresult err)
{
    if (err != 0 && PyErr_Occurred())
        return NULL;
    return PyLong_FromLong((long)err);
}

static PyObject *
failed(CUresult err, PyObject *call)
{
    if (err != 0 && PyErr_Occurred())
        return NULL;
    return Py_BuildValue("(iO)", (int)err, call);
}

/* (0, type(address)): a new handle object of the bindings, or NULL. */
static PyObject *
made(PyObject *type, void *value)
{
    PyObject *number = PyLong_FromVoidPtr(value);
    if (number == NULL)
        return NULL;
    PyObject *handle = PyObject_CallOneArg(type, number);
    Py_DECREF(number);
    if (handle == NULL)
        return NULL;
    PyObject *result = PyTuple_New(2);
    if (result == NULL) {
        Py_DECREF(handle);
        return NULL;
    }
    PyTuple_SET_ITEM(result, 0, PyLong_FromLong(0));
    PyTuple_SET_ITEM(result, 1, handle);
    return result;
}

/* (0, address as an int): for handles the layers keep as ints (events), the bindings' type made on demand. */
static PyObject *
made_int(void *value)
{
    PyObject *number = PyLong_FromVoidPtr(value);
    if (number == NULL)
        return NULL;
    PyObject *result = PyTuple_New(2);
    if (result == NULL) {
        Py_DECREF(number);
        return NULL;
    }
    PyTuple_SET_ITEM(result, 0, PyLong_FromLong(0));
    PyTuple_SET_ITEM(result, 1, number);
    return result;
}

static PyObject *
not_ready(void)
{
    PyErr_SetString(PyExc_RuntimeError, "cuguard.fastpath._native.setup() has not succeeded");
    return NULL;
}

/* setup(capi, CUstream, CUevent, CUdeviceptr, CUgraphNode) -> list of problems (empty: ready). */
static PyObject *
fp_setup(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "setup(capi, CUstream, CUevent, CUdeviceptr, CUgraphNode)");
        return NULL;
    }
    PyObject *capi = args[0];
    if (!PyDict_Check(capi)) {
        PyErr_SetString(PyExc_TypeError, "capi must be a dict (cuda.bindings.cydriver.__pyx_capi__)");
        return NULL;
    }
    PyObject *problems = PyList_New(0);
    if (problems == NULL)
        return NULL;
    void *found[sizeof(entries) / sizeof(entries[0])];
    for (int i = 0; entries[i].name != NULL; i++) {
        found[i] = NULL;
        PyObject *capsule = PyDict_GetItemString(capi, entries[i].name);
        const char *why = NULL;
        const char *name = NULL;
        if (capsule == NULL)
            why = "missing";
        else if (!PyCapsule_CheckExact(capsule))
            why = "not a capsule";
        else {
            name = PyCapsule_GetName(capsule);
            if (name == NULL || strcmp(name, entries[i].signature) != 0)
                why = "another signature";
            else {
                found[i] = PyCapsule_GetPointer(capsule, name);
                if (found[i] == NULL) {
                    PyErr_Clear();
                    why = "an empty capsule";
                }
            }
        }
        if (why != NULL) {
            PyObject *text = PyUnicode_FromFormat("%s: %s (%s)", entries[i].name, why, name ? name : "-");
            if (text == NULL || PyList_Append(problems, text) < 0) {
                Py_XDECREF(text);
                Py_DECREF(problems);
                return NULL;
            }
            Py_DECREF(text);
        }
    }
    if (PyList_GET_SIZE(problems) == 0) {
        for (int i = 0; entries[i].name != NULL; i++)
            *entries[i].slot = found[i];
        PyObject **types[] = {&t_stream, &t_event, &t_deviceptr, &t_graphnode};
        for (int i = 0; i < 4; i++) {
            Py_INCREF(args[i + 1]);
            Py_XSETREF(*types[i], args[i + 1]);
        }
        ready = 1;
    }
    return problems;
}

/* Shared by event_create and stream_create: (0, handle) | (-1, current context as int) | (status, call).
 * `type` NULL: the handle is returned as an int (its address). */
static PyObject *
create_in(PyObject *const *args, Py_ssize_t nargs, create_t create, PyObject *type, PyObject *call, int release_gil)
{
    if (!ready)
        return not_ready();
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "takes (context as int, flags)");
        return NULL;
    }
    void *want;
    if (address(args[0], &want) < 0)
        return NULL;
    unsigned long flags = PyLong_AsUnsignedLong(args[1]);
    if (flags == (unsigned long)-1 && PyErr_Occurred())
        return NULL;
    CUcontext current = NULL;
    CUresult err = p_cuCtxGetCurrent(&current);
    if (err)
        return failed(err, n_ctx);
    if (current != want) {
        PyObject *number = PyLong_FromVoidPtr(current);
        if (number == NULL)
            return NULL;
        return Py_BuildValue("(iN)", -1, number);
    }
    void *handle = NULL;
    if (release_gil) {
        Py_BEGIN_ALLOW_THREADS
        err = create(&handle, (unsigned int)flags);
        Py_END_ALLOW_THREADS
    } else {
        err = create(&handle, (unsigned int)flags);
    }
    if (err)
        return failed(err, call);
    return type == NULL ? made_int(handle) : made(type, handle);
}

static PyObject *
fp_event_create(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return create_in(args, nargs, p_cuEventCreate, NULL, n_event_create, 0); /* the event's address, an int */
}

static PyObject *
fp_stream_create(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return create_in(args, nargs, p_cuStreamCreate, t_stream, n_stream_create, 1);
}

static PyObject *
one_handle(PyObject *const *args, Py_ssize_t nargs, destroy_t fn, int release_gil)
{
    if (!ready)
        return not_ready();
    if (nargs != 1) {
        PyErr_SetString(PyExc_TypeError, "takes one handle");
        return NULL;
    }
    void *handle;
    if (address(args[0], &handle) < 0)
        return NULL;
    CUresult err;
    if (release_gil) {
        Py_BEGIN_ALLOW_THREADS
        err = fn(handle);
        Py_END_ALLOW_THREADS
    } else {
        err = fn(handle);
    }
    return status(err);
}

static PyObject *
fp_event_destroy(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return one_handle(args, nargs, p_cuEventDestroy, 0);
}

static PyObject *
fp_event_query(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return one_handle(args, nargs, p_cuEventQuery, 0);
}

static PyObject *
fp_stream_destroy(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return one_handle(args, nargs, p_cuStreamDestroy, 1);
}

static PyObject *
fp_event_record(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (!ready)
        return not_ready();
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "event_record(event, stream)");
        return NULL;
    }
    void *event, *stream;
    if (address(args[0], &event) < 0 || address(args[1], &stream) < 0)
        return NULL;
    CUresult err;
    Py_BEGIN_ALLOW_THREADS
    err = p_cuEventRecord(event, stream);
    Py_END_ALLOW_THREADS
    return status(err);
}

static PyObject *
fp_mem_alloc_async(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (!ready)
        return not_ready();
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "mem_alloc_async(size, stream)");
        return NULL;
    }
    size_t size = PyLong_AsSize_t(args[0]);
    if (size == (size_t)-1 && PyErr_Occurred())
        return NULL;
    void *stream;
    if (address(args[1], &stream) < 0)
        return NULL;
    CUdeviceptr ptr = 0;
    CUresult err;
    Py_BEGIN_ALLOW_THREADS
    err = p_cuMemAllocAsync(&ptr, size, stream);
    Py_END_ALLOW_THREADS
    if (err)
        return failed(err, n_alloc);
    return made(t_deviceptr, (void *)(uintptr_t)ptr);
}

static PyObject *
fp_mem_free_async(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (!ready)
        return not_ready();
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "mem_free_async(ptr, stream)");
        return NULL;
    }
    void *ptr, *stream;
    if (address(args[0], &ptr) < 0 || address(args[1], &stream) < 0)
        return NULL;
    CUresult err;
    Py_BEGIN_ALLOW_THREADS
    err = p_cuMemFreeAsync((CUdeviceptr)(uintptr_t)ptr, stream);
    Py_END_ALLOW_THREADS
    return status(err);
}

/* launch(function, gx, gy, gz, bx, by, bz, shared, stream, params address) -> status */
static PyObject *
fp_launch(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (!ready)
        return not_ready();
    if (nargs != 10) {
        PyErr_SetString(PyExc_TypeError, "launch(function, gx, gy, gz, bx, by, bz, shared, stream, params)");
        return NULL;
    }
    void *function, *stream, *params;
    if (address(args[0], &function) < 0 || address(args[8], &stream) < 0 || address(args[9], &params) < 0)
        return NULL;
    unsigned int dims[7];
    for (int i = 0; i < 7; i++) {
        unsigned long value = PyLong_AsUnsignedLong(args[i + 1]);
        if (value == (unsigned long)-1 && PyErr_Occurred())
            return NULL;
        if (value > 0xFFFFFFFFUL) {
            PyErr_SetString(PyExc_OverflowError, "a launch dimension does not fit 32 bits");
            return NULL;
        }
        dims[i] = (unsigned int)value;
    }
    CUresult err;
    Py_BEGIN_ALLOW_THREADS
    err = p_cuLaunchKernel(function, dims[0], dims[1], dims[2], dims[3], dims[4], dims[5], dims[6], stream,
                           (void **)params, NULL);
    Py_END_ALLOW_THREADS
    return status(err);
}

/* graph_add_empty(graph, dependency or None) -> (0, CUgraphNode) | (status, call) */
static PyObject *
fp_graph_add_empty(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (!ready)
        return not_ready();
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "graph_add_empty(graph, dependency or None)");
        return NULL;
    }
    void *graph, *dep = NULL;
    if (address(args[0], &graph) < 0)
        return NULL;
    size_t count = 0;
    if (args[1] != Py_None) {
        if (address(args[1], &dep) < 0)
            return NULL;
        count = 1;
    }
    CUgraphNode node = NULL;
    CUresult err = p_cuGraphAddEmptyNode(&node, graph, count ? (const CUgraphNode *)&dep : NULL, count);
    if (err)
        return failed(err, n_graph_add);
    return made(t_graphnode, node);
}

/* The current-context check of a call that must run in `want`: 0 when it is current, 1 when another is
 * (`*other` set to it, a new reference), -1 with an exception (a Python error, or `*failure` set to the
 * (status, "cuCtxGetCurrent") tuple to return). */
static int
in_context(PyObject *context, PyObject **other, PyObject **failure)
{
    void *want;
    *other = *failure = NULL;
    if (address(context, &want) < 0)
        return -1;
    CUcontext current = NULL;
    CUresult err = p_cuCtxGetCurrent(&current);
    if (err) {
        *failure = failed(err, n_ctx);
        return -1;
    }
    if (current == want)
        return 0;
    *other = PyLong_FromVoidPtr(current);
    return *other == NULL ? -1 : 1;
}

/* graph_instantiate(context or None, graph, flags) -> (0, executable graph as int) | (-1, current context as int)
 * | (status, call). With a context, nothing is instantiated unless it is current (-1: switch, then the Python path). */
static PyObject *
fp_graph_instantiate(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (!ready)
        return not_ready();
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "graph_instantiate(context or None, graph, flags)");
        return NULL;
    }
    if (args[0] != Py_None) {
        PyObject *other, *failure;
        int where = in_context(args[0], &other, &failure);
        if (where < 0)
            return failure;
        if (where > 0)
            return Py_BuildValue("(iN)", -1, other);
    }
    void *graph;
    if (address(args[1], &graph) < 0)
        return NULL;
    unsigned long long flags = PyLong_AsUnsignedLongLong(args[2]);
    if (flags == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    CUgraphExec exec = NULL;
    CUresult err;
    Py_BEGIN_ALLOW_THREADS
    err = p_cuGraphInstantiate(&exec, graph, flags);
    Py_END_ALLOW_THREADS
    if (err)
        return failed(err, n_instantiate);
    return made_int(exec);
}

static PyObject *
fp_graph_launch(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (!ready)
        return not_ready();
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "graph_launch(executable graph, stream)");
        return NULL;
    }
    void *exec, *stream;
    if (address(args[0], &exec) < 0 || address(args[1], &stream) < 0)
        return NULL;
    CUresult err;
    Py_BEGIN_ALLOW_THREADS
    err = p_cuGraphLaunch(exec, stream);
    Py_END_ALLOW_THREADS
    return status(err);
}

static PyObject *
fp_graph_exec_destroy(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return one_handle(args, nargs, p_cuGraphExecDestroy, 1);
}

static PyObject *
fp_stream_synchronize(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return one_handle(args, nargs, p_cuStreamSynchronize, 1);
}

/* A host pointer: an int (an address, e.g. page-locked memory) or an object with the buffer protocol of at
 * least `size` bytes (held in `view` until release_host). */
static int
host_pointer(PyObject *obj, int writable, size_t size, Py_buffer *view, void **out)
{
    view->obj = NULL;
    if (PyLong_CheckExact(obj)) {
        *out = PyLong_AsVoidPtr(obj);
        return (*out == NULL && PyErr_Occurred()) ? -1 : 0;
    }
    if (PyObject_GetBuffer(obj, view, writable ? PyBUF_WRITABLE : PyBUF_SIMPLE) < 0)
        return -1;
    if ((size_t)view->len < size) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_ValueError, "the host buffer has %zd bytes, the copy needs %zu", view->len, size);
        return -1;
    }
    *out = view->buf;
    return 0;
}

static void
release_host(Py_buffer *view)
{
    if (view->obj != NULL)
        PyBuffer_Release(view);
}

/* copy(dst, src, size, stream or context, async, to_device) -> status (async) | 0, -1, (status, call) (sync). */
static PyObject *
copy(PyObject *const *args, Py_ssize_t nargs, int async, int to_device)
{
    if (!ready)
        return not_ready();
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, async ? "takes (dst, src, size, stream)" : "takes (context, dst, src, size)");
        return NULL;
    }
    PyObject *const *a = async ? args : args + 1; /* dst, src, size */
    size_t size = PyLong_AsSize_t(a[2]);
    if (size == (size_t)-1 && PyErr_Occurred())
        return NULL;
    void *device, *host, *stream = NULL;
    Py_buffer view;
    if (address(to_device ? a[0] : a[1], &device) < 0)
        return NULL;
    if (async && address(args[3], &stream) < 0)
        return NULL;
    if (!async) {
        PyObject *other, *failure;
        int where = in_context(args[0], &other, &failure);
        if (where < 0)
            return failure;
        if (where > 0) {
            Py_DECREF(other);
            return PyLong_FromLong(-1);
        }
    }
    if (host_pointer(to_device ? a[1] : a[0], !to_device, size, &view, &host) < 0)
        return NULL;
    CUresult err;
    CUdeviceptr dptr = (CUdeviceptr)(uintptr_t)device;
    Py_BEGIN_ALLOW_THREADS
    if (async)
        err = to_device ? p_cuMemcpyHtoDAsync(dptr, host, size, stream) : p_cuMemcpyDtoHAsync(host, dptr, size, stream);
    else
        err = to_device ? p_cuMemcpyHtoD(dptr, host, size) : p_cuMemcpyDtoH(host, dptr, size);
    Py_END_ALLOW_THREADS
    release_host(&view);
    if (async || err == 0)
        return status(err);
    return failed(err, to_device ? n_htod : n_dtoh);
}

static PyObject *
fp_memcpy_htod_async(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return copy(args, nargs, 1, 1);
}

static PyObject *
fp_memcpy_dtoh_async(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return copy(args, nargs, 1, 0);
}

static PyObject *
fp_memcpy_htod(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return copy(args, nargs, 0, 1);
}

static PyObject *
fp_memcpy_dtoh(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return copy(args, nargs, 0, 0);
}

static PyMethodDef methods[] = {
    {"setup", (PyCFunction)(void (*)(void))fp_setup, METH_FASTCALL, "Resolve the entry points; return the problems."},
    {"event_create", (PyCFunction)(void (*)(void))fp_event_create, METH_FASTCALL, NULL},
    {"event_destroy", (PyCFunction)(void (*)(void))fp_event_destroy, METH_FASTCALL, NULL},
    {"event_record", (PyCFunction)(void (*)(void))fp_event_record, METH_FASTCALL, NULL},
    {"event_query", (PyCFunction)(void (*)(void))fp_event_query, METH_FASTCALL, NULL},
    {"stream_create", (PyCFunction)(void (*)(void))fp_stream_create, METH_FASTCALL, NULL},
    {"stream_destroy", (PyCFunction)(void (*)(void))fp_stream_destroy, METH_FASTCALL, NULL},
    {"mem_alloc_async", (PyCFunction)(void (*)(void))fp_mem_alloc_async, METH_FASTCALL, NULL},
    {"mem_free_async", (PyCFunction)(void (*)(void))fp_mem_free_async, METH_FASTCALL, NULL},
    {"launch", (PyCFunction)(void (*)(void))fp_launch, METH_FASTCALL, NULL},
    {"graph_add_empty", (PyCFunction)(void (*)(void))fp_graph_add_empty, METH_FASTCALL, NULL},
    {"graph_instantiate", (PyCFunction)(void (*)(void))fp_graph_instantiate, METH_FASTCALL, NULL},
    {"graph_launch", (PyCFunction)(void (*)(void))fp_graph_launch, METH_FASTCALL, NULL},
    {"graph_exec_destroy", (PyCFunction)(void (*)(void))fp_graph_exec_destroy, METH_FASTCALL, NULL},
    {"stream_synchronize", (PyCFunction)(void (*)(void))fp_stream_synchronize, METH_FASTCALL, NULL},
    {"memcpy_htod_async", (PyCFunction)(void (*)(void))fp_memcpy_htod_async, METH_FASTCALL, NULL},
    {"memcpy_dtoh_async", (PyCFunction)(void (*)(void))fp_memcpy_dtoh_async, METH_FASTCALL, NULL},
    {"memcpy_htod", (PyCFunction)(void (*)(void))fp_memcpy_htod, METH_FASTCALL, NULL},
    {"memcpy_dtoh", (PyCFunction)(void (*)(void))fp_memcpy_dtoh, METH_FASTCALL, NULL},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "cuguard.fastpath._native",
    "The driver calls of cuguard's hot operations, from C (see cuguard.fastpath).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__native(void)
{
    n_ctx = PyUnicode_InternFromString("cuCtxGetCurrent");
    n_event_create = PyUnicode_InternFromString("cuEventCreate");
    n_stream_create = PyUnicode_InternFromString("cuStreamCreate");
    n_alloc = PyUnicode_InternFromString("cuMemAllocAsync");
    n_graph_add = PyUnicode_InternFromString("cuGraphAddEmptyNode");
    n_instantiate = PyUnicode_InternFromString("cuGraphInstantiate");
    n_htod = PyUnicode_InternFromString("cuMemcpyHtoD");
    n_dtoh = PyUnicode_InternFromString("cuMemcpyDtoH");
    if (!n_ctx || !n_event_create || !n_stream_create || !n_alloc || !n_graph_add || !n_instantiate || !n_htod ||
        !n_dtoh)
        return NULL;
    return PyModule_Create(&module);
}

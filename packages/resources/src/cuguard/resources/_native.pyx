# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The driver calls of cuguard's hot operations, compiled (the compiled build of cuguard-resources).

Headerless: no CUDA header is used. The driver's entry points are taken, at
:func:`setup`, from the capsules that cuda-bindings' ``cuda.bindings.cydriver``
exports for ``cimport`` (its ``__pyx_capi__`` dictionary). Each capsule holds a C
function pointer and is named by the function's C signature, which is checked
against the signature declared here; a capsule that is missing or has another
signature keeps the compiled calls off (``setup`` returns the problems). The
handle types are the driver's opaque pointer types, which is all these calls need.

Nothing here raises for a driver failure: every function returns the status
(and, for a call that makes something, the name of the driver call that
failed), and the layer's Python code raises, rolls back and reports, exactly as
on the pure-Python path (``_fast.py`` says when these functions are used). The
only exceptions raised here are Python ones: a handle that is neither an int nor
a cuda-bindings handle (``TypeError``), a host object without the buffer
protocol or too short for the copy, a number out of range (``OverflowError``),
or the bindings' own error when they cannot find a driver entry point (their
entry points set a Python exception and return a failed status; an exception
set after a failed status is therefore theirs, and it propagates).
"""

cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.exc cimport PyErr_Occurred
from cpython.long cimport PyLong_AsVoidPtr, PyLong_FromUnsignedLongLong, PyLong_FromVoidPtr
from cpython.pycapsule cimport PyCapsule_CheckExact, PyCapsule_GetName, PyCapsule_GetPointer
from libc.stdint cimport uintptr_t
from libc.string cimport strcmp


cdef extern from *:
    """
    /* Whether a Python object converts to an int through its type's __int__ (the cuda-bindings handle
     * types do); str and bytes do not, so a misplaced string is a TypeError rather than a parse. */
    static int cuguard_has_int(PyObject *obj)
    {
        PyNumberMethods *nb = Py_TYPE(obj)->tp_as_number;
        return nb != NULL && nb->nb_int != NULL;
    }
    """
    bint has_int "cuguard_has_int"(object obj)


ctypedef int CUresult
ctypedef unsigned long long CUdeviceptr

# The entry points' C types (every handle is an opaque pointer). The bindings' functions may take the GIL
# to set an exception when their loader fails; they never need it held.
ctypedef CUresult (*ctx_get_current_t)(void **) noexcept nogil
ctypedef CUresult (*create_t)(void **, unsigned int) noexcept nogil
ctypedef CUresult (*one_handle_t)(void *) noexcept nogil
ctypedef CUresult (*set_current_t)(void *) noexcept nogil
ctypedef CUresult (*two_handles_t)(void *, void *) noexcept nogil
ctypedef CUresult (*is_capturing_t)(void *, int *) noexcept nogil
ctypedef CUresult (*exchange_mode_t)(int *) noexcept nogil
ctypedef CUresult (*mem_alloc_async_t)(CUdeviceptr *, size_t, void *) noexcept nogil
ctypedef CUresult (*mem_free_async_t)(CUdeviceptr, void *) noexcept nogil
ctypedef CUresult (*launch_kernel_t)(void *, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int,
                                     unsigned int, unsigned int, void *, void **, void **) noexcept nogil
ctypedef CUresult (*graph_add_empty_t)(void **, void *, void **, size_t) noexcept nogil
ctypedef CUresult (*graph_instantiate_t)(void **, void *, unsigned long long) noexcept nogil
ctypedef CUresult (*memcpy_htod_async_t)(CUdeviceptr, const void *, size_t, void *) noexcept nogil
ctypedef CUresult (*memcpy_dtoh_async_t)(void *, CUdeviceptr, size_t, void *) noexcept nogil
ctypedef CUresult (*memcpy_htod_t)(CUdeviceptr, const void *, size_t) noexcept nogil
ctypedef CUresult (*memcpy_dtoh_t)(void *, CUdeviceptr, size_t) noexcept nogil

cdef ctx_get_current_t p_cuCtxGetCurrent = NULL
cdef set_current_t p_cuCtxSetCurrent = NULL
cdef create_t p_cuEventCreate = NULL
cdef one_handle_t p_cuEventDestroy = NULL
cdef two_handles_t p_cuEventRecord = NULL
cdef one_handle_t p_cuEventQuery = NULL
cdef create_t p_cuStreamCreate = NULL
cdef one_handle_t p_cuStreamDestroy = NULL
cdef is_capturing_t p_cuStreamIsCapturing = NULL
cdef exchange_mode_t p_cuThreadExchangeStreamCaptureMode = NULL
cdef mem_alloc_async_t p_cuMemAllocAsync = NULL
cdef mem_free_async_t p_cuMemFreeAsync = NULL
cdef launch_kernel_t p_cuLaunchKernel = NULL
cdef graph_add_empty_t p_cuGraphAddEmptyNode = NULL
cdef graph_instantiate_t p_cuGraphInstantiate = NULL
cdef two_handles_t p_cuGraphLaunch = NULL
cdef one_handle_t p_cuGraphExecDestroy = NULL
cdef one_handle_t p_cuStreamSynchronize = NULL
cdef memcpy_htod_async_t p_cuMemcpyHtoDAsync = NULL
cdef memcpy_dtoh_async_t p_cuMemcpyDtoHAsync = NULL
cdef memcpy_htod_t p_cuMemcpyHtoD = NULL
cdef memcpy_dtoh_t p_cuMemcpyDtoH = NULL

cdef bint ready = False

#: ``CU_STREAM_CAPTURE_STATUS_ACTIVE``.
cdef int CAPTURE_ACTIVE = 1
#: ``CU_STREAM_CAPTURE_MODE_RELAXED``.
cdef int MODE_RELAXED = 2
#: What :meth:`Calls.mem_alloc_async` returns as its status when the stream is being captured (nothing allocated).
CAPTURING = -2

#: Each entry point: its name in ``__pyx_capi__`` and the C signature its capsule must carry.
ENTRY_POINTS = (
    ("cuCtxGetCurrent", "CUresult (CUcontext *)"),
    ("cuCtxSetCurrent", "CUresult (CUcontext)"),
    ("cuEventCreate", "CUresult (CUevent *, unsigned int)"),
    ("cuEventDestroy", "CUresult (CUevent)"),
    ("cuEventRecord", "CUresult (CUevent, CUstream)"),
    ("cuEventQuery", "CUresult (CUevent)"),
    ("cuStreamCreate", "CUresult (CUstream *, unsigned int)"),
    ("cuStreamDestroy", "CUresult (CUstream)"),
    ("cuStreamIsCapturing", "CUresult (CUstream, CUstreamCaptureStatus *)"),
    ("cuThreadExchangeStreamCaptureMode", "CUresult (CUstreamCaptureMode *)"),
    ("cuMemAllocAsync", "CUresult (CUdeviceptr *, size_t, CUstream)"),
    ("cuMemFreeAsync", "CUresult (CUdeviceptr, CUstream)"),
    (
        "cuLaunchKernel",
        "CUresult (CUfunction, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, "
        "unsigned int, unsigned int, CUstream, void **, void **)",
    ),
    ("cuGraphAddEmptyNode", "CUresult (CUgraphNode *, CUgraph, CUgraphNode const *, size_t)"),
    # cuda-bindings maps cuGraphInstantiate to the driver's cuGraphInstantiateWithFlags (12.x and 13.x).
    ("cuGraphInstantiate", "CUresult (CUgraphExec *, CUgraph, unsigned PY_LONG_LONG)"),
    ("cuGraphLaunch", "CUresult (CUgraphExec, CUstream)"),
    ("cuGraphExecDestroy", "CUresult (CUgraphExec)"),
    ("cuStreamSynchronize", "CUresult (CUstream)"),
    ("cuMemcpyHtoDAsync", "CUresult (CUdeviceptr, void const *, size_t, CUstream)"),
    ("cuMemcpyDtoHAsync", "CUresult (void *, CUdeviceptr, size_t, CUstream)"),
    ("cuMemcpyHtoD", "CUresult (CUdeviceptr, void const *, size_t)"),
    ("cuMemcpyDtoH", "CUresult (void *, CUdeviceptr, size_t)"),
)


cdef int address(object obj, void **out) except -1:
    """A handle's address: an int, or an object whose type converts to int (the cuda-bindings handles)."""
    if type(obj) is not int:
        if not has_int(obj):
            raise TypeError(f"a driver handle or an int is needed, not {type(obj).__name__}")
        obj = int(obj)
    out[0] = PyLong_AsVoidPtr(obj)
    if out[0] == NULL and PyErr_Occurred() != NULL:
        return -1
    return 0


cdef int raised(CUresult err) except -1:
    """-1 (the exception propagates) when a failed call left a Python exception set: the bindings' own."""
    if err != 0 and PyErr_Occurred() != NULL:
        return -1
    return 0


cdef tuple failed(CUresult err, str call):
    raised(err)
    return (err, call)


cdef object in_context(object context):
    """The current-context check: ``None`` when ``context`` is current, else ``(-1, the current context as an
    int)`` or ``(status, "cuCtxGetCurrent")``."""
    cdef void *want
    cdef void *current = NULL
    cdef CUresult err
    address(context, &want)
    err = p_cuCtxGetCurrent(&current)
    if err:
        return failed(err, "cuCtxGetCurrent")
    if current != want:
        return (-1, PyLong_FromVoidPtr(current))
    return None


cdef int check_ready() except -1:
    if not ready:
        raise RuntimeError("cuguard.resources._native.setup() has not succeeded")
    return 0


def setup(dict capi, /):
    """Resolve every entry point from ``capi`` (``cuda.bindings.cydriver.__pyx_capi__``); return the problems.

    An empty list: ready. Otherwise nothing is resolved and every call of :data:`CALLS` refuses with
    ``RuntimeError``.
    """
    global ready
    problems = []
    found = {}
    cdef const char *name
    cdef void *pointer
    for entry, signature in ENTRY_POINTS:
        capsule = capi.get(entry)
        if capsule is None:
            problems.append(f"{entry}: missing")
            continue
        if not PyCapsule_CheckExact(capsule):
            problems.append(f"{entry}: not a capsule")
            continue
        name = PyCapsule_GetName(capsule)
        carried = "-" if name == NULL else name.decode("utf-8", "replace")
        if carried != signature:
            problems.append(f"{entry}: another signature ({carried})")
            continue
        pointer = PyCapsule_GetPointer(capsule, name)
        if pointer == NULL:
            problems.append(f"{entry}: an empty capsule")
            continue
        found[entry] = <uintptr_t>pointer
    if problems:
        return problems
    global p_cuCtxGetCurrent, p_cuCtxSetCurrent, p_cuEventCreate, p_cuEventDestroy, p_cuEventRecord, p_cuEventQuery
    global p_cuStreamCreate, p_cuStreamDestroy, p_cuStreamIsCapturing, p_cuMemAllocAsync, p_cuMemFreeAsync
    global p_cuThreadExchangeStreamCaptureMode
    global p_cuLaunchKernel, p_cuGraphAddEmptyNode, p_cuGraphInstantiate, p_cuGraphLaunch, p_cuGraphExecDestroy
    global p_cuStreamSynchronize, p_cuMemcpyHtoDAsync, p_cuMemcpyDtoHAsync, p_cuMemcpyHtoD, p_cuMemcpyDtoH
    p_cuCtxGetCurrent = <ctx_get_current_t><uintptr_t>found["cuCtxGetCurrent"]
    p_cuCtxSetCurrent = <set_current_t><uintptr_t>found["cuCtxSetCurrent"]
    p_cuEventCreate = <create_t><uintptr_t>found["cuEventCreate"]
    p_cuEventDestroy = <one_handle_t><uintptr_t>found["cuEventDestroy"]
    p_cuEventRecord = <two_handles_t><uintptr_t>found["cuEventRecord"]
    p_cuEventQuery = <one_handle_t><uintptr_t>found["cuEventQuery"]
    p_cuStreamCreate = <create_t><uintptr_t>found["cuStreamCreate"]
    p_cuStreamDestroy = <one_handle_t><uintptr_t>found["cuStreamDestroy"]
    p_cuStreamIsCapturing = <is_capturing_t><uintptr_t>found["cuStreamIsCapturing"]
    p_cuThreadExchangeStreamCaptureMode = <exchange_mode_t><uintptr_t>found["cuThreadExchangeStreamCaptureMode"]
    p_cuMemAllocAsync = <mem_alloc_async_t><uintptr_t>found["cuMemAllocAsync"]
    p_cuMemFreeAsync = <mem_free_async_t><uintptr_t>found["cuMemFreeAsync"]
    p_cuLaunchKernel = <launch_kernel_t><uintptr_t>found["cuLaunchKernel"]
    p_cuGraphAddEmptyNode = <graph_add_empty_t><uintptr_t>found["cuGraphAddEmptyNode"]
    p_cuGraphInstantiate = <graph_instantiate_t><uintptr_t>found["cuGraphInstantiate"]
    p_cuGraphLaunch = <two_handles_t><uintptr_t>found["cuGraphLaunch"]
    p_cuGraphExecDestroy = <one_handle_t><uintptr_t>found["cuGraphExecDestroy"]
    p_cuStreamSynchronize = <one_handle_t><uintptr_t>found["cuStreamSynchronize"]
    p_cuMemcpyHtoDAsync = <memcpy_htod_async_t><uintptr_t>found["cuMemcpyHtoDAsync"]
    p_cuMemcpyDtoHAsync = <memcpy_dtoh_async_t><uintptr_t>found["cuMemcpyDtoHAsync"]
    p_cuMemcpyHtoD = <memcpy_htod_t><uintptr_t>found["cuMemcpyHtoD"]
    p_cuMemcpyDtoH = <memcpy_dtoh_t><uintptr_t>found["cuMemcpyDtoH"]
    ready = True
    return problems


cdef tuple create_in(object context, unsigned int flags, create_t create, str call, bint release):
    """``(0, the handle's address)`` | ``(-1, the current context as an int)`` | ``(status, call)``: creates only in
    ``context``."""
    cdef void *handle = NULL
    cdef CUresult err
    check_ready()
    elsewhere = in_context(context)
    if elsewhere is not None:
        return elsewhere
    if release:
        with nogil:
            err = create(&handle, flags)
    else:
        err = create(&handle, flags)
    if err:
        return failed(err, call)
    return (0, PyLong_FromVoidPtr(handle))


cdef tuple create_switched(object context, object previous, unsigned int flags, create_t create, bint release):
    """Switch to ``context``, create, switch back to ``previous``: ``(switch status, status, the handle's address,
    restore status)``. A refused switch runs nothing else; a failed create is still followed by the restore."""
    cdef void *want
    cdef void *back
    cdef void *handle = NULL
    cdef CUresult serr
    cdef CUresult err = 0
    cdef CUresult rerr = 0
    check_ready()
    address(context, &want)
    address(previous, &back)
    if release:
        with nogil:
            serr = p_cuCtxSetCurrent(want)
            if serr == 0:
                err = create(&handle, flags)
                rerr = p_cuCtxSetCurrent(back)
    else:
        serr = p_cuCtxSetCurrent(want)
        if serr == 0:
            err = create(&handle, flags)
            rerr = p_cuCtxSetCurrent(back)
    raised(serr or err or rerr)
    if serr or err:
        return (serr, err, None, rerr)
    return (0, 0, PyLong_FromVoidPtr(handle), rerr)


cdef int one_handle(object obj, one_handle_t fn, bint release) except -1:
    cdef void *handle
    cdef CUresult err
    check_ready()
    address(obj, &handle)
    if release:
        with nogil:
            err = fn(handle)
    else:
        err = fn(handle)
    raised(err)
    return err


cdef int two_handles(object first, object second, two_handles_t fn) except -1:
    """``fn(first, second)`` with the GIL released: the status."""
    cdef void *a
    cdef void *b
    cdef CUresult err
    check_ready()
    address(first, &a)
    address(second, &b)
    with nogil:
        err = fn(a, b)
    raised(err)
    return err


cdef int host_pointer(object obj, bint writable, size_t size, Py_buffer *view, void **out) except -1:
    """A host pointer: an int (an address: page-locked memory; 0 returned) or a buffer of at least ``size``
    bytes, held in ``view`` until ``PyBuffer_Release`` (1 returned)."""
    if type(obj) is int:
        out[0] = PyLong_AsVoidPtr(obj)
        if out[0] == NULL and PyErr_Occurred() != NULL:
            return -1
        return 0
    PyObject_GetBuffer(obj, view, PyBUF_WRITABLE if writable else PyBUF_SIMPLE)
    if <size_t>view.len < size:
        length = view.len
        PyBuffer_Release(view)
        raise ValueError(f"the host buffer has {length} bytes, the copy needs {size}")
    out[0] = view.buf
    return 1


cdef object copy(object context, object dst, object src, size_t size, object stream, bint queued, bint to_device):
    """A copy between device memory and host memory: queued on ``stream`` (the status), or synchronous in
    ``context`` (0 done, -1 another context is current and nothing was done, ``(status, call)`` failed)."""
    cdef void *device
    cdef void *host
    cdef void *s = NULL
    cdef Py_buffer view
    cdef CUresult err
    cdef bint held
    check_ready()
    address(dst if to_device else src, &device)
    if queued:
        address(stream, &s)
    else:
        elsewhere = in_context(context)
        if elsewhere is not None:
            return -1 if elsewhere[0] == -1 else elsewhere
    held = host_pointer(src if to_device else dst, not to_device, size, &view, &host)
    cdef CUdeviceptr dptr = <CUdeviceptr><uintptr_t>device
    with nogil:
        if queued:
            if to_device:
                err = p_cuMemcpyHtoDAsync(dptr, host, size, s)
            else:
                err = p_cuMemcpyDtoHAsync(host, dptr, size, s)
        elif to_device:
            err = p_cuMemcpyHtoD(dptr, host, size)
        else:
            err = p_cuMemcpyDtoH(host, dptr, size)
    if held:
        PyBuffer_Release(&view)
    raised(err)
    if queued or err == 0:
        return err
    return (err, "cuMemcpyHtoD" if to_device else "cuMemcpyDtoH")


#: The calls of :class:`Calls`, in the order of its counters.
CALL_NAMES = (
    "event_create",
    "stream_create",
    "event_create_switched",
    "stream_create_switched",
    "event_destroy",
    "event_query",
    "event_record",
    "stream_destroy",
    "stream_synchronize",
    "mem_alloc_async",
    "mem_free_async",
    "launch",
    "graph_add_empty",
    "graph_instantiate",
    "graph_launch",
    "graph_exec_destroy_relaxed",
    "memcpy_htod_async",
    "memcpy_dtoh_async",
    "memcpy_htod",
    "memcpy_dtoh",
)


@cython.final
cdef class Calls:
    """The compiled driver calls (one instance: :data:`CALLS`). Handles in (ints, or the bindings' handle
    types), statuses out; nothing raises for a driver failure.

    A compiled module that declares its ``Calls`` in its ``.pxd`` calls these methods in C, without a
    Python call; pure Python calls them as ordinary methods. Handles that these calls make are ints (the
    addresses); the resources keep them so, and give the bindings' types out on demand.
    """

    def __cinit__(self):
        self.CAPTURING = CAPTURING

    def counts(self):
        """How many times each call was made in this process (by name): what tests and benchmarks read to
        see that the compiled calls were used."""
        return {name: self.made[i] for i, name in enumerate(CALL_NAMES)}

    cpdef tuple event_create(self, object context, unsigned int flags):
        """Create an event in ``context`` if it is current: ``(0, its address)``, ``(-1, the current context as
        an int)`` (nothing made: the caller switches) or ``(status, "cuEventCreate" or "cuCtxGetCurrent")``."""
        self.made[0] += 1
        return create_in(context, flags, p_cuEventCreate, "cuEventCreate", False)

    cpdef tuple stream_create(self, object context, unsigned int flags):
        """Create a stream in ``context`` if it is current (the GIL released): as :meth:`event_create`."""
        self.made[1] += 1
        return create_in(context, flags, p_cuStreamCreate, "cuStreamCreate", True)

    cpdef tuple event_create_switched(self, object context, object previous, unsigned int flags):
        """Create an event in ``context`` while ``previous`` is current: switch in, create, switch back.
        ``(switch status, status, its address or None, restore status)``."""
        self.made[2] += 1
        return create_switched(context, previous, flags, p_cuEventCreate, False)

    cpdef tuple stream_create_switched(self, object context, object previous, unsigned int flags):
        """Create a stream in ``context`` while ``previous`` is current (the GIL released): as
        :meth:`event_create_switched`."""
        self.made[3] += 1
        return create_switched(context, previous, flags, p_cuStreamCreate, True)

    cpdef int event_destroy(self, object event) except -1:
        """``cuEventDestroy``: the status."""
        self.made[4] += 1
        return one_handle(event, p_cuEventDestroy, False)

    cpdef int event_query(self, object event) except -1:
        """``cuEventQuery``: the status (``CUDA_ERROR_NOT_READY`` while work before the record is pending)."""
        self.made[5] += 1
        return one_handle(event, p_cuEventQuery, False)

    cpdef int event_record(self, object event, object stream) except -1:
        """``cuEventRecord`` (the GIL released): the status."""
        self.made[6] += 1
        return two_handles(event, stream, p_cuEventRecord)

    cpdef int stream_destroy(self, object stream) except -1:
        """``cuStreamDestroy`` (the GIL released): the status."""
        self.made[7] += 1
        return one_handle(stream, p_cuStreamDestroy, True)

    cpdef int stream_synchronize(self, object stream) except -1:
        """``cuStreamSynchronize`` (the GIL released): the status."""
        self.made[8] += 1
        return one_handle(stream, p_cuStreamSynchronize, True)

    cpdef tuple mem_alloc_async(self, size_t size, object stream, bint ask_capture):
        """Allocate ``size`` bytes ordered on ``stream`` (the GIL released).

        With ``ask_capture``, ``cuStreamIsCapturing`` first: while a capture is active on the stream nothing
        is allocated and the status is :data:`CAPTURING`. Returns ``(0, the address as an int)``,
        ``(CAPTURING, None)`` or ``(status, the call that failed)``.
        """
        self.made[9] += 1
        cdef void *s
        cdef CUdeviceptr ptr = 0
        cdef int capturing = 0
        cdef CUresult err = 0
        cdef bint asked = False
        check_ready()
        address(stream, &s)
        with nogil:
            if ask_capture:
                err = p_cuStreamIsCapturing(s, &capturing)
                asked = True
            if err == 0 and capturing != CAPTURE_ACTIVE:
                asked = False
                err = p_cuMemAllocAsync(&ptr, size, s)
        if err:
            return failed(err, "cuStreamIsCapturing" if asked else "cuMemAllocAsync")
        if capturing == CAPTURE_ACTIVE:
            return (CAPTURING, None)
        return (0, PyLong_FromUnsignedLongLong(ptr))

    cpdef int mem_free_async(self, object ptr, object stream) except -1:
        """``cuMemFreeAsync`` (the GIL released): the status."""
        self.made[10] += 1
        cdef void *p
        cdef void *s
        cdef CUresult err
        check_ready()
        address(ptr, &p)
        address(stream, &s)
        with nogil:
            err = p_cuMemFreeAsync(<CUdeviceptr><uintptr_t>p, s)
        raised(err)
        return err

    cpdef int launch(self, object function, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                     unsigned int by, unsigned int bz, unsigned int shared, object stream, object params) except -1:
        """``cuLaunchKernel`` with a packed parameter array at address ``params`` (the GIL released): the status."""
        self.made[11] += 1
        cdef void *f
        cdef void *s
        cdef void *p
        cdef CUresult err
        check_ready()
        address(function, &f)
        address(stream, &s)
        address(params, &p)
        with nogil:
            err = p_cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shared, s, <void **>p, NULL)
        raised(err)
        return err

    cpdef tuple graph_add_empty(self, object graph, object dependency):
        """An empty node after ``dependency`` (or none): ``(0, the node's address as an int)`` | ``(status, call)``.

        ``graph`` and ``dependency`` are handles or their addresses (ints); the graphs layer keeps the
        address and makes the bindings' ``CUgraphNode`` only when it is asked for.
        """
        self.made[12] += 1
        cdef void *g
        cdef void *dep = NULL
        cdef void *node = NULL
        cdef size_t count = 0
        cdef CUresult err
        check_ready()
        address(graph, &g)
        if dependency is not None:
            address(dependency, &dep)
            count = 1
        err = p_cuGraphAddEmptyNode(&node, g, &dep if count else NULL, count)
        if err:
            return failed(err, "cuGraphAddEmptyNode")
        return (0, PyLong_FromVoidPtr(node))

    cpdef tuple graph_instantiate(self, object context, object graph, unsigned long long flags):
        """Instantiate ``graph`` (the GIL released) in ``context`` if it is current (``None``: wherever).

        ``(0, the executable graph's address as an int)`` | ``(-1, the current context as an int)`` (nothing
        made: the caller switches) | ``(status, call)``.
        """
        self.made[13] += 1
        cdef void *g
        cdef void *made = NULL
        cdef CUresult err
        check_ready()
        if context is not None:
            elsewhere = in_context(context)
            if elsewhere is not None:
                return elsewhere
        address(graph, &g)
        with nogil:
            err = p_cuGraphInstantiate(&made, g, flags)
        if err:
            return failed(err, "cuGraphInstantiate")
        return (0, PyLong_FromVoidPtr(made))

    cpdef int graph_launch(self, object graph_exec, object stream) except -1:
        """``cuGraphLaunch`` (the GIL released): the status."""
        self.made[14] += 1
        return two_handles(graph_exec, stream, p_cuGraphLaunch)

    cpdef tuple graph_exec_destroy_relaxed(self, object graph_exec):
        """``cuGraphExecDestroy`` (the GIL released) with the calling thread in relaxed capture mode: switch the
        mode, destroy, give the thread its mode back (skipped when it was relaxed already). ``(switch status,
        status, restore status)``: a refused switch runs nothing else."""
        self.made[15] += 1
        cdef void *handle
        cdef int mode = MODE_RELAXED
        cdef CUresult xerr
        cdef CUresult err = 0
        cdef CUresult rerr = 0
        check_ready()
        address(graph_exec, &handle)
        with nogil:
            xerr = p_cuThreadExchangeStreamCaptureMode(&mode)  # mode: the thread's mode before
            if xerr == 0:
                err = p_cuGraphExecDestroy(handle)
                if mode != MODE_RELAXED:
                    rerr = p_cuThreadExchangeStreamCaptureMode(&mode)
        raised(xerr or err or rerr)
        return (xerr, err, rerr)

    cpdef int memcpy_htod_async(self, object dst, object src, size_t size, object stream) except -1:
        """Queue a host-to-device copy (``src``: an address or a buffer) on ``stream``: the status."""
        self.made[16] += 1
        return copy(None, dst, src, size, stream, True, True)

    cpdef int memcpy_dtoh_async(self, object dst, object src, size_t size, object stream) except -1:
        """Queue a device-to-host copy (``dst``: an address or a writable buffer) on ``stream``: the status."""
        self.made[17] += 1
        return copy(None, dst, src, size, stream, True, False)

    cpdef object memcpy_htod(self, object context, object dst, object src, size_t size):
        """A synchronous host-to-device copy in ``context``: 0, -1 (another context current) or ``(status, call)``."""
        self.made[18] += 1
        return copy(context, dst, src, size, None, False, True)

    cpdef object memcpy_dtoh(self, object context, object dst, object src, size_t size):
        """A synchronous device-to-host copy in ``context``: 0, -1 (another context current) or ``(status, call)``."""
        self.made[19] += 1
        return copy(context, dst, src, size, None, False, False)


#: The compiled calls (usable once :func:`setup` succeeded; before, each raises ``RuntimeError``).
CALLS = Calls()

# The compiled driver calls (_native.pyx), declared for the compiled modules that call them in C: a module
# whose .pxd declares its `_fp` global as a Calls calls these methods without a Python call.
cimport cython


@cython.final
cdef class Calls:
    cdef readonly int CAPTURING
    cdef unsigned long long made[20]  # how many times each call was made, in the order of CALL_NAMES

    cpdef tuple event_create(self, object context, unsigned int flags)
    cpdef tuple stream_create(self, object context, unsigned int flags)
    cpdef tuple event_create_switched(self, object context, object previous, unsigned int flags)
    cpdef tuple stream_create_switched(self, object context, object previous, unsigned int flags)
    cpdef int event_destroy(self, object event) except -1
    cpdef int event_query(self, object event) except -1
    cpdef int event_record(self, object event, object stream) except -1
    cpdef int stream_destroy(self, object stream) except -1
    cpdef int stream_synchronize(self, object stream) except -1
    cpdef tuple mem_alloc_async(self, size_t size, object stream, bint ask_capture)
    cpdef int mem_free_async(self, object ptr, object stream) except -1
    cpdef int launch(self, object function, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                     unsigned int by, unsigned int bz, unsigned int shared, object stream, object params) except -1
    cpdef tuple graph_add_empty(self, object graph, object dependency)
    cpdef tuple graph_instantiate(self, object context, object graph, unsigned long long flags)
    cpdef int graph_launch(self, object graph_exec, object stream) except -1
    cpdef tuple graph_exec_destroy_relaxed(self, object graph_exec)
    cpdef int memcpy_htod_async(self, object dst, object src, size_t size, object stream) except -1
    cpdef int memcpy_dtoh_async(self, object dst, object src, size_t size, object stream) except -1
    cpdef object memcpy_htod(self, object context, object dst, object src, size_t size)
    cpdef object memcpy_dtoh(self, object context, object dst, object src, size_t size)

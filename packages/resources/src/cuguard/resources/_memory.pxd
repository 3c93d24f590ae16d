# The compiled build of _memory.py (Cython's pure-Python mode): Buffer and PinnedBuffer are
# compiled classes whose fields are C slots; the module's functions are compiled from the same source.
cimport cython

from cuguard.context.contexts cimport Context
from cuguard.resources._base cimport Resource
from cuguard.resources._native cimport Calls
from cuguard.resources._stream cimport Stream

# The compiled calls while in use (else None): typed, so that its methods are C calls.
cdef Calls _fp
# Whether the race checker is on (_race.follow keeps it current).
cdef bint _racing
# The owner tables of the captures in progress (_captures._tables): empty while nothing captures.
cdef dict _capture_tables
# The owners of live DLPack exports (_dlpack._owners): empty while nothing is exported.
cdef dict _dlpack_owners


cdef class PinnedBuffer


cdef class Buffer(Resource):
    cdef public object _device
    cdef public object _graph_used
    cdef public object _lender
    cdef public object _mr
    cdef public object _mr_data
    cdef public object _release_deferred
    cdef public object _size
    cdef public object _stream

    @cython.locals(free_on=Stream)
    cpdef close(self, stream=*)

    @cython.locals(s=Stream, pinned=PinnedBuffer)
    cpdef copy_from(self, src, stream=*)


cdef class PinnedBuffer(Resource):
    cdef public object _graph_used
    cdef public object _mr
    cdef public object _mr_data
    cdef public object _release_deferred
    cdef public object _size
    cdef public object _views


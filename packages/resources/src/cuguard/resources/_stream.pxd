# The compiled build of _stream.py (Cython's pure-Python mode): Stream and Event are compiled
# classes whose fields are C slots, and the hot paths' factories set those slots directly; the
# module's other functions are compiled from the same source.
cimport cython

from cuguard.resources._base cimport Resource
from cuguard.resources._native cimport Calls

# The compiled calls while in use (else None): typed, so that its methods are C calls.
cdef Calls _fp
# source_new(__file__, X): None here (the factories' X.__new__(X) is a direct C call); C globals.
cdef object _new_event, _new_stream
# Whether the race checker is on (_race.follow keeps it current).
cdef bint _racing


cdef class Stream(Resource):
    cdef public object _borrowers
    cdef public object _device
    cdef public object _lender
    cdef public object _may_capture
    cdef public object _release_deferred


cdef class Event(Resource):
    cdef public object _device
    cdef public object _release_deferred
    cdef public object _timing

    @cython.locals(s=Stream)
    cpdef record(self, stream)


@cython.locals(event=Event)
cpdef new_event(handle, context, device, timing)

@cython.locals(stream=Stream)
cpdef new_stream(handle, context, device)

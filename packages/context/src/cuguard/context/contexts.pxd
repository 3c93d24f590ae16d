# The compiled build of _context.py (Cython's pure-Python mode): Context is a compiled class whose
# fields are C slots, so that the compiled layers above read a context's state without a lookup
# (their .pxd files type their contexts with it); the module's functions are compiled from the same
# source.
from cuguard.errors.owners cimport Unique

# Whether a context was ever destroyed for good (_record_gone): read on every switch path.
cdef bint _any_gone


cdef class Context(Unique):
    cdef object __weakref__
    cdef public object _closed
    cdef public object _device
    cdef public object _driver
    cdef public object _handle
    cdef public object _int
    cdef public object _kind
    cdef public object _released
    cdef public object _why

# The compiled build of _base.py (Cython's pure-Python mode): Resource is a compiled class whose
# fields are C slots; its subclasses (Python classes, or compiled ones declared in other .pxd files)
# add their own.
from cuguard.context.contexts cimport Context
from cuguard.errors.owners cimport Owned


cdef class Resource(Owned):
    cdef object __weakref__
    cdef public object _closed
    cdef public Context _context
    cdef public object _handle
    cdef public object _owned

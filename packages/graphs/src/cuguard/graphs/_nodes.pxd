# The compiled build of _nodes.py (Cython's pure-Python mode): Node is a compiled class whose fields are
# C slots, GraphDefinition sits on a compiled base (DefinitionFields) holding the fields building reads,
# and add_empty, the hot path of empty() and join(), reads both as C slots (its driver call is the
# resources layer's compiled call while in use). The module's other functions and classes are compiled
# from the same source.
cimport cython

from cuguard.errors.owners cimport Owned, Unique

# The resources layer's compiled calls while in use (else None): a C global, read without a lookup.
cdef object _fp


cdef class Node(Unique):
    cdef object __weakref__
    cdef public object _graph
    cdef public object _h
    cdef public object _info
    cdef public object _key
    cdef public object _kind
    cdef public object _order
    cdef public object _state


cdef class DefinitionFields(Owned):
    cdef object __weakref__
    cdef public object _closed
    cdef public object _driver
    cdef public object _fresh
    cdef public object _handle
    cdef public object _int
    cdef public object _next_order
    cdef public object _version


@cython.locals(node=Node, first=Node, fresh=list)
cpdef Node add_empty(DefinitionFields graph, tuple deps)

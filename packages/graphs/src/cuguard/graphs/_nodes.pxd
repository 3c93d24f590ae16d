# The compiled build of _nodes.py (Cython's pure-Python mode): Node is a compiled class whose fields are
# C slots, GraphDefinition sits on a compiled base (DefinitionFields) holding its fields, made, set
# up and released by compiled functions, and add_empty, the hot path of empty() and join(), reads both
# as C slots (its driver call is the resources layer's compiled call while in use). The module's other functions and classes are compiled
# from the same source.
cimport cython

from cuguard.errors.owners cimport Owned, Unique

# The resources layer's compiled calls while in use (else None): a C global, read without a lookup.
cdef object _fp
# source_new(__file__, X): None here (the factories' X.__new__(X) is a direct C call); C globals.
cdef object _new_node


cdef class Node(Unique):
    cdef object __weakref__
    cdef public object _graph
    cdef public object _h
    cdef public object _info
    cdef public object _key
    cdef public object _kind
    cdef public object _order
    cdef public object _state


cdef class Collected(Owned):
    pass


cdef class DefinitionFields(Collected):
    cdef object __weakref__
    cdef public object _bodies
    cdef public object _closed
    cdef public object _conditions
    cdef public object _context
    cdef public object _driver
    cdef public object _executables
    cdef public object _found
    cdef public object _fresh
    cdef public object _handle
    cdef public object _int
    cdef public object _next_order
    cdef public object _nodes
    cdef public object _owners
    cdef public object _payload
    cdef public object _shape
    cdef public object _shared
    cdef public object _source
    cdef public object _uobj
    cdef public object _version


@cython.locals(node=Node, fresh=list, deps=tuple, count=Py_ssize_t)
cpdef Node add_empty(DefinitionFields graph, Node first, tuple rest)

cpdef create_definition(DefinitionFields graph, device=*)
cpdef setup_fields(DefinitionFields graph, handle, context, owners, next_order)
cpdef forget_fields(DefinitionFields graph)
cpdef close_definition(DefinitionFields graph)

# The compiled build of _executable.py (Cython's pure-Python mode): Graph is a compiled class whose
# fields are C slots, made by new_graph (a C function setting them); launch and close, its hot methods,
# read them as C slots. The module's other functions and classes are compiled from the same source.
cimport cython

from cuguard.graphs._nodes cimport Collected, DefinitionFields

# The resources layer's compiled calls while in use (else None): a C global, read without a lookup.
cdef object _fp
# source_new(__file__, X): None here (the factories' X.__new__(X) is a direct C call); C globals.
cdef object _new_graph


cdef class Graph(Collected):
    cdef object __weakref__
    cdef public object _closed
    cdef public object _context
    cdef public object _driver
    cdef public object _handle
    cdef public object _int
    cdef public object _origin
    cdef public object _owners
    cdef public object _released_with_close
    cdef public object _signature


@cython.locals(graph=Graph)
cpdef Graph new_graph(handle, context, owners, signature, origin)

cpdef Graph instantiate_definition(DefinitionFields definition)

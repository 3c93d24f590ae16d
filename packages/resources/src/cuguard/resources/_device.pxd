# The compiled build of _device.py (Cython's pure-Python mode): the module is compiled whole (Device stays
# a Python class: one object per ordinal, made in __new__).
from cuguard.resources._native cimport Calls

# The compiled calls while in use (else None): typed, so that its methods are C calls.
cdef Calls _fp
# Whether the race checker is on (_race.follow keeps it current).
cdef bint _racing

# The hot paths' factories, called in C.
from cuguard.resources._memory cimport allocate_ordered
from cuguard.resources._stream cimport new_event, new_stream

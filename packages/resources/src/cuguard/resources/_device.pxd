# The compiled build of _device.py (Cython's pure-Python mode): the module is compiled whole (Device stays
# a Python class: one object per ordinal, made in __new__).
from cuguard.resources._native cimport Calls

# The compiled calls while in use (else None): typed, so that its methods are C calls.
cdef Calls _fp

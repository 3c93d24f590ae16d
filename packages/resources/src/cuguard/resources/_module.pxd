# The compiled build of _module.py (Cython's pure-Python mode): the module is compiled whole (launch and
# its checks; Module, Kernel and LaunchConfig stay Python classes).
from cuguard.resources._native cimport Calls

# The compiled calls while in use (else None): typed, so that its methods are C calls.
cdef Calls _fp

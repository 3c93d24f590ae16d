# The compiled build of _module.py (Cython's pure-Python mode): the module is compiled whole (launch and
# its checks; Module, Kernel and LaunchConfig stay Python classes).
from cuguard.resources._native cimport Calls

# The compiled calls while in use (else None): typed, so that its methods are C calls.
cdef Calls _fp
# Whether the race checker is on (_race.follow keeps it current).
cdef bint _racing
# The owner tables of the captures in progress (_captures._tables): empty while nothing captures.
cdef dict _capture_tables

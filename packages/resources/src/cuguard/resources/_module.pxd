# The compiled build of _module.py (Cython's pure-Python mode): Module and Kernel are compiled classes whose
# fields are C slots, and launch's checked part takes a typed stream and kernel; the module's other
# functions are compiled from the same source (LaunchConfig stays a Python class: its immutability rests on
# object.__setattr__, which a compiled class's own __setattr__ would refuse).
from cuguard.errors.owners cimport Unique
from cuguard.resources._base cimport Resource
from cuguard.resources._native cimport Calls
from cuguard.resources._stream cimport Stream

# The compiled calls while in use (else None): typed, so that its methods are C calls.
cdef Calls _fp
# Whether the race checker is on (_race.follow keeps it current).
cdef bint _racing
# The owner tables of the captures in progress (_captures._tables): empty while nothing captures.
cdef dict _capture_tables


cdef class Module(Resource):
    cdef public object _device
    cdef public object _signatures
    cdef public object _symbols


cdef class Kernel(Unique):
    cdef public object _address
    cdef public object _handle
    cdef public object _signature
    cdef public Module _module
    cdef public object _name


cpdef launch_checked(Stream stream, config, Kernel kernel, tuple args, reads)

# The compiled build of _device.py (Cython's pure-Python mode): the module is compiled whole. Device stays a
# Python class (one object per ordinal, made in __new__) on a compiled base, DeviceFields, whose fields are
# C slots; the hot paths take the device typed as that base, and its context typed.
cimport cython

from cuguard.context.contexts cimport Context
from cuguard.resources._native cimport Calls

# The compiled calls while in use (else None): typed, so that its methods are C calls.
cdef Calls _fp
# source_new(__file__, X): None here (the factories' X.__new__(X) is a direct C call); C globals.
cdef object _new_buffer, _new_event
# Whether the race checker is on (_race.follow keeps it current).
cdef bint _racing

# The hot paths' factories, called in C, and the classes they make.
from cuguard.resources._memory cimport Buffer
from cuguard.resources._stream cimport Event, Stream, new_stream


cdef class DeviceFields:
    cdef public object _context
    cdef public object _default_mr
    cdef public object _driver
    cdef public object _handle
    cdef public object _memory_resource
    cdef public object _ordinal
    cdef public object _properties


@cython.locals(context=Context)
cpdef stream_on(DeviceFields device, flags, priority)

@cython.locals(context=Context, event=Event)
cpdef event_on(DeviceFields device, timing=*, ipc_enabled=*)

@cython.locals(context=Context, s=Stream, buf=Buffer)
cpdef allocate_on(DeviceFields device, size, stream=*)

cdef object _compiled_refused(Context context, err, value, str switched, str call, undo, flags)

# The compiled build of owners.py (Cython's pure-Python mode): both bases are compiled classes, so
# that the layers above can declare compiled classes on Owned.
cdef class Unique:
    pass


cdef class Owned(Unique):
    pass

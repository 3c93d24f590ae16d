"""What the real CUDA driver does in the edge cases cuguard depends on, as data.

Observed on an NVIDIA H200 (driver 580.159.04, CUDA 13.0, cuda-bindings
13.3.1); the raw observations are ``shared/driver-facts/`` in the repository.
The simulated driver reproduces them, and the fault proxy over the real driver
reuses :data:`STICKY_EXEMPT` to make a ``sticky`` fault behave as the real
driver does after a kernel fault. The facts about each driver function (which
calls work before ``cuInit``, which still succeed once the driver is sticky)
are records of the one table of driver facts
(:data:`cuguard.errors.lowlevel.DRIVER_FACTS`); the sets here are views of it.
"""

from __future__ import annotations

from cuguard.errors.lowlevel import calls_where

__all__ = [
    "CONTEXT_FLAGS_MASK",
    "CRASHING_CASES",
    "DRIVER_VERSION",
    "EVENT_FLAGS_MASK",
    "FUNCTION_ATTRIBUTE_DEFAULTS",
    "HOST_ALLOC_FLAGS_MASK",
    "MANAGED_ATTACH_FLAGS",
    "PITCH_ALIGNMENT",
    "PITCH_ELEMENT_SIZES",
    "PRE_INIT_CALLS",
    "STREAM_FLAGS",
    "STREAM_PRIORITY_RANGE",
    "context_flags_valid",
    "event_flags_valid",
    "STICKY_ASSUMED_SUCCEEDS",
    "STICKY_EXEMPT",
    "STICKY_OBSERVED_FAILS",
    "STICKY_OBSERVED_SUCCEEDS",
]

#: ``cuDriverGetVersion`` of the observed driver (CUDA 13.0).
DRIVER_VERSION = 13000

#: Calls that work before ``cuInit`` (every other call returns
#: ``CUDA_ERROR_NOT_INITIALIZED`` until then).
PRE_INIT_CALLS: frozenset[str] = calls_where(pre_init=True)

#: Calls observed to fail with the sticky status after a kernel wrote to an
#: invalid address (``CUDA_ERROR_ILLEGAL_ADDRESS``). Releases fail too: what
#: cannot be released must be reported and leaked.
STICKY_OBSERVED_FAILS: frozenset[str] = calls_where(sticky="fails-observed")

#: Calls observed to still succeed after that sticky error.
STICKY_OBSERVED_SUCCEEDS: frozenset[str] = calls_where(sticky="succeeds-observed")

#: Calls not observed, assumed to keep working after a sticky error because
#: they only read driver constants, manage the calling thread's context stack,
#: or edit host-side graph definitions (like ``cuGraphCreate``, which was
#: observed) and reference counts.
STICKY_ASSUMED_SUCCEEDS: frozenset[str] = calls_where(sticky="succeeds-assumed")

#: Calls that still succeed while the driver is sticky; every other call
#: returns the sticky status.
STICKY_EXEMPT: frozenset[str] = calls_where(sticky_exempt=True)

#: Misuse that crashed the real process (segmentation fault or abort): the
#: simulator raises ``SimulatedCrash`` for each instead of returning a status.
CRASHING_CASES: dict[str, str] = {
    "stream_destroy_twice": "cuStreamDestroy twice on the same stream: segmentation fault",
    "event_destroy_twice": "cuEventDestroy twice on the same event: segmentation fault",
    "graph_node_destroy_twice": "cuGraphDestroyNode twice on the same node: segmentation fault",
    "stream_destroy_in_destroyed_ctx": "cuStreamDestroy of a stream whose context was destroyed: segmentation fault",
    "ctx_set_current_destroyed": "cuCtxSetCurrent of a destroyed context: abort (double free or corruption)",
    # Observed later on the same H200 (driver 580.159.04):
    "graph_add_kernel_node_without_context": (
        "cuGraphAddKernelNode while no context is current (even with the params' ctx set): segmentation fault"
    ),
}


# --- argument rules of the driver ------------------------------------------------------------
# Each rule says where it comes from: the CUDA driver API documentation ("documented"), or a
# choice where the documentation is silent ("assumed"); the differential harness
# (scripts/differential.py) checks every one of them against a real GPU.

#: Valid ``cuCtxCreate`` / ``cuDevicePrimaryCtxSetFlags`` flag bits (``CU_CTX_FLAGS_MASK``);
#: at most one scheduling flag of ``CU_CTX_SCHED_MASK`` (documented: "Only one of the
#: scheduling flags can be set"). Other bits: ``CUDA_ERROR_INVALID_VALUE`` (assumed).
CONTEXT_FLAGS_MASK = 0xFF
_SCHED_MASK = 0x07


def context_flags_valid(flags: int) -> bool:
    """Whether the driver accepts ``flags`` for a context (see :data:`CONTEXT_FLAGS_MASK`)."""
    sched = flags & _SCHED_MASK
    return not flags & ~CONTEXT_FLAGS_MASK and sched in (0, 1, 2, 4)


#: Valid ``cuStreamCreate`` / ``cuStreamCreateWithPriority`` flags (documented:
#: ``CU_STREAM_DEFAULT``, ``CU_STREAM_NON_BLOCKING``); others: ``CUDA_ERROR_INVALID_VALUE``.
STREAM_FLAGS = frozenset({0, 1})

#: ``cuCtxGetStreamPriorityRange`` of an H200: (least, greatest). A priority outside it is
#: clamped into it, not refused (documented).
STREAM_PRIORITY_RANGE = (0, -5)

#: Valid ``cuEventCreate`` flag bits (``BLOCKING_SYNC | DISABLE_TIMING | INTERPROCESS``); other
#: bits are ``CUDA_ERROR_INVALID_VALUE`` (assumed), and so is ``CU_EVENT_INTERPROCESS`` without
#: ``CU_EVENT_DISABLE_TIMING`` (documented: it "must be specified along with" it).
EVENT_FLAGS_MASK = 0x07


def event_flags_valid(flags: int) -> bool:
    """Whether the driver accepts ``flags`` for ``cuEventCreate``."""
    return not flags & ~EVENT_FLAGS_MASK and (not flags & 4 or bool(flags & 2))


#: Valid ``cuMemHostAlloc`` flag bits (``PORTABLE | DEVICEMAP | WRITECOMBINED``, documented as
#: orthogonal); other bits: ``CUDA_ERROR_INVALID_VALUE`` (assumed).
HOST_ALLOC_FLAGS_MASK = 0x07

#: ``cuMemAllocManaged`` flags: exactly one of ``CU_MEM_ATTACH_GLOBAL`` and
#: ``CU_MEM_ATTACH_HOST`` (documented); anything else: ``CUDA_ERROR_INVALID_VALUE``.
MANAGED_ATTACH_FLAGS = frozenset({1, 2})

#: ``cuMemAllocPitch``: ``ElementSizeBytes`` "may be 4, 8 or 16" (documented; others:
#: ``CUDA_ERROR_INVALID_VALUE``, assumed), and the pitch is the width rounded up to this
#: alignment (assumed: the texture pitch alignment of recent GPUs).
PITCH_ELEMENT_SIZES = frozenset({4, 8, 16})
PITCH_ALIGNMENT = 512

#: ``cuFuncGetAttribute`` of a kernel with no shared, constant or local memory and no launch
#: bounds, by ``CUfunction_attribute`` name (assumed, H200-like; ``NUM_REGS`` is what ptxas
#: gives a trivial kernel). ``MAX_DYNAMIC_SHARED_SIZE_BYTES`` starts at 48 KiB; raising it
#: (up to the device's opt-in limit) is what allows a launch with more.
FUNCTION_ATTRIBUTE_DEFAULTS: dict[str, int] = {
    "MAX_THREADS_PER_BLOCK": 1024,
    "SHARED_SIZE_BYTES": 0,
    "CONST_SIZE_BYTES": 0,
    "LOCAL_SIZE_BYTES": 0,
    "NUM_REGS": 4,
    "PTX_VERSION": 90,
    "BINARY_VERSION": 90,
    "CACHE_MODE_CA": 0,
    "MAX_DYNAMIC_SHARED_SIZE_BYTES": 49152,
    "PREFERRED_SHARED_MEMORY_CARVEOUT": -1,
    "CLUSTER_SIZE_MUST_BE_SET": 0,
    "REQUIRED_CLUSTER_WIDTH": 0,
    "REQUIRED_CLUSTER_HEIGHT": 0,
    "REQUIRED_CLUSTER_DEPTH": 0,
    "NON_PORTABLE_CLUSTER_SIZE_ALLOWED": 0,
    "CLUSTER_SCHEDULING_POLICY_PREFERENCE": 0,
    "DEVICE_NODE_UPDATE_SUPPORTED": 0,
    "SHARED_MEMORY_MODE": 0,
}

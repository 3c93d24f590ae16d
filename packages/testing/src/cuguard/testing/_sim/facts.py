"""What the real CUDA driver does in the edge cases cuguard depends on, as data.

Observed on an NVIDIA H200 (driver 580.159.04, CUDA 13.0, cuda-bindings
13.3.1); the raw observations are ``shared/driver-facts/`` in the repository.
The simulated driver reproduces them, and the fault proxy over the real driver
reuses :data:`STICKY_EXEMPT` to make a ``sticky`` fault behave as the real
driver does after a kernel fault.
"""

from __future__ import annotations

__all__ = [
    "CRASHING_CASES",
    "DRIVER_VERSION",
    "PRE_INIT_CALLS",
    "STICKY_ASSUMED_SUCCEEDS",
    "STICKY_EXEMPT",
    "STICKY_OBSERVED_FAILS",
    "STICKY_OBSERVED_SUCCEEDS",
]

#: ``cuDriverGetVersion`` of the observed driver (CUDA 13.0).
DRIVER_VERSION = 13000

#: Calls that work before ``cuInit`` (every other call returns
#: ``CUDA_ERROR_NOT_INITIALIZED`` until then).
PRE_INIT_CALLS: frozenset[str] = frozenset({"cuInit", "cuDriverGetVersion", "cuGetErrorName", "cuGetErrorString"})

#: Calls observed to fail with the sticky status after a kernel wrote to an
#: invalid address (``CUDA_ERROR_ILLEGAL_ADDRESS``). Releases fail too: what
#: cannot be released must be reported and leaked.
STICKY_OBSERVED_FAILS: frozenset[str] = frozenset(
    {
        "cuStreamSynchronize",
        "cuCtxSynchronize",
        "cuStreamCreate",
        "cuEventCreate",
        "cuMemAlloc",
        "cuEventRecord",
        "cuEventQuery",
        "cuStreamDestroy",
        "cuEventDestroy",
        "cuMemFree",
        "cuModuleUnload",
    }
)

#: Calls observed to still succeed after that sticky error.
STICKY_OBSERVED_SUCCEEDS: frozenset[str] = frozenset(
    {
        "cuCtxGetCurrent",
        "cuCtxSetCurrent",
        "cuGraphCreate",
        "cuCtxDestroy",
        "cuDevicePrimaryCtxRelease",
        "cuGetErrorName",
    }
)

#: Calls not observed, assumed to keep working after a sticky error because
#: they only read driver constants, manage the calling thread's context stack,
#: or edit host-side graph definitions (like ``cuGraphCreate``, which was
#: observed) and reference counts.
STICKY_ASSUMED_SUCCEEDS: frozenset[str] = frozenset(
    {
        "cuGetErrorString",
        "cuDriverGetVersion",
        "cuInit",
        "cuDeviceGet",
        "cuDeviceGetCount",
        "cuDeviceGetName",
        "cuDeviceGetAttribute",
        "cuDeviceTotalMem",
        "cuDeviceGetUuid",
        "cuCtxGetDevice",
        "cuCtxPushCurrent",
        "cuCtxPopCurrent",
        "cuCtxGetApiVersion",
        "cuStreamGetCtx",
        "cuGraphDestroy",
        "cuGraphDestroyNode",
        "cuGraphAddDependencies",
        "cuGraphRemoveDependencies",
        "cuGraphGetNodes",
        "cuGraphGetEdges",
        "cuGraphGetRootNodes",
        "cuGraphNodeGetDependencies",
        "cuGraphNodeGetDependentNodes",
        "cuGraphNodeGetType",
        "cuGraphAddEmptyNode",
        "cuGraphAddChildGraphNode",
        "cuGraphAddHostNode",
        "cuGraphAddEventRecordNode",
        "cuGraphAddEventWaitNode",
        "cuGraphAddKernelNode",
        "cuGraphAddMemsetNode",
        "cuGraphAddMemcpyNode",
        "cuGraphKernelNodeGetParams",
        "cuGraphKernelNodeSetParams",
        "cuGraphChildGraphNodeGetGraph",
        "cuGraphClone",
        "cuUserObjectCreate",
        "cuUserObjectRetain",
        "cuUserObjectRelease",
        "cuGraphRetainUserObject",
        "cuGraphReleaseUserObject",
    }
)

#: Calls that still succeed while the driver is sticky; every other call
#: returns the sticky status.
STICKY_EXEMPT: frozenset[str] = STICKY_OBSERVED_SUCCEEDS | STICKY_ASSUMED_SUCCEEDS

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

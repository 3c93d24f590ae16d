"""One record per CUDA driver function cuguard knows: what the call does to the driver's state.

Every layer, the simulated driver, the fault proxy, the safety net over the
real driver and the sweeps read their facts about driver functions from this
one table, through views (:func:`calls_where`), instead of keeping lists of
their own. A function cuguard calls, or the simulator implements, has a
record; a test checks that (adding a driver call means adding its record
here, and nowhere else).

What a record says (:class:`DriverFact`):

- ``creates``: the kind of driver object the call makes (``"stream"``,
  ``"device_memory"``, ``"graph_node"``...), found at ``handle_from``: the
  call's second result (``"result"``) or its first argument (``"argument"``:
  ``cuMemMap`` maps at an address the caller reserved; a device's primary
  context is counted by its device). ``releases``: the kind it releases (its
  first argument). Primary contexts and user objects are reference counted
  (:data:`REFCOUNTED`): releasing one twice is no misuse.
- ``synchronizes``: waits for the device (a kernel fault surfaces there);
  ``waits``: asks for or waits on streams, events or contexts
  (refused on a capturing stream); ``queues``: queues work on a stream (a
  capture records it or refuses it); ``transfers``: a synchronous copy or
  memset.
- ``capture_unsafe``: a thread whose capture mode prohibits potentially unsafe
  calls may not make it (CUDA refuses it and invalidates the capture).
- ``callback_safe``: answers from static tables: allowed inside a CUDA
  callback, after a deinitialization, before ``cuInit`` (``pre_init`` says
  which calls work before ``cuInit`` at all).
- ``switches``: changes the calling thread's current context;
  ``legacy_query``: may name the legacy default stream while a blocking
  stream captures, ordering no work.
- ``sticky``: what it does once a kernel fault made the context sticky, as
  observed on an NVIDIA H200 (driver 580.159.04, CUDA 13.0): ``"fails"``
  (assumed, the default), ``"fails-observed"``, ``"succeeds-observed"`` or
  ``"succeeds-assumed"`` (reads driver constants, manages the thread's
  context stack, or edits host-side graph definitions and reference counts).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from types import MappingProxyType
from typing import Literal

__all__ = ["DRIVER_FACTS", "REFCOUNTED", "DriverFact", "calls_where"]

Sticky = Literal["fails", "fails-observed", "succeeds-observed", "succeeds-assumed"]


@dataclass(frozen=True, slots=True)
class DriverFact:
    """What one driver function does (see the module's description of each field)."""

    name: str
    creates: str | None = None
    handle_from: Literal["result", "argument"] = "result"
    releases: str | None = None
    synchronizes: bool = False
    waits: bool = False
    queues: bool = False
    transfers: bool = False
    capture_unsafe: bool = False
    callback_safe: bool = False
    pre_init: bool = False
    switches: bool = False
    legacy_query: bool = False
    sticky: Sticky = "fails"

    @property
    def sticky_exempt(self) -> bool:
        """Whether the call still succeeds once the driver is sticky (observed or assumed)."""
        return self.sticky.startswith("succeeds")


#: Kinds of driver object that are reference counted: a second release is no misuse.
REFCOUNTED = frozenset({"primary_context", "user_object"})


def _fact(name: str, **facts: object) -> DriverFact:
    return DriverFact(name, **facts)  # type: ignore[arg-type]


_TABLE = (
    _fact("cuCtxCreate", creates="context"),
    _fact("cuCtxDestroy", releases="context", synchronizes=True, sticky="succeeds-observed"),
    _fact("cuCtxGetApiVersion", sticky="succeeds-assumed"),
    _fact("cuCtxGetCurrent", sticky="succeeds-observed"),
    _fact("cuCtxGetDevice", sticky="succeeds-assumed"),
    _fact("cuCtxGetFlags"),
    _fact("cuCtxGetStreamPriorityRange"),
    _fact("cuCtxPopCurrent", sticky="succeeds-assumed"),
    _fact("cuCtxPushCurrent", switches=True, sticky="succeeds-assumed"),
    _fact("cuCtxSetCurrent", switches=True, sticky="succeeds-observed"),
    _fact("cuCtxSynchronize", synchronizes=True, waits=True, capture_unsafe=True, sticky="fails-observed"),
    _fact("cuDeviceGet", sticky="succeeds-assumed"),
    _fact("cuDeviceGetAttribute", sticky="succeeds-assumed"),
    _fact("cuDeviceGetCount", sticky="succeeds-assumed"),
    _fact("cuDeviceGetDefaultMemPool"),
    _fact("cuDeviceGetMemPool"),
    _fact("cuDeviceGetName", sticky="succeeds-assumed"),
    _fact("cuDeviceGetPCIBusId", sticky="succeeds-assumed"),
    _fact("cuDeviceGetUuid", sticky="succeeds-assumed"),
    _fact("cuDevicePrimaryCtxGetState", sticky="succeeds-assumed"),
    _fact("cuDevicePrimaryCtxRelease", releases="primary_context", synchronizes=True, sticky="succeeds-observed"),
    _fact("cuDevicePrimaryCtxReset"),
    _fact("cuDevicePrimaryCtxRetain", creates="primary_context", handle_from="argument"),
    _fact("cuDevicePrimaryCtxSetFlags"),
    _fact("cuDeviceSetMemPool"),
    _fact("cuDeviceTotalMem", sticky="succeeds-assumed"),
    _fact("cuDriverGetVersion", pre_init=True, sticky="succeeds-assumed"),
    _fact("cuEventCreate", creates="event", sticky="fails-observed"),
    _fact("cuEventDestroy", releases="event", sticky="fails-observed"),
    _fact("cuEventElapsedTime"),
    _fact("cuEventQuery", synchronizes=True, waits=True, sticky="fails-observed"),
    _fact("cuEventRecord", queues=True, sticky="fails-observed"),
    _fact("cuEventRecordWithFlags", queues=True),
    _fact("cuEventSynchronize", synchronizes=True, waits=True),
    _fact("cuFuncGetAttribute"),
    _fact("cuFuncGetParamCount"),
    _fact("cuFuncGetParamInfo"),
    _fact("cuFuncSetAttribute"),
    _fact("cuGetErrorName", callback_safe=True, pre_init=True, sticky="succeeds-observed"),
    _fact("cuGetErrorString", callback_safe=True, pre_init=True, sticky="succeeds-assumed"),
    _fact("cuGraphAddChildGraphNode", creates="graph_node", sticky="succeeds-assumed"),
    _fact("cuGraphAddDependencies", sticky="succeeds-assumed"),
    _fact("cuGraphAddEmptyNode", creates="graph_node", sticky="succeeds-assumed"),
    _fact("cuGraphAddEventRecordNode", creates="graph_node", sticky="succeeds-assumed"),
    _fact("cuGraphAddEventWaitNode", creates="graph_node", sticky="succeeds-assumed"),
    _fact("cuGraphAddHostNode", creates="graph_node", sticky="succeeds-assumed"),
    _fact("cuGraphAddKernelNode", creates="graph_node", sticky="succeeds-assumed"),
    _fact("cuGraphAddMemAllocNode", creates="graph_node"),
    _fact("cuGraphAddMemFreeNode", creates="graph_node"),
    _fact("cuGraphAddMemcpyNode", creates="graph_node", sticky="succeeds-assumed"),
    _fact("cuGraphAddMemsetNode", creates="graph_node", sticky="succeeds-assumed"),
    _fact("cuGraphAddNode", creates="graph_node"),
    _fact("cuGraphChildGraphNodeGetGraph", sticky="succeeds-assumed"),
    _fact("cuGraphClone", creates="graph", sticky="succeeds-assumed"),
    _fact("cuGraphConditionalHandleCreate"),
    _fact("cuGraphCreate", creates="graph", sticky="succeeds-observed"),
    _fact("cuGraphDestroy", releases="graph", sticky="succeeds-assumed"),
    _fact("cuGraphDestroyNode", releases="graph_node", sticky="succeeds-assumed"),
    _fact("cuGraphExecChildGraphNodeSetParams"),
    _fact("cuGraphExecDestroy", releases="graph_exec", capture_unsafe=True),
    _fact("cuGraphExecEventRecordNodeSetEvent"),
    _fact("cuGraphExecEventWaitNodeSetEvent"),
    _fact("cuGraphExecHostNodeSetParams"),
    _fact("cuGraphExecKernelNodeSetParams"),
    _fact("cuGraphExecMemcpyNodeSetParams"),
    _fact("cuGraphExecMemsetNodeSetParams"),
    _fact("cuGraphExecUpdate"),
    _fact("cuGraphGetEdges", sticky="succeeds-assumed"),
    _fact("cuGraphGetNodes", sticky="succeeds-assumed"),
    _fact("cuGraphGetRootNodes", sticky="succeeds-assumed"),
    _fact("cuGraphInstantiate", creates="graph_exec", capture_unsafe=True),
    _fact("cuGraphInstantiateWithFlags", creates="graph_exec", capture_unsafe=True),
    _fact("cuGraphKernelNodeGetParams", sticky="succeeds-assumed"),
    _fact("cuGraphKernelNodeSetParams", sticky="succeeds-assumed"),
    _fact("cuGraphLaunch", queues=True),
    _fact("cuGraphNodeFindInClone"),
    _fact("cuGraphNodeGetDependencies", sticky="succeeds-assumed"),
    _fact("cuGraphNodeGetDependentNodes", sticky="succeeds-assumed"),
    _fact("cuGraphNodeGetEnabled"),
    _fact("cuGraphNodeGetType", sticky="succeeds-assumed"),
    _fact("cuGraphNodeSetEnabled"),
    _fact("cuGraphReleaseUserObject", sticky="succeeds-assumed"),
    _fact("cuGraphRemoveDependencies", sticky="succeeds-assumed"),
    _fact("cuGraphRetainUserObject", sticky="succeeds-assumed"),
    _fact("cuGraphUpload", queues=True),
    _fact("cuInit", pre_init=True, sticky="succeeds-assumed"),
    _fact("cuIpcGetEventHandle"),
    _fact("cuIpcOpenEventHandle", creates="event"),
    _fact("cuKernelGetFunction"),
    _fact("cuLaunchHostFunc", queues=True),
    _fact("cuLaunchKernel", queues=True),
    _fact("cuLaunchKernelEx", queues=True),
    _fact("cuLibraryGetKernel"),
    _fact("cuLibraryLoadData", creates="library"),
    _fact("cuLibraryUnload", releases="library"),
    _fact("cuMemAddressFree", releases="address_range"),
    _fact("cuMemAddressReserve", creates="address_range"),
    _fact("cuMemAdvise"),
    _fact("cuMemAdvise_v2"),
    _fact("cuMemAlloc", creates="device_memory", capture_unsafe=True, sticky="fails-observed"),
    _fact("cuMemAllocAsync", creates="device_memory", queues=True),
    _fact("cuMemAllocFromPoolAsync", creates="device_memory", queues=True),
    _fact("cuMemAllocHost", creates="host_memory", capture_unsafe=True),
    _fact("cuMemAllocManaged", creates="device_memory", capture_unsafe=True),
    _fact("cuMemAllocPitch", creates="device_memory", capture_unsafe=True),
    _fact("cuMemCreate", creates="physical_memory"),
    _fact("cuMemFree", releases="device_memory", synchronizes=True, capture_unsafe=True, sticky="fails-observed"),
    _fact("cuMemFreeAsync", releases="device_memory"),
    _fact("cuMemFreeHost", releases="host_memory", synchronizes=True, capture_unsafe=True),
    _fact("cuMemGetAccess"),
    _fact("cuMemGetAllocationGranularity"),
    _fact("cuMemGetInfo"),
    _fact("cuMemHostAlloc", creates="host_memory", capture_unsafe=True),
    _fact("cuMemMap", creates="memory_mapping", handle_from="argument"),
    _fact("cuMemPoolCreate", creates="memory_pool", capture_unsafe=True),
    _fact("cuMemPoolDestroy", releases="memory_pool"),
    _fact("cuMemPoolExportPointer"),
    _fact("cuMemPoolExportToShareableHandle"),
    _fact("cuMemPoolGetAccess"),
    _fact("cuMemPoolGetAttribute"),
    _fact("cuMemPoolImportFromShareableHandle", creates="memory_pool"),
    _fact("cuMemPoolImportPointer", creates="device_memory"),
    _fact("cuMemPoolSetAccess"),
    _fact("cuMemPoolSetAttribute"),
    _fact("cuMemPoolTrimTo"),
    _fact("cuMemPrefetchAsync", queues=True),
    _fact("cuMemPrefetchAsync_v2", queues=True),
    _fact("cuMemRelease", releases="physical_memory"),
    _fact("cuMemSetAccess"),
    _fact("cuMemUnmap", releases="memory_mapping"),
    _fact("cuMemcpy", synchronizes=True, transfers=True, capture_unsafe=True),
    _fact("cuMemcpyAsync", queues=True),
    _fact("cuMemcpyDtoD", synchronizes=True, transfers=True, capture_unsafe=True),
    _fact("cuMemcpyDtoDAsync", queues=True),
    _fact("cuMemcpyDtoH", synchronizes=True, transfers=True, capture_unsafe=True),
    _fact("cuMemcpyDtoHAsync", queues=True),
    _fact("cuMemcpyHtoD", synchronizes=True, transfers=True, capture_unsafe=True),
    _fact("cuMemcpyHtoDAsync", queues=True),
    _fact("cuMemsetD16", synchronizes=True, transfers=True, capture_unsafe=True),
    _fact("cuMemsetD16Async", queues=True),
    _fact("cuMemsetD32", synchronizes=True, transfers=True, capture_unsafe=True),
    _fact("cuMemsetD32Async", queues=True),
    _fact("cuMemsetD8", synchronizes=True, transfers=True, capture_unsafe=True),
    _fact("cuMemsetD8Async", queues=True),
    _fact("cuModuleGetFunction"),
    _fact("cuModuleLoadData", creates="module"),
    _fact("cuModuleUnload", releases="module", synchronizes=True, sticky="fails-observed"),
    _fact("cuOccupancyAvailableDynamicSMemPerBlock"),
    _fact("cuOccupancyMaxActiveBlocksPerMultiprocessor"),
    _fact("cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags"),
    _fact("cuOccupancyMaxActiveClusters"),
    _fact("cuOccupancyMaxPotentialBlockSize"),
    _fact("cuOccupancyMaxPotentialClusterSize"),
    _fact("cuStreamBeginCapture", queues=True, legacy_query=True),
    _fact("cuStreamBeginCaptureToGraph", queues=True),
    _fact("cuStreamCreate", creates="stream", sticky="fails-observed"),
    _fact("cuStreamCreateWithPriority", creates="stream"),
    _fact("cuStreamDestroy", releases="stream", legacy_query=True, sticky="fails-observed"),
    _fact("cuStreamEndCapture", creates="graph", queues=True, legacy_query=True),
    _fact("cuStreamGetCaptureInfo", queues=True, legacy_query=True),
    _fact("cuStreamGetCtx", legacy_query=True, sticky="succeeds-assumed"),
    _fact("cuStreamGetFlags", legacy_query=True),
    _fact("cuStreamGetId", legacy_query=True),
    _fact("cuStreamGetPriority", legacy_query=True),
    _fact("cuStreamIsCapturing", legacy_query=True),
    _fact("cuStreamQuery", synchronizes=True, waits=True),
    _fact("cuStreamSynchronize", synchronizes=True, waits=True, sticky="fails-observed"),
    _fact("cuStreamUpdateCaptureDependencies", queues=True),
    _fact("cuStreamWaitEvent", queues=True),
    _fact("cuThreadExchangeStreamCaptureMode"),
    _fact("cuUserObjectCreate", creates="user_object", sticky="succeeds-assumed"),
    _fact("cuUserObjectRelease", releases="user_object", sticky="succeeds-assumed"),
    _fact("cuUserObjectRetain", sticky="succeeds-assumed"),
    _fact("cuguardRestoreContext", switches=True),
)

#: Every record, by function name.
DRIVER_FACTS: Mapping[str, DriverFact] = MappingProxyType({fact.name: fact for fact in _TABLE})

_FIELDS = frozenset(f.name for f in fields(DriverFact)) | {"sticky_exempt"}


def calls_where(**conditions: object) -> frozenset[str]:
    """The names of the functions whose records have every field given equal to its value.

    ``calls_where(synchronizes=True)``, ``calls_where(releases="stream")``,
    ``calls_where(sticky_exempt=True)``. A field that does not exist raises
    ``TypeError``. Never reaches the driver.
    """
    unknown = set(conditions) - _FIELDS
    if unknown:
        raise TypeError(f"DriverFact has no field {', '.join(sorted(unknown))}")
    return frozenset(
        name
        for name, fact in DRIVER_FACTS.items()
        if all(getattr(fact, key) == value for key, value in conditions.items())
    )

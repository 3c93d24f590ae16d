"""The misuse sweep's coverage table: the public callables the catalog draws under another name, or not at all.

See :data:`COVERAGE` and :func:`cuguard.sweeps._misuse.catalog.coverage_problems`.
"""

from __future__ import annotations

from cuguard.sweeps._misuse.model import MEMORY_RESOURCES, POOL_RESOURCES
from cuguard.sweeps._misuse.ops_base import KERNEL_ATTRIBUTES

__all__ = ["COVERAGE"]


#: The public callables the catalog draws under another name (``"op:<name>"``), through a step kind
#: (``"step:<kind>"``), or does not draw, with the reason. Everything else has an operation of its own
#: (see :func:`coverage_problems`; the completeness test keeps this table honest).
def _rows(why: str, *keys: str) -> dict[str, str]:
    return dict.fromkeys(keys, why)


def _members_of(cls: str, *names: str) -> tuple[str, ...]:
    return tuple(f"{cls}.{name}" for name in names)


_ACCOUNTING = ("buffers", "device_id", "held", "is_device_accessible", "is_host_accessible", "leaked")
_POOL_STATE = ("closed", "context", "handle", "is_imported", "is_ipc_enabled", "owned")
_EXCEPTIONS = "an exception class: raised by the operations, and every step checks what it raised (E1-E5)"
_STICKY = "the is_sticky property CUDAError defines, inherited unchanged (drawn by errors.CUDAError)"
_RESULT = "a result type the drawn operations return; it is not constructed by users and holds no driver handle"
_OPTIONS = "an options value type; its values reach cuguard through the drawn constructor that takes it"
_SEAM = (
    "the driver seam used by cuguard.testing and the layers: the sweep installs drivers through it "
    "(the switch step) and reads it for every check; calling it at random would replace the sweep's own driver"
)
_CALLBACK = (
    "the layers' bracket around CUDA host functions and destructors; every host and graph callback step "
    "runs through it (O5, W6), and calling it outside a callback would mark the sweep's thread as one"
)
_REPORTING = (
    "a reporting helper of the layers' failure paths; each step checks what it produced (W1, G4) "
    "rather than calling it with made-up failures"
)
_BODY = (
    "a conditional body is a GraphDefinition (its subclass, with the same methods); the conditional "
    "builders and Node.branches reach bodies, but they are not pooled as receivers: closing and "
    "instantiating a body are refused by design"
)
_IPC_OTHER_PROCESS = (
    "opens what another process exported; the sweep runs in one process, and the failure-point sweep "
    "and the IPC tests cover it with the simulator's other-process view"
)

COVERAGE: dict[str, str] = {
    # --- errors ---
    **_rows("op:errors.CUDAError", "errors.CUDAError()", "errors.CUDAError.is_sticky"),
    **_rows(
        "an undo helper in pure Python that makes no driver call of its own: its misuse (a step that is not "
        "callable) and its rollback order are proven by its own tests (G1, G4)",
        "errors.Transaction()",
        "errors.Transaction.append",
        "errors.Transaction.commit",
        "errors.Transaction.pending",
        "errors.Transaction.rollback",
    ),
    **_rows(
        _EXCEPTIONS,
        "errors.CUDADriverNotFoundError()",
        "graphs.GraphUpdateError()",
        "errors.LibraryNotFoundError()",
        "errors.NVJitLinkError()",
        "errors.NVRTCError()",
        "errors.NVVMError()",
        "errors.ResourceClosedError()",
        "errors.StickyCUDAError()",
    ),
    **_rows(
        _STICKY,
        "errors.CUDADriverNotFoundError.is_sticky",
        "graphs.GraphUpdateError.is_sticky",
        "errors.NVJitLinkError.is_sticky",
        "errors.NVRTCError.is_sticky",
        "errors.NVVMError.is_sticky",
        "errors.StickyCUDAError.is_sticky",
    ),
    "errors.CUDAWarning()": "a warning class: every step checks the CUDAWarnings it caused (W1, W4, O6)",
    "errors.StickyFaultWarning()": "a CUDAWarning class: the steps check it as every CUDAWarning they caused (W1, W7)",
    "resources.RaceWarning()": "a CUDAWarning class of the race checker (B7), which the misuse sweep leaves off",
    "resources.racecheck": "turns the process-wide race checker (B7) on or off; no driver call, left off by the sweep",
    "resources.racecheck_enabled": "reads the race checker's flag (B7): no driver call, nothing to misuse",
    "errors.DriverSeam()": (
        "the type of cuguard.errors.driver, the seam every driver call goes through; never constructed"
    ),
    "errors.Unique()": "step:copy",
    # --- the layers' declared interfaces for the layers above (their lowlevel modules) ---
    **_rows(
        "the lifecycle base of Resource and the graph classes: abstract (close and _collect are each "
        "subclass's); its with-blocks, closes and collections are swept through every subclass's entries",
        "errors.Owned()",
        "errors.Owned.close",
    ),
    **_rows(
        "a lock type the layers make with deferring_lock; its use is swept through every locked operation",
        "errors.DeferringLock()",
        "errors.DeferringLock.acquire",
        "errors.DeferringLock.locked",
        "errors.DeferringLock.release",
    ),
    **_rows(
        "the owner table graphs and captures keep; every graph and capture operation of the catalog fills it",
        "resources.OwnerTable()",
        "resources.OwnerTable.copy",
        "resources.OwnerTable.keep",
        "resources.OwnerTable.merge",
        "resources.OwnerTable.pop",
        "resources.retain",
        "resources.split_written",
        "resources.stream_undestroyed",
        "resources.capture_began",
        "resources.capture_ended",
        "resources.capture_joined",
        "resources.capture_left",
        "resources.waiting_count",
        "resources.graph_let_go",
    ),
    **_rows(
        "the table of driver facts and its views: data read at import, no driver call, nothing to misuse",
        "errors.DriverFact()",
        "errors.DriverFact.sticky_exempt",
        "errors.calls_where",
    ),
    **_rows(
        "registers a process-wide hook or observer for the life of the process; calling it would change every "
        "later example",
        "context.on_synchronized",
        "errors.on_route_change",
        "errors.set_acquire_hook",
        "resources.add_close_guard",
        "resources.follow_compiled",
        "resources.use_compiled",
    ),
    **_rows(
        "says why the compiled build's calls are in use or not: a string, no driver call, nothing to misuse",
        "resources.compiled_status",
    ),
    **_rows(
        "raises on_own_behalf's failures from three statuses of a compiled call: no driver call and no object; "
        "proven by its own tests and the compiled scenario on the no-op driver (the simulator never runs the "
        "compiled call)",
        "resources.relaxed_failed",
    ),
    **_rows(
        "a step of cuguard's own operations (their switch, relaxed-mode or argument path), drawn through them",
        "context.call_switched",
        "context.call_switched_by",
        "resources.on_own_behalf",
        "resources.unprohibited",
        "resources.check_read_only",
        "resources.memory_uses",
    ),
    "errors.install_driver": "step:switch",
    **_rows(
        _SEAM,
        "errors.active_driver",
        "errors.base_driver",
        "errors.driver_state",
        "errors.driver_token",
        "errors.forget_driver",
        "errors.installed_driver",
        "errors.on_driver_change",
        "errors.on_driver_forgotten",
        "errors.real_driver",
        "errors.use_driver",
    ),
    **_rows(
        _CALLBACK,
        "errors.call_unraisable",
        "errors.enter_driver_callback",
        "errors.exit_driver_callback",
        "errors.in_driver_callback",
    ),
    "errors.defer": "step:host_callback",
    "errors.deferred_count": "op:errors.flush_deferred",
    **_rows(_REPORTING, "errors.add_failure_note", "errors.report", "errors.report_error", "errors.report_warning"),
    "errors.first_sticky_fault": "step:fault",
    "errors.forget_sticky_fault": "step:fault",
    "errors.out_of_range": "op:errors.wrong_kind",
    "errors.refuse_construction": "step:construct",
    "errors.source_new": "a pure function of a module's file name and a class (the class's __new__ or None), "
    "called once per module at import: no driver call, no object; a cls that is not a class is a TypeError "
    "(its own tests)",
    # --- context ---
    "context.Context()": "step:construct",
    **_rows(
        "op:context.Context.is_primary", "context.Context.closed", "context.Context.owned", "context.Context.stale"
    ),
    # --- resources: factory-made classes (direct construction is refused: O1) ---
    **_rows(
        "step:construct",
        "resources.Buffer()",
        "resources.Event()",
        "resources.Kernel()",
        "resources.Module()",
        "resources.PinnedBuffer()",
        "resources.Resource()",
        "resources.Stream()",
        "graphs.Graph()",
        "graphs.Node()",
    ),
    **_rows(
        "op:resources.Buffer.size",
        "resources.Buffer.closed",
        "resources.Buffer.context",
        "resources.Buffer.device",
        "resources.Buffer.owned",
        "resources.Buffer.stream",
    ),
    "resources.Buffer.handle": "op:resources.Buffer.ptr",
    "resources.Buffer.from_ipc_descriptor": _IPC_OTHER_PROCESS,
    "resources.Event.from_ipc_descriptor": _IPC_OTHER_PROCESS,
    "resources.IPCAllocationHandle.from_fd": _IPC_OTHER_PROCESS,
    **_rows("op:resources.Event.timing", "resources.Event.closed", "resources.Event.context", "resources.Event.device"),
    "resources.Event.is_ipc_enabled": "op:resources.Event.get_ipc_descriptor",
    **_rows("op:resources.Device.properties", "resources.Device.arch", "resources.Device.uuid"),
    "resources.Device.handle": "op:resources.Device.ordinal",
    **_rows("op:resources.Stream.device", "resources.Stream.closed", "resources.Stream.context"),
    "resources.Stream.priority": "op:resources.Stream.flags",
    **_rows("op:resources.Module.handle", "resources.Module.closed", "resources.Module.context"),
    "resources.Kernel.num_arguments": "op:resources.Kernel.handle",
    **_rows(
        "reads a field the kernel was made with: never refuses (not once its module is closed either) and makes "
        "no driver call, so there is nothing to misuse",
        "resources.Kernel.module",
        "resources.Kernel.name",
    ),
    **_rows(
        "op:resources.PinnedBuffer.size",
        "resources.PinnedBuffer.closed",
        "resources.PinnedBuffer.context",
        "resources.PinnedBuffer.memory_resource",
    ),
    "resources.PinnedBuffer.handle": "op:resources.PinnedBuffer.address",
    **_rows(
        "op:resources.LaunchConfig.dims", "resources.LaunchConfig.is_cooperative", "resources.LaunchConfig.shared_mem"
    ),
    "resources.Resource.close": (
        "the base class's close(), drawn as Stream.close, Event.close, Buffer.close and Module.close"
    ),
    **_rows(
        "properties of the base class, drawn on each subclass (Stream, Event, Buffer, PinnedBuffer, Module)",
        "resources.Resource.closed",
        "resources.Resource.context",
        "resources.Resource.handle",
    ),
    # --- resources: typed views (a view owns no handle: made by its class methods, drawn on buffers) ---
    **_rows(
        "op:resources.StridedMemoryView.from_buffer",
        "resources.StridedMemoryView()",
        "resources.args_viewable_as_strided_memory",
        *_members_of(
            "resources.StridedMemoryView",
            "device_id",
            "dtype",
            "exporting_obj",
            "from_any_interface",
            "from_cuda_array_interface",
            "from_dlpack",
            "is_device_accessible",
            "ptr",
            "readonly",
            "shape",
            "size",
            "stream_ptr",
            "strides",
        ),
    ),
    # --- resources: memory resources ---
    **{
        key: f"op:resources.{cls}.held[accounting]"
        for cls in MEMORY_RESOURCES
        for key in _members_of(f"resources.{cls}", *_ACCOUNTING)
        if key != f"resources.{cls}.held"
    },
    **{
        key: f"op:resources.{cls}.owned[state]"
        for cls in POOL_RESOURCES
        for key in _members_of(f"resources.{cls}", *_POOL_STATE)
        if key != f"resources.{cls}.owned"
    },
    "resources.VirtualMemoryResource.options": "op:resources.VirtualMemoryResource.granularity",
    "resources.MemoryResource()": "the abstract base of the memory resources: each concrete resource is drawn instead",
    **_rows(
        "an abstract method of the base class, drawn on each concrete memory resource",
        *_members_of("resources.MemoryResource", "allocate", "deallocate", *_ACCOUNTING),
    ),
    "resources.MemoryPoolAttributes()": _RESULT,
    **{
        f"resources.MemoryPoolAttributes.{name}": "op:resources.DeviceMemoryResource.attributes"
        for name in (
            "release_threshold",
            "reuse_follow_event_dependencies",
            "reuse_allow_opportunistic",
            "reuse_allow_internal_dependencies",
            "reserved_mem_current",
            "reserved_mem_high",
            "used_mem_current",
            "used_mem_high",
        )
    },
    "resources.MemoryPoolAttributes.reset_high_watermarks": (
        "op:resources.DeviceMemoryResource.attributes.reset_high_watermarks"
    ),
    **_rows(
        "op:resources.DeviceMemoryResource.get_allocation_handle",
        "resources.IPCAllocationHandle.close",
        "resources.IPCAllocationHandle.closed",
        "resources.IPCAllocationHandle.fd",
    ),
    **_rows(
        _RESULT, "resources.IPCAllocationHandle()", "resources.IPCBufferDescriptor()", "resources.IPCEventDescriptor()"
    ),
    **_rows(
        _OPTIONS,
        "resources.DeviceMemoryResourceOptions()",
        "resources.PinnedMemoryResourceOptions()",
        "resources.VirtualMemoryResourceOptions()",
    ),
    **_rows(_RESULT, "resources.MemoryRecord()", "resources.MemoryReport()"),
    **_rows(
        "op:resources.memory_in_use",
        "resources.MemoryReport.by_device",
        "resources.MemoryReport.by_source",
        "resources.MemoryReport.total",
    ),
    # --- resources: kernels, code, compilers ---
    **_rows(
        _RESULT,
        "resources.DeviceProperties()",
        "resources.KernelAttributes()",
        "resources.KernelOccupancy()",
        "resources.KernelParameter()",
        "resources.MaxPotentialBlockSizeOccupancyResult()",
    ),
    **{f"resources.KernelAttributes.{name}": "op:resources.Kernel.attributes" for name in KERNEL_ATTRIBUTES},
    "resources.KernelOccupancy.max_active_blocks_per_multiprocessor": "op:resources.Kernel.occupancy",
    "resources.KernelOccupancy.max_potential_block_size": "op:resources.Kernel.occupancy.max_potential_block_size",
    "resources.KernelOccupancy.available_dynamic_shared_memory_per_block": (
        "op:resources.Kernel.occupancy.available_dynamic_shared_memory_per_block"
    ),
    "resources.KernelOccupancy.max_active_clusters": "op:resources.Kernel.occupancy.max_active_clusters",
    "resources.KernelOccupancy.max_potential_cluster_size": "op:resources.Kernel.occupancy.max_potential_cluster_size",
    "resources.KernelParameter.kind": "op:resources.Kernel.parameters",
    "resources.ObjectCode()": (
        "a value holding code bytes (no driver handle), made by its from_* methods, which are drawn"
    ),
    **_rows(
        "op:resources.ObjectCode.from_cubin",
        "resources.ObjectCode.code",
        "resources.ObjectCode.code_type",
        "resources.ObjectCode.name",
        "resources.ObjectCode.symbol_mapping",
    ),
    "resources.ObjectCode.lowered_name": "op:resources.ObjectCode.from_ptx",
    **_rows(
        "op:resources.Program.compile",
        "resources.Program()",
        "resources.Program.backend",
        "resources.Program.close",
        "resources.Program.code",
        "resources.Program.code_type",
        "resources.Program.options",
        "resources.ProgramOptions.as_options",
        "resources.ProgramCache()",
        "resources.ProgramCache.get",
        "resources.ProgramCache.key",
        "resources.ProgramCache.put",
    ),
    "resources.ProgramCache.clear": (
        "it empties the sweep's own compilation cache, which would only make Program.compile slower"
    ),
    "resources.ProgramOptions()": _OPTIONS,
    "resources.LinkerOptions()": _OPTIONS,
    **_rows(
        "op:resources.Linker.link",
        "resources.Linker()",
        "resources.Linker.backend",
        "resources.Linker.close",
        "resources.Linker.get_error_log",
        "resources.Linker.get_info_log",
        "resources.LinkerOptions.as_options",
    ),
    # --- graphs ---
    "graphs.GraphDefinition.closed": "op:graphs.GraphDefinition.context",
    "graphs.GraphDefinition.edges": "op:graphs.GraphDefinition.nodes",
    "graphs.Graph.closed": "op:graphs.Graph.handle",
    **_rows("op:graphs.Node.type", "graphs.Node.closed", "graphs.Node.graph", "graphs.Node.params"),
    "graphs.Node.condition": "op:graphs.Node.branches",
    "graphs.GraphCondition()": "step:construct",
    **_rows("op:graphs.GraphCondition.handle", "graphs.GraphCondition.default", "graphs.GraphCondition.graph"),
    **_rows(
        "op:graphs.GraphBuilder.status",
        "graphs.GraphBuilder.closed",
        "graphs.GraphBuilder.is_building",
        "graphs.GraphBuilder.mode",
        "graphs.GraphBuilder.stream",
    ),
    "graphs.EdgeView()": (
        "the type of Node.pred and Node.succ (never constructed by users); its methods are drawn through them"
    ),
    **{
        f"graphs.EdgeView.{name}": f"op:graphs.Node.pred.{name}"
        for name in ("add", "clear", "difference_update", "discard", "pop", "remove", "update")
    },
    "graphs.ConditionalBody()": "step:construct",
    **_rows(
        _BODY,
        *_members_of(
            "graphs.ConditionalBody",
            "allocate",
            "callback",
            "clone",
            "close",
            "closed",
            "connect",
            "context",
            "create_condition",
            "deallocate",
            "disconnect",
            "edges",
            "embed",
            "empty",
            "find_node",
            "handle",
            "if_else",
            "if_then",
            "instantiate",
            "join",
            "launch",
            "memcpy",
            "memset",
            "nodes",
            "record",
            "switch",
            "wait",
            "while_loop",
        ),
    ),
}

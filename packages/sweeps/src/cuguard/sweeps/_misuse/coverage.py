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
    **_rows("op:errors.CUDAError", "CUDAError", "CUDAError.is_sticky"),
    **_rows(
        _EXCEPTIONS,
        "CUDADriverNotFoundError",
        "GraphUpdateError",
        "LibraryNotFoundError",
        "NVJitLinkError",
        "NVRTCError",
        "NVVMError",
        "ResourceClosedError",
        "StickyCUDAError",
    ),
    **_rows(
        _STICKY,
        "CUDADriverNotFoundError.is_sticky",
        "GraphUpdateError.is_sticky",
        "NVJitLinkError.is_sticky",
        "NVRTCError.is_sticky",
        "NVVMError.is_sticky",
        "StickyCUDAError.is_sticky",
    ),
    "CUDAWarning": "a warning class: every step checks the CUDAWarnings it caused (W1, W4, O6)",
    "StickyFaultWarning": "a CUDAWarning class: the steps check it as every CUDAWarning they caused (W1, W7)",
    "RaceWarning": "a CUDAWarning class of the race checker (B7), which the misuse sweep leaves off",
    "resources.racecheck": "turns the process-wide race checker (B7) on or off; no driver call, left off by the sweep",
    "resources.racecheck_enabled": "reads the race checker's flag (B7): no driver call, nothing to misuse",
    "DriverSeam": "the type of cuguard.errors.driver, the seam every driver call goes through; never constructed",
    "Unique": "step:copy",
    # --- the layers' declared interfaces for the layers above (their lowlevel modules) ---
    **_rows(
        "a lock type the layers make with deferring_lock; its use is swept through every locked operation",
        "DeferringLock",
        "DeferringLock.acquire",
        "DeferringLock.locked",
        "DeferringLock.release",
    ),
    **_rows(
        "the owner table graphs and captures keep; every graph and capture operation of the catalog fills it",
        "OwnerTable",
        "OwnerTable.copy",
        "OwnerTable.keep",
        "OwnerTable.merge",
        "resources.retain",
        "resources.split_written",
        "resources.capture_began",
        "resources.capture_ended",
        "resources.capture_joined",
        "resources.capture_left",
        "resources.waiting_count",
        "resources.graph_let_go",
    ),
    **_rows(
        "registers a process-wide hook or observer for the life of the process; calling it would change every "
        "later example",
        "context.on_synchronized",
        "errors.on_route_change",
        "errors.set_acquire_hook",
        "resources.add_close_guard",
        "resources.follow_fastpath",
    ),
    **_rows(
        "a step of cuguard's own operations (their switch, relaxed-mode or argument path), drawn through them",
        "context.call_switched",
        "resources.on_own_behalf",
        "resources.unprohibited",
        "resources.check_read_only",
        "resources.memory_uses",
    ),
    "errors.install_driver": "step:switch",
    **_rows(
        _SEAM,
        "errors.active_driver",
        "errors.driver_state",
        "errors.driver_token",
        "errors.forget_driver",
        "errors.installed_driver",
        "errors.on_driver_change",
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
    # --- context ---
    "Context": "step:construct",
    **_rows("op:Context.is_primary", "Context.closed", "Context.owned", "Context.stale"),
    # --- resources: factory-made classes (direct construction is refused: O1) ---
    **_rows(
        "step:construct", "Buffer", "Event", "Kernel", "Module", "PinnedBuffer", "Resource", "Stream", "Graph", "Node"
    ),
    **_rows("op:Buffer.size", "Buffer.closed", "Buffer.context", "Buffer.device", "Buffer.owned", "Buffer.stream"),
    "Buffer.handle": "op:Buffer.ptr",
    "Buffer.from_ipc_descriptor": _IPC_OTHER_PROCESS,
    "Event.from_ipc_descriptor": _IPC_OTHER_PROCESS,
    "IPCAllocationHandle.from_fd": _IPC_OTHER_PROCESS,
    **_rows("op:Event.timing", "Event.closed", "Event.context", "Event.device"),
    "Event.is_ipc_enabled": "op:Event.get_ipc_descriptor",
    **_rows("op:Device.properties", "Device.arch", "Device.uuid"),
    "Device.handle": "op:Device.ordinal",
    **_rows("op:Stream.device", "Stream.closed", "Stream.context"),
    "Stream.priority": "op:Stream.flags",
    **_rows("op:Module.handle", "Module.closed", "Module.context"),
    "Kernel.num_arguments": "op:Kernel.handle",
    **_rows("op:PinnedBuffer.size", "PinnedBuffer.closed", "PinnedBuffer.context", "PinnedBuffer.memory_resource"),
    "PinnedBuffer.handle": "op:PinnedBuffer.address",
    **_rows("op:LaunchConfig.dims", "LaunchConfig.is_cooperative", "LaunchConfig.shared_mem"),
    "Resource.close": "the base class's close(), drawn as Stream.close, Event.close, Buffer.close and Module.close",
    **_rows(
        "properties of the base class, drawn on each subclass (Stream, Event, Buffer, PinnedBuffer, Module)",
        "Resource.closed",
        "Resource.context",
        "Resource.handle",
    ),
    # --- resources: typed views (a view owns no handle: made by its class methods, drawn on buffers) ---
    **_rows(
        "op:StridedMemoryView.from_buffer",
        "StridedMemoryView",
        "resources.args_viewable_as_strided_memory",
        *_members_of(
            "StridedMemoryView",
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
    **{key: f"op:{cls}.accounting" for cls in MEMORY_RESOURCES for key in _members_of(cls, *_ACCOUNTING)},
    **{key: f"op:{cls}.state" for cls in POOL_RESOURCES for key in _members_of(cls, *_POOL_STATE)},
    "VirtualMemoryResource.options": "op:VirtualMemoryResource.granularity",
    "MemoryResource": "the abstract base of the memory resources: each concrete resource is drawn instead",
    **_rows(
        "an abstract method of the base class, drawn on each concrete memory resource",
        *_members_of("MemoryResource", "allocate", "deallocate", *_ACCOUNTING),
    ),
    "MemoryPoolAttributes": _RESULT,
    **{
        f"MemoryPoolAttributes.{name}": "op:DeviceMemoryResource.attributes"
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
    "MemoryPoolAttributes.reset_high_watermarks": "op:DeviceMemoryResource.reset_high_watermarks",
    **_rows(
        "op:DeviceMemoryResource.get_allocation_handle",
        "IPCAllocationHandle.close",
        "IPCAllocationHandle.closed",
        "IPCAllocationHandle.fd",
    ),
    **_rows(_RESULT, "IPCAllocationHandle", "IPCBufferDescriptor", "IPCEventDescriptor"),
    **_rows(_OPTIONS, "DeviceMemoryResourceOptions", "PinnedMemoryResourceOptions", "VirtualMemoryResourceOptions"),
    **_rows(_RESULT, "MemoryRecord", "MemoryReport"),
    **_rows("op:resources.memory_in_use", "MemoryReport.by_device", "MemoryReport.by_source", "MemoryReport.total"),
    # --- resources: kernels, code, compilers ---
    **_rows(
        _RESULT,
        "DeviceProperties",
        "KernelAttributes",
        "KernelOccupancy",
        "KernelParameter",
        "MaxPotentialBlockSizeOccupancyResult",
    ),
    **{f"KernelAttributes.{name}": "op:Kernel.attributes" for name in KERNEL_ATTRIBUTES},
    "KernelOccupancy.max_active_blocks_per_multiprocessor": "op:Kernel.occupancy",
    "KernelOccupancy.max_potential_block_size": "op:Kernel.occupancy.max_potential_block_size",
    "KernelOccupancy.available_dynamic_shared_memory_per_block": (
        "op:Kernel.occupancy.available_dynamic_shared_memory_per_block"
    ),
    "KernelOccupancy.max_active_clusters": "op:Kernel.occupancy.max_active_clusters",
    "KernelOccupancy.max_potential_cluster_size": "op:Kernel.occupancy.max_potential_cluster_size",
    "KernelParameter.kind": "op:Kernel.parameters",
    "ObjectCode": "a value holding code bytes (no driver handle), made by its from_* methods, which are drawn",
    **_rows(
        "op:ObjectCode.from_cubin",
        "ObjectCode.code",
        "ObjectCode.code_type",
        "ObjectCode.name",
        "ObjectCode.symbol_mapping",
    ),
    "ObjectCode.lowered_name": "op:ObjectCode.from_ptx",
    **_rows(
        "op:Program.compile",
        "Program",
        "Program.backend",
        "Program.close",
        "Program.code",
        "Program.code_type",
        "Program.options",
        "ProgramOptions.as_options",
        "ProgramCache",
        "ProgramCache.get",
        "ProgramCache.key",
        "ProgramCache.put",
    ),
    "ProgramCache.clear": "it empties the sweep's own compilation cache, which would only make Program.compile slower",
    "ProgramOptions": _OPTIONS,
    "LinkerOptions": _OPTIONS,
    **_rows(
        "op:Linker.link",
        "Linker",
        "Linker.backend",
        "Linker.close",
        "Linker.get_error_log",
        "Linker.get_info_log",
        "LinkerOptions.as_options",
    ),
    # --- graphs ---
    "GraphDefinition.closed": "op:GraphDefinition.context",
    "GraphDefinition.edges": "op:GraphDefinition.nodes",
    "Graph.closed": "op:Graph.handle",
    **_rows("op:Node.type", "Node.closed", "Node.graph", "Node.params"),
    "Node.condition": "op:Node.branches",
    "GraphCondition": "step:construct",
    **_rows("op:GraphCondition.handle", "GraphCondition.default", "GraphCondition.graph"),
    **_rows(
        "op:GraphBuilder.status",
        "GraphBuilder.closed",
        "GraphBuilder.is_building",
        "GraphBuilder.mode",
        "GraphBuilder.stream",
    ),
    "EdgeView": "the type of Node.pred and Node.succ (never constructed by users); its methods are drawn through them",
    **{
        f"EdgeView.{name}": f"op:Node.pred.{name}"
        for name in ("add", "clear", "difference_update", "discard", "pop", "remove", "update")
    },
    "ConditionalBody": "step:construct",
    **_rows(
        _BODY,
        *_members_of(
            "ConditionalBody",
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

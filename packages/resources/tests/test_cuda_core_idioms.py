"""cuda.core 1.2's device idioms: ``system``, ``Device.pci_bus_id``, ``Device.properties`` names, ``with dev:``.

On the simulated driver by default and on a GPU with ``--cuguard-driver=real``.
"""

from __future__ import annotations

import re
import threading
from typing import Any

import pytest

from cuguard.context import Context
from cuguard.errors import CUDAError, ResourceClosedError, driver
from cuguard.resources import Device, system
from cuguard.testing import SimulatedDriver, inject, record_calls, restore_fault, simulated_driver

INVALID_VALUE = 1
INVALID_CONTEXT = 201
NOT_INITIALIZED = 3

# The names of every property of cuda.core's DeviceProperties, with their types, as cuda.core 1.2.2
# declares them (facts of its public API, in its order). cuguard must offer each under the same name
# and type.
CUDA_CORE_INT_PROPERTIES = (
    "max_threads_per_block",
    "max_block_dim_x",
    "max_block_dim_y",
    "max_block_dim_z",
    "max_grid_dim_x",
    "max_grid_dim_y",
    "max_grid_dim_z",
    "max_shared_memory_per_block",
    "total_constant_memory",
    "warp_size",
    "max_pitch",
    "maximum_texture1d_width",
    "maximum_texture1d_linear_width",
    "maximum_texture1d_mipmapped_width",
    "maximum_texture2d_width",
    "maximum_texture2d_height",
    "maximum_texture2d_linear_width",
    "maximum_texture2d_linear_height",
    "maximum_texture2d_linear_pitch",
    "maximum_texture2d_mipmapped_width",
    "maximum_texture2d_mipmapped_height",
    "maximum_texture3d_width",
    "maximum_texture3d_height",
    "maximum_texture3d_depth",
    "maximum_texture3d_width_alternate",
    "maximum_texture3d_height_alternate",
    "maximum_texture3d_depth_alternate",
    "maximum_texturecubemap_width",
    "maximum_texture1d_layered_width",
    "maximum_texture1d_layered_layers",
    "maximum_texture2d_layered_width",
    "maximum_texture2d_layered_height",
    "maximum_texture2d_layered_layers",
    "maximum_texturecubemap_layered_width",
    "maximum_texturecubemap_layered_layers",
    "maximum_surface1d_width",
    "maximum_surface2d_width",
    "maximum_surface2d_height",
    "maximum_surface3d_width",
    "maximum_surface3d_height",
    "maximum_surface3d_depth",
    "maximum_surface1d_layered_width",
    "maximum_surface1d_layered_layers",
    "maximum_surface2d_layered_width",
    "maximum_surface2d_layered_height",
    "maximum_surface2d_layered_layers",
    "maximum_surfacecubemap_width",
    "maximum_surfacecubemap_layered_width",
    "maximum_surfacecubemap_layered_layers",
    "max_registers_per_block",
    "clock_rate",
    "texture_alignment",
    "texture_pitch_alignment",
    "multiprocessor_count",
    "compute_mode",
    "pci_bus_id",
    "pci_device_id",
    "pci_domain_id",
    "memory_clock_rate",
    "global_memory_bus_width",
    "l2_cache_size",
    "max_threads_per_multiprocessor",
    "compute_capability_major",
    "compute_capability_minor",
    "max_shared_memory_per_multiprocessor",
    "max_registers_per_multiprocessor",
    "multi_gpu_board_group_id",
    "single_to_double_precision_perf_ratio",
    "max_shared_memory_per_block_optin",
    "max_blocks_per_multiprocessor",
    "max_persisting_l2_cache_size",
    "max_access_policy_window_size",
    "reserved_shared_memory_per_block",
    "gpu_direct_rdma_flush_writes_options",
    "gpu_direct_rdma_writes_ordering",
    "mempool_supported_handle_types",
    "numa_config",
    "numa_id",
    "surface_alignment",
    "async_engine_count",
    "maximum_texture2d_gather_width",
    "maximum_texture2d_gather_height",
    "mem_sync_domain_count",
    "host_numa_id",
    "mem_decompress_algorithm_mask",
    "mem_decompress_maximum_length",
    "gpu_pci_device_id",
    "gpu_pci_subsystem_id",
)
CUDA_CORE_BOOL_PROPERTIES = (
    "gpu_overlap",
    "kernel_exec_timeout",
    "integrated",
    "can_map_host_memory",
    "concurrent_kernels",
    "ecc_enabled",
    "tcc_driver",
    "unified_addressing",
    "global_l1_cache_supported",
    "local_l1_cache_supported",
    "managed_memory",
    "multi_gpu_board",
    "host_native_atomic_supported",
    "pageable_memory_access",
    "concurrent_managed_access",
    "compute_preemption_supported",
    "can_use_host_pointer_for_registered_mem",
    "cooperative_launch",
    "pageable_memory_access_uses_host_page_tables",
    "direct_managed_mem_access_from_host",
    "virtual_memory_management_supported",
    "handle_type_posix_file_descriptor_supported",
    "handle_type_win32_handle_supported",
    "handle_type_win32_kmt_handle_supported",
    "generic_compression_supported",
    "gpu_direct_rdma_with_cuda_vmm_supported",
    "sparse_cuda_array_supported",
    "read_only_host_register_supported",
    "memory_pools_supported",
    "gpu_direct_rdma_supported",
    "deferred_mapping_cuda_array_supported",
    "multicast_supported",
    "can_tex2d_gather",
    "stream_priorities_supported",
    "can_flush_remote_writes",
    "host_register_supported",
    "timeline_semaphore_interop_supported",
    "cluster_launch",
    "can_use_64_bit_stream_mem_ops",
    "can_use_stream_wait_value_nor",
    "dma_buf_supported",
    "ipc_event_supported",
    "tensor_map_access_supported",
    "handle_type_fabric_supported",
    "unified_function_pointers",
    "mps_enabled",
    "d3d12_cig_supported",
    "vulkan_cig_supported",
    "host_numa_virtual_memory_management_supported",
    "host_numa_memory_pools_supported",
    "host_numa_multinode_ipc_supported",
    "host_memory_pools_supported",
    "host_virtual_memory_management_supported",
    "host_alloc_dma_buf_supported",
    "only_partial_host_native_atomic_supported",
)


def _switches(log: list[Any]) -> list[str]:
    return [c.name for c in log if c.name in ("cuCtxSetCurrent", "cuCtxPushCurrent", "cuCtxPopCurrent")]


# --- system ------------------------------------------------------------------------------------


@pytest.mark.contract("G2")
def test_system_answers_from_the_driver_and_keeps_the_context(device: Device) -> None:
    with record_calls() as log:
        count = system.get_num_devices()
        version = system.get_driver_version()
        major_minor = system.get_user_mode_driver_version()
    # cuInit at most once (the recording proxy is a driver the seam has not initialized yet)
    assert [c.name for c in log if c.name != "cuInit"] == [
        "cuDeviceGetCount",
        "cuDriverGetVersion",
        "cuDriverGetVersion",
    ]
    err, expected = driver.cuDeviceGetCount()
    assert not err
    assert count == int(expected) == Device.count() >= 1
    err, raw = driver.cuDriverGetVersion()
    assert not err
    assert version == int(raw)
    assert major_minor == (int(raw) // 1000, int(raw) % 1000 // 10)
    assert system.num_devices == count  # the spellings of earlier cuda.core releases
    assert system.driver_version == major_minor
    assert {"get_num_devices", "get_user_mode_driver_version", "num_devices", "driver_version"} <= set(dir(system))
    assert Context.current() is None  # no context was made current or retained for these (G2)
    with pytest.raises(AttributeError, match="get_driver_branch"):
        _ = system.get_driver_branch  # an NVML question: not answered by the CUDA driver


@pytest.mark.contract("E1")
@pytest.mark.parametrize(
    ("call", "ask"),
    [
        ("cuDeviceGetCount", system.get_num_devices),
        ("cuDriverGetVersion", system.get_driver_version),
        ("cuDriverGetVersion", system.get_user_mode_driver_version),
        ("cuDriverGetVersion", lambda: system.driver_version),
        ("cuDeviceGetCount", lambda: system.num_devices),
    ],
)
def test_system_refusals_raise_naming_the_call(device: Device, call: str, ask: Any) -> None:
    with inject(call, INVALID_VALUE, nth=1), pytest.raises(CUDAError) as info:
        ask()
    assert info.value.call == call
    assert info.value.name == "CUDA_ERROR_INVALID_VALUE"
    assert Context.current() is None


@pytest.mark.contract("E1")
def test_system_count_initializes_the_driver_and_reports_a_failed_init() -> None:
    with simulated_driver(devices=3):
        assert system.get_num_devices() == 3
    with simulated_driver(devices=1), inject("cuInit", NOT_INITIALIZED, nth=1), pytest.raises(CUDAError) as info:
        system.get_num_devices()
    assert info.value.call == "cuInit"


# --- Device.pci_bus_id ---------------------------------------------------------------------------


@pytest.mark.contract("G2", "E1")
def test_pci_bus_id_is_the_drivers_and_switches_nothing(device: Device) -> None:
    with record_calls() as log:
        text = device.pci_bus_id
    assert [c.name for c in log] == ["cuDeviceGetPCIBusId"]
    assert re.fullmatch(r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]", text), text
    bus = int(text.split(":")[1], 16)
    domain = int(text.split(":")[0], 16)
    assert bus == device.properties.pci_bus_id
    assert domain == device.properties.pci_domain_id
    assert Context.current() is None
    with inject("cuDeviceGetPCIBusId", INVALID_VALUE, nth=1), pytest.raises(CUDAError) as info:
        _ = device.pci_bus_id
    assert info.value.call == "cuDeviceGetPCIBusId"


def test_pci_bus_ids_differ_between_devices(device: Device) -> None:
    if Device.count() < 2:
        pytest.skip("one device")
    assert Device(0).pci_bus_id != Device(1).pci_bus_id


@pytest.mark.contract("O3")
def test_pci_bus_id_of_an_uninstalled_driver_is_refused() -> None:
    with simulated_driver(devices=1):
        dev = Device(0)
    with simulated_driver(devices=1), record_calls() as log, pytest.raises(ResourceClosedError):
        _ = dev.pci_bus_id
    assert log == []


# --- properties under cuda.core 1.2's names ------------------------------------------------------


@pytest.mark.contract("E1")
def test_every_cuda_core_property_name_reads_with_cuda_core_type(cuguard_driver: Any, device: Device) -> None:
    props = device.properties
    names = set(dir(props))
    from cuda.bindings.driver import CUdevice_attribute

    known = {m.name for m in CUdevice_attribute}

    def in_bindings(name: str) -> bool:  # an attribute newer than the installed cuda-bindings has no name there
        return name == "virtual_memory_management_supported" or f"CU_DEVICE_ATTRIBUTE_{name.upper()}" in known

    missing = [n for n in (*CUDA_CORE_INT_PROPERTIES, *CUDA_CORE_BOOL_PROPERTIES) if n not in names]
    assert [n for n in missing if in_bindings(n)] == []
    simulated = isinstance(cuguard_driver, SimulatedDriver)
    unknown_to_driver = []
    for name, kind in [(n, int) for n in CUDA_CORE_INT_PROPERTIES] + [(n, bool) for n in CUDA_CORE_BOOL_PROPERTIES]:
        if name in missing:
            continue
        try:
            value = getattr(props, name)
        except CUDAError as exc:
            # A driver older than the attribute refuses it (cuda.core reads 0 then; cuguard raises, E1).
            unknown_to_driver.append((name, exc.name))
            continue
        assert type(value) is kind, (name, value)
    if simulated:
        assert unknown_to_driver == []
    assert {why for _, why in unknown_to_driver} <= {"CUDA_ERROR_INVALID_VALUE"}
    assert len(unknown_to_driver) < 10, unknown_to_driver


def test_cuda_core_names_read_the_drivers_attributes(device: Device) -> None:
    from cuda.bindings.driver import CUdevice_attribute as A

    props = device.properties
    assert props.virtual_memory_management_supported == bool(
        device.attribute(A.CU_DEVICE_ATTRIBUTE_VIRTUAL_ADDRESS_MANAGEMENT_SUPPORTED)
    )
    assert props.unified_function_pointers == bool(device.attribute(A.CU_DEVICE_ATTRIBUTE_UNIFIED_FUNCTION_POINTERS))
    assert props.multiprocessor_count == device.attribute(A.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
    assert isinstance(props.can_use_64_bit_stream_mem_ops, bool)
    assert isinstance(props.can_use_stream_wait_value_nor, bool)


def test_the_drivers_spelling_is_an_alias_of_the_same_cached_value(device: Device) -> None:
    props = device.properties
    value = props.virtual_memory_management_supported
    with record_calls() as log:
        assert props.virtual_address_management_supported is value
    assert log == []  # one cached value for both names
    assert "virtual_address_management_supported" in dir(props)


def test_names_beyond_cuda_core_are_the_installed_bindings_attributes(device: Device) -> None:
    from cuda.bindings.driver import CUdevice_attribute

    attributes = {
        m.name[len("CU_DEVICE_ATTRIBUTE_") :].lower()
        for m in CUdevice_attribute
        if m.name.startswith("CU_DEVICE_ATTRIBUTE_") and m.name != "CU_DEVICE_ATTRIBUTE_MAX"
    }
    cuda_core = {*CUDA_CORE_INT_PROPERTIES, *CUDA_CORE_BOOL_PROPERTIES}
    props = device.properties
    exposed = {n for n in dir(props) if not n.startswith("_")}
    # every exposed name is cuda.core's, the driver's alias of one, or an attribute of the installed bindings
    assert exposed - cuda_core - attributes == set()
    assert "virtual_address_management_supported" in attributes  # the alias is the driver's own spelling


# --- with dev: -----------------------------------------------------------------------------------


@pytest.mark.contract("G2", "C1")
def test_with_device_makes_its_context_current_and_restores(device: Device, other_context: Context) -> None:
    with record_calls() as log:
        with device as entered:
            assert entered is device
            assert Context.current() == device.context
        assert Context.current() == other_context
    assert _switches(log) == ["cuCtxSetCurrent", "cuCtxSetCurrent"]
    device.set_current()
    with record_calls() as log, device:
        assert Context.current() == device.context
    assert _switches(log) == []


@pytest.mark.contract("G2")
def test_with_device_nests_across_devices_and_restores_no_context(device: Device) -> None:
    second = Device(1) if Device.count() > 1 else device
    assert Context.current() is None
    with device:
        with second:
            assert Context.current() == second.context
            with device:
                assert Context.current() == device.context
            assert Context.current() == second.context
        assert Context.current() == device.context
    assert Context.current() is None
    with device.context:  # the same through the context
        assert Context.current() == device.context
    assert Context.current() is None


@pytest.mark.contract("G2")
def test_with_device_restores_after_an_exception_and_work_in_the_block(device: Device) -> None:
    def body() -> None:
        with device:
            stream = device.create_stream()
            stream.sync()
            stream.close()
            raise KeyError("inside")

    with pytest.raises(KeyError):
        body()
    assert Context.current() is None


@pytest.mark.contract("G2")
def test_with_device_is_per_thread(device: Device) -> None:
    seen: list[Any] = []

    def other() -> None:
        seen.append(Context.current())
        with device:
            seen.append(Context.current())
        seen.append(Context.current())

    with device:
        thread = threading.Thread(target=other)
        thread.start()
        thread.join(30)
        assert Context.current() == device.context
    assert seen == [None, device.context, None]
    assert Context.current() is None


@pytest.mark.contract("C2")
def test_with_device_failed_restore_raises(device: Device) -> None:
    with pytest.raises(CUDAError) as info, restore_fault(INVALID_CONTEXT), device:
        pass
    assert "could not be restored" in str(info.value)
    assert "set_current()" in str(info.value)
    assert Context.current() == device.context
    driver.cuCtxSetCurrent(_null())


@pytest.mark.contract("G4")
def test_with_device_failed_restore_under_an_exception_is_a_note(device: Device) -> None:
    with pytest.raises(KeyError) as info, restore_fault(INVALID_CONTEXT), device:
        raise KeyError("inside")
    notes = getattr(info.value, "__notes__", [])
    assert len(notes) == 1
    assert "could not be restored" in notes[0]
    driver.cuCtxSetCurrent(_null())


def _null() -> Any:
    from cuda.bindings.driver import CUcontext

    return CUcontext(0)

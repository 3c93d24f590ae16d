"""One pool imported twice in a process: one driver pool, one owner, destroyed with the last import (O1, S2).

An H200 answered a second ``cuMemPoolImportFromShareableHandle`` of the same pool with the same
handle, and one ``cuMemPoolDestroy`` ended the pool for both imports. The simulator does the same;
cuguard's two resources share the import, and the pool is destroyed once, by the last of them to
let go (closed or collected, its buffers freed), never under the other. The same-process tests run
on the simulator (the driver's IPC joins two processes); the two-process one also on a GPU.
"""

from __future__ import annotations

import gc
import multiprocessing
from typing import Any

import pytest

from cuguard.errors import CUDAError
from cuguard.resources import (
    Buffer,
    Device,
    DeviceMemoryResource,
    DeviceMemoryResourceOptions,
    IPCAllocationHandle,
)
from cuguard.testing import SimulatedDriver, inject, leak_check, record_calls

SIZE = 4096
INVALID_VALUE = 1
JOIN_TIMEOUT = 120
_FD = 1  # CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR


def _sim_only(driver: Any) -> None:
    if not isinstance(driver, SimulatedDriver):
        pytest.skip("imports in the exporting process itself: simulator only (the driver's IPC joins two processes)")


def _pools(sim: SimulatedDriver) -> list[int]:
    return [o.handle for o in sim.live_objects() if o.kind == "memory_pool"]


def _destroys(log: list[Any]) -> list[int]:
    return [int(c.args[0]) for c in log if c.name == "cuMemPoolDestroy" and not c.status]


@pytest.fixture
def shared(device: Device) -> Any:
    """An IPC-enabled pool with one buffer, shared: ``(handle, buffer descriptor)``."""
    mr = DeviceMemoryResource(device, DeviceMemoryResourceOptions(ipc_enabled=True))
    buf = mr.allocate(SIZE)
    handle = mr.get_allocation_handle()
    yield handle, buf.get_ipc_descriptor()
    handle.close()
    buf.close()
    mr.close()


@pytest.mark.contract("O1", "B2")
def test_the_simulator_gives_the_same_pool_to_a_second_import(cuguard_driver: Any, shared: Any) -> None:
    _sim_only(cuguard_driver)
    sim: SimulatedDriver = cuguard_driver
    handle, _ = shared
    before = _pools(sim)
    err, first = sim.cuMemPoolImportFromShareableHandle(handle.fd, _FD, 0)
    assert int(err) == 0
    err, second = sim.cuMemPoolImportFromShareableHandle(handle.fd, _FD, 0)
    assert int(err) == 0
    assert int(second) == int(first)  # the same pool, as an H200 answered
    assert len(_pools(sim)) == len(before) + 1  # no second pool
    assert int(sim.cuMemPoolDestroy(first)[0]) == 0  # one destroy ends it for both imports
    assert _pools(sim) == before
    err, third = sim.cuMemPoolImportFromShareableHandle(handle.fd, _FD, 0)  # imported again: a new pool
    assert int(err) == 0
    assert int(third) != int(first)
    assert int(sim.cuMemPoolDestroy(third)[0]) == 0
    assert sim.double_release == []


@pytest.mark.contract("O1", "S2", "W5")
@pytest.mark.parametrize("first_goes", ["close", "collected"])
def test_two_imports_of_one_pool_share_it_and_the_last_destroys_it(
    cuguard_driver: Any, device: Device, shared: Any, first_goes: str
) -> None:
    _sim_only(cuguard_driver)
    sim: SimulatedDriver = cuguard_driver
    handle, desc = shared
    with leak_check(), record_calls() as log:
        first = DeviceMemoryResource.from_allocation_handle(device, handle)
        second = DeviceMemoryResource.from_allocation_handle(device, handle)
        assert first is not second
        pool = int(first.handle)
        assert int(second.handle) == pool
        mapped = Buffer.from_ipc_descriptor(second, desc)
        if first_goes == "close":
            first.close()
        else:
            del first
            gc.collect()
        assert _destroys(log) == []  # the other import still holds the pool
        assert second.attributes.used_mem_current >= 0  # and uses it (the driver still knows it)
        second.close()  # while its buffer is mapped: destroyed after that buffer
        assert _destroys(log) == []
        mapped.close()
        assert _destroys(log) == [pool]  # once, by the last to let go
    assert sim.double_release == []
    assert sim.misuse == []


@pytest.mark.contract("O1", "S2")
def test_the_last_import_to_go_destroys_whatever_order_they_close(
    cuguard_driver: Any, device: Device, shared: Any
) -> None:
    _sim_only(cuguard_driver)
    sim: SimulatedDriver = cuguard_driver
    handle, desc = shared
    with leak_check(), record_calls() as log:
        imports = [DeviceMemoryResource.from_allocation_handle(device, handle) for _ in range(3)]
        mapped = Buffer.from_ipc_descriptor(imports[0], desc)
        imports[0].close()  # its buffer keeps it: destroy pending
        imports[2].close()
        assert _destroys(log) == []
        imports[1].close()
        assert _destroys(log) == []  # the first one's buffer is still mapped
        mapped.close()
        assert len(_destroys(log)) == 1
        again = DeviceMemoryResource.from_allocation_handle(device, handle)  # a new import after the last
        assert int(again.handle) != _destroys(log)[0]
        again.close()
        assert len(_destroys(log)) == 2
    assert sim.double_release == []


@pytest.mark.contract("G1", "O1", "S2")
def test_a_failed_second_import_leaves_the_first_alone(cuguard_driver: Any, device: Device, shared: Any) -> None:
    _sim_only(cuguard_driver)
    sim: SimulatedDriver = cuguard_driver
    handle, _ = shared
    first = DeviceMemoryResource.from_allocation_handle(device, handle)
    pool = int(first.handle)
    with record_calls() as log:
        with inject("cuThreadExchangeStreamCaptureMode", INVALID_VALUE, nth=2), pytest.raises(CUDAError) as info:
            DeviceMemoryResource.from_allocation_handle(device, handle)  # imported, then the mode restore fails
        assert info.value.call == "cuThreadExchangeStreamCaptureMode"
        assert _destroys(log) == []  # the undo does not destroy the pool the first import holds
        assert first.attributes.used_mem_current == 0
        first.close()
        assert _destroys(log) == [pool]
    assert sim.double_release == []


# --- two processes: the importer imports twice (simulator and GPU) -------------------------------


def _importer_body(conn: Any, handle: IPCAllocationHandle, desc: Any) -> None:
    dev = Device(0)
    with handle:
        first = DeviceMemoryResource.from_allocation_handle(dev, handle)
        second = DeviceMemoryResource.from_allocation_handle(dev, handle)
    same = int(first.handle) == int(second.handle)
    first.close()
    mapped = Buffer.from_ipc_descriptor(second, desc)  # the pool is still there for the second import
    seen = bytearray(mapped.size)
    mapped.copy_to(seen)
    mapped.close()
    second.close()
    conn.send((same, bytes(seen)))


def _importer(conn: Any, simulated: bool, handle: IPCAllocationHandle, desc: Any) -> None:
    try:
        if simulated:
            from cuguard.testing import simulated_driver

            with simulated_driver(devices=1):
                _importer_body(conn, handle, desc)
        else:
            _importer_body(conn, handle, desc)
    except BaseException as exc:
        conn.send(("error", repr(exc)))
        raise
    finally:
        conn.close()


@pytest.mark.contract("O1", "S2")
def test_another_process_imports_one_pool_twice(cuguard_driver: Any, device: Device) -> None:
    simulated = isinstance(cuguard_driver, SimulatedDriver)
    mr = DeviceMemoryResource(device, DeviceMemoryResourceOptions(ipc_enabled=True))
    buf = mr.allocate(SIZE)
    buf.fill(0x3C)
    handle = mr.get_allocation_handle()
    spawn = multiprocessing.get_context("spawn")
    here, there = spawn.Pipe()
    proc = spawn.Process(target=_importer, args=(there, simulated, handle, buf.get_ipc_descriptor()))
    proc.start()
    there.close()
    handle.close()
    if not here.poll(JOIN_TIMEOUT):
        proc.kill()
        pytest.fail("the importing process sent nothing in time")
    message = here.recv()
    proc.join(JOIN_TIMEOUT)
    assert message[0] != "error", message
    same, seen = message
    assert proc.exitcode == 0  # no crash: the pool was destroyed once, after both imports let go
    assert seen == b"\x3c" * SIZE
    if simulated:
        assert same  # the simulator follows the H200's answer; on a GPU the test takes what the driver gives
    buf.close()
    mr.close()

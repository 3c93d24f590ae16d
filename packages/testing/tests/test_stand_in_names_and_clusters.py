"""Stand-ins for templated kernels from a cubin, under their C++ names, and for cluster launches (B2).

A cubin here is a small ELF64 image made by hand: NVRTC gives a template's
instantiations weak function symbols and ``extern "C"`` kernels global ones, and
the simulator must find both by name, as the driver does. (The resources layer's
tests compile real cubins with NVRTC.)
"""

from __future__ import annotations

import os
import pickle
import struct
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cuguard.errors import CUDAError
from cuguard.graphs import GraphBuilder
from cuguard.resources import Device, LaunchConfig, ObjectCode, launch
from cuguard.testing import (
    DevicePointer,
    KernelLaunch,
    MissingStandInError,
    SimulatedDriver,
    register_stand_in,
    remove_stand_in,
    stand_in,
)

_STB_LOCAL, _STB_GLOBAL, _STB_WEAK = 0, 1, 2
_STT_OBJECT, _STT_FUNC = 1, 2


def _elf(symbols: list[tuple[str, int, int]]) -> bytes:
    """An ELF64 image whose symbol table holds ``(name, binding, type)`` symbols, as a cubin's does."""
    strtab = b"\0"
    entries = [bytes(24)]  # symbol 0 is the null symbol
    for name, bind, kind in symbols:
        entries.append(struct.pack("<IBBHQQ", len(strtab), (bind << 4) | kind, 0x10, 0, 0, 0))
        strtab += name.encode() + b"\0"
    symtab = b"".join(entries)
    shstrtab = b"\0.shstrtab\0.strtab\0.symtab\0"
    header_size = 64
    body = shstrtab + strtab + symtab
    offsets = (header_size, header_size + len(shstrtab), header_size + len(shstrtab) + len(strtab))
    shoff = header_size + len(body)
    sections = [
        bytes(64),
        struct.pack("<IIQQQQIIQQ", 1, 3, 0, 0, offsets[0], len(shstrtab), 0, 0, 1, 0),
        struct.pack("<IIQQQQIIQQ", 11, 3, 0, 0, offsets[1], len(strtab), 0, 0, 1, 0),
        struct.pack("<IIQQQQIIQQ", 19, 2, 0, 0, offsets[2], len(symtab), 2, 1, 8, 24),
    ]
    ident = b"\x7fELF" + bytes([2, 1, 1, 0x33, 7]) + bytes(7)
    header = struct.pack("<16sHHIQQQIHHHHHH", ident, 2, 190, 1, 0, 0, shoff, 0, 64, 0, 0, 64, len(sections), 1)
    return header + body + b"".join(sections)


def _mangled(test: str) -> str:
    """A lowered name of its own for each test (learned names are process-wide)."""
    return f"_Z{len(test)}{test}IfEvPfm"


@pytest.fixture
def dev(sim: SimulatedDriver) -> Iterator[Device]:
    device = Device(0)
    previous = device.set_current()
    yield device
    if previous is not None:
        previous.set_current()


def _upload(dev: Device, values: list[float]) -> Any:
    buf = dev.allocate(4 * len(values))
    buf.copy_from(np.array(values, dtype=np.float32).tobytes())
    return buf


def _download(buf: Any, n: int) -> list[float]:
    host = bytearray(4 * n)
    buf.copy_to(host)
    return [float(v) for v in np.frombuffer(bytes(host), dtype=np.float32)]


def _double(launch: KernelLaunch, out: DevicePointer, n: int) -> None:
    out.array(np.float32, n)[:] *= 2


@pytest.mark.contract("B2")
def test_a_weak_function_symbol_of_a_cubin_is_a_kernel_the_simulator_finds(dev: Device) -> None:
    weak = _mangled("weakkernel")
    image = _elf(
        [
            (weak, _STB_WEAK, _STT_FUNC),
            ("plain", _STB_GLOBAL, _STT_FUNC),
            ("helper", _STB_LOCAL, _STT_FUNC),
            ("table", _STB_GLOBAL, _STT_OBJECT),
        ]
    )
    register_stand_in(weak, _double)
    try:
        with dev.load_module(image) as module, dev.create_stream() as stream:
            module.get_kernel("plain")
            for absent in ("helper", "table"):  # a local function, a data symbol: no kernel of that name
                with pytest.raises(CUDAError, match="CUDA_ERROR_NOT_FOUND"):
                    module.get_kernel(absent)
            buf = _upload(dev, [1, 2, 3])
            launch(stream, LaunchConfig(1, 3), module.get_kernel(weak), buf, 3)
            stream.sync()
            assert _download(buf, 3) == [2, 4, 6]
            buf.close()
    finally:
        remove_stand_in(weak)


@pytest.mark.contract("B2")
def test_a_stand_in_registered_under_the_name_expression_runs_for_the_lowered_kernel(
    sim: SimulatedDriver, dev: Device
) -> None:
    lowered = _mangled("sourcename")
    code = ObjectCode.from_cubin(_elf([(lowered, _STB_WEAK, _STT_FUNC)]), symbol_mapping={"sourcename<float>": lowered})
    seen: list[KernelLaunch] = []

    @stand_in("sourcename<float>")
    def by_source_name(launch: KernelLaunch, out: DevicePointer, n: int) -> None:
        seen.append(launch)
        _double(launch, out, n)

    try:
        kernel = code.get_kernel("sourcename<float>")
        with dev.create_stream() as stream:
            buf = _upload(dev, [1.5, 2.5])
            launch(stream, LaunchConfig(1, 2), kernel, buf, 2)
            stream.sync()
            assert _download(buf, 2) == [3, 5]
            (info,) = seen
            assert info.kernel == lowered  # the entry name, as on a GPU
            # A stand-in under the lowered name itself comes first.
            register_stand_in(lowered, lambda launch, out, n: out.array(np.float32, n).fill(7))
            launch(stream, LaunchConfig(1, 2), kernel, buf, 2)
            stream.sync()
            assert _download(buf, 2) == [7, 7]
            assert len(seen) == 1
            buf.close()
    finally:
        remove_stand_in("sourcename<float>")
        remove_stand_in(lowered)
        kernel.module.close()


@pytest.mark.contract("B2")
def test_a_driver_s_own_emulation_may_use_the_name_expression_too(sim: SimulatedDriver, dev: Device) -> None:
    lowered = _mangled("ownemulation")
    code = ObjectCode.from_cubin(
        _elf([(lowered, _STB_WEAK, _STT_FUNC)]), symbol_mapping={"ownemulation<float>": lowered}
    )
    calls: list[tuple[Any, ...]] = []
    sim.register_kernel("ownemulation<float>", lambda s, *args: calls.append(args))
    with dev.load_module(code) as module, dev.create_stream() as stream:
        launch(stream, LaunchConfig(1, 1), module.get_kernel("ownemulation<float>"), 5, 6)
        stream.sync()
    assert calls == [(5, 6)]


@pytest.mark.contract("B2")
def test_a_kernel_without_a_stand_in_is_refused_naming_its_name_expression(dev: Device) -> None:
    lowered = _mangled("unemulated")
    code = ObjectCode.from_cubin(_elf([(lowered, _STB_WEAK, _STT_FUNC)]), symbol_mapping={"unemulated<float>": lowered})
    with dev.load_module(code) as module, dev.create_stream() as stream:
        kernel = module.get_kernel("unemulated<float>")
        with pytest.raises(MissingStandInError, match=r"stand_in\('unemulated<float>'\)") as info:
            launch(stream, LaunchConfig(1, 1), kernel, 0, 0)
        assert info.value.kernel == lowered
        assert info.value.names == ("unemulated<float>",)
        again = pickle.loads(pickle.dumps(info.value))
        assert (again.kernel, again.names) == (lowered, ("unemulated<float>",))
        stream.sync()
    # A name never learned is suggested as it is.
    assert MissingStandInError("k").names == ()
    assert "stand_in('k')" in str(MissingStandInError("k"))


@pytest.mark.contract("B2")
def test_learning_lowered_names_checks_the_mapping_and_learns_nothing_from_a_bad_one(
    sim: SimulatedDriver, dev: Device
) -> None:
    lowered = _mangled("badmapping")
    with pytest.raises(TypeError, match="mapping"):
        sim.learn_lowered_names([("badmapping<float>", lowered)])
    with pytest.raises(TypeError, match="non-empty str"):
        sim.learn_lowered_names({"badmapping<float>": lowered, "other": 5})
    register_stand_in("badmapping<float>", _double)
    try:
        with dev.load_module(_elf([(lowered, _STB_WEAK, _STT_FUNC)])) as module, dev.create_stream() as stream:
            with pytest.raises(MissingStandInError):  # the first pair of the refused mapping was not learned
                launch(stream, LaunchConfig(1, 1), module.get_kernel(lowered), 0, 0)
            sim.learn_lowered_names({"badmapping<float>": lowered})
            sim.learn_lowered_names({"badmapping<float>": lowered})  # again: nothing changes
            buf = _upload(dev, [4])
            launch(stream, LaunchConfig(1, 1), module.get_kernel(lowered), buf, 1)
            stream.sync()
            assert _download(buf, 1) == [8]
            buf.close()
    finally:
        remove_stand_in("badmapping<float>")


CLUSTER_PTX = b"""
.version 8.0
.target sm_90
.address_size 64
.visible .entry clustered(.param .u64 out)
{
    ld.param.u64 %rd1, [out];
    ret;
}
"""


@pytest.mark.contract("B2")
def test_a_stand_in_sees_the_launch_s_cluster_and_cooperative_flag(dev: Device) -> None:
    seen: list[KernelLaunch] = []

    def record(launch: KernelLaunch, out: DevicePointer) -> None:
        seen.append(launch)
        if launch.cluster_blocks > 1:  # one value per block: the cluster it belongs to (neighbours along x)
            out.array(np.int32, launch.grid[0])[:] = [b // launch.cluster[0] for b in range(launch.grid[0])]

    register_stand_in("clustered", record)
    try:
        with dev.load_module(CLUSTER_PTX) as module, dev.create_stream() as stream, dev.allocate(4 * 8) as buf:
            kernel = module.get_kernel("clustered")
            launch(stream, LaunchConfig(grid=(4, 1), cluster=(2, 1), block=32), kernel, buf)
            launch(stream, LaunchConfig(grid=8, block=32), kernel, buf)
            launch(stream, LaunchConfig(grid=2, block=32, cooperative_launch=True), kernel, buf)
            stream.sync()
            host = bytearray(4 * 8)
            buf.copy_to(host)
        clustered, plain, cooperative = seen
        # LaunchConfig's grid counts clusters when a cluster is given (as cuda.core's): 4 clusters of 2 blocks.
        assert (clustered.grid, clustered.cluster, clustered.clusters) == ((8, 1, 1), (2, 1, 1), (4, 1, 1))
        assert (clustered.cluster_blocks, clustered.cooperative) == (2, False)
        assert np.frombuffer(bytes(host), np.int32).tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
        assert (plain.cluster, plain.clusters, plain.cluster_blocks) == ((1, 1, 1), (8, 1, 1), 1)
        assert (cooperative.cluster, cooperative.cooperative) == ((1, 1, 1), True)
    finally:
        remove_stand_in("clustered")


@pytest.mark.contract("B2")
def test_a_captured_cluster_launch_keeps_its_cluster_in_the_graph(dev: Device) -> None:
    seen: list[tuple[int, int, int]] = []
    register_stand_in("clustered", lambda launch, out: seen.append(launch.cluster))
    try:
        with dev.load_module(CLUSTER_PTX) as module, dev.create_stream() as stream, dev.allocate(16) as buf:
            kernel = module.get_kernel("clustered")
            with GraphBuilder(stream).begin_building() as builder:
                builder.launch(LaunchConfig(grid=(1, 2), cluster=(1, 4), block=32), kernel, buf)
                builder.launch(LaunchConfig(grid=1, block=32), kernel, buf)
                with builder.end_building().complete() as graph:
                    assert seen == []  # captured, not run
                    graph.launch(stream)
                    graph.launch(stream)
                    stream.sync()
        assert seen == [(1, 4, 1), (1, 1, 1)] * 2
    finally:
        remove_stand_in("clustered")


@pytest.mark.contract("B2")
def test_a_stand_in_written_for_the_five_field_launch_keeps_working(sim: SimulatedDriver) -> None:
    launch_info = KernelLaunch("k", (2, 1, 1), (4, 1, 1), 0, sim)
    assert (launch_info.cluster, launch_info.cooperative, launch_info.threads) == ((1, 1, 1), False, 8)
    assert launch_info.clusters == (2, 1, 1)


_REGISTERED = any(ep.name == "sim" for ep in entry_points(group="cuguard.drivers"))

PROGRAM = """
import numpy as np
from cuguard.resources import Device, LaunchConfig, ObjectCode, launch

code = ObjectCode.from_cubin({image!r}, symbol_mapping={{"scaled<float>": {lowered!r}}})
dev = Device(0)
dev.set_current()
kernel = code.get_kernel("scaled<float>")
with dev.create_stream() as stream, dev.allocate(16) as buf:
    buf.copy_from(np.arange(4, dtype=np.float32), stream=stream)
    launch(stream, LaunchConfig(grid=1, block=4), kernel, buf, 4)
    out = np.empty(4, dtype=np.float32)
    buf.copy_to(out, stream=stream)
    stream.sync()
print("result", out.tolist())
"""

STAND_INS = """
import numpy as np
from cuguard.testing import stand_in

@stand_in("scaled<float>")  # the name the program compiled, not the lowered one
def scaled(launch, data, n):
    data.array(np.float32, n)[:] *= 3
"""


@pytest.mark.contract("B2")
@pytest.mark.skipif(not _REGISTERED, reason="cuguard-testing is not installed (no entry points)")
def test_a_stand_ins_module_uses_the_name_expression_of_an_unchanged_program(tmp_path: Path) -> None:
    lowered = _mangled("scaled")
    program = PROGRAM.format(image=_elf([(lowered, _STB_WEAK, _STT_FUNC)]), lowered=lowered)
    (tmp_path / "program.py").write_text(textwrap.dedent(program))
    (tmp_path / "name_stand_ins.py").write_text(textwrap.dedent(STAND_INS))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUGUARD_")}
    env.update(
        PYTHONPATH=os.pathsep.join([str(tmp_path), *sys.path]),
        CUGUARD_DRIVER="sim",
        CUGUARD_SIM_STAND_INS="name_stand_ins",
    )
    done = subprocess.run(
        [sys.executable, str(tmp_path / "program.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "result [0.0, 3.0, 6.0, 9.0]" in done.stdout

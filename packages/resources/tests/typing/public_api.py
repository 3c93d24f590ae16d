"""Public-API usage of compilation and launches that ``mypy --strict`` must accept (type-checked, not run).

If a change to cuguard.resources makes this file fail to type-check, users' code would too.
"""

from __future__ import annotations

import io
from typing import assert_type

from cuguard.resources import (
    Device,
    Kernel,
    KernelAttributes,
    KernelOccupancy,
    LaunchConfig,
    Linker,
    LinkerOptions,
    MaxPotentialBlockSizeOccupancyResult,
    Module,
    ObjectCode,
    Program,
    ProgramCache,
    ProgramOptions,
    Stream,
    launch,
    link,
)


def compile_and_link(device: Device) -> None:
    options = ProgramOptions(arch="sm_90", std="c++17", define_macro=[("N", "4")], include_path="inc")
    program = Program("__global__ void k() {}", "c++", options)
    assert_type(program.options, ProgramOptions)
    logs = io.StringIO()
    code = program.compile("ptx", name_expressions=("k",), logs=logs, cache=ProgramCache())
    assert_type(code, ObjectCode)
    assert_type(code.code, bytes)
    assert_type(code.symbol_mapping, dict[str, str])
    linked = Linker(code, options=LinkerOptions(arch="sm_90")).link("cubin")
    assert_type(linked, ObjectCode)
    assert_type(link([code, b"// ptx"], "sm_90"), bytes)
    assert_type(Program(["-arch=sm_90"][0], options=["-arch=sm_90"]).compile(), ObjectCode)
    assert_type(Module.load(device.context, linked), Module)
    assert_type(ObjectCode.from_cubin(b"\x7fELF").get_kernel("k"), Kernel)


def launch_and_query(stream: Stream, kernel: Kernel) -> None:
    config = LaunchConfig(grid=(2, 1), block=128, cluster=2, shmem_size=0, cooperative_launch=False)
    assert_type(config.shared_mem, int)
    launch(stream, config, kernel, 1, 2.0)
    assert_type(kernel.attributes, KernelAttributes)
    assert_type(kernel.attributes.num_regs(), int)
    assert_type(kernel.attributes.cache_mode_ca(), bool)
    assert_type(kernel.occupancy, KernelOccupancy)
    assert_type(kernel.occupancy.max_active_blocks_per_multiprocessor(128, 0), int)
    result = kernel.occupancy.max_potential_block_size(0, 0)
    assert_type(result, MaxPotentialBlockSizeOccupancyResult)
    assert_type(result.max_block_size, int)

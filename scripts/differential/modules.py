"""Modules and launches: loading PTX, function attributes, launch attributes."""

from __future__ import annotations

from typing import Any

from cuda.bindings import driver as B

from differential.common import (
    PTX,
    Obs,
    Setup,
    name,
    ok,
    scenario,
)

FA = B.CUfunction_attribute


@scenario
def module_cases(d: Any) -> Obs:
    with Setup(d):
        garbage = name(d.cuModuleLoadData(b"\x7fELF garbage\x00")[0])
        mod = ok(d.cuModuleLoadData(PTX))
        missing = name(d.cuModuleGetFunction(mod, b"nope")[0])
        fn = ok(d.cuModuleGetFunction(mod, b"empty"))
        s = ok(d.cuStreamCreate(0))
        launched = name(d.cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, s, 0, 0)[0])
        synced = name(d.cuStreamSynchronize(s)[0])
        d.cuStreamDestroy(s)
        unloaded = name(d.cuModuleUnload(mod)[0])
    return [garbage, missing, launched, synced, unloaded]


@scenario
def function_attributes(d: Any) -> Obs:
    keys = [
        "MAX_THREADS_PER_BLOCK",
        "SHARED_SIZE_BYTES",
        "CONST_SIZE_BYTES",
        "LOCAL_SIZE_BYTES",
        "NUM_REGS",
        "PTX_VERSION",
        "BINARY_VERSION",
        "CACHE_MODE_CA",
        "MAX_DYNAMIC_SHARED_SIZE_BYTES",
        "PREFERRED_SHARED_MEMORY_CARVEOUT",
        "CLUSTER_SIZE_MUST_BE_SET",
        "REQUIRED_CLUSTER_WIDTH",
        "NON_PORTABLE_CLUSTER_SIZE_ALLOWED",
        "CLUSTER_SCHEDULING_POLICY_PREFERENCE",
    ]

    def attribute(key: str) -> Any:
        return getattr(FA, "CU_FUNC_ATTRIBUTE_" + key)

    with Setup(d) as env:
        fn = env.kernel()
        out: Obs = [[key, int(ok(d.cuFuncGetAttribute(attribute(key), fn)))] for key in keys]
        out.append(name(d.cuFuncGetAttribute(999, fn)[0]))
        for key, value in (
            ("MAX_DYNAMIC_SHARED_SIZE_BYTES", 100000),
            ("MAX_DYNAMIC_SHARED_SIZE_BYTES", 232448),
            ("MAX_DYNAMIC_SHARED_SIZE_BYTES", 232449),
            ("MAX_DYNAMIC_SHARED_SIZE_BYTES", -1),
            ("PREFERRED_SHARED_MEMORY_CARVEOUT", 50),
            ("PREFERRED_SHARED_MEMORY_CARVEOUT", 101),
            ("PREFERRED_SHARED_MEMORY_CARVEOUT", -2),
            ("REQUIRED_CLUSTER_WIDTH", 2),
            ("NON_PORTABLE_CLUSTER_SIZE_ALLOWED", 1),
            ("MAX_THREADS_PER_BLOCK", 512),
            ("NUM_REGS", 8),
            ("SHARED_SIZE_BYTES", 16),
        ):
            status = name(d.cuFuncSetAttribute(fn, attribute(key), value)[0])
            out.append([key, value, status, int(ok(d.cuFuncGetAttribute(attribute(key), fn)))])
        out.append(name(d.cuFuncSetAttribute(fn, 999, 0)[0]))
        d.cuCtxSetCurrent(B.CUcontext(0))
        out.append(name(d.cuFuncGetAttribute(attribute("MAX_THREADS_PER_BLOCK"), fn)[0]))  # no current context
        d.cuCtxSetCurrent(env.ctx)
    return out


def _ex_config(stream: Any, attributes: list[tuple[str, int]]) -> Any:
    """A one-block ``CUlaunchConfig`` on ``stream`` with launch attributes ``(name, value)``."""
    attrs = []
    for which, value in attributes:
        attr = B.CUlaunchAttribute()
        attr.id = getattr(B.CUlaunchAttributeID, f"CU_LAUNCH_ATTRIBUTE_{which}")
        if which == "PRIORITY":
            attr.value.priority = value
        else:
            attr.value.programmaticStreamSerializationAllowed = value
        attrs.append(attr)
    cfg = B.CUlaunchConfig()
    cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = 1
    cfg.blockDimX = cfg.blockDimY = cfg.blockDimZ = 1
    cfg.sharedMemBytes = 0
    cfg.hStream = stream
    cfg.attrs = attrs
    cfg.numAttrs = len(attrs)
    return cfg


@scenario
def launch_priority_and_programmatic_serialization(d: Any) -> Obs:
    """Launch attributes of cuLaunchKernelEx: priorities in and out of the stream priority range, PDL."""
    out: Obs = []
    with Setup(d) as env:
        least, greatest = ok(d.cuCtxGetStreamPriorityRange())
        out.append([int(least), int(greatest)])
        fn = env.kernel()
        s = env.stream()
        for attributes in (
            [("PRIORITY", int(greatest))],
            [("PRIORITY", int(least))],
            [("PRIORITY", int(greatest) - 1)],
            [("PRIORITY", int(least) + 1)],
            [("PRIORITY", -1000)],
            [("PROGRAMMATIC_STREAM_SERIALIZATION", 1)],
            [("PROGRAMMATIC_STREAM_SERIALIZATION", 0)],
            [("PROGRAMMATIC_STREAM_SERIALIZATION", 1), ("PRIORITY", int(greatest))],
        ):
            out.append(name(d.cuLaunchKernelEx(_ex_config(s, attributes), fn, 0, 0)[0]))
        out.append(name(d.cuStreamSynchronize(s)[0]))
    return out

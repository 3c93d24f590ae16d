"""The misuse sweep's operations of the resources layer's modules, launches and code."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace

from cuguard.errors import LibraryNotFoundError
from cuguard.sweeps._misuse.model import SIZE
from cuguard.sweeps._misuse.ops_base import (
    ANY,
    CONFIG,
    CONTEXT,
    KERNEL,
    KERNEL_ARGS,
    KERNEL_ARGS_PARAM,
    KERNEL_ATTRIBUTES,
    STREAM,
    Op,
    Param,
    _attributed_launch,
    _compile,
    _describe,
    _link_with,
    _object_code,
    _object_code_state,
    _p,
    _v,
    adder,
    image_param,
)

__all__ = ["code_ops", "launch_ops"]


def launch_ops(L: SimpleNamespace, image: Callable[[], bytes]) -> list[Op]:
    """Modules, launch configurations, launches and kernel arguments."""
    E, R = L.errors, L.resources
    ops: list[Op] = []
    add = adder(ops)
    images = image_param(image)
    kargs = KERNEL_ARGS_PARAM
    add("resources.Module.load", None, R.Module.load, _p("context", CONTEXT, "Context"), images)
    add(
        "resources.Module.get_kernel",
        "Module",
        lambda m, name: m.get_kernel(name),
        _v("name", "fill_u8", "fill_u8", "missing", None, 5, good=2),
        weight=2,
    )
    add(
        "resources.LaunchConfig()",
        None,
        lambda grid, block: R.LaunchConfig(grid=grid, block=block),
        _v("grid", 1, 1, (1, 1), 0, -1, "x", (1, 2, 3, 4), 1.5, good=3),
        _v("block", SIZE, 1, (32, 2), 2048, 0, None, good=3),
    )
    # launch attributes: a priority outside the device's range is refused at the launch (ValueError)
    add(
        "resources.LaunchConfig()[attributes]",
        None,
        lambda priority, serialize: R.LaunchConfig(
            grid=1, block=SIZE, priority=priority, programmatic_stream_serialization=serialize
        ),
        _v("priority", None, 0, -1, -5, 1, -9, True, 1.5, "x", 2**31, good=6),
        _v("programmatic_stream_serialization", False, True, 1, None, good=2),
    )
    kargs = Param("args", special=KERNEL_ARGS, star=True, naming=False)
    add(
        "resources.launch",
        None,
        R.launch,
        _p("stream", STREAM, "Stream"),
        _p("config", CONFIG, "LaunchConfig"),
        _p("kernel", KERNEL, "Kernel"),
        kargs,
        weight=3,
    )
    # A launch with fault attribution on (E5): a launch on a capturing stream must not synchronize it (G6).
    add(
        "errors.attribute_faults",
        None,
        lambda stream, config, kernel, *args: _attributed_launch(E, R, stream, config, kernel, args),
        _p("stream", STREAM, "Stream"),
        _p("config", CONFIG, "LaunchConfig"),
        _p("kernel", KERNEL, "Kernel"),
        kargs,
        weight=2,
    )
    add("resources.pack_args", None, lambda *args: R.pack_args(args), kargs)
    add("resources.Kernel.pack", "Kernel", lambda k, *args: k.pack(args)[0], kargs)
    add(
        "resources.Kernel.parameters",
        "Kernel",
        lambda k: ([p.kind for p in k.parameters], k.name),
        uses_receiver=False,
    )
    add("resources.Kernel.handle", "Kernel", lambda k: (k.handle, k.num_arguments))
    add("resources.Module.handle", "Module", lambda m: (m.handle, m.context, m.closed))
    add("resources.LaunchConfig.dims", "LaunchConfig", lambda c: (c.dims(), c.is_cooperative, c.shared_mem))
    add(
        "resources.LaunchConfig()[cluster]",
        None,
        lambda grid, cluster, shmem, coop: R.LaunchConfig(
            grid=grid, block=SIZE, cluster=cluster, shmem_size=shmem, cooperative_launch=coop
        ),
        _v("grid", 1, (1, 2), 0, "x", good=2),
        _v("cluster", None, 2, (1, 2, 1), 0, (1, 1, 1, 1), 1.5, good=3),
        _v("shmem_size", 0, 16, -1, None, good=3),
        _v("cooperative_launch", False, True, 1, good=2),
    )
    add(
        "resources.launch[cluster]",
        None,
        lambda stream, kernel, cooperative, *args: R.launch(
            stream,
            R.LaunchConfig(grid=1, block=SIZE, cluster=None if cooperative else 2, cooperative_launch=cooperative),
            kernel,
            *args,
        ),
        _p("stream", STREAM, "Stream"),
        _p("kernel", KERNEL, "Kernel"),
        _v("cooperative", False, True),
        kargs,
        weight=2,
    )
    return ops


def code_ops(L: SimpleNamespace, image: Callable[[], bytes]) -> list[Op]:
    """Kernel attributes and occupancy, object code, compilers, linkers, foreign streams, launch descriptions."""
    R = L.resources
    ops: list[Op] = []
    add = adder(ops)
    add(
        "resources.Kernel.attributes",
        "Kernel",
        lambda k, name: getattr(k.attributes, name)(),
        _v("name", *KERNEL_ATTRIBUTES),
    )
    add(
        "resources.Kernel.occupancy",
        "Kernel",
        lambda k, block_size, shmem: k.occupancy.max_active_blocks_per_multiprocessor(block_size, shmem),
        _v("block_size", SIZE, 32, 0, -1, None, 1.5, good=2),
        _v("dynamic_shared_memory_size", 0, 128, -1, None, good=2),
    )
    add(
        "resources.Kernel.occupancy.max_potential_block_size",
        "Kernel",
        lambda k, shmem, limit: k.occupancy.max_potential_block_size(shmem, limit),
        _v("dynamic_shared_memory_needed", 0, 256, -1, None, good=2),
        _v("block_size_limit", 0, 128, -1, "x", good=2),
    )
    add(
        "resources.Kernel.occupancy.available_dynamic_shared_memory_per_block",
        "Kernel",
        lambda k, blocks, block_size: k.occupancy.available_dynamic_shared_memory_per_block(blocks, block_size),
        _v("num_blocks_per_multiprocessor", 1, 4, 0, None, good=2),
        _v("block_size", SIZE, 1024, 0, "x", good=2),
    )
    add(
        "resources.Kernel.occupancy.max_active_clusters",
        "Kernel",
        lambda k, cluster, stream: k.occupancy.max_active_clusters(
            R.LaunchConfig(grid=1, block=SIZE, cluster=cluster), stream
        ),
        _v("cluster", 2, 4, None, 32, good=2),
        _p("stream", STREAM, "Stream", optional=True),
    )
    add(
        "resources.Kernel.occupancy.max_potential_cluster_size",
        "Kernel",
        lambda k, config: k.occupancy.max_potential_cluster_size(config),
        _p("config", CONFIG, "LaunchConfig"),
    )
    add(
        "resources.ObjectCode.get_kernel",
        None,
        lambda data, name: _object_code(R, data).get_kernel(name),
        _v("image", image, image, b"garbage", good=2),
        _v("name", "fill_u8", "fill_u8", "missing", None, 5, good=2),
    )
    add(
        "resources.ObjectCode.from_ptx",
        None,
        lambda data, name: R.ObjectCode.from_ptx(data, name=name).lowered_name("fill_u8"),
        _v("module", image, b"", None, 5, good=2),
        _v("name", "", "kernels", None, good=2),
    )
    for kind in ("cubin", "fatbin", "ltoir"):
        add(
            f"resources.ObjectCode.from_{kind}",
            None,
            lambda data, name, kind=kind: _object_code_state(getattr(R.ObjectCode, f"from_{kind}")(data, name=name)),
            _v("module", image, b"garbage", "text", b"", None, 5, good=3),
            _v("name", "", "kernels", None, good=2),
            extra_errors=(OSError,),  # documented: a str is the path of a file to read
        )
    program_cache = R.ProgramCache()  # repeated compilations come from memory
    add(
        "resources.Program.compile",
        None,
        lambda code_type, target, names: _compile(R, program_cache, code_type, target, names),
        _v("code_type", "c++", "c++", "fortran", None, good=2),
        _v("target_type", "ptx", "ptx", "bogus", None, good=2),
        _v("name_expressions", (), ("tiny<int>",), "tiny<int>", (5,), good=2),
        extra_errors=(LibraryNotFoundError,),  # documented: NVRTC is not installed
    )
    add(
        "resources.Linker.link",
        None,
        lambda arch, target: _link_with(R, image(), arch, target),
        _v("arch", "sm_90", None, "x", 5, good=1),
        _v("target_type", "cubin", "bogus", None, good=1),
        extra_errors=(LibraryNotFoundError,),  # documented: nvJitLink is not installed
    )
    add(
        "resources.link",
        None,
        R.link,
        _v("images", lambda: [image()], lambda: (image(),), lambda: [b"garbage"], (), None, 5, lambda: [5], good=2),
        _v("arch", "sm_90", None, 5, "x", good=1),
        extra_errors=(LibraryNotFoundError,),  # documented: nvJitLink is not installed
    )
    # A foreign stream (or a builder, or a Stream) as a cuguard Stream; the wrapper is pooled (not owned).
    # a Stream is returned as it is (a conversion, not a use): a closed or stale one is refused where it is used
    add("resources.as_stream", None, R.as_stream, _p("stream", STREAM, "Stream", uses=False), weight=2)
    add(
        "resources.wait_attributed",
        None,
        R.wait_attributed,
        _p("stream", STREAM, "Stream"),
        _v("describe", lambda: _describe, None, 5, good=1),
    )
    add(
        "resources.describe_launch",
        None,
        lambda name, config, *args: R.describe_launch(name, config, args),
        _v("name", "fill_u8", None, 5, good=1),
        _p("config", CONFIG, "LaunchConfig"),
        Param("args", ANY, "", star=True, uses=False, naming=False),  # only described: any object, never used
    )
    return ops

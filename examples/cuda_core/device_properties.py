"""What the driver says about each device, under cuda.core's property names."""

from cuguard.resources import Device, system

count = system.get_num_devices()
major, minor = system.get_user_mode_driver_version()[:2]
print(f"{count} device(s), CUDA driver {major}.{minor} ({system.get_driver_version()})")
assert count == Device.count() >= 1

for ordinal in range(count):
    dev = Device(ordinal)
    props = dev.properties
    cc = dev.compute_capability
    free, total = dev.memory_info
    print(f"device {ordinal}: {dev.name}")
    print(f"  compute capability {cc[0]}.{cc[1]} (sm_{dev.arch}), PCI bus {dev.pci_bus_id}, uuid {dev.uuid}")
    print(f"  {props.multiprocessor_count} multiprocessors, warp size {props.warp_size}")
    shared = props.max_shared_memory_per_block
    print(f"  {props.max_threads_per_block} threads and {shared} bytes of shared memory per block at most")
    print(f"  memory: {free >> 20} MiB free of {total >> 20} MiB; memory pools: {props.memory_pools_supported}")
    print(f"  virtual memory management: {props.virtual_memory_management_supported}")
    assert dev.arch == f"{cc[0]}{cc[1]}"
    assert (props.compute_capability_major, props.compute_capability_minor) == cc
    assert props.warp_size == 32
    assert props.multiprocessor_count > 0
    assert 0 < free <= total
    assert Device(ordinal) is dev
print("device properties: ok")

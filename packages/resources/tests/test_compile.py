"""NVRTC and nvJitLink failures carry their library's status and log (E2); real GPU machines only."""

from __future__ import annotations

import pytest

from cuguard.errors import CUDAError, NVJitLinkError, NVRTCError
from cuguard.resources import Device, LaunchConfig, Program, ProgramOptions, launch, link

pytestmark = pytest.mark.real_only


@pytest.mark.contract("E2")
def test_compile_error_raises_nvrtc_error_with_log(device: Device) -> None:
    source = 'extern "C" __global__ void broken() { this is not cuda; }'
    with pytest.raises(NVRTCError) as info:
        Program(source, options=ProgramOptions(name="broken.cu")).compile("ptx")
    error = info.value
    assert isinstance(error, CUDAError)
    assert error.name == "NVRTC_ERROR_COMPILATION"
    assert error.call == "nvrtcCompileProgram"
    assert "broken.cu" in error.log
    assert "error" in error.log
    assert not error.is_sticky


@pytest.mark.contract("E2")
def test_bad_option_is_an_nvrtc_error(device: Device) -> None:
    with pytest.raises(NVRTCError) as info:
        Program('extern "C" __global__ void k() {}', options=["--no-such-option"]).compile("ptx")
    assert info.value.name.startswith("NVRTC_ERROR_")


@pytest.mark.contract("E2")
def test_link_failure_raises_nvjitlink_error_with_log(device: Device) -> None:
    major, minor = device.compute_capability
    with pytest.raises(NVJitLinkError) as info:
        link([b"// not ptx\n.version 99.0\n.target nonsense\n garbage \x00"], arch=f"sm_{major}{minor}")
    error = info.value
    assert isinstance(error, CUDAError)
    assert error.name.startswith("NVJITLINK_ERROR_")
    assert error.log


def test_ptx_linked_with_nvjitlink_runs(device: Device) -> None:
    major, minor = device.compute_capability
    ptx = Program('extern "C" __global__ void empty() {}', options=[f"-arch=compute_{major}{minor}"]).compile("ptx")
    cubin = link([ptx], arch=f"sm_{major}{minor}")
    with device.load_module(cubin) as module, device.create_stream() as stream:
        launch(stream, LaunchConfig(), module.get_kernel("empty"))
        stream.sync()

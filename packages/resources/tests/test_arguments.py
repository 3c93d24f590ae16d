"""Arguments of the wrong kind are refused before the driver sees them (E3), found by the misuse sweep."""

from __future__ import annotations

from typing import Any

import pytest

from cuguard.errors import CUDAError
from cuguard.resources import Device, LaunchConfig, Module, Stream, as_stream, launch
from cuguard.testing import record_calls


class ForeignStream:
    """Another library's stream: only ``__cuda_stream__``."""

    def __init__(self, stream: Stream) -> None:
        self._address = int(stream.handle)

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self._address)


WRONG: list[Any] = [None, 3, 1.5, "text", object()]


def _refused(call: Any, param: str, expected: str, given: str) -> None:
    with record_calls() as log, pytest.raises(TypeError) as info:
        call()
    message = str(info.value)
    assert param in message, message
    assert expected in message, message
    assert given in message, message
    assert [c.name for c in log if c.name not in ("cuCtxGetCurrent", "cuInit")] == []


@pytest.mark.contract("E3")
@pytest.mark.parametrize("value", WRONG, ids=lambda v: type(v).__name__)
def test_a_stream_parameter_names_itself_the_kind_and_what_was_given(device: Device, value: Any) -> None:
    with device.create_stream() as stream, device.create_event() as event, device.allocate(16) as buf:
        given = "None" if value is None else type(value).__name__
        _refused(lambda: event.record(value), "stream", "Stream", given)
        _refused(
            lambda: buf.fill(1, stream=value if value is not None else event),
            "stream",
            "Stream",
            given if value is not None else "Event",
        )
        _refused(lambda: stream.wait(value), "other", "Event or a Stream", given)
        _refused(
            lambda: device.allocate(16, stream=value if value is not None else event),
            "stream",
            "Stream",
            given if value is not None else "Event",
        )


@pytest.mark.contract("E3")
def test_resources_of_the_wrong_kind_never_reach_the_driver(device: Device, module: Module) -> None:
    kernel = module.get_kernel("fill_u32")
    with device.create_stream() as stream, device.create_event() as event, device.allocate(16) as buf:
        _refused(lambda: event.elapsed_since(stream), "start", "Event", "Stream")  # type: ignore[arg-type]
        _refused(lambda: stream.record(stream), "event", "Event", "Stream")  # type: ignore[arg-type]
        _refused(lambda: event.record(event), "stream", "Stream", "Event")  # type: ignore[arg-type]
        _refused(lambda: launch(event, LaunchConfig(), kernel, buf, 1, 4), "stream", "Stream", "Event")  # type: ignore[arg-type]
        _refused(lambda: buf.copy_from(b"x" * 16, stream=event), "stream", "Stream", "Event")  # type: ignore[arg-type]
        _refused(lambda: buf.copy_to(bytearray(16), stream=buf), "stream", "Stream", "Buffer")  # type: ignore[arg-type]
        _refused(lambda: buf.copy_from(device), "src", "Buffer", "Device")
        _refused(lambda: buf.copy_to(True), "dst", "Buffer", "bool")
        _refused(lambda: Module.load(device, b"x"), "context", "Context", "Device")  # type: ignore[arg-type]
        _refused(lambda: Stream.wrap("text", device.context), "obj", "Stream", "str")


@pytest.mark.contract("E3")
def test_a_foreign_stream_is_taken_wherever_a_stream_is(device: Device, module: Module) -> None:
    kernel = module.get_kernel("fill_u32")
    with device.create_stream() as stream, device.create_event() as event, device.allocate(16) as buf:
        foreign = ForeignStream(stream)
        wrapped = as_stream(foreign)
        assert int(wrapped.handle) == int(stream.handle)
        launch(foreign, LaunchConfig(), kernel, buf, 7, 4)  # type: ignore[arg-type]
        buf.fill(3, stream=foreign)  # type: ignore[arg-type]
        buf.copy_from(b"\x01" * 16, stream=foreign)  # type: ignore[arg-type]
        event.record(foreign)  # type: ignore[arg-type]
        stream.wait(foreign)  # type: ignore[arg-type]
        with device.allocate(16, stream=foreign) as other:  # type: ignore[arg-type]
            other.fill(0, stream=stream)
        stream.sync()
        wrapped.close()  # a wrapper never destroys the stream
        stream.sync()


@pytest.mark.contract("E3")
def test_a_malformed_cuda_stream_protocol_is_a_type_error(device: Device) -> None:
    class Bad:
        def __cuda_stream__(self) -> Any:
            return "nonsense"

    with device.allocate(16) as buf, pytest.raises(TypeError, match="__cuda_stream__"):
        buf.fill(1, stream=Bad())  # type: ignore[arg-type]


@pytest.mark.contract("E3", "O5")
def test_cuguard_calls_inside_a_host_function_are_refused_before_the_driver(device: Device) -> None:
    refused: list[CUDAError] = []

    def inside() -> None:
        try:
            stream.query()
        except CUDAError as exc:
            refused.append(exc)

    with device.create_stream() as stream:
        stream.launch_host_func(inside)
        stream.sync()
    assert [(e.call, e.name) for e in refused] == [("cuStreamQuery", "CUDA_ERROR_NOT_PERMITTED")]
    assert "not called" in str(refused[0])

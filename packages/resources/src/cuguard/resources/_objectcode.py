"""Compiled images (:class:`ObjectCode`): what :class:`Program` and :class:`Linker` produce.

An :class:`ObjectCode` is plain data (the image bytes, their kind, a name and the
lowered names of the C++ name expressions it was compiled with) plus the modules
that :meth:`ObjectCode.get_kernel` loaded from it, one per context.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from cuguard.context import Context
from cuguard.errors import add_failure_note, driver_token
from cuguard.errors.lowlevel import deferring_lock, wrong_kind

if TYPE_CHECKING:
    from cuguard.errors.lowlevel import DeferringLock
    from cuguard.resources._module import Kernel, Module

__all__ = ["CODE_TYPES", "ObjectCode"]

#: The kinds of image an :class:`ObjectCode` holds.
CODE_TYPES = ("cubin", "ptx", "ltoir", "fatbin", "object", "library")
#: The kinds the driver loads as a module.
LOADABLE = frozenset({"cubin", "ptx", "fatbin"})


class ObjectCode:
    """A compiled image: ``code`` (bytes) of kind ``code_type`` (``"cubin"``, ``"ptx"``, ``"ltoir"``...).

    Made by :meth:`Program.compile`, :meth:`Linker.link` or the ``from_*``
    class methods. ``symbol_mapping`` maps each C++ name expression given to
    :meth:`Program.compile` (``"saxpy<float>"``) to its lowered (mangled)
    entry name; :meth:`get_kernel` and :meth:`Module.get_kernel` look names up
    there first. On the simulated driver, a kernel's stand-in may be
    registered under a name expression too: loading a module hands the
    mapping to the driver.

    Load it with :meth:`Device.load_module` (into a device's primary context),
    :meth:`Module.load` (into any context), or let :meth:`get_kernel` load it
    into the calling thread's current context (device 0's primary context
    when none is current). An ``ObjectCode`` can be copied
    and pickled: the copy carries the image, not the modules loaded from it.
    """

    __slots__ = ("_code", "_code_type", "_lock", "_modules", "_name", "_symbols")

    _code: bytes
    _code_type: str
    _name: str
    _symbols: dict[str, str]
    _modules: list[Module]
    _lock: DeferringLock

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise TypeError(
            "ObjectCode cannot be constructed directly; use ObjectCode.from_cubin(), ObjectCode.from_ptx(), "
            "ObjectCode.from_ltoir(), Program.compile() or Linker.link()"
        )

    @classmethod
    def _make(
        cls, code: bytes, code_type: str, name: str = "", symbol_mapping: Mapping[str, str] | None = None
    ) -> ObjectCode:
        self = cls.__new__(cls)
        self._code = bytes(code)
        self._code_type = code_type
        self._name = name
        self._symbols = dict(symbol_mapping or {})
        self._modules = []
        self._lock = deferring_lock()
        return self

    @classmethod
    def _from(
        cls, code_type: str, module: bytes | bytearray | str, name: str, symbol_mapping: Mapping[str, str] | None
    ) -> ObjectCode:
        if isinstance(module, str):
            with open(os.fspath(module), "rb") as f:  # a path, as in cuda.core
                data = f.read()
        elif isinstance(module, bytes | bytearray):
            data = bytes(module)
        else:
            raise wrong_kind("module", "bytes or a file path (str)", module)
        if not isinstance(name, str):
            raise wrong_kind("name", "a str", name)
        symbols = _check_symbols(symbol_mapping)
        return cls._make(data, code_type, name, symbols)

    @classmethod
    def from_cubin(
        cls, module: bytes | bytearray | str, *, name: str = "", symbol_mapping: Mapping[str, str] | None = None
    ) -> ObjectCode:
        """A cubin image: its bytes, or the path (``str``) of a file holding them.

        ``TypeError`` for another kind of argument; ``OSError`` when the file
        cannot be read. The bytes are not checked here: loading garbage raises
        :class:`~cuguard.errors.CUDAError` (``CUDA_ERROR_INVALID_IMAGE``).
        """
        return cls._from("cubin", module, name, symbol_mapping)

    @classmethod
    def from_ptx(
        cls, module: bytes | bytearray | str, *, name: str = "", symbol_mapping: Mapping[str, str] | None = None
    ) -> ObjectCode:
        """PTX text: its bytes, or the path (``str``) of a file holding it (see :meth:`from_cubin`)."""
        return cls._from("ptx", module, name, symbol_mapping)

    @classmethod
    def from_ltoir(
        cls, module: bytes | bytearray | str, *, name: str = "", symbol_mapping: Mapping[str, str] | None = None
    ) -> ObjectCode:
        """LTO IR (for :class:`Linker` only; it cannot be loaded): bytes or a file path."""
        return cls._from("ltoir", module, name, symbol_mapping)

    @classmethod
    def from_fatbin(
        cls, module: bytes | bytearray | str, *, name: str = "", symbol_mapping: Mapping[str, str] | None = None
    ) -> ObjectCode:
        """A fat binary: bytes or a file path (see :meth:`from_cubin`)."""
        return cls._from("fatbin", module, name, symbol_mapping)

    @property
    def code(self) -> bytes:
        """The image bytes."""
        return self._code

    @property
    def code_type(self) -> str:
        """``"cubin"``, ``"ptx"``, ``"ltoir"``, ``"fatbin"``, ``"object"`` or ``"library"``."""
        return self._code_type

    @property
    def name(self) -> str:
        """The name given by the program or linker options (``""`` when none)."""
        return self._name

    @property
    def symbol_mapping(self) -> dict[str, str]:
        """A copy of the map from name expressions to lowered entry names."""
        return dict(self._symbols)

    def lowered_name(self, name: str) -> str:
        """The entry name of ``name``: its lowered name when it was a name expression, else ``name``."""
        if not isinstance(name, str):
            raise wrong_kind("name", "a str", name)
        return self._symbols.get(name, name)

    def get_kernel(self, name: str) -> Kernel:
        """The kernel ``name`` (an entry name or a name expression given to :meth:`Program.compile`).

        The first call in a context loads the image into the calling thread's
        current context, or device 0's primary context when none is current
        (:meth:`Module.load`), and keeps that module for later calls in the
        same context; the kernel keeps it alive. Raises ``ValueError`` for an
        image that
        cannot be loaded (LTO IR, an object or a library: link it first), and
        :class:`~cuguard.errors.CUDAError` when loading fails or the kernel is
        not found (``CUDA_ERROR_NOT_FOUND``). A call that raises leaves
        nothing loaded that was not loaded before (a module it loaded is
        unloaded again; a failure of that unload is a note on the error).
        """
        from cuguard.resources._module import Module

        if not isinstance(name, str):
            raise wrong_kind("name", "a str", name)
        if self._code_type not in LOADABLE:
            raise ValueError(f"a {self._code_type} image cannot be loaded; link it into a cubin first")
        context = Context.current()
        if context is None:  # as cuda.core: the first device when none is current
            from cuguard.resources._device import Device

            context = Device(0).context
        with self._lock:
            module = None
            for loaded in self._modules:
                if not loaded._closed and loaded._context == context:
                    module = loaded
                    break
            if module is not None:
                return module.get_kernel(name)
            module = Module.load(context, self)
            try:
                kernel = module.get_kernel(name)
            except BaseException as exc:
                try:  # nothing stays loaded by a call that raises (G1)
                    module.close()
                except BaseException as failure:  # noqa: BLE001 - attached to the propagating error (G4)
                    add_failure_note(exc, failure)
                raise
            self._modules = [m for m in self._modules if not m._closed]
            self._modules.append(module)
            return kernel

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (self._code, self._code_type, self._name, dict(self._symbols)))

    def __repr__(self) -> str:
        shown = f" {self._name!r}" if self._name else ""
        return f"<ObjectCode{shown} {self._code_type}, {len(self._code)} bytes>"


def _rebuild(code: bytes, code_type: str, name: str, symbols: dict[str, str]) -> ObjectCode:
    return ObjectCode._make(code, code_type, name, symbols)


def share_lowered_names(symbols: Mapping[str, str]) -> None:
    """Tell the driver that is about to load an image the lowered names of its name expressions.

    Only a driver with a ``learn_lowered_names`` method is told: the simulated
    driver has one, so that a kernel's stand-in may be registered under the
    name expression the program compiled (``"saxpy<float>"``) as well as under
    its lowered name; the real driver has none and is not asked. Pairs with an
    empty name are left out. Raises nothing for an :class:`ObjectCode`'s
    mapping (it holds only str).
    """
    pairs = {k: v for k, v in symbols.items() if k and v}
    if not pairs:
        return
    learn = getattr(driver_token(), "learn_lowered_names", None)
    if learn is not None:
        learn(pairs)


def _check_symbols(symbol_mapping: Mapping[str, str] | None) -> dict[str, str]:
    if symbol_mapping is None:
        return {}
    if not isinstance(symbol_mapping, Mapping):
        raise wrong_kind("symbol_mapping", "a mapping of str to str", symbol_mapping)
    out: dict[str, str] = {}
    for key, value in symbol_mapping.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(f"symbol_mapping must map str to str, not {key!r} to {value!r}")
        out[key] = value
    return out

"""Kernel images as the simulated driver reads them: PTX entries, ELF (cubin) symbols, parameter layouts.

Plain functions of bytes; :mod:`cuguard.testing._sim.modules` loads images with them.
"""

from __future__ import annotations

import ctypes
import re
import struct
from typing import Any

__all__ = ["param_layout", "parse_elf_functions", "parse_ptx", "ptx_trivial_entries"]

_ENTRY = re.compile(rb"\.entry\s+([A-Za-z_$][\w$]*)\s*(\(([^)]*)\))?", re.S)
_PARAM_TYPE = re.compile(rb"\.([usbf])(8|16|32|64)\b")
_ARRAY = re.compile(rb"\[(\d+)\]")
_CTYPES: dict[tuple[bytes, bytes], Any] = {
    (b"u", b"8"): ctypes.c_uint8,
    (b"s", b"8"): ctypes.c_int8,
    (b"b", b"8"): ctypes.c_uint8,
    (b"u", b"16"): ctypes.c_uint16,
    (b"s", b"16"): ctypes.c_int16,
    (b"b", b"16"): ctypes.c_uint16,
    (b"f", b"16"): ctypes.c_uint16,
    (b"u", b"32"): ctypes.c_uint32,
    (b"s", b"32"): ctypes.c_int32,
    (b"b", b"32"): ctypes.c_uint32,
    (b"f", b"32"): ctypes.c_float,
    (b"u", b"64"): ctypes.c_uint64,
    (b"s", b"64"): ctypes.c_int64,
    (b"b", b"64"): ctypes.c_uint64,
    (b"f", b"64"): ctypes.c_double,
}


_ALIGN = re.compile(rb"\.align\s+(\d+)")
_TRIVIAL_BODY = re.compile(rb"\{\s*ret\s*;\s*\}")
_COMMENTS = re.compile(rb"//[^\n]*|/\*.*?\*/", re.S)


def _byte_array(size: int, align: int) -> Any:
    """A ctypes array type of ``size`` bytes that remembers its PTX alignment."""
    array = ctypes.c_uint8 * size
    return type(f"b8x{size}_align{align}", (array,), {"ptx_align": align})


def parse_ptx(text: bytes) -> dict[str, tuple[Any, ...] | None]:
    """Kernel names of a PTX text and, where readable, the ctypes of their parameters."""
    entries: dict[str, tuple[Any, ...] | None] = {}
    for match in _ENTRY.finditer(text):
        name = match.group(1).decode()
        params = match.group(3)
        types: list[Any] = []
        ok = True
        if params is not None and params.strip():
            for param in params.split(b","):
                tm = _PARAM_TYPE.search(param)
                if tm is None:
                    ok = False
                    break
                ctype = _CTYPES[(tm.group(1), tm.group(2))]
                am = _ARRAY.search(param)
                if am is not None:
                    al = _ALIGN.search(param)
                    size = int(am.group(1)) * ctypes.sizeof(ctype)
                    ctype = _byte_array(size, int(al.group(1)) if al else ctypes.sizeof(ctype))
                types.append(ctype)
        entries[name] = tuple(types) if ok else None
    return entries


def ptx_trivial_entries(text: bytes) -> frozenset[str]:
    """The entries of a PTX text whose body is only ``ret;``: they do nothing on a GPU either."""
    bare = _COMMENTS.sub(b"", text)
    out: set[str] = set()
    for match in _ENTRY.finditer(bare):
        brace = bare.find(b"{", match.end())
        if brace >= 0 and _TRIVIAL_BODY.match(bare, brace):
            out.add(match.group(1).decode())
    return frozenset(out)


def param_layout(types: tuple[Any, ...]) -> list[tuple[int, int]]:
    """``(offset, size)`` of each parameter in a kernel's parameter buffer (natural alignment)."""
    layout: list[tuple[int, int]] = []
    offset = 0
    for ctype in types:
        size = ctypes.sizeof(ctype)
        align = int(getattr(ctype, "ptx_align", 0) or ctypes.alignment(ctype))
        offset = (offset + align - 1) // align * align
        layout.append((offset, size))
        offset += size
    return layout


def parse_elf_functions(image: bytes) -> dict[str, tuple[Any, ...] | None]:
    """Names of the global and weak function symbols of an ELF64 image (a cubin).

    NVRTC gives a template's instantiations (``saxpy<float>``) weak binding and
    ``extern "C"`` kernels global binding; the driver finds both by name.

    Raises ``ValueError`` when the image is not a readable ELF64 file (the real
    driver answers ``CUDA_ERROR_INVALID_IMAGE`` for such bytes).
    """
    out: dict[str, tuple[Any, ...] | None] = {}
    try:
        if image[4] != 2:  # ELFCLASS64 only
            raise ValueError("not an ELF64 image")
        e_shoff = struct.unpack_from("<Q", image, 0x28)[0]
        e_shentsize, e_shnum = struct.unpack_from("<HH", image, 0x3A)
        sections = [struct.unpack_from("<IIQQQQIIQQ", image, e_shoff + i * e_shentsize) for i in range(e_shnum)]
        for sec in sections:
            if sec[1] != 2:  # SHT_SYMTAB
                continue
            strtab = sections[sec[6]]
            str_off = strtab[4]
            for i in range(sec[5] // 24):
                st_name, st_info, _other, _shndx, _value, _size = struct.unpack_from("<IBBHQQ", image, sec[4] + i * 24)
                if st_info & 0xF == 2 and st_info >> 4 in (1, 2):  # STT_FUNC; STB_GLOBAL or STB_WEAK
                    end = image.index(b"\0", str_off + st_name)
                    out[image[str_off + st_name : end].decode(errors="replace")] = None
        names = sections[struct.unpack_from("<H", image, 0x3E)[0]][4]
        for sec in sections:
            end = image.index(b"\0", names + sec[0])
            section = image[names + sec[0] : end].decode(errors="replace")
            if section.startswith(_KERNEL_INFO) and section[len(_KERNEL_INFO) :] in out:
                out[section[len(_KERNEL_INFO) :]] = _kernel_params(image[sec[4] : sec[4] + sec[5]])
    except (IndexError, struct.error, ValueError) as exc:
        raise ValueError(f"malformed ELF image: {exc}") from None
    return out


_KERNEL_INFO = ".nv.info."
_KPARAM_INFO = 0x17  # the attribute that describes one kernel parameter
_SIZED = {1: ctypes.c_uint8, 2: ctypes.c_uint16, 4: ctypes.c_uint32, 8: ctypes.c_uint64}


def _kernel_params(info: bytes) -> tuple[Any, ...] | None:
    """Parameter ctypes (by size: a cubin keeps sizes and offsets, not types) from a ``.nv.info.<kernel>`` section."""
    found: dict[int, tuple[int, int]] = {}
    at = 0
    while at + 2 <= len(info):
        fmt, attr = info[at], info[at + 1]
        if fmt == 4:  # a value with a 16-bit length
            (size,) = struct.unpack_from("<H", info, at + 2)
            payload = info[at + 4 : at + 4 + size]
            at += 4 + size
        else:
            payload = info[at + 2 : at + 4] if fmt == 3 else b""
            at += 4 if fmt == 3 else 2
        if attr == _KPARAM_INFO and len(payload) >= 12:
            _index, ordinal, offset, packed = struct.unpack_from("<IHHI", payload)
            found[ordinal] = (offset, (packed >> 18) & 0x3FFF)
    if sorted(found) != list(range(len(found))):
        return None
    types: list[Any] = []
    for ordinal in range(len(found)):
        offset, size = found[ordinal]
        align = next(a for a in (8, 4, 2, 1) if offset % a == 0)
        types.append(_SIZED.get(size) or _byte_array(size, align))
    return tuple(types) if param_layout(tuple(types)) == [found[i] for i in range(len(found))] else None

"""The dynamic symbols of an ELF shared library, read the way the dynamic loader reads them.

The loader does not use section headers: it follows the ``PT_DYNAMIC`` segment to the symbol
table (``DT_SYMTAB``), its strings (``DT_STRTAB``) and a hash table (``DT_GNU_HASH`` or
``DT_HASH``) that bounds the number of symbols. This module does the same, in pure Python, for
32- and 64-bit files of either byte order, so that what it reports is what the loader will bind.
A file it cannot follow raises ``ElfError``: a caller that screens libraries must refuse those.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

_PT_LOAD, _PT_DYNAMIC = 1, 2
_DT_NULL, _DT_HASH, _DT_STRTAB, _DT_SYMTAB, _DT_STRSZ, _DT_SYMENT = 0, 4, 5, 6, 10, 11
_DT_GNU_HASH = 0x6FFFFEF5
_SHN_UNDEF = 0
_BINDINGS = {0: "local", 1: "global", 2: "weak", 10: "unique"}
_KINDS = {0: "none", 1: "object", 2: "function", 3: "section", 4: "file", 5: "common",
          6: "tls", 10: "ifunc"}
MAX_SYMBOLS = 1 << 20  # a kernel library has hundreds; a larger count means a corrupt table


class ElfError(ValueError):
    """The file is not an ELF shared library whose dynamic symbols can be read."""


@dataclass(frozen=True)
class DynamicSymbol:
    """One entry of the dynamic symbol table. ``defined`` False: the library imports it."""

    name: str
    defined: bool
    binding: str  # local, global, weak, unique
    kind: str  # function, object, tls, ifunc, ...


@dataclass(frozen=True)
class _Layout:
    """Struct formats of one ELF class and byte order."""

    order: str
    wide: bool

    def fmt(self, fields32: str, fields64: str) -> struct.Struct:
        return struct.Struct(self.order + (fields64 if self.wide else fields32))


class _Image:
    """Bounds-checked reads of the file's bytes, and virtual address to file offset."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        if len(data) < 16 or data[:4] != b"\x7fELF":
            raise ElfError("not an ELF file")
        if data[4] not in (1, 2) or data[5] not in (1, 2):
            raise ElfError(f"unknown ELF class {data[4]} or byte order {data[5]}")
        self.layout = _Layout("<" if data[5] == 1 else ">", data[4] == 2)
        self.loads: list[tuple[int, int, int]] = []  # (vaddr, offset, file size)

    def unpack(self, fmt: struct.Struct, offset: int) -> tuple[int, ...]:
        if offset < 0 or offset + fmt.size > len(self.data):
            raise ElfError(f"the file is truncated (read at {offset} past {len(self.data)})")
        return fmt.unpack_from(self.data, offset)

    def offset_of(self, vaddr: int, size: int = 1) -> int:
        for start, offset, filesz in self.loads:
            if start <= vaddr and vaddr + size <= start + filesz:
                return offset + vaddr - start
        raise ElfError(f"address {vaddr:#x} is not in a loaded segment")

    def string(self, start: int, limit: int) -> str:
        end = self.data.find(b"\0", start, limit)
        if start < 0 or end < 0:
            raise ElfError("a symbol name runs past its string table")
        return self.data[start:end].decode("utf-8", errors="replace")


def _segments(image: _Image) -> tuple[int, int]:
    """Record the PT_LOAD mappings; return the PT_DYNAMIC segment's (offset, size)."""
    lay = image.layout
    header = lay.fmt("16xHHIIIIIHHHHHH", "16xHHIQQQIHHHHHH")
    fields = image.unpack(header, 0)
    e_type, phoff, phentsize, phnum = fields[0], fields[4], fields[8], fields[9]
    if e_type != 3:
        raise ElfError(f"not a shared library (ELF type {e_type})")
    phdr = lay.fmt("IIIIIIII", "IIQQQQQQ")
    if phentsize < phdr.size:
        raise ElfError("program headers too small")
    dynamic = None
    for i in range(phnum):
        entry = image.unpack(phdr, phoff + i * phentsize)
        if lay.wide:
            p_type, _, p_offset, p_vaddr, _, p_filesz = entry[:6]
        else:
            p_type, p_offset, p_vaddr, _, p_filesz = entry[:5]
        if p_type == _PT_LOAD:
            image.loads.append((p_vaddr, p_offset, p_filesz))
        elif p_type == _PT_DYNAMIC:
            dynamic = (p_offset, p_filesz)
    if dynamic is None:
        raise ElfError("no dynamic segment (a statically linked file?)")
    return dynamic


def _dynamic_entries(image: _Image, offset: int, size: int) -> dict[int, int]:
    entry = image.layout.fmt("iI", "qQ")
    found: dict[int, int] = {}
    for at in range(offset, offset + size, entry.size):
        tag, value = image.unpack(entry, at)
        if tag == _DT_NULL:
            break
        found.setdefault(tag, value)
    for tag, what in ((_DT_SYMTAB, "DT_SYMTAB"), (_DT_STRTAB, "DT_STRTAB"),
                      (_DT_STRSZ, "DT_STRSZ")):
        if tag not in found:
            raise ElfError(f"the dynamic section has no {what}")
    return found


def _symbol_count(image: _Image, dynamic: dict[int, int]) -> int:
    """How many symbols the table holds, from DT_HASH's chain count or by walking DT_GNU_HASH."""
    word = struct.Struct(image.layout.order + "I")
    if _DT_HASH in dynamic:
        return image.unpack(word, image.offset_of(dynamic[_DT_HASH], 8) + 4)[0]
    if _DT_GNU_HASH not in dynamic:
        raise ElfError("the dynamic section has neither DT_HASH nor DT_GNU_HASH")
    base = image.offset_of(dynamic[_DT_GNU_HASH], 16)
    nbuckets, symoffset, bloom_size, _ = (image.unpack(word, base + 4 * i)[0] for i in range(4))
    buckets = base + 16 + bloom_size * (8 if image.layout.wide else 4)
    last = max((image.unpack(word, buckets + 4 * i)[0] for i in range(nbuckets)), default=0)
    if last < symoffset:
        return symoffset  # no hashed (exported) symbols: only the unhashed ones below symoffset
    chains = buckets + 4 * nbuckets
    while True:
        if last - symoffset > MAX_SYMBOLS:
            raise ElfError("the GNU hash chain does not end")
        if image.unpack(word, chains + 4 * (last - symoffset))[0] & 1:
            return last + 1
        last += 1


def dynamic_symbols(path: Path | str) -> list[DynamicSymbol]:
    """Every symbol of ``path``'s dynamic symbol table (the null entry excluded)."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ElfError(f"cannot read {path}: {exc.strerror}") from exc
    image = _Image(data)
    dyn_offset, dyn_size = _segments(image)
    dynamic = _dynamic_entries(image, dyn_offset, dyn_size)
    count = _symbol_count(image, dynamic)
    if count > MAX_SYMBOLS:
        raise ElfError(f"the symbol table claims {count} entries")
    lay = image.layout
    symbol = lay.fmt("IIIBBH", "IBBHQQ")
    stride = dynamic.get(_DT_SYMENT, symbol.size)
    if stride < symbol.size:
        raise ElfError(f"symbol entries of {stride} bytes are too small")
    table = image.offset_of(dynamic[_DT_SYMTAB], max(count, 1) * stride)
    strings = image.offset_of(dynamic[_DT_STRTAB], dynamic[_DT_STRSZ])
    strings_end = strings + dynamic[_DT_STRSZ]
    found = []
    for i in range(1, count):
        fields = image.unpack(symbol, table + i * stride)
        if lay.wide:
            name, info, _, shndx = fields[:4]
        else:
            name, info, shndx = fields[0], fields[3], fields[5]
        if name >= dynamic[_DT_STRSZ]:
            raise ElfError(f"symbol {i}'s name lies outside the string table")
        found.append(DynamicSymbol(image.string(strings + name, strings_end),
                                   shndx != _SHN_UNDEF, _BINDINGS.get(info >> 4, str(info >> 4)),
                                   _KINDS.get(info & 0xF, str(info & 0xF))))
    return found


def imported_symbols(path: Path | str) -> list[str]:
    """The names ``path`` needs from other libraries (undefined entries), in table order."""
    return [s.name for s in dynamic_symbols(path) if not s.defined and s.name]

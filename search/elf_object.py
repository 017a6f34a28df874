"""A small reader of ELF64 little-endian relocatable objects (`nvcc -c` output on x86-64): sections, symbols and
relocations, enough for `search.object_check` to judge a candidate's object without running or loading it.

    obj = ElfObject.read(Path("kernel.o"))
    obj.undefined()                  # names the object needs from elsewhere
    obj.relocations_of(".init_array")
"""
from __future__ import annotations

import dataclasses
import struct
from pathlib import Path

SHT_SYMTAB, SHT_RELA, SHT_NOBITS, SHT_SYMTAB_SHNDX = 2, 4, 8, 18
SHF_WRITE, SHF_ALLOC, SHF_EXECINSTR, SHF_TLS = 0x1, 0x2, 0x4, 0x400
STT_OBJECT, STT_FUNC, STT_SECTION, STT_COMMON, STT_TLS = 1, 2, 3, 5, 6
SHN_UNDEF, SHN_LORESERVE, SHN_COMMON, SHN_XINDEX = 0, 0xFF00, 0xFFF2, 0xFFFF
ET_REL, EM_X86_64 = 1, 62


class ElfError(ValueError):
    """The file is not an ELF64 little-endian x86-64 relocatable object (or is damaged)."""


@dataclasses.dataclass(frozen=True)
class Section:
    index: int
    name: str
    type: int
    flags: int
    offset: int
    size: int
    link: int
    info: int


@dataclasses.dataclass(frozen=True)
class Symbol:
    name: str
    type: int
    bind: int
    section: int      # section index, or SHN_UNDEF / SHN_COMMON / other special values
    value: int
    size: int


@dataclasses.dataclass(frozen=True)
class Relocation:
    offset: int
    symbol: Symbol
    type: int
    addend: int


class ElfObject:
    """The sections, symbols and relocations of one relocatable object."""

    def __init__(self, data: bytes):
        if data[:4] != b"\x7fELF" or len(data) < 64:
            raise ElfError("not an ELF file")
        if data[4] != 2 or data[5] != 1:
            raise ElfError("not a 64-bit little-endian ELF file")
        (_, e_type, e_machine, _, _, _, shoff, _, _, _, _, shentsize, shnum, shstrndx) = struct.unpack_from(
            "<16sHHIQQQIHHHHHH", data, 0)
        if e_type != ET_REL or e_machine != EM_X86_64:
            raise ElfError(f"not an x86-64 relocatable object (type {e_type}, machine {e_machine})")
        self.data = data
        raw = [self._section_header(shoff, shentsize, 0)]
        count = shnum or raw[0][5]          # extended numbering: the count is in section 0's size
        if shstrndx == SHN_XINDEX:
            shstrndx = raw[0][6]
        raw += [self._section_header(shoff, shentsize, i) for i in range(1, count)]
        names = raw[shstrndx]
        self.sections = [Section(i, self._string(names[4], h[0]), h[1], h[2], h[4], h[5], h[6], h[7])
                         for i, h in enumerate(raw)]
        self.symbols = self._symbols()

    @classmethod
    def read(cls, path: Path) -> "ElfObject":
        """Reads and parses `path`."""
        return cls(Path(path).read_bytes())

    def _section_header(self, shoff: int, shentsize: int, i: int) -> tuple:
        start = shoff + i * shentsize
        if start + 64 > len(self.data):
            raise ElfError("section header table runs past the end of the file")
        return struct.unpack_from("<IIQQQQIIQQ", self.data, start)

    def _string(self, table_offset: int, index: int) -> str:
        end = self.data.find(b"\0", table_offset + index)
        return self.data[table_offset + index:end].decode(errors="replace")

    def _symbols(self) -> list[Symbol]:
        table = next((s for s in self.sections if s.type == SHT_SYMTAB), None)
        if table is None:
            return []
        strings = self.sections[table.link].offset
        xindex = next((s for s in self.sections if s.type == SHT_SYMTAB_SHNDX and s.link == table.index), None)
        out = []
        for i in range(table.size // 24):
            name, info, _, shndx, value, size = struct.unpack_from("<IBBHQQ", self.data, table.offset + 24 * i)
            if shndx == SHN_XINDEX and xindex is not None:
                shndx = struct.unpack_from("<I", self.data, xindex.offset + 4 * i)[0]
            symbol_name = self._string(strings, name)
            if info & 0xF == STT_SECTION and 0 < shndx < len(self.sections):
                symbol_name = self.sections[shndx].name
            out.append(Symbol(symbol_name, info & 0xF, info >> 4, shndx, value, size))
        return out

    def section(self, name: str) -> Section | None:
        """The first section called `name`."""
        return next((s for s in self.sections if s.name == name), None)

    def undefined(self) -> list[str]:
        """Names of the symbols the object uses but does not define."""
        return sorted({s.name for s in self.symbols if s.section == SHN_UNDEF and s.name})

    def defined_in(self, section: Section) -> list[Symbol]:
        """The named (non-section) symbols defined in `section`."""
        return [s for s in self.symbols if s.section == section.index and s.type != STT_SECTION and s.name]

    def relocations_of(self, section: Section) -> list[Relocation]:
        """The RELA relocations that apply to `section`."""
        out = []
        for rela in self.sections:
            if rela.type != SHT_RELA or rela.info != section.index:
                continue
            for i in range(rela.size // 24):
                offset, info, addend = struct.unpack_from("<QQq", self.data, rela.offset + 24 * i)
                index = info >> 32
                if index >= len(self.symbols):
                    raise ElfError(f"relocation in {rela.name} names symbol {index} of {len(self.symbols)}")
                out.append(Relocation(offset, self.symbols[index], info & 0xFFFFFFFF, addend))
        return out

    def function_at(self, section_index: int, offset: int) -> Symbol | None:
        """The function symbol defined at `offset` of section `section_index`."""
        return next((s for s in self.symbols if s.section == section_index and s.type == STT_FUNC
                     and s.value == offset), None)

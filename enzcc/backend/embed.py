"""Bitcode carried inside native objects.

``enzcc -c`` writes a real native object and adds a section :data:`SECTION` holding the translation
unit's bitcode itself (not a path), so ``ar``, ``ranlib``, ``ld -r`` and ``make`` keep working and the
link step can rebuild the whole program as LLVM IR.

The section holds one or more *records* (``ld -r`` concatenates sections, with zero padding between):

    magic  b"ENZCCBC1"   8 bytes
    hlen   uint32 LE     length of the JSON header
    blen   uint64 LE     length of the bitcode
    header JSON          {"source": ..., "lang": ..., "opt": ..., "target": ...}
    bitcode
    zero padding to a multiple of 8
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass, field

from enzcc.errors import EnzccError
from enzcc.tools import find_tool, run

SECTION = ".enzcc.bc"
MAGIC = b"ENZCCBC1"
_HEAD = struct.Struct("<8sIQ")


@dataclass
class BitcodeRecord:
    """The bitcode of one translation unit and what is known about how it was produced."""

    bitcode: bytes
    source: str = ""
    """The source file it came from."""
    lang: str = "c"
    """Frontend language (c, c++, fortran, rust, llvm, mlir)."""
    opt: int = 0
    """Optimization level requested when it was compiled (0..3)."""
    target: str = ""
    """Target triple."""
    extra: dict = field(default_factory=dict)
    """Other header keys, kept for forward compatibility."""

    def header(self) -> dict:
        return {"source": self.source, "lang": self.lang, "opt": self.opt, "target": self.target, **self.extra}


def pack_records(records: list[BitcodeRecord]) -> bytes:
    out = bytearray()
    for rec in records:
        head = json.dumps(rec.header(), sort_keys=True).encode()
        out += _HEAD.pack(MAGIC, len(head), len(rec.bitcode)) + head + rec.bitcode
        out += b"\0" * (-len(out) % 8)
    return bytes(out)


def unpack_records(data: bytes, where: str = "") -> list[BitcodeRecord]:
    records = []
    pos = 0
    while pos < len(data):
        if data[pos] == 0:
            pos += 1
            continue
        if data[pos:pos + 8] != MAGIC or pos + _HEAD.size > len(data):
            raise EnzccError(f"{where}: corrupt {SECTION} section (at byte {pos})")
        _, hlen, blen = _HEAD.unpack_from(data, pos)
        pos += _HEAD.size
        try:
            head = json.loads(data[pos:pos + hlen])
        except ValueError:
            raise EnzccError(f"{where}: corrupt {SECTION} section header") from None
        pos += hlen
        bc = data[pos:pos + blen]
        if len(bc) != blen:
            raise EnzccError(f"{where}: truncated {SECTION} section")
        pos += blen
        known = {k: head.pop(k) for k in ("source", "lang", "opt", "target") if k in head}
        records.append(BitcodeRecord(bitcode=bc, extra=head, **known))
    return records


def embed(obj_path: str, records: list[BitcodeRecord], workdir: str) -> None:
    """Add the records to ``obj_path`` (in place) as section :data:`SECTION`."""
    payload = os.path.join(workdir, os.path.basename(obj_path) + ".enzccbc")
    with open(payload, "wb") as fh:
        fh.write(pack_records(records))
    objcopy = find_tool("llvm-objcopy")
    run([objcopy, "--add-section", f"{SECTION}={payload}",
         "--set-section-flags", f"{SECTION}=exclude,readonly,contents",
         "--set-section-alignment", f"{SECTION}=8", obj_path], capture=True, tool="llvm-objcopy")


def records_in_object(data: bytes, where: str) -> list[BitcodeRecord]:
    """The records carried by an ELF object's bytes (empty when it has none)."""
    if data[:4] != b"\x7fELF":
        return []
    import llvmlite.binding as llvm

    from enzcc.backend.llvm import ensure_initialized

    ensure_initialized()
    try:
        obj = llvm.ObjectFileRef.from_data(data)
    except Exception:
        return []
    for sec in obj.sections():
        if sec.name() == SECTION.encode():
            return unpack_records(bytes(sec.data()), where)
    return []


# ---------------------------------------------------------------------------------------------
# ar archives


@dataclass
class ArchiveMember:
    name: str
    data: bytes


def is_archive(data_or_path) -> bool:
    if isinstance(data_or_path, str):
        try:
            with open(data_or_path, "rb") as fh:
                return fh.read(8) == b"!<arch>\n"
        except OSError:
            return False
    return data_or_path[:8] == b"!<arch>\n"


def read_archive(path: str) -> list[ArchiveMember]:
    """Members of a System V / GNU ``ar`` archive (symbol tables skipped, long names resolved)."""
    with open(path, "rb") as fh:
        data = fh.read()
    if data[:8] != b"!<arch>\n":
        raise EnzccError(f"{path}: not an ar archive")
    if data[:8] == b"!<thin>\n":
        raise EnzccError(f"{path}: thin archives are not supported")
    members: list[ArchiveMember] = []
    longnames = b""
    pos = 8
    while pos + 60 <= len(data):
        hdr = data[pos:pos + 60]
        name = hdr[0:16].decode("latin-1").rstrip()
        try:
            size = int(hdr[48:58].decode().strip())
        except ValueError:
            raise EnzccError(f"{path}: corrupt archive member header") from None
        body = data[pos + 60:pos + 60 + size]
        pos += 60 + size + (size & 1)
        if name in ("/", "/SYM64/", "__.SYMDEF", "__.SYMDEF SORTED"):
            continue
        if name == "//":
            longnames = body
            continue
        if name.startswith("#1/"):  # BSD long name
            n = int(name[3:])
            name, body = body[:n].rstrip(b"\0").decode("latin-1"), body[n:]
        elif name.startswith("/") and name[1:].isdigit():
            off = int(name[1:])
            end = longnames.find(b"/\n", off)
            name = longnames[off:end if end >= 0 else None].decode("latin-1")
        else:
            name = name.rstrip("/")
        members.append(ArchiveMember(name, body))
    return members

"""Bitcode carried inside native objects.

``enzcc -c`` writes a real native object and adds a section :data:`SECTION` holding the translation
unit's bitcode itself (not a path), so ``ar``, ``ranlib``, ``ld -r`` and ``make`` keep working and the
link step can rebuild the whole program as LLVM IR.

The section holds one or more *records* (``ld -r`` concatenates sections, with zero padding between):

    magic  b"ENZCCBC1"   8 bytes
    hlen   uint32 LE     length of the JSON header
    blen   uint64 LE     length of the bitcode
    header JSON          {"source": ..., "lang": ..., "opt": ..., "target": ...[, "compression": "zlib"]}
    bitcode              (zlib-compressed when the header says so)
    zero padding to a multiple of 8

The bitcode of a translation unit that calls no ``__enzyme_*`` function (most of a project's) is compressed:
archives stay smaller, and a link can still tell from an input's raw bytes, without unpacking anything, whether
some bitcode in it calls Enzyme (:func:`calls_enzyme`), since such bitcode is never compressed.
"""

from __future__ import annotations

import os
import struct

from enzcc.errors import EnzccError
from enzcc.records import factory, record
from enzcc.tools import find_tool, run

SECTION = ".enzcc.bc"
MAGIC = b"ENZCCBC1"
_HEAD = struct.Struct("<8sIQ")
#: what every call of an Enzyme entry point (``__enzyme_autodiff``...) names, in bitcode or a symbol table
ENZYME_PREFIX = b"__enzyme_"
#: zlib's level for compressed bitcode: level 1 costs a third of the default's time for 5-10 % more bytes
ZLIB_LEVEL = 6


@record
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
    extra: dict = factory(dict)
    """Other header keys, kept for forward compatibility."""

    def header(self) -> dict:
        return {"source": self.source, "lang": self.lang, "opt": self.opt, "target": self.target, **self.extra}


def _json_object(header: dict) -> str:
    """``json.dumps(header, sort_keys=True)`` for a header of strings and integers, without importing ``json``
    (which imports ``re``: every ``enzcc -c`` packs a header)."""
    from _json import encode_basestring_ascii as quote  # (json.dumps's own string encoder)

    if not all(type(v) in (str, int) for v in header.values()):
        import json

        return json.dumps(header, sort_keys=True)
    return "{" + ", ".join(f"{quote(k)}: {quote(v) if type(v) is str else int.__repr__(v)}"
                           for k, v in sorted(header.items())) + "}"


def pack_records(records: list[BitcodeRecord]) -> bytes:
    """The section's bytes; bitcode that names no ``__enzyme_`` symbol compressed (see the module's text)."""
    out = bytearray()
    for rec in records:
        header, bitcode = rec.header(), rec.bitcode
        if ENZYME_PREFIX not in bitcode:
            import zlib

            header["compression"] = "zlib"
            bitcode = zlib.compress(bitcode, ZLIB_LEVEL)
        head = _json_object(header).encode()
        out += _HEAD.pack(MAGIC, len(head), len(bitcode)) + head + bitcode
        out += b"\0" * (-len(out) % 8)
    return bytes(out)


def calls_enzyme(data: bytes) -> bool:
    """Whether an object's, archive's or library's bytes may hold bitcode or code calling an Enzyme entry point:
    a plain search, sound because such bitcode is never compressed (:func:`pack_records`). False positives
    (the name in a string, in a symbol the program defines) only cost the full link."""
    return ENZYME_PREFIX in data


def unpack_records(data: bytes, where: str = "") -> list[BitcodeRecord]:
    import json

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
        compression = head.pop("compression", None)
        if compression is not None:
            bc = _decompress(bc, compression, where)
        known = {k: head.pop(k) for k in ("source", "lang", "opt", "target") if k in head}
        records.append(BitcodeRecord(bitcode=bc, extra=head, **known))
    return records


def _decompress(data: bytes, compression: str, where: str) -> bytes:
    if compression != "zlib":
        raise EnzccError(f"{where}: {SECTION} section compressed with '{compression}', which this enzcc cannot "
                         "read (made by a newer enzcc?)")
    import zlib

    try:
        return zlib.decompress(data)
    except zlib.error:
        raise EnzccError(f"{where}: corrupt {SECTION} section (compressed bitcode)") from None


#: clang's own bitcode sections (``-fembed-bitcode``: the module before optimization, and the cc1 command
#: line), replaced by :data:`SECTION` so that they do not reach the linked program
CLANG_SECTIONS = (".llvmbc", ".llvmcmd")


def embed(obj_path: str, records: list[BitcodeRecord], workdir: str) -> None:
    """Add the records to ``obj_path`` (in place) as section :data:`SECTION`, in place of clang's
    :data:`CLANG_SECTIONS`."""
    with open(obj_path, "rb") as fh:
        data = fh.read()
    packed = pack_records(records)
    grown = add_elf_section(data, SECTION, packed, drop=CLANG_SECTIONS)
    if grown is not None:
        with open(obj_path, "wb") as fh:
            fh.write(grown)
        return
    payload = os.path.join(workdir, os.path.basename(obj_path) + ".enzccbc")
    with open(payload, "wb") as fh:
        fh.write(packed)
    objcopy = find_tool("llvm-objcopy")
    remove = [a for name in CLANG_SECTIONS for a in ("--remove-section", name)]
    try:
        run([objcopy, *remove, "--add-section", f"{SECTION}={payload}",
             "--set-section-flags", f"{SECTION}=exclude,readonly,contents",
             "--set-section-alignment", f"{SECTION}=8", obj_path], capture=True, tool="llvm-objcopy")
    finally:
        os.unlink(payload)  # (workdir may be the output's directory: the fast path has no other)


_SHF_EXCLUDE = 0x80000000


def add_elf_section(data: bytes, name: str, payload: bytes, drop=()) -> bytes | None:
    """A relocatable 64-bit little-endian ELF object with one more section, ``name`` (excluded from links,
    8-byte aligned), and the sections named in ``drop`` emptied (renamed, size 0: tools that look for clang's
    ``.llvmbc`` no longer find it); None for other files (the caller falls back to ``llvm-objcopy``). The
    sections' bytes are laid out again, in their order, followed by the section-name table and the section
    header table."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1 or len(data) < 64:
        return None
    etype, = struct.unpack_from("<H", data, 0x10)
    phnum, = struct.unpack_from("<H", data, 0x38)
    shoff, = struct.unpack_from("<Q", data, 0x28)
    ehsize, = struct.unpack_from("<H", data, 0x34)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    if etype != 1 or phnum or shentsize != 64 or not 0 < shnum < 0xFF00 or not 0 < shstrndx < shnum or \
            shoff + shnum * 64 > len(data):
        return None
    fmt = struct.Struct("<IIQQQQIIQQ")  # name, type, flags, addr, offset, size, link, info, addralign, entsize
    headers = [list(fmt.unpack_from(data, shoff + i * 64)) for i in range(shnum)]
    strtab = headers[shstrndx]
    names = data[strtab[4]:strtab[4] + strtab[5]]
    dropped = {n.encode() for n in drop}
    new_names = bytearray(names)
    new_at = len(new_names)
    new_names += name.encode() + b"\0"
    empty_at = len(new_names)
    new_names += name.encode() + b".dropped\0"
    for h in headers:
        if names[h[0]:names.find(b"\0", h[0])] in dropped:
            h[0], h[2], h[5] = empty_at, h[2] | _SHF_EXCLUDE, 0
    out = bytearray(data[:ehsize])
    for h in sorted((h for i, h in enumerate(headers) if i and i != shstrndx), key=lambda h: h[4]):
        if h[1] == 8:  # SHT_NOBITS: no bytes in the file
            continue
        out += b"\0" * (-len(out) % max(h[8], 1))
        body = data[h[4]:h[4] + h[5]]
        h[4] = len(out)
        out += body
    out += b"\0" * (-len(out) % 8)
    headers.append([new_at, 1, _SHF_EXCLUDE, 0, len(out), len(payload), 0, 0, 8, 0])
    out += payload
    strtab[4], strtab[5] = len(out), len(new_names)
    out += new_names
    out += b"\0" * (-len(out) % 8)
    struct.pack_into("<Q", out, 0x28, len(out))
    struct.pack_into("<H", out, 0x3C, len(headers))
    for h in headers:
        out += fmt.pack(*h)
    return bytes(out)


def elf_section(data: bytes, name: str) -> bytes | None:
    """The contents of section ``name`` of an ELF object's bytes (None if it is not ELF or has no such
    section). Read directly: no LLVM needed."""
    if data[:4] != b"\x7fELF" or len(data) < 64:
        return None
    wide, order = data[4] == 2, "<" if data[5] == 1 else ">"
    try:
        if wide:
            shoff, = struct.unpack_from(order + "Q", data, 0x28)
            shentsize, shnum, shstrndx = struct.unpack_from(order + "HHH", data, 0x3A)
            fmt = order + "IIQQQQ"  # name, type, flags, addr, offset, size
        else:
            shoff, = struct.unpack_from(order + "I", data, 0x20)
            shentsize, shnum, shstrndx = struct.unpack_from(order + "HHH", data, 0x2E)
            fmt = order + "IIIIII"

        def header(i: int) -> tuple:
            return struct.unpack_from(fmt, data, shoff + i * shentsize)

        str_off, str_size = header(shstrndx)[4:6]
        names = data[str_off:str_off + str_size]
        want = name.encode()
        for i in range(shnum):
            h = header(i)
            end = names.find(b"\0", h[0])
            if names[h[0]:end] == want:
                return data[h[4]:h[4] + h[5]]
    except struct.error:
        return None
    return None


def records_in_object(data: bytes, where: str) -> list[BitcodeRecord]:
    """The records carried by an ELF object's bytes (empty when it has none)."""
    payload = elf_section(data, SECTION)
    return unpack_records(payload, where) if payload else []


# ---------------------------------------------------------------------------------------------
# ar archives


@record
class ArchiveMember:
    name: str
    data: bytes


ARCHIVE_MAGICS = (b"!<arch>\n", b"!<thin>\n")
"""A regular ``ar`` archive, and a thin one (``ar T``: meson's static libraries), whose members stay in their
own files, named relative to the archive."""


def is_archive(data_or_path) -> bool:
    if isinstance(data_or_path, str):
        try:
            with open(data_or_path, "rb") as fh:
                return fh.read(8) in ARCHIVE_MAGICS
        except OSError:
            return False
    return data_or_path[:8] in ARCHIVE_MAGICS


def read_archive(path: str) -> list[ArchiveMember]:
    """Members of a System V / GNU ``ar`` archive, regular or thin (symbol tables skipped, long names
    resolved; a thin archive's members read from their files)."""
    with open(path, "rb") as fh:
        data = fh.read()
    if data[:8] not in ARCHIVE_MAGICS:
        raise EnzccError(f"{path}: not an ar archive")
    thin = data[:8] == b"!<thin>\n"
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
        inline = not thin or name in ("/", "//", "/SYM64/")  # (a thin archive holds only its tables)
        body = data[pos + 60:pos + 60 + size] if inline else b""
        pos += 60 + (size + (size & 1) if inline else 0)
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
        if thin:
            body = _thin_member(path, name)
        members.append(ArchiveMember(name, body))
    return members


def _thin_member(archive: str, name: str) -> bytes:
    """The bytes of a thin archive's member: the file it names, relative to the archive's directory."""
    member = name if os.path.isabs(name) else os.path.join(os.path.dirname(archive), name)
    try:
        with open(member, "rb") as fh:
            return fh.read()
    except OSError as exc:
        raise EnzccError(f"{archive}: cannot read its member {member}: {exc.strerror}") from None

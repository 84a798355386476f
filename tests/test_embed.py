"""Bitcode records inside objects and archives."""

import subprocess

import pytest

from enzcc_testing import need
from enzcc.backend import embed as E
from enzcc.errors import EnzccError


def _rec(n):
    return E.BitcodeRecord(bitcode=b"BC\xc0\xde" + bytes([n]) * (n * 3 + 1), source=f"s{n}.c", lang="c", opt=n % 4,
                           target="x86_64-pc-linux-gnu", extra={"future": n})


def test_records_round_trip_and_concatenate():
    recs = [_rec(1), _rec(2)]
    data = E.pack_records(recs)
    assert len(data) % 8 == 0
    # ld -r concatenates sections, possibly with zero padding between them
    joined = data + b"\0" * 5 + E.pack_records([_rec(3)])
    back = E.unpack_records(joined, "x.o")
    assert [r.source for r in back] == ["s1.c", "s2.c", "s3.c"]
    assert back[1].bitcode == recs[1].bitcode and back[1].opt == 2 and back[1].extra == {"future": 2}


@pytest.mark.parametrize("damage", [lambda d: d[:20], lambda d: b"XXXX" + d[4:], lambda d: d[:-12]])
def test_corrupt_records_are_errors(damage):
    with pytest.raises(EnzccError):
        E.unpack_records(damage(E.pack_records([_rec(5)])), "bad.o")


@need("clang-22", "llvm-objcopy-22", "llvm-ar-22")
def test_embed_in_object_and_read_from_archive(tmp_path):
    src = tmp_path / "a.c"
    src.write_text("int f(int x) { return x + 1; }\n")
    obj = tmp_path / "a.o"
    subprocess.run(["clang-22", "-c", str(src), "-o", str(obj)], check=True)
    assert E.records_in_object(obj.read_bytes(), "a.o") == []
    E.embed(str(obj), [_rec(2)], str(tmp_path))
    data = obj.read_bytes()
    assert [r.source for r in E.records_in_object(data, "a.o")] == ["s2.c"]
    # the object still links: the section is excluded from final outputs
    main = tmp_path / "m.c"
    main.write_text("int f(int); int main(void) { return f(41) - 42; }\n")
    exe = tmp_path / "m"
    subprocess.run(["clang-22", str(main), str(obj), "-o", str(exe)], check=True)
    assert subprocess.run([str(exe)]).returncode == 0
    out = subprocess.run(["llvm-readelf-22", "-S", str(exe)], capture_output=True, text=True).stdout
    assert E.SECTION not in out
    # archives: long member names too
    long_obj = tmp_path / ("a_member_with_a_name_longer_than_sixteen_chars.o")
    long_obj.write_bytes(data)
    lib = tmp_path / "libx.a"
    subprocess.run(["llvm-ar-22", "rcs", str(lib), str(obj), str(long_obj)], check=True)
    members = E.read_archive(str(lib))
    assert [m.name for m in members] == ["a.o", long_obj.name]
    assert all(E.records_in_object(m.data, m.name)[0].source == "s2.c" for m in members)

"""``-o`` naming something that is not a regular file (``/dev/null`` in configure probes, a FIFO): enzcc writes
into it as clang does and never renames a file over it. Before, ``enzcc -c t.c -o /dev/null`` run as root
replaced the machine's /dev/null with a regular file."""

import os
import stat
import threading

import pytest

from enzcc.files import atomic_output
from enzcc_testing import need

CUBE = "double cube(double x) { return x * x * x; }\n"
GRAD = ("double cube(double x) { return x * x * x; }\n"
        "double __enzyme_autodiff(void *, ...);\n"
        "int main(void) { return __enzyme_autodiff((void *)cube, 2.0) == 12.0 ? 0 : 1; }\n")


def _drain(path, sink: list):
    """Read a FIFO to its end in a thread (a writer blocks until a reader opens it)."""
    def run():
        with open(path, "rb") as fh:
            sink.append(fh.read())
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_atomic_output_writes_into_a_fifo_and_keeps_it(tmp_path):
    fifo = tmp_path / "out"
    os.mkfifo(fifo)
    got: list = []
    reader = _drain(fifo, got)
    with atomic_output(str(fifo)) as tmp:
        with open(tmp, "wb") as fh:
            fh.write(b"payload")
    reader.join(10)
    assert got == [b"payload"]
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert os.listdir(tmp_path) == ["out"]  # no temporary left beside it


def test_a_failed_block_writes_nothing_into_a_fifo(tmp_path):
    fifo = tmp_path / "out"
    os.mkfifo(fifo)
    with pytest.raises(RuntimeError):
        with atomic_output(str(fifo)) as tmp:
            open(tmp, "wb").close()
            raise RuntimeError("the build failed")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


@pytest.mark.skipif(os.geteuid() != 0, reason="making a character device needs root")
@need("clang-22")
@pytest.mark.parametrize("source,args", [(CUBE, ["-c"]), (GRAD, [])], ids=["compile", "differentiating-link"])
def test_output_to_a_null_device_keeps_the_device(enzcc, tmp_path, source, args):
    """A copy of /dev/null (char device 1,3) in the test's directory stands for the real one."""
    null = enzcc.cwd / "null"
    os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    enzcc.write("t.c", source)
    enzcc("-O2", *args, "t.c", "-o", str(null))
    assert stat.S_ISCHR(os.stat(null).st_mode)
    enzcc("-O2", *args, "t.c", "-o", str(null), env={**enzcc.env, "ENZCC_NO_FAST_PATH": "1"})
    assert stat.S_ISCHR(os.stat(null).st_mode)

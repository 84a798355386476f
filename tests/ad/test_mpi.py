"""MPI programs differentiated (enzcc/ad/calls/mpi.py), run with ranks on this machine only: each gradient
against central differences and, where the problem does not depend on how it is split, against the one-rank
run's; forward mode against the gradient; and the refusals, as one-line errors."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from enzcc_testing import need

HERE = Path(__file__).resolve().parent / "mpi"
RANKS = (1, 2, 4)
pytestmark = need("mpicc", "mpirun")


def mpi_flags(what: str) -> list[str]:
    return subprocess.run(["mpicc", f"-showme:{what}"], capture_output=True, text=True, check=True).stdout.split()


def mpirun(exe: Path, ranks: int, timeout: int = 60) -> subprocess.CompletedProcess:
    """``exe`` on ``ranks`` local processes (as root too, as CI runs; shared memory only; bounded in time)."""
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "--mca", "btl", "self,vader",
           "--mca", "btl_vader_single_copy_mechanism", "none", "-np", str(ranks), str(exe)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=exe.parent)


def build(enzcc, source: str, *flags: str, name: str = "prog", via: str = "enzcc") -> Path:
    """Build one of tests/ad/mpi/*.c: with enzcc and mpi.h on the include path, or through Open MPI's wrapper
    (``OMPI_CC=enzcc mpicc``, ``OMPI_CXX=enzcc++ mpicxx``)."""
    exe = enzcc.cwd / name
    src = str(HERE / source)
    if via == "enzcc":
        enzcc("-O2", src, *flags, *mpi_flags("compile"), *mpi_flags("link"), "-lm", "-o", str(exe))
    elif via == "mpicc":
        enzcc.run("mpicc", "-O2", src, *flags, "-lm", "-o", str(exe), env={"OMPI_CC": "enzcc"})
    else:
        enzcc.run("mpicxx", "-O2", "-x", "c++", src, *flags, "-lm", "-o", str(exe), env={"OMPI_CXX": "enzcc++"})
    return exe


def results(exe: Path, ranks: int) -> dict:
    proc = mpirun(exe, ranks)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    grad = [float(v) for _, v in sorted((int(j), v) for j, v in re.findall(r"^grad (\d+) (\S+)$", out, re.M))]
    return {"grad": grad, "fd_err": float(re.search(r"^fd_err (\S+)", out, re.M).group(1)),
            "fwd_err": float(re.search(r"^fwd_err (\S+)", out, re.M).group(1)),
            "same_loss": "same_loss 1" in out}


def check(exe: Path, fd_tol: float = 1e-7, fwd_tol: float = 1e-12, split_free: bool = True) -> None:
    """At 1, 2 and 4 ranks: the gradient against central differences (relative to its largest element), forward
    mode's tangent against the gradient, the primal unchanged by the derivatives; the gradients of the runs
    equal (``split_free``: the problem is the same however it is split)."""
    first = None
    for ranks in RANKS:
        r = results(exe, ranks)
        assert len(r["grad"]) == 8 and any(r["grad"]), r
        assert r["fd_err"] < fd_tol, (ranks, r)
        assert r["fwd_err"] < fwd_tol, (ranks, r)
        assert r["same_loss"], (ranks, r)
        if first is None:
            first = r["grad"]
        elif split_free:
            assert r["grad"] == pytest.approx(first, rel=1e-12, abs=1e-13), (ranks, r["grad"], first)


@pytest.mark.parametrize("form", [1, 2, 3], ids=["send_recv", "isend_irecv_waitall", "sendrecv"])
def test_heat_equation(enzcc, form):
    check(build(enzcc, "heat.c", f"-DFORM={form}"))


def test_dot_norm_min_max(enzcc):
    check(build(enzcc, "dot.c"))


def test_bcast_then_reduce(enzcc):
    check(build(enzcc, "bcast.c"))


def test_gather_scatter_allgather(enzcc):
    check(build(enzcc, "gather.c"))


def test_buffers_without_derivatives_on_one_side(enzcc):
    """A constant table sent (blocking and not) into memory used with derivatives: zeros go as its derivative."""
    check(build(enzcc, "mixed.c"))


def test_contiguous_type_and_float(enzcc):
    """A contiguous type made, committed and freed in the function (in reverse mode its release waits for the
    reverse of its commit), and MPI_FLOAT data: the double-precision part tight, then the single-precision part
    weighed in, with a wider step."""
    check(build(enzcc, "contiguous.c", "-DFW=0"), split_free=False)
    check(build(enzcc, "contiguous.c", "-DFW=1", "-DH=1e-2", name="prog_f"), fd_tol=1e-4, fwd_tol=1e-6,
          split_free=False)


@pytest.mark.parametrize("source, flags", [("heat.c", ["-DFORM=2"]), ("dot.c", [])], ids=["isend_irecv", "dot"])
def test_split_mode(enzcc, source, flags):
    """__enzyme_augmentfwd then __enzyme_reverse: the request records and a maximum's winners on the tape."""
    check(build(enzcc, source, *flags, "-DSPLIT"))


def test_through_open_mpi_wrappers(enzcc):
    """``OMPI_CC=enzcc mpicc`` and ``OMPI_CXX=enzcc++ mpicxx`` build the heat equation (non-blocking form)."""
    check(build(enzcc, "heat.c", "-DFORM=2", via="mpicc"))
    if shutil.which("mpicxx"):
        check(build(enzcc, "heat.c", "-DFORM=2", name="prog_cxx", via="mpicxx"))


# -- refusals -------------------------------------------------------------------------------------------------

REFUSED = r"""
#include <mpi.h>
extern int enzyme_dup, enzyme_const;
void __enzyme_autodiff(void *, ...);
double f(double *x, int m) {
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  double s = x[0] * x[0], t = 0;
  BODY
  return t;
}
int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  double x[4] = {1, 2, 3, 4}, dx[4] = {0};
  __enzyme_autodiff((void *)f, enzyme_dup, x, dx, enzyme_const, 4);
  MPI_Finalize();
  return 0;
}
"""


@pytest.mark.parametrize("body, message", [
    ("MPI_Send(x, 8, MPI_INT, 0, 0, MPI_COMM_WORLD); MPI_Recv(x, 8, MPI_INT, 0, 0, MPI_COMM_WORLD, "
     "MPI_STATUS_IGNORE); t = x[1];",
     "MPI_Send on memory with derivatives with a datatype other than MPI_DOUBLE, MPI_FLOAT or a contiguous type "
     "of them is not supported (here MPI_INT)"),
    ("MPI_Allreduce(&s, &t, 1, MPI_DOUBLE, MPI_PROD, MPI_COMM_WORLD);",
     "MPI_Allreduce with an operation other than MPI_SUM, MPI_MIN or MPI_MAX on data with derivatives is not "
     "supported (here MPI_PROD)"),
    ("MPI_Sendrecv(&s, 1, MPI_DOUBLE, rank, 0, &t, 1, MPI_DOUBLE, MPI_ANY_SOURCE, 0, MPI_COMM_WORLD, "
     "MPI_STATUS_IGNORE);",
     "MPI_Sendrecv with MPI_ANY_SOURCE or MPI_ANY_TAG in a differentiated function is not supported"),
    ("MPI_Request r; int done; MPI_Isend(&s, 1, MPI_DOUBLE, rank, 0, MPI_COMM_WORLD, &r); "
     "MPI_Recv(&t, 1, MPI_DOUBLE, rank, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE); MPI_Test(&r, &done, "
     "MPI_STATUS_IGNORE);",
     "MPI_Test in a differentiated function is not supported"),
    ("double a[2] = {s, s}, b[2]; MPI_Alltoall(a, 1, MPI_DOUBLE, b, 1, MPI_DOUBLE, MPI_COMM_WORLD); t = b[0];",
     "no derivative rule for call to 'MPI_Alltoall'"),
], ids=["int_type", "prod", "any_source", "test", "alltoall"])
def test_refusals(enzcc, body, message):
    enzcc.write("bad.c", REFUSED.replace("BODY", body))
    proc = enzcc("-O2", "bad.c", *mpi_flags("compile"), *mpi_flags("link"), "-o", "bad", check=False)
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_non_contiguous_type_refused_when_it_runs(enzcc):
    """A vector type is known only when the program runs: it stops with a one-line message naming the call."""
    enzcc.write("vec.c", REFUSED.replace("BODY", "double a[4] = {s, s, s, s}, b[4] = {0}; MPI_Datatype v; "
                                         "MPI_Type_vector(2, 1, 2, MPI_DOUBLE, &v); MPI_Type_commit(&v); "
                                         "MPI_Sendrecv(a, 1, v, rank, 0, b, 1, v, rank, 0, MPI_COMM_WORLD, "
                                         "MPI_STATUS_IGNORE); t = b[0] + b[2];"))
    enzcc("-O2", "vec.c", *mpi_flags("compile"), *mpi_flags("link"), "-o", "vec")
    proc = mpirun(enzcc.cwd / "vec", 1)
    assert proc.returncode != 0
    assert ("enzcc: MPI_Sendrecv on memory with derivatives with a datatype other than MPI_DOUBLE, MPI_FLOAT or a "
            "contiguous type of them is not supported") in proc.stderr, proc.stderr


"""Text-in/text-out tests of the AD transform on hand-written LLVM IR, executed with llvmlite's JIT."""

import ctypes

import pytest

from enzcc.ad import differentiate_text
from enzcc.ad.activity import Activity
from enzcc.ad.errors import ADError
from enzcc.ad.memory import MemoryTypes
from enzcc.ir.parser import parse_module
from enzcc_testing import jit

HEADER = """target datalayout = "e-m:e-p270:32:32-p271:32:32-p272:64:64-i64:64-i128:128-f80:128-n8:16:32:64-S128"
target triple = "x86_64-pc-linux-gnu"
@enzyme_dup = external global i32
@enzyme_const = external global i32
@enzyme_out = external global i32
declare double @__enzyme_autodiff(ptr, ...)
declare double @__enzyme_fwddiff(ptr, ...)
declare double @llvm.sin.f64(double)
declare double @exp(double)
"""

POLY = """
define double @f(double %x, double %y) {
entry:
  %a = fmul double %x, %y
  %s = call double @llvm.sin.f64(double %x)
  %b = fadd double %a, %s
  ret double %b
}
define double @df_dx(double %x, double %y) {
  %m = load i32, ptr @enzyme_out
  %c = load i32, ptr @enzyme_const
  %r = call double (ptr, ...) @__enzyme_autodiff(ptr @f, i32 %m, double %x, i32 %c, double %y)
  ret double %r
}
define double @tangent_y(double %x, double %y) {
  %d = load i32, ptr @enzyme_dup
  %r = call double (ptr, ...) @__enzyme_fwddiff(ptr @f, double %x, double 0.0, i32 %d, double %y, double 1.0)
  ret double %r
}
"""

LOOP = """
define double @sumexp(ptr %x, i64 %n) {
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i1, %loop ]
  %acc = phi double [ 0.0, %entry ], [ %acc1, %loop ]
  %p = getelementptr double, ptr %x, i64 %i
  %v = load double, ptr %p
  %e = call double @exp(double %v)
  %t = fmul double %e, %acc
  %acc1 = fadd double %t, %v
  %i1 = add i64 %i, 1
  %done = icmp eq i64 %i1, %n
  br i1 %done, label %exit, label %loop
exit:
  ret double %acc1
}
define void @grad(ptr %x, ptr %dx, i64 %n) {
  %r = call double (ptr, ...) @__enzyme_autodiff(ptr @sumexp, ptr %x, ptr %dx, i64 %n)
  ret void
}
"""


def test_scalar_reverse_and_forward_transform():
    out, count = differentiate_text(HEADER + POLY)
    assert count == 2
    assert "@__enzyme_autodiff(ptr @f" not in out and "@__enzyme_fwddiff(ptr @f" not in out
    assert "define internal double @diffe_f(" in out and "define internal double @fwddiffe_f(" in out
    assert "__enzcc_tape" not in out  # straight-line code needs no tape
    engine = jit(out)
    proto = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_double, ctypes.c_double)
    dfdx = proto(engine.get_function_address("df_dx"))
    ty = proto(engine.get_function_address("tangent_y"))
    import math
    assert dfdx(0.7, 1.9) == pytest.approx(1.9 + math.cos(0.7), rel=1e-15)
    assert ty(0.7, 1.9) == pytest.approx(0.7, rel=1e-15)


def test_loop_uses_the_tape_and_is_exact():
    out, _ = differentiate_text(HEADER + LOOP)
    assert "@__enzcc_tape_reserve" in out and "@__enzcc_tape_pop" in out
    engine = jit(out)
    grad = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(
        engine.get_function_address("grad"))
    import math

    xs = [0.3, -0.2, 0.5, 0.1]
    n = len(xs)
    x = (ctypes.c_double * n)(*xs)
    dx = (ctypes.c_double * n)(*([1.0] * n))  # shadows accumulate

    def f(v):
        acc = 0.0
        for a in v:
            acc = math.exp(a) * acc + a
        return acc

    grad(ctypes.addressof(x), ctypes.addressof(dx), n)
    for i in range(n):
        h = 1e-6
        up, down = list(xs), list(xs)
        up[i] += h
        down[i] -= h
        assert dx[i] - 1.0 == pytest.approx((f(up) - f(down)) / (2 * h), rel=1e-6)


def test_no_rule_is_an_error_naming_the_function():
    text = HEADER + """declare double @mystery(double)
define double @g(double %x) {
  %m = call double @mystery(double %x)
  ret double %m
}
define double @h(double %x) {
  %r = call double (ptr, ...) @__enzyme_autodiff(ptr @g, double %x)
  ret double %r
}
"""
    with pytest.raises(ADError, match="in function 'g': no derivative rule for call to 'mystery'"):
        differentiate_text(text)


def test_module_without_calls_is_untouched():
    text = HEADER + "define double @k(double %x) {\n  ret double %x\n}\n"
    out, count = differentiate_text(text)
    assert count == 0 and out == text


def test_activity_analysis_skips_inactive_values():
    mod = parse_module(HEADER + """
define double @act(double %x, double %c, ptr %buf, i64 %n) {
  %k = fmul double %c, 2.0
  %a = fmul double %x, %x
  %unused = fmul double %x, 3.0
  %i = fptosi double %a to i64
  %b = fadd double %a, %k
  %q = getelementptr double, ptr %buf, i64 %n
  %l = load double, ptr %q
  %r = fadd double %b, %l
  ret double %r
}
""")
    fn = mod.get_function("act").parse()
    act = Activity(fn, ["out", "const", "dup", "const"], active_return=True)
    by_name = {i.name: i for i in fn.instructions() if i.name}
    assert act.is_active(by_name["a"]) and act.is_active(by_name["b"]) and act.is_active(by_name["r"])
    assert act.is_active(by_name["l"]) and act.is_active_ptr(by_name["q"])
    assert not act.is_active(by_name["k"])       # depends only on a constant argument
    assert not act.is_active(by_name["unused"])  # varied but influences nothing
    assert not act.is_active(by_name["i"])       # integers never carry derivatives


def test_memory_types_from_accesses_and_tbaa():
    mod = parse_module(HEADER + """
declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)
define void @copies(ptr %d, ptr %s, ptr %pd, ptr %ps, ptr %u, ptr %v) {
  %e = getelementptr double, ptr %s, i64 1
  %x = load double, ptr %e
  call void @llvm.memcpy.p0.p0.i64(ptr %d, ptr %s, i64 64, i1 false)
  %p = load ptr, ptr %ps
  call void @llvm.memcpy.p0.p0.i64(ptr %pd, ptr %ps, i64 16, i1 false)
  call void @llvm.memcpy.p0.p0.i64(ptr %u, ptr %v, i64 16, i1 false), !tbaa.struct !0
  ret void
}
!0 = !{i64 0, i64 8, !1, i64 8, i64 8, !1}
!1 = !{!2, !2, i64 0}
!2 = !{!"double", !3, i64 0}
!3 = !{!"omnipotent char", !4, i64 0}
!4 = !{!"Simple C/C++ TBAA"}
""")
    fn = mod.get_function("copies").parse()
    mt = MemoryTypes(fn)
    copies = [i for i in fn.instructions() if getattr(i, "callee_name", "") and "memcpy" in i.callee_name]
    assert str(mt.copy_kind(copies[0])) == "double"
    assert str(mt.copy_kind(copies[1])) == "ptr"
    assert str(mt.copy_kind(copies[2])) == "double"  # from TBAA alone


# y[i] = sin(x[i]) * x[i]: the reverse sweep needs sin(x[i]) and x[i]. The function writes y, so x[i] can be
# read again in the reverse sweep only when y cannot be x's memory: a noalias (restrict) parameter on either.
ELEMENTWISE = """
declare double @sin(double)
define void @sinx(ptr ATTR %x, i64 %n, ptr ATTR %y) {
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i1, %loop ]
  %px = getelementptr double, ptr %x, i64 %i
  %v = load double, ptr %px
  %s = call double @sin(double %v)
  %p = fmul double %s, %v
  %py = getelementptr double, ptr %y, i64 %i
  store double %p, ptr %py
  %i1 = add i64 %i, 1
  %done = icmp eq i64 %i1, %n
  br i1 %done, label %exit, label %loop
exit:
  ret void
}
define void @grad(ptr %x, ptr %dx, i64 %n, ptr %y, ptr %dy) {
  %d = load i32, ptr @enzyme_dup
  %c = load i32, ptr @enzyme_const
  call void (ptr, ...) @__enzyme_autodiff(ptr @sinx, i32 %d, ptr %x, ptr %dx, i32 %c, i64 %n, i32 %d, ptr %y, ptr %dy)
  ret void
}
"""


def test_loads_of_memory_nothing_may_write_are_read_again_not_cached():
    import math
    import re

    outs, records = {}, {}
    for attr in ("", "noalias"):
        outs[attr], _ = differentiate_text(HEADER.replace("declare double @exp(double)\n", "") +
                                           ELEMENTWISE.replace("ATTR", attr))
        records[attr] = [int(m) for m in re.findall(r"call ptr @__enzcc_tape_reserve\(ptr %\S+, i64 (\d+)\)",
                                                    outs[attr])]
    # the loop's record per iteration: x[i] (8 bytes; sin(x[i]) is computed again from it, with the cos(x[i])
    # of its derivative), and nothing at all when y is noalias (x[i] is read again)
    assert max(records[""]) == 8 and not records["noalias"], records
    for attr, out in outs.items():
        engine = jit(out)
        n = 5
        x = (ctypes.c_double * n)(0.3, -1.2, 2.0, 0.7, 1.5)
        dx, y, dy = (ctypes.c_double * n)(), (ctypes.c_double * n)(), (ctypes.c_double * n)(1, 2, 3, 4, 5)
        grad = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
                                ctypes.c_void_p)(engine.get_function_address("grad"))
        grad(ctypes.addressof(x), ctypes.addressof(dx), n, ctypes.addressof(y), ctypes.addressof(dy))
        for i in range(n):
            assert dx[i] == pytest.approx((i + 1) * (math.cos(x[i]) * x[i] + math.sin(x[i])), rel=1e-14), attr


# enzyme_dupnoneed on y: the primal values stored into y need not be computed. With y noalias and only stored
# through, the derivative stores nothing into y and computes no sin(x[i]) in its forward sweep (sin and cos are
# computed together in the reverse sweep); when the function reads y back (READBACK), its stores stay.
DUPNONEED_GRAD = """
define void @grad(ptr %x, ptr %dx, i64 %n, ptr %y, ptr %dy) {
  %d = load i32, ptr @enzyme_dup
  %c = load i32, ptr @enzyme_const
  %nn = load i32, ptr @enzyme_dupnoneed
  call void (ptr, ...) @__enzyme_autodiff(ptr @sinx, i32 %d, ptr %x, ptr %dx, i32 %c, i64 %n, i32 %nn, ptr %y, ptr %dy)
  ret void
}
"""
READBACK = ("store double %p, ptr %py\n",
            "store double %p, ptr %py\n  %back = load double, ptr %py\n  %b2 = fmul double %back, %back\n"
            "  store double %b2, ptr %py\n")


@pytest.mark.parametrize("readback", [False, True])
def test_dupnoneed_output_is_not_stored(readback):
    import math
    import re

    body = ELEMENTWISE.replace("ATTR", "noalias")
    body = body[:body.index("define void @grad")] + DUPNONEED_GRAD
    if readback:
        body = body.replace(*READBACK)
    text = HEADER.replace("declare double @exp(double)\n", "") + body + "@enzyme_dupnoneed = external global i32\n"
    out, _ = differentiate_text(text)
    grad_ir = out[re.search(r"define [^\n]*@diffe_sinx\(", out).start():]
    grad_ir = grad_ir[:grad_ir.index("\n}\n")]
    assert "@sin(" not in grad_ir  # (the libm call became llvm.sin: no errno, removable)
    stores_to_y = re.findall(r"store double [^,]+, ptr %y\b|store double [^,]+, ptr %py\b", grad_ir)
    engine = jit(out)
    n = 5
    x = (ctypes.c_double * n)(0.3, -1.2, 2.0, 0.7, 1.5)
    dx, y, dy = (ctypes.c_double * n)(), (ctypes.c_double * n)(*[-7.0] * n), (ctypes.c_double * n)(1, 2, 3, 4, 5)
    grad = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
                            ctypes.c_void_p)(engine.get_function_address("grad"))
    grad(ctypes.addressof(x), ctypes.addressof(dx), n, ctypes.addressof(y), ctypes.addressof(dy))
    for i in range(n):
        p = math.sin(x[i]) * x[i]
        dp = math.cos(x[i]) * x[i] + math.sin(x[i])
        want = (i + 1) * (2 * p * dp if readback else dp)
        assert dx[i] == pytest.approx(want, rel=1e-13), (readback, i)
    if readback:
        assert [y[i] for i in range(n)] != [-7.0] * n  # read back: stored
    else:
        assert [y[i] for i in range(n)] == [-7.0] * n  # not needed: not stored
        assert "llvm.sin" in grad_ir and "llvm.cos" in grad_ir and "__enzcc_tape_reserve" not in grad_ir, grad_ir
    assert bool(stores_to_y) == readback, grad_ir


# A loop nest whose inner body is skipped when j == i (C's `continue`) and whose loads must be cached (the
# function overwrites x). The reverse sweep recomputes which way the skip went (j and i are induction variables)
# and the inner loop's iteration count (from n), so the tape holds only x[j], one double per inner iteration.
SKIP_NEST = """
define double @f(ptr %x, i64 %n) {
entry:
  br label %outer
outer:
  %i = phi i64 [ 0, %entry ], [ %i1, %outer.latch ]
  br label %inner
inner:
  %j = phi i64 [ 0, %outer ], [ %j1, %inner.latch ]
  %acc = phi double [ 0.0, %outer ], [ %acc2, %inner.latch ]
  %skip = icmp eq i64 %j, %i
  br i1 %skip, label %inner.latch, label %body
body:
  %p = getelementptr double, ptr %x, i64 %j
  %v = load double, ptr %p
  %sq = fmul double %v, %v
  %acc.b = fadd double %acc, %sq
  br label %inner.latch
inner.latch:
  %acc2 = phi double [ %acc, %inner ], [ %acc.b, %body ]
  %j1 = add i64 %j, 1
  %dj = icmp eq i64 %j1, %n
  br i1 %dj, label %outer.latch, label %inner
outer.latch:
  %h = fmul double %acc2, 0.5
  %pi = getelementptr double, ptr %x, i64 %i
  store double %h, ptr %pi
  %i1 = add i64 %i, 1
  %di = icmp eq i64 %i1, %n
  br i1 %di, label %exit, label %outer
exit:
  ret double %acc2
}
define void @grad(ptr %x, ptr %dx, i64 %n) {
  %d = load i32, ptr @enzyme_dup
  %c = load i32, ptr @enzyme_const
  call double (ptr, ...) @__enzyme_autodiff(ptr @f, i32 %d, ptr %x, ptr %dx, i32 %c, i64 %n)
  ret void
}
"""


def _skip_nest(x):
    x = list(x)
    for i in range(len(x)):
        acc = sum(v * v for j, v in enumerate(x) if j != i)
        x[i] = 0.5 * acc
    return acc


def test_branches_and_loop_counts_recomputed_from_induction_variables():
    import math
    import re

    out, _ = differentiate_text(HEADER + SKIP_NEST)
    sizes = re.findall(r"call ptr @__enzcc_tape_(?:reserve|pop)\(ptr %\S+, i64 (\d+)\)", out)
    assert sizes and set(sizes) == {"8"}, sizes  # x[j] only: no predecessor index, no inner iteration count
    assert " switch " not in out
    # the tape's buffer passes from one call to the next: the calls below grow it past its first size
    assert "call void @__enzcc_tape_take" in out and "call void @__enzcc_tape_release" in out
    engine = jit(out)
    grad = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(
        engine.get_function_address("grad"))
    for n in (5, 30, 5, 3):  # 30: 900 records, more than the first 4096 bytes
        x0 = [(0.9 if n < 10 else 0.05) * math.sin(1.7 * k + n) for k in range(n)]
        x, dx = (ctypes.c_double * n)(*x0), (ctypes.c_double * n)()
        grad(ctypes.addressof(x), ctypes.addressof(dx), n)
        for k in range(n):
            h = 1e-6
            up, down = list(x0), list(x0)
            up[k] += h
            down[k] -= h
            fd = (_skip_nest(up) - _skip_nest(down)) / (2 * h)
            assert dx[k] == pytest.approx(fd, rel=1e-6, abs=1e-8), (n, k)


# The butterflies of an in-place radix-2 transform (clang -O2 of `for (len = 2; len <= n; len <<= 1) { half =
# len / 2; stride = n / len; for (i = 0; i < n; i += len) for (j = 0; j < half; j++) ...}`): half, the stride
# n >> ctz(len), the guard half > 0 and their extensions all come from the len phi, which is the one value of
# the outer loop the tape holds; the reverse sweep recomputes the others from it.
BUTTERFLIES = """
declare i32 @llvm.cttz.i32(i32, i1)
define void @passes(i32 %n, ptr %re, ptr %w) {
entry:
  %cmp.not53 = icmp slt i32 %n, 2
  br i1 %cmp.not53, label %for.cond.cleanup, label %for.body.lr.ph

for.body.lr.ph:
  %0 = zext nneg i32 %n to i64
  br label %for.cond6.preheader.lr.ph

for.cond.cleanup:
  ret void

for.cond6.preheader.lr.ph:
  %len.054 = phi i32 [ 2, %for.body.lr.ph ], [ %shl, %for.cond.cleanup4 ]
  %div = ashr exact i32 %len.054, 1
  %1 = tail call range(i32 1, 33) i32 @llvm.cttz.i32(i32 %len.054, i1 true)
  %div155 = lshr i32 %n, %1
  %cmp749 = icmp sgt i32 %div, 0
  %2 = sext i32 %div to i64
  %3 = zext nneg i32 %div155 to i64
  %4 = sext i32 %len.054 to i64
  %wide.trip.count = zext nneg i32 %div to i64
  %invariant.gep = getelementptr double, ptr %re, i64 %2
  br label %for.cond6.preheader

for.cond6.preheader:
  %indvars.iv60 = phi i64 [ 0, %for.cond6.preheader.lr.ph ], [ %indvars.iv.next61, %for.cond.cleanup8 ]
  br i1 %cmp749, label %for.body9, label %for.cond.cleanup8

for.cond.cleanup4:
  %shl = shl i32 %len.054, 1
  %cmp.not = icmp sgt i32 %shl, %n
  br i1 %cmp.not, label %for.cond.cleanup, label %for.cond6.preheader.lr.ph

for.cond.cleanup8:
  %indvars.iv.next61 = add nsw i64 %indvars.iv60, %4
  %cmp3 = icmp slt i64 %indvars.iv.next61, %0
  br i1 %cmp3, label %for.cond6.preheader, label %for.cond.cleanup4

for.body9:
  %indvars.iv = phi i64 [ %indvars.iv.next, %for.body9 ], [ 0, %for.cond6.preheader ]
  %5 = add nsw i64 %indvars.iv, %indvars.iv60
  %6 = mul nuw nsw i64 %indvars.iv, %3
  %arrayidx = getelementptr inbounds nuw double, ptr %w, i64 %6
  %7 = load double, ptr %arrayidx, align 8
  %gep = getelementptr double, ptr %invariant.gep, i64 %5
  %8 = load double, ptr %gep, align 8
  %mul13 = fmul double %7, %8
  %arrayidx15 = getelementptr inbounds double, ptr %re, i64 %5
  %9 = load double, ptr %arrayidx15, align 8
  %sub = fsub double %9, %mul13
  store double %sub, ptr %gep, align 8
  %add20 = fadd double %9, %mul13
  store double %add20, ptr %arrayidx15, align 8
  %indvars.iv.next = add nuw nsw i64 %indvars.iv, 1
  %exitcond.not = icmp eq i64 %indvars.iv.next, %wide.trip.count
  br i1 %exitcond.not, label %for.cond.cleanup8, label %for.body9
}
define void @grad(i32 %n, ptr %re, ptr %dre, ptr %w) {
  %c = load i32, ptr @enzyme_const
  call void (ptr, ...) @__enzyme_autodiff(ptr @passes, i32 %c, i32 %n, ptr %re, ptr %dre, i32 %c, ptr %w)
  ret void
}
"""


def _butterflies(re_, w):
    re_, n, length = list(re_), len(re_), 2
    while length <= n:
        half, stride = length // 2, n // length
        for i in range(0, n, length):
            for j in range(half):
                a, b = i + j, i + j + half
                t = w[j * stride] * re_[b]
                re_[b], re_[a] = re_[a] - t, re_[a] + t
        length *= 2
    return re_


def test_values_computed_from_a_loop_phi_are_recomputed_from_it_not_cached():
    import re

    out, _ = differentiate_text(HEADER + BUTTERFLIES)
    sizes = re.findall(r"call ptr @__enzcc_tape_reserve\(ptr %\S+, i64 (\d+)\)", out)
    # per pass: len (8 bytes); leaving the loop: len and the pass count. Before, half, the stride, the guard
    # and two extensions: 40 and 32 bytes.
    assert sorted(set(sizes)) == ["16", "8"], sizes
    # adjoints are summed with nsz: re[a]'s adjoint, zeroed by the reverse of its store and added to by the
    # reverse of its load, then needs no addition of 0.0 (which LLVM keeps for -0.0 without the flag)
    body = out.split("define internal void @diffe_passes(")[1].split("\n}\n")[0]
    sums = re.findall(r"= fadd (nsz )?double", body[body.index("\nrev."):])  # (the reverse sweep)
    assert sums and all(sums), sums
    engine = jit(out)
    grad = ctypes.CFUNCTYPE(None, ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)(
        engine.get_function_address("grad"))
    for n in (2, 8, 32):
        x0 = [0.3 * k - 0.7 for k in range(n)]
        w = [1.0 + 0.1 * k for k in range(n)]
        seed = [1.0 / (k + 1) for k in range(n)]
        x, dx = (ctypes.c_double * n)(*x0), (ctypes.c_double * n)(*seed)
        wc = (ctypes.c_double * n)(*w)
        grad(n, ctypes.addressof(x), ctypes.addressof(dx), ctypes.addressof(wc))
        assert list(x) == pytest.approx(_butterflies(x0, w), rel=1e-14)
        for k in range(n):  # the transform is linear: (J^T seed)_k = seed . (J e_k)
            col = _butterflies([1.0 if i == k else 0.0 for i in range(n)], w)
            assert dx[k] == pytest.approx(sum(s * c for s, c in zip(seed, col)), rel=1e-12), (n, k)


def test_promoted_adjoint_slots_start_from_their_first_contribution():
    """An adjoint slot used in one reverse block becomes SSA values (enzcc.ad.promote); where the slot still
    holds its zero, ``adjoint + c`` is ``c`` (LLVM would keep ``fadd x, 0.0``, which is not ``x`` for -0.0)."""
    from enzcc.ad.promote import promote_single_block_slots
    from enzcc.ir.instructions import Alloca

    mod = parse_module(HEADER + """
define double @g(double %c, double %e) {
entry:
  %s = alloca double
  store double 0.000000e+00, ptr %s
  br label %rev
rev:
  %l0 = load double, ptr %s
  %a0 = fadd double %l0, %c
  store double %a0, ptr %s
  %l1 = load double, ptr %s
  %a1 = fadd double %l1, %e
  store double %a1, ptr %s
  %t = load double, ptr %s
  store double 0.000000e+00, ptr %s
  %u = load double, ptr %s
  %a2 = fadd double %u, %t
  store double %a2, ptr %s
  store double 0.000000e+00, ptr %s
  ret double %a2
}
""")
    fn = mod.get_function("g")
    slots = [i for i in fn.instructions() if isinstance(i, Alloca)]
    assert promote_single_block_slots(fn, slots) == 1
    body = str(mod).split("define double @g(")[1]
    assert "alloca" not in body and "load" not in body and "0.000000e+00" not in body
    assert body.count("fadd") == 1 and "fadd double %c, %e" in body  # (%a0 is %c, %a2 is %t = %a1)
    engine = jit(str(mod))
    g = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_double, ctypes.c_double)(engine.get_function_address("g"))
    assert g(1.25, 2.5) == 3.75


SCRATCH_TABLE = """
declare ptr @malloc(i64)
declare void @free(ptr)
define double @g(ptr %x, ptr %w, i64 %n) {
entry:
  %bytes = shl i64 %n, 3
  %t = call ptr @malloc(i64 %bytes)
  br label %fill
fill:
  %i = phi i64 [ 0, %entry ], [ %i1, %fill ]
  %px = getelementptr double, ptr %x, i64 %i
  %vx = load double, ptr %px
  %pw = getelementptr double, ptr %w, i64 %i
  %vw = load double, ptr %pw
  %m = fmul double %vx, %vw
  %pt = getelementptr double, ptr %t, i64 %i
  store double %m, ptr %pt
  %i1 = add i64 %i, 1
  %d1 = icmp eq i64 %i1, %n
  br i1 %d1, label %sum, label %fill
sum:
  %j = phi i64 [ 0, %fill ], [ %j1, %sum ]
  %s = phi double [ 0.0, %fill ], [ %s1, %sum ]
  %qt = getelementptr double, ptr %t, i64 %j
  %vt = load double, ptr %qt
  %sq = fmul double %vt, %vt
  %s1 = fadd double %s, %sq
  %j1 = add i64 %j, 1
  %d2 = icmp eq i64 %j1, %n
  br i1 %d2, label %exit, label %sum
exit:
  call void @free(ptr %t)
  ret double %s1
}
define void @grad(ptr %x, ptr %dx, ptr %w, i64 %n) {
  %c = load i32, ptr @enzyme_const
  call double (ptr, ...) @__enzyme_autodiff(ptr @g, ptr %x, ptr %dx, i32 %c, ptr %w, i64 %n)
  ret void
}
"""


def test_shadow_memory_kept_for_the_next_call_leaves_argument_loads_recomputable():
    """The shadow of the scratch array comes from enzcc.ad.shadow_reuse's helper, which the analyses take as
    an allocation: the loads of x and w (memory the function does not write) are read again in the reverse
    sweep. So is t[j]: nothing writes t after the second loop reads it, and t's free waits for the end of the
    reverse sweep. Nothing goes on the tape."""
    import re

    out, _ = differentiate_text(HEADER + SCRATCH_TABLE)
    assert "@__enzcc_shadow_take" in out and "@__enzcc_shadow_release" in out
    # take and release stand for malloc and free: calls, the memory new (noalias) and not captured by release
    assert "define internal noalias ptr @__enzcc_shadow_take(ptr %0, i64 %1) noinline {" in out
    assert "define internal void @__enzcc_shadow_release(ptr %0, ptr captures(none) %1) noinline {" in out
    body = out.split("define internal void @diffe_g(")[1].split("\n}\n")[0]
    pushes = {block.split(":")[0]: [int(m) for m in re.findall(r"@__enzcc_tape_reserve\(ptr %\S+, i64 (\d+)\)",
                                                               block)]
              for block in body.split("\n\n")[1:]}
    assert not any(pushes.values()), pushes
    frees = [label for label, block in zip(pushes, body.split("\n\n")[1:]) if "call void @free(ptr %t)" in block]
    assert len(frees) == 1 and frees[0].startswith("rev.exit"), frees
    engine = jit(out)
    grad = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                            ctypes.c_int64)(engine.get_function_address("grad"))
    for n in (4, 9, 2, 9):  # (the kept shadow too small, then large enough: zero-filled either way)
        x = (ctypes.c_double * n)(*[0.1 * (k + 1) for k in range(n)])
        w = (ctypes.c_double * n)(*[1.5 - 0.2 * k for k in range(n)])
        dx = (ctypes.c_double * n)()
        grad(ctypes.addressof(x), ctypes.addressof(dx), ctypes.addressof(w), n)
        for k in range(n):
            assert dx[k] == pytest.approx(2 * x[k] * w[k] * w[k], rel=1e-14), (n, k)


BRANCHY = """
define double @h(double %x, double %y, i1 %c) {
entry:
  %a = fmul double %x, %y
  %s = call double @llvm.sin.f64(double %a)
  %b = fmul double %s, %a
  br i1 %c, label %more, label %done
more:
  %m = fmul double %b, %x
  br label %done
done:
  %p = phi double [ %b, %entry ], [ %m, %more ]
  %q = fmul double %p, %p
  ret double %q
}
define double @dh_dx(double %x, double %y, i1 %c) {
  %m = load i32, ptr @enzyme_out
  %k = load i32, ptr @enzyme_const
  %r = call double (ptr, ...) @__enzyme_autodiff(ptr @h, i32 %m, double %x, i32 %k, double %y, i32 %k, i1 %c)
  ret double %r
}
"""


def test_adjoints_used_in_one_block_are_ssa_values_from_the_start(monkeypatch):
    """The adjoint of a value whose uses are all in its own block, none a phi, is summed as SSA values while
    the reverse of that block is made (no stack slot to promote afterwards: large straight-line functions made
    millions of short-lived instructions); values used in other blocks or by phis keep a slot. Same gradients
    with every adjoint in a slot."""
    import math

    import enzcc.ad.reverse as reverse
    from enzcc.ad.adjoint import AdjointGenerator

    slots = []
    promote = reverse.promote_single_block_slots

    def counting(fn, made):
        slots.append(len(made))
        return promote(fn, made)

    monkeypatch.setattr(reverse, "promote_single_block_slots", counting)
    outs = [differentiate_text(HEADER + POLY.split("define double @tangent_y")[0])[0],
            differentiate_text(HEADER + BRANCHY)[0]]
    monkeypatch.setattr(AdjointGenerator, "_running", lambda self, b, v, ty=None: (False, None))
    outs += [differentiate_text(HEADER + POLY.split("define double @tangent_y")[0])[0],
             differentiate_text(HEADER + BRANCHY)[0]]
    # straight-line: only the adjoints of %x (an argument, read at the end) and of %b (it starts from the seed,
    # which is not made in the block) are in slots; %a and %s were too before
    assert slots[0] == 2 and slots[2] == 4
    assert 0 < slots[1] < slots[3]
    for out in outs[0], outs[2]:
        dfdx = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_double, ctypes.c_double)(
            (engine := jit(out)).get_function_address("df_dx"))
        assert dfdx(0.7, 1.9) == pytest.approx(1.9 + math.cos(0.7), rel=1e-15)
    for out in outs[1], outs[3]:
        dh = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_double, ctypes.c_double, ctypes.c_bool)(
            (engine := jit(out)).get_function_address("dh_dx"))
        for x, y, c in ((0.7, 1.3, True), (0.7, 1.3, False), (-1.1, 0.4, True)):
            a = x * y
            b = math.sin(a) * a
            db_dx = (math.cos(a) * a + math.sin(a)) * y
            p, dp = (b * x, db_dx * x + b) if c else (b, db_dx)
            assert dh(x, y, c) == pytest.approx(2 * p * dp, rel=1e-13)


WHILE_LOOP = """
define double @halve(double %x) {
entry:
  br label %loop
loop:
  %a = phi double [ %x, %entry ], [ %b, %loop ]
  %s = call double @llvm.sin.f64(double %a)
  %b = fmul double %s, %a
  %more = fcmp ogt double %b, 1.000000e-03
  br i1 %more, label %loop, label %exit
exit:
  ret double %b
}
define double @dhalve(double %x) {
  %r = call double (ptr, ...) @__enzyme_autodiff(ptr @halve, double %x)
  ret double %r
}
"""


def test_records_of_a_counted_loop_are_made_room_for_at_its_entry():
    """A loop whose iteration count is known at its entry (an induction variable tested against a bound
    defined outside it) makes room for all its records there (``__enzcc_tape_ensure``) and pushes each
    iteration's record without a capacity test (``__enzcc_tape_bump``); the record of its exit edge, and every
    record of a loop whose exit depends on the data, keep the test (``__enzcc_tape_reserve``)."""
    out, _ = differentiate_text(HEADER + LOOP)
    body = out.split("define internal void @diffe_sumexp(")[1].split("\n}\n")[0]
    entry = body.split("\nloop:")[0]
    assert "call void @__enzcc_tape_ensure(" in entry and "mul i64 %" in entry
    back, leave = body.split("\nloop.to.loop:")[1], body.split("\nloop.to.exit:")[1]
    assert "@__enzcc_tape_bump(" in back.split("\n\n")[0] and "@__enzcc_tape_reserve(" in leave.split("\n\n")[0]
    assert body.count("@__enzcc_tape_bump(") == 1 and body.count("@__enzcc_tape_reserve(") == 1
    out, _ = differentiate_text(HEADER + WHILE_LOOP)
    body = out.split("define internal double @diffe_halve(")[1].split("\n}\n")[0]
    assert "@__enzcc_tape_reserve(" in body and "@__enzcc_tape_bump(" not in body and "ensure" not in body
    engine = jit(out)
    dh = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_double)(engine.get_function_address("dhalve"))
    import math

    def halve(x):
        a = x
        while True:
            a = math.sin(a) * a
            if not a > 1e-3:
                return a
    assert dh(0.9) == pytest.approx((halve(0.9 + 1e-7) - halve(0.9 - 1e-7)) / 2e-7, rel=1e-6)

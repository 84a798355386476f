"""Text-in / text-out tests for mutation and the IRBuilder."""

from __future__ import annotations

import textwrap

import pytest

from ir_helpers import llvm_check
from enzcc.ir import (
    BasicBlock, Br, Call, ConstantPoison, Function, Instruction, IRBuilder, IRError, Phi,
    const_float,
    const_int, parse_module, types as T,
)


def dedent(s: str) -> str:
    return textwrap.dedent(s).lstrip("\n")


SIMPLE = dedent("""
    define double @f(double %x, double %y) {
    entry:
      %a = fadd double %x, %y
      %b = fmul double %a, %a
      %dead = fsub double %x, 1.000000e+00
      ret double %b
    }
    """)


def test_insert_rauw_erase():
    mod = parse_module(SIMPLE)
    fn = mod.get_function("f")
    a, b, dead, ret = fn.entry_block.instructions
    bld = IRBuilder.after(a)
    s = bld.fmul(a, 2.0, name="s", flags=["fast"])
    a.replace_uses_with_if(s, lambda use: use.user is not s)
    dead.erase()
    assert str(fn) == dedent("""
        define double @f(double %x, double %y) {
        entry:
          %a = fadd double %x, %y
          %s = fmul fast double %a, 2.000000e+00
          %b = fmul double %s, %s
          ret double %b
        }
        """)
    assert [u.user for u in s.uses] == [b, b]
    assert a.users == [s]
    llvm_check(str(mod))


def test_replace_all_uses_with_and_erase_errors():
    mod = parse_module(SIMPLE)
    fn = mod.get_function("f")
    a, b, dead, ret = fn.entry_block.instructions
    with pytest.raises(IRError):
        a.erase()  # still used by %b
    with pytest.raises(IRError):
        a.replace_all_uses_with(const_int(T.i32, 1))  # type mismatch
    a.replace_all_uses_with(fn.args[0])
    a.erase()
    dead.erase()
    assert fn.args[0].has_uses()
    assert str(fn).splitlines()[2] == "  %b = fmul double %x, %x"
    assert fn.args[0].num_uses == 2
    llvm_check(str(mod))


def test_unnamed_values_are_renumbered():
    mod = parse_module(dedent("""
        define i32 @g(i32 %0) {
          %2 = add i32 %0, 1
          %3 = mul i32 %2, %2
          ret i32 %3
        }
        """))
    fn = mod.get_function("g")
    add = fn.entry_block.instructions[0]
    sub = IRBuilder.after(add).sub(add, 3)
    add_use = fn.entry_block.instructions[2]
    add_use.set_operand(1, sub)
    assert str(fn) == dedent("""
        define i32 @g(i32 %0) {
          %2 = add i32 %0, 1
          %3 = sub i32 %2, 3
          %4 = mul i32 %2, %3
          ret i32 %4
        }
        """)
    llvm_check(str(mod))


def test_move_and_clone():
    mod = parse_module(SIMPLE)
    fn = mod.get_function("f")
    a, b, dead, ret = fn.entry_block.instructions
    dead.move_before(a)
    c = a.clone()
    c.name = "a2"
    c.insert_after(a)
    assert [i.name for i in fn.entry_block] == ["dead", "a", "a2", "b", None]
    assert c.operands == a.operands and fn.args[0].num_uses == 3
    dead.erase()
    c.erase()
    assert fn.args[0].num_uses == 1
    llvm_check(str(mod))


LOOP = dedent("""
    define double @sum(ptr %p, i64 %n) {
    entry:
      br label %loop

    loop:
      %i = phi i64 [ 0, %entry ], [ %i.next, %loop ]
      %acc = phi double [ 0.000000e+00, %entry ], [ %acc.next, %loop ]
      %addr = getelementptr inbounds double, ptr %p, i64 %i
      %v = load double, ptr %addr, align 8
      %acc.next = fadd double %acc, %v
      %i.next = add nuw i64 %i, 1
      %c = icmp ult i64 %i.next, %n
      br i1 %c, label %loop, label %exit

    exit:
      ret double %acc.next
    }
    """)


def test_split_block_updates_phis():
    mod = parse_module(LOOP)
    fn = mod.get_function("sum")
    loop = fn.get_block("loop")
    v = next(i for i in loop if i.name == "v")
    tail = loop.split_before(v, name="loop.tail")
    phis = loop.phis()
    assert phis[0].incoming_blocks == [fn.entry_block, tail]
    assert isinstance(loop.terminator, Br) and loop.terminator.dest is tail
    assert tail.predecessors == [loop]
    assert set(b.name for b in loop.predecessors) == {"entry", "loop.tail"}
    text = str(fn)
    assert "  %i = phi i64 [ 0, %entry ], [ %i.next, %loop.tail ]" in text
    assert "loop.tail:                                        ; preds = %loop" in text
    llvm_check(str(mod))


def test_builder_new_gradient_function():
    mod = parse_module(LOOP)
    fnty = T.FunctionType(T.void, (T.ptr, T.ptr, T.i64, T.f64))
    grad = mod.add_function(Function("diffe_sum", fnty, ["p", "dp", "n", "dret"]))
    grad.linkage = "internal"
    p, dp, n, dret = grad.args
    entry = grad.append_block("entry")
    loop = grad.append_block("loop")
    exit_ = grad.append_block("exit")
    b = IRBuilder.at_end(entry)
    tmp = b.alloca(T.f64, align=8, name="tmp")
    b.store(dret, tmp, align=8)
    b.memset(dp, 0, b.mul(n, 8, name="bytes"))
    b.br(loop)
    b.position_at_end(loop)
    i = b.phi(T.i64, [(const_int(T.i64, 0), entry)], name="i")
    addr = b.gep(T.f64, dp, [i], name="addr", inbounds=True)
    x = b.load(T.f64, b.gep(T.f64, p, [i], inbounds=True), align=8)
    dx = b.fmul(b.load(T.f64, tmp, align=8), b.call_intrinsic("llvm.cos", [x]))
    old = b.load(T.f64, addr, align=8)
    b.store(b.fadd(old, dx), addr, align=8)
    nxt = b.add(i, 1, name="i.next", flags=["nuw"])
    i.add_incoming(nxt, loop)
    b.cond_br(b.icmp("ult", nxt, n), loop, exit_)
    b.position_at_end(exit_)
    b.ret()
    assert "llvm.cos.f64" in mod.functions and "llvm.memset.p0.i64" in mod.functions
    assert str(mod.functions["llvm.memset.p0.i64"]) == \
        "declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)\n"
    text = str(grad)
    assert text == dedent("""
        define internal void @diffe_sum(ptr %p, ptr %dp, i64 %n, double %dret) {
        entry:
          %tmp = alloca double, align 8
          store double %dret, ptr %tmp, align 8
          %bytes = mul i64 %n, 8
          call void @llvm.memset.p0.i64(ptr %dp, i8 0, i64 %bytes, i1 false)
          br label %loop

        loop:                                             ; preds = %loop, %entry
          %i = phi i64 [ 0, %entry ], [ %i.next, %loop ]
          %addr = getelementptr inbounds double, ptr %dp, i64 %i
          %0 = getelementptr inbounds double, ptr %p, i64 %i
          %1 = load double, ptr %0, align 8
          %2 = load double, ptr %tmp, align 8
          %3 = call double @llvm.cos.f64(double %1)
          %4 = fmul double %2, %3
          %5 = load double, ptr %addr, align 8
          %6 = fadd double %5, %4
          store double %6, ptr %addr, align 8
          %i.next = add nuw i64 %i, 1
          %7 = icmp ult i64 %i.next, %n
          br i1 %7, label %loop, label %exit

        exit:                                             ; preds = %loop
          ret void
        }
        """)
    llvm_check(str(mod))


def test_builder_casts_aggregates_vectors_select():
    mod = parse_module("define void @h() {\nentry:\n  ret void\n}\n")
    fn = mod.get_function("h")
    b = IRBuilder.before(fn.entry_block.terminator)
    x = const_float(T.f32, 1.5)
    d = b.fpext(x, T.f64, name="d")
    i = b.fptosi(d, T.i32, name="i")
    agg = b.insert_value(ConstantPoison(T.StructType((T.f64, T.i32))), d, 0, name="agg")
    agg2 = b.insert_value(agg, i, 1, name="agg2")
    e = b.extract_value(agg2, 1, name="e")
    vec = b.insert_element(ConstantPoison(T.VectorType(2, T.f64)), d, 0, name="vec")
    spl = b.shuffle_vector(vec, ConstantPoison(vec.type), [0, 0], name="spl")
    el = b.extract_element(spl, 1, name="el")
    c = b.fcmp("olt", el, 0.0, name="c")
    b.select(c, e, 7, name="sel")
    b.call_intrinsic("llvm.fabs", [b.fneg(d, name="neg")], name="abs")
    b.call_intrinsic("llvm.powi", [d, const_int(T.i32, 3)], overload_types=[T.f64, T.i32],
                     name="cube")
    assert str(fn) == dedent("""
        define void @h() {
        entry:
          %d = fpext float 1.500000e+00 to double
          %i = fptosi double %d to i32
          %agg = insertvalue { double, i32 } poison, double %d, 0
          %agg2 = insertvalue { double, i32 } %agg, i32 %i, 1
          %e = extractvalue { double, i32 } %agg2, 1
          %vec = insertelement <2 x double> poison, double %d, i64 0
          %spl = shufflevector <2 x double> %vec, <2 x double> poison, <2 x i32> <i32 0, i32 0>
          %el = extractelement <2 x double> %spl, i64 1
          %c = fcmp olt double %el, 0.000000e+00
          %sel = select i1 %c, i32 %e, i32 7
          %neg = fneg double %d
          %abs = call double @llvm.fabs.f64(double %neg)
          %cube = call double @llvm.powi.f64.i32(double %d, i32 3)
          ret void
        }
        """)
    llvm_check(str(mod))


def test_builder_switch_call_by_name_and_debug_loc():
    mod = parse_module(dedent("""
        declare double @ext(double)

        define double @k(i32 %sel, double %x) {
        entry:
          ret double %x
        }
        """))
    fn = mod.get_function("k")
    entry = fn.entry_block
    entry.terminator.erase()
    one = fn.append_block("one")
    other = fn.append_block("other")
    b = IRBuilder.at_end(entry)
    b.switch(fn.args[0], other, [(1, one), (5, one)])
    b.position_at_end(one)
    r = b.call("ext", [fn.args[1]], name="r", tail="tail")
    b.ret(r)
    b.position_at_end(other)
    b.ret(fn.args[1])
    assert isinstance(r, Call) and r.callee_name == "ext"
    assert str(entry.terminator) == ("switch i32 %sel, label %other [\n"
                                     "    i32 1, label %one\n    i32 5, label %one\n  ]")
    assert str(r) == "%r = tail call double @ext(double %x)"
    assert one.predecessors == [entry]
    llvm_check(str(mod))
    b.debug_loc = "!7"
    b.position_before(r)
    c = b.fadd(fn.args[1], 1.0)
    assert str(c).endswith(", !dbg !7")


def test_duplicate_names_are_uniqued_on_print():
    mod = parse_module(SIMPLE)
    fn = mod.get_function("f")
    a = fn.entry_block.instructions[0]
    b = IRBuilder.after(a)
    t1 = b.fadd(a, 1.0, name="t")
    t2 = b.fadd(t1, 1.0, name="t")
    b.fadd(t2, 1.0, name="a")
    text = str(fn)
    assert "%t = fadd double %a, 1.000000e+00" in text
    assert "%t1 = fadd double %t, 1.000000e+00" in text
    assert "%a1 = fadd double %t1, 1.000000e+00" in text
    llvm_check(str(mod))


def test_erase_keeps_debug_records_consistent():
    ir = dedent("""
        define void @d(i32 %x) !dbg !3 {
        entry:
          %y = add i32 %x, 1
            #dbg_value(i32 %y, !6, !DIExpression(), !7)
          %z = mul i32 %x, 2
          ret void, !dbg !7
        }

        !llvm.dbg.cu = !{!0}
        !llvm.module.flags = !{!2}
        !0 = distinct !DICompileUnit(language: DW_LANG_C11, file: !1, emissionKind: FullDebug)
        !1 = !DIFile(filename: "d.c", directory: "/tmp")
        !2 = !{i32 2, !"Debug Info Version", i32 3}
        !3 = distinct !DISubprogram(name: "d", scope: !1, file: !1, line: 1, type: !4, spFlags: DISPFlagDefinition, unit: !0)
        !4 = !DISubroutineType(types: !5)
        !5 = !{null}
        !6 = !DILocalVariable(name: "y", scope: !3, file: !1, line: 1, type: !8)
        !7 = !DILocation(line: 1, column: 1, scope: !3)
        !8 = !DIBasicType(name: "int", size: 32, encoding: DW_ATE_signed)
        """)
    mod = parse_module(ir)
    fn = mod.get_function("d")
    y, z, ret = fn.entry_block.instructions
    rec = z.debug_records[0]
    assert y.debug_users == [rec]
    z.erase()  # the record moves to the next instruction
    assert ret.debug_records == [rec] and rec.parent is ret
    y.erase()  # the record's location becomes poison
    assert isinstance(rec.values()[0], ConstantPoison)
    assert "    #dbg_value(i32 poison, !6, !DIExpression(), !7)\n  ret void, !dbg !7" in str(fn)
    llvm_check(str(mod))


def test_block_erase_and_detached_errors():
    mod = parse_module(LOOP)
    fn = mod.get_function("sum")
    exit_ = fn.get_block("exit")
    with pytest.raises(IRError):
        exit_.erase()  # still a branch target
    loop = fn.get_block("loop")
    term = loop.terminator
    term.erase()
    loop.append(Br(loop))
    exit_.erase()
    assert [b.name for b in fn.blocks] == ["entry", "loop"]
    with pytest.raises(IRError):
        IRBuilder().fadd(const_float(T.f64, 1), 2.0)
    with pytest.raises(IRError):
        fn.entry_block.append(loop.instructions[0])  # already in a block


def test_phi_incoming_edits():
    mod = parse_module(LOOP)
    fn = mod.get_function("sum")
    phi = fn.get_block("loop").instructions[0]
    assert isinstance(phi, Phi)
    nxt = phi.incoming_value_for(fn.get_block("loop"))
    assert nxt.name == "i.next"
    phi.remove_incoming(0)
    assert phi.incoming == [(nxt, fn.get_block("loop"))]
    assert [u.index for u in nxt.uses if u.user is phi] == [0]
    phi.add_incoming(const_int(T.i64, 0), fn.entry_block)
    llvm_check(str(mod))


def test_new_block_before_and_named_types():
    mod = parse_module("%struct.S = type { double, [2 x float] }\n" + LOOP)
    fn = mod.get_function("sum")
    S = mod.get_named_type("struct.S")
    blk = BasicBlock("pre")
    fn.insert_block(1, blk)
    b = IRBuilder.at_end(blk)
    s = b.alloca(S, align=8, name="s")
    f1 = b.struct_gep(S, s, 1, name="f1")
    b.gep(S, s, [0, 1, 1], name="f11", inbounds=True)
    b.br(fn.get_block("loop"))
    entry_br = fn.entry_block.terminator
    entry_br.set_operand(0, blk)
    fn.get_block("loop").instructions[0].replace_incoming_block(fn.entry_block, blk)
    fn.get_block("loop").instructions[1].replace_incoming_block(fn.entry_block, blk)
    assert str(f1) == "%f1 = getelementptr inbounds %struct.S, ptr %s, i32 0, i32 1"
    assert "%f11 = getelementptr inbounds %struct.S, ptr %s, i64 0, i32 1, i64 1" in str(fn)
    llvm_check(str(mod))


def test_function_clone(tmp_path):
    mod = parse_module(LOOP)
    fn = mod.get_function("sum")
    new, vmap = fn.clone("sum.clone")
    mod.add_function(new)
    assert vmap[fn.args[0]] is new.args[0]
    assert vmap[fn.entry_block] is new.entry_block
    phi = new.get_block("loop").instructions[0]
    assert phi.incoming_blocks == [new.entry_block, new.get_block("loop")]
    assert all(i.function is new for i in new.instructions())
    # the clone's values are used only inside the clone
    for inst in new.instructions():
        for op in inst.operands:
            if isinstance(op, Instruction):
                assert op.function is new
    expected = str(fn).replace("@sum(", "@sum.clone(")
    assert str(new) == expected
    # editing the clone leaves the original alone
    fadd = new.get_block("loop").instructions[4]
    fadd.set_operand(1, fadd.operands[0])
    assert "%acc.next = fadd double %acc, %acc" in str(new)
    assert str(fn) == str(parse_module(LOOP).get_function("sum").parse())
    llvm_check(str(mod))


def test_clone_with_debug_info(tmp_path):
    from ir_helpers import compile_to_ir
    text = compile_to_ir("c", ["-O2", "-g"], tmp_path)
    mod = parse_module(text)
    for fn in list(mod.definitions())[:6]:
        copy, _ = fn.clone(fn.name + ".nodbg", strip_debug=True)
        assert not any(i.debug_records or i.get_metadata("dbg") for i in copy.instructions())
        mod.add_function(copy)
    mod.verify()
    llvm_check(str(mod))


def test_fresh_module_globals_and_removal():
    from enzcc.ir import Module, X86_64_LINUX_LAYOUT, const_array
    mod = Module("grad.c", X86_64_LINUX_LAYOUT, "x86_64-unknown-linux-gnu")
    shadow = mod.add_global("shadow", T.ArrayType(4, T.f64), align=16)
    table = mod.add_global("table", T.ArrayType(2, T.f64),
                           const_array(T.f64, [const_float(T.f64, 0.5), const_float(T.f64, 0.1)]),
                           constant=True, linkage="private")
    assert shadow.text == "@shadow = internal global [4 x double] zeroinitializer, align 16"
    assert table.text == ("@table = private constant [2 x double] "
                          "[double 5.000000e-01, double 1.000000e-01]")
    fn = mod.add_function(Function("get", T.FunctionType(T.f64, (T.i64,)), ["i"]))
    b = IRBuilder.at_end(fn.append_block("entry"))
    p = b.gep(T.ArrayType(2, T.f64), mod.global_ref("table"), [0, fn.args[0]], name="p",
              inbounds=True)
    v = b.load(T.f64, p, align=8, name="v")
    b.store(v, b.gep(T.f64, mod.global_ref("shadow"), [fn.args[0]]), align=8)
    b.ret(v)
    helper = mod.add_function(Function("unused", T.FunctionType(T.void, ())))
    assert helper.is_declaration
    text = str(mod)
    assert text.startswith('source_filename = "grad.c"\ntarget datalayout = "e-m:e')
    assert "declare void @unused()" in text
    llvm_check(text)
    mod.verify()
    assert {u.user.function.name for u in mod.global_ref("table").uses} == {"get"}
    mod.remove_function("unused")
    with pytest.raises(IRError):
        mod.add_function(Function("get", T.FunctionType(T.void, ())))
    callee = mod.add_function(Function("callee", T.FunctionType(T.void, ())))
    IRBuilder.before(fn.entry_block.terminator).call(callee, [])
    with pytest.raises(IRError):
        mod.remove_function("callee")
    assert "unused" not in str(mod)
    llvm_check(str(mod))


def test_builders_keep_their_position_when_block_changes():
    mod = parse_module(SIMPLE)
    fn = mod.get_function("f")
    a, b, dead, ret = fn.entry_block.instructions
    top = IRBuilder.at_start(fn.entry_block)
    bottom = IRBuilder.before(ret)
    x1 = top.fadd(fn.args[0], 1.0, name="x1")
    y1 = bottom.fadd(b, 1.0, name="y1")
    x2 = top.fadd(x1, 1.0, name="x2")
    y2 = bottom.fadd(y1, 1.0, name="y2")
    assert [i.name for i in fn.entry_block] == ["x1", "x2", "a", "b", "dead", "y1", "y2", None]
    dead.erase()
    bottom.fadd(y2, x2, name="y3")
    assert [i.name for i in fn.entry_block][-2:] == ["y3", None]
    llvm_check(str(mod))

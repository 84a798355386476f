"""Hand-written IR covering every supported instruction and syntax form."""

from __future__ import annotations

from ir_helpers import assert_roundtrip, llvm_check
from enzcc.ir import (
    AtomicRMW, Call, CmpXchg, ConstantExpr, ConstantFloat, ConstantSplat, ConstantString,
    DebugRecord, GlobalRef, InlineAsm, Invoke, LandingPad, MetadataValue, OpaqueConstant,
    Phi, Store, Switch, VAArg, parse_module, types as T,
)

ALL_IR = r"""
source_filename = "hand.ll"
target datalayout = "e-m:e-p270:32:32-p271:32:32-p272:64:64-i64:64-i128:128-f80:128-n8:16:32:64-S128"
target triple = "x86_64-unknown-linux-gnu"

%pair = type { double, i32 }
%"quoted type" = type <{ i8, i32 }>
%opaque.t = type opaque
%node = type { ptr, %pair, [2 x <4 x float>] }

@g = global double 1.000000e+00, align 8
@arr = internal constant [3 x double] [double 1.0, double 0x3FB999999999999A, double -0.000000e+00]
@str = private unnamed_addr constant [6 x i8] c"hi\0A\22\5C\00"
@packed = global %"quoted type" <{ i8 1, i32 2 }>
@gep = global ptr getelementptr inbounds nuw (i8, ptr @arr, i64 8)
@p2i = global i64 ptrtoint (ptr @g to i64)
@vec = global <4 x i32> splat (i32 7)
@"weird name" = global i32 5
@alias = alias double, ptr @g
@tls = thread_local(initialexec) global i32 0
@fp80 = global x86_fp80 0xK3FFF8000000000000000
@q = global fp128 0xL00000000000000003FFF000000000000
@h = global half 0xH3C00
@bf = global bfloat 0xR3F80

declare i32 @printf(ptr, ...)
declare void @use(ptr)
declare double @llvm.experimental.constrained.fadd.f64(double, double, metadata, metadata)
declare void @llvm.assume(i1)
declare i32 @__gxx_personality_v0(...)
declare void @may_throw(i32)
declare fastcc double @fast(double)
declare cc 10 void @ghc()

define double @arith(double %a, double %b, i32 %i, <4 x float> %v) {
entry:
  %x = fadd fast double %a, %b
  %y = fsub nnan ninf double %x, 1.500000e+00
  %z = fmul reassoc nsz arcp contract afn double %y, %a
  %w = fdiv double %z, 0x7FF0000000000000
  %r = frem double %w, 2.0
  %n = fneg fast double %r
  %s1 = add nuw nsw i32 %i, 1
  %s2 = sub i32 %s1, -5
  %s3 = mul nsw i32 %s2, %s2
  %s4 = udiv exact i32 %s3, 2
  %s5 = sdiv i32 %s4, 3
  %s6 = urem i32 %s5, 7
  %s7 = srem i32 %s6, 7
  %s8 = shl nuw i32 %s7, 2
  %s9 = lshr exact i32 %s8, 1
  %s10 = ashr i32 %s9, 1
  %s11 = and i32 %s10, 255
  %s12 = or disjoint i32 %s11, 256
  %s13 = xor i32 %s12, -1
  %c1 = icmp samesign ult i32 %s13, 10
  %c2 = fcmp fast olt double %n, %a
  %c3 = fcmp uno double %n, %a
  %c4 = and i1 %c2, %c3
  %sel = select nnan i1 %c4, double %n, double %a
  %fr = freeze double %sel
  %t1 = trunc nuw i32 %s13 to i8
  %t2 = zext nneg i8 %t1 to i64
  %t3 = sext i8 %t1 to i32
  %t4 = sitofp i32 %t3 to double
  %t5 = uitofp nneg i64 %t2 to float
  %t6 = fpext float %t5 to double
  %t7 = fptrunc fast double %t6 to float
  %t8 = fptosi double %fr to i32
  %t9 = fptoui float %t7 to i16
  %t10 = bitcast double %t4 to i64
  %t11 = inttoptr i64 %t10 to ptr
  %t12 = ptrtoint ptr %t11 to i64
  %t13 = addrspacecast ptr %t11 to ptr addrspace(1)
  %e1 = extractelement <4 x float> %v, i32 0
  %e2 = insertelement <4 x float> %v, float %e1, i64 3
  %e3 = shufflevector <4 x float> %e2, <4 x float> poison, <4 x i32> <i32 3, i32 2, i32 poison, i32 0>
  %e4 = fadd <4 x float> %e3, splat (float 1.000000e+00)
  %e5 = fcmp ogt <4 x float> %e4, zeroinitializer
  %agg1 = insertvalue %pair undef, double %fr, 0
  %agg2 = insertvalue %pair %agg1, i32 %t8, 1
  %agg3 = extractvalue %pair %agg2, 0
  %res = fadd double %agg3, %t6
  ret double %res
}

define i32 @memory(ptr %p, i64 %n) personality ptr @__gxx_personality_v0 {
entry:
  %a = alloca i32, align 4
  %b = alloca double, i64 %n, align 16
  %c = alloca [4 x %pair], align 8, addrspace(5)
  %d = alloca inalloca i32, align 4
  store i32 1, ptr %a, align 4
  store volatile i32 2, ptr %a, align 4
  store atomic i32 3, ptr %a release, align 4
  store atomic volatile i32 4, ptr %a syncscope("singlethread") seq_cst, align 4
  %l1 = load i32, ptr %a, align 4, !tbaa !0
  %l2 = load volatile i32, ptr %a, align 4
  %l3 = load atomic i32, ptr %a acquire, align 4
  %l4 = load atomic volatile i32, ptr %a syncscope("agent") monotonic, align 4
  %l5 = load i32, ptr %a
  fence acquire
  fence syncscope("singlethread") seq_cst
  %cx = cmpxchg ptr %a, i32 %l1, i32 %l2 seq_cst seq_cst, align 4
  %cx2 = cmpxchg weak volatile ptr %a, i32 %l1, i32 %l2 syncscope("singlethread") acq_rel monotonic, align 4
  %ok = extractvalue { i32, i1 } %cx, 1
  %rmw = atomicrmw add ptr %a, i32 1 seq_cst, align 4
  %rmw2 = atomicrmw volatile fadd ptr %b, double 1.0 syncscope("agent") monotonic, align 8
  %g1 = getelementptr inbounds %pair, ptr %p, i64 %n, i32 1
  %g2 = getelementptr nusw nuw [4 x %pair], ptr addrspace(5) %c, i64 0, i64 2, i32 0
  %g3 = getelementptr i8, ptr %p, <2 x i64> <i64 1, i64 2>
  %g4 = getelementptr %node, ptr @g, i32 0, i32 2, i32 1, i64 3
  %ld = load i32, ptr %g1, align 4, !range !1, !noundef !2
  call void @llvm.assume(i1 true) [ "align"(ptr %p, i64 16), "nonnull"(ptr %p) ]
  %cf = call double @llvm.experimental.constrained.fadd.f64(double 1.0, double 2.0, metadata !"round.dynamic", metadata !"fpexcept.strict") #0
  invoke void @may_throw(i32 %ld)
          to label %cont unwind label %lpad

cont:
  %pr = call i32 (ptr, ...) @printf(ptr noundef nonnull @str, i32 %ld, double %cf)
  %tc = tail call fastcc double @fast(double 1.0)
  %nt = notail call fast double @fast(double %tc)
  call cc 10 void @ghc()
  call void asm sideeffect "nop", "~{dirflag},~{fpsr},~{flags}"()
  %asm = call i32 asm "leal 1($1), $0", "=r,r,~{dirflag},~{fpsr},~{flags}"(i32 %ld)
  call void @use(ptr %g4) #1
  ret i32 %asm

lpad:
  %lp = landingpad { ptr, i32 }
          cleanup
          catch ptr @g
          filter [1 x ptr] [ptr @g]
  resume { ptr, i32 } %lp
}

define i32 @control(i32 %k, ptr %ap) {
entry:
  switch i32 %k, label %def [
    i32 0, label %zero
    i32 1, label %"a b"
    i32 -7, label %zero
  ]

zero:
  br label %join

"a b":
  %va = va_arg ptr %ap, i32
  %later = fadd double 1.0, 2.0
  br i1 true, label %join, label %def

def:
  %ind = select i1 false, ptr blockaddress(@control, %zero), ptr blockaddress(@control, %join)
  indirectbr ptr %ind, [label %zero, label %join]

join:
  %phi = phi fast double [ 1.0, %zero ], [ %later, %"a b" ], [ 2.0, %def ]
  %q = phi i32 [ 0, %zero ], [ %va, %"a b" ], [ 5, %def ]
  %is = icmp eq i32 %q, 0
  br i1 %is, label %done, label %unr

unr:
  unreachable

done:
  ret i32 %q
}

define i32 @numbered(i32 %0, i32 %1) {
  %3 = add i32 %0, %1
  br label %4

4:
  %5 = phi i32 [ %3, %2 ], [ %6, %4 ]
  %6 = add i32 %5, 1
  %7 = icmp slt i32 %6, 10
  br i1 %7, label %4, label %8

8:
  ret i32 %6
}

define void @oneline() { ret void }

define internal void @dbg(ptr %x) !dbg !10 {
entry:
    #dbg_declare(ptr %x, !11, !DIExpression(), !12)
    #dbg_value(!DIArgList(ptr %x, ptr %x), !11, !DIExpression(DW_OP_LLVM_arg, 0, DW_OP_LLVM_arg, 1, DW_OP_plus, DW_OP_stack_value), !12)
  ret void, !dbg !12
}

attributes #0 = { strictfp }
attributes #1 = { nounwind }

!llvm.module.flags = !{!3, !4}
!llvm.dbg.cu = !{!5}
!0 = !{!13, !13, i64 0}
!1 = !{i32 0, i32 10}
!2 = !{}
!3 = !{i32 2, !"Debug Info Version", i32 3}
!4 = !{i32 7, !"Dwarf Version", i32 5}
!5 = distinct !DICompileUnit(language: DW_LANG_C11, file: !6, producer: "hand", isOptimized: false, runtimeVersion: 0, emissionKind: FullDebug)
!6 = !DIFile(filename: "hand.c", directory: "/tmp")
!7 = !DISubroutineType(types: !8)
!8 = !{null}
!10 = distinct !DISubprogram(name: "dbg", scope: !6, file: !6, line: 1, type: !7, scopeLine: 1, spFlags: DISPFlagDefinition, unit: !5, retainedNodes: !2)
!11 = !DILocalVariable(name: "x", arg: 1, scope: !10, file: !6, line: 1, type: !14)
!12 = !DILocation(line: 1, column: 1, scope: !10)
!13 = !{!"int", !15}
!14 = !DIBasicType(name: "int", size: 32, encoding: DW_ATE_signed)
!15 = !{!"tbaa root"}
"""


def test_handwritten_roundtrip():
    assert_roundtrip(ALL_IR)


def test_handwritten_model_details():
    mod = parse_module(ALL_IR)
    assert mod.source_filename == "hand.ll"
    assert mod.triple == "x86_64-unknown-linux-gnu"
    assert str(mod.named_types["quoted type"]) == '%"quoted type"'
    assert mod.named_types["quoted type"].packed
    assert mod.named_types["opaque.t"].is_opaque
    assert mod.globals["fp80"].value_type == T.x86_fp80
    assert mod.globals["alias"].kind == "alias"
    assert mod.globals["arr"].is_constant and mod.globals["arr"].linkage == "internal"
    assert mod.functions["fast"].cconv == "fastcc"
    assert mod.functions["ghc"].cconv == "cc 10"
    assert mod.functions["printf"].is_varargs

    mem = mod.get_function("memory")
    assert not mem.is_parsed
    insts = list(mem.instructions())
    assert mem.is_parsed
    by_name = {i.name: i for i in insts if i.name}
    assert by_name["l3"].ordering == "acquire" and by_name["l3"].align == 4
    assert by_name["l4"].syncscope == "agent" and by_name["l4"].volatile
    assert by_name["l5"].align is None
    assert by_name["l1"].get_metadata("tbaa") == "!0"
    assert isinstance(by_name["cx2"], CmpXchg) and by_name["cx2"].weak
    assert by_name["cx2"].type == T.StructType((T.i32, T.i1))
    assert isinstance(by_name["rmw2"], AtomicRMW) and by_name["rmw2"].operation == "fadd"
    assert by_name["b"].num_elements is not None
    assert by_name["c"].type == T.PointerType(5)
    assert by_name["g3"].type == T.VectorType(2, T.ptr)
    assert by_name["g1"].source_type.name == "pair"
    assume = next(i for i in insts if isinstance(i, Call) and i.callee_name == "llvm.assume")
    assert [(t, len(v)) for t, v in assume.bundle_operands] == [("align", 2), ("nonnull", 1)]
    assert all(u.user is assume or u.user.opcode != "call"
               for u in mem.args[0].uses if u.user is assume)
    cf = by_name["cf"]
    assert all(isinstance(a, MetadataValue) for a in cf.args[2:])
    assert cf.fn_attrs == ["#0"]
    inv = next(i for i in insts if isinstance(i, Invoke))
    assert inv.normal_dest.name == "cont" and inv.unwind_dest.name == "lpad"
    lp = by_name["lp"]
    assert isinstance(lp, LandingPad) and lp.cleanup
    assert [k for k, _ in lp.clauses] == ["catch", "filter"]
    pr = by_name["pr"]
    assert pr.function_type.varargs and pr.arg_attrs[0] == ["noundef", "nonnull"]
    assert by_name["tc"].tail == "tail" and by_name["tc"].cconv == "fastcc"
    assert by_name["nt"].tail == "notail" and by_name["nt"].flags == ["fast"]
    assert isinstance(by_name["asm"].callee, InlineAsm)
    stores = [i for i in insts if isinstance(i, Store)]
    assert [s.ordering for s in stores] == [None, None, "release", "seq_cst"]

    ctl = mod.parse_function("control")
    sw = ctl.entry_block.terminator
    assert isinstance(sw, Switch)
    assert [c.value for c, _ in sw.cases] == [0, 1, -7]
    assert [b.name for b in sw.successors] == ["def", "zero", "a b", "zero"]
    join = ctl.get_block("join")
    phi = join.instructions[0]
    assert isinstance(phi, Phi) and phi.flags == ["fast"]
    later = phi.incoming_value_for(ctl.get_block("a b"))
    assert later.name == "later" and later.parent.name == "a b"
    assert any(isinstance(i, VAArg) for i in ctl.instructions())
    sel = next(i for i in ctl.instructions() if i.opcode == "select")
    assert isinstance(sel.operands[1], OpaqueConstant)
    assert {b.name for b in join.predecessors} == {"zero", "a b", "def"}

    num = mod.parse_function("numbered")
    assert [b.name for b in num.blocks] == [None, None, None]
    loop_phi = num.blocks[1].instructions[0]
    assert loop_phi.incoming_blocks == [num.blocks[0], num.blocks[1]]

    dbg = mod.parse_function("dbg")
    ret = dbg.entry_block.instructions[0]
    assert [r.kind for r in ret.debug_records] == ["declare", "value"]
    assert ret.debug_records[0].values() == [dbg.args[0]]
    assert dbg.metadata == [("dbg", "!10")]
    assert dbg.linkage == "internal"

    one = mod.parse_function("oneline")
    assert [i.opcode for i in one.instructions()] == ["ret"]


def test_constants_model():
    mod = parse_module(ALL_IR)
    arith = mod.parse_function("arith")
    insts = {i.name: i for i in arith.instructions()}
    w = insts["w"].rhs
    assert isinstance(w, ConstantFloat) and w.text == "0x7FF0000000000000"
    assert w.value == float("inf")
    assert isinstance(insts["e4"].rhs, ConstantSplat)
    assert insts["s2"].rhs.value == -5
    assert str(insts["y"]) == "%y = fsub nnan ninf double %x, 1.500000e+00"
    assert str(insts["e3"]).endswith("<4 x i32> <i32 3, i32 2, i32 poison, i32 0>")
    assert insts["x"].has_flag("nnan") and not insts["y"].has_flag("fast")
    assert insts["c1"].flags == ["samesign"] and insts["c1"].predicate == "ult"
    assert insts["t13"].type == T.PointerType(1)


def test_global_refs_are_shared_and_track_uses():
    mod = parse_module(ALL_IR).parse_all()
    g = mod.global_ref("g")
    users = {u.user.function.name for u in g.uses}
    assert users == {"memory"}
    assert g.resolve() is mod.globals["g"]
    assert mod.global_ref("printf").resolve() is mod.functions["printf"]
    assert isinstance(mod.global_ref("printf"), GlobalRef)


def test_debug_record_roundtrip_after_edit():
    mod = parse_module(ALL_IR)
    dbg = mod.parse_function("dbg")
    ret = dbg.entry_block.instructions[0]
    rec = ret.debug_records[0]
    assert isinstance(rec, DebugRecord)
    assert str(rec) == "#dbg_declare(ptr %x, !11, !DIExpression(), !12)"
    dbg.args[0].name = "renamed"
    text = str(mod)
    assert "#dbg_declare(ptr %renamed, !11, !DIExpression(), !12)" in text
    assert "!DIArgList(ptr %renamed, ptr %renamed)" in text
    llvm_check(text)


def test_string_and_expr_constants_in_instructions():
    ir = r"""
@s = constant [3 x i8] c"a\22\00"
@t = global [2 x i32] [i32 1, i32 2]
declare void @sink(ptr, [3 x i8], i64, <{ i8, i32 }>)
define void @f() {
  call void @sink(ptr getelementptr inbounds nuw (i8, ptr @t, i64 4), [3 x i8] c"x\0Ay", i64 ptrtoint (ptr @t to i64), <{ i8, i32 }> <{ i8 1, i32 2 }>)
  ret void
}
"""
    mod = parse_module(ir)
    call = mod.parse_function("f").entry_block.instructions[0]
    gep, s, p2i, packed = call.args
    assert isinstance(gep, ConstantExpr) and gep.opcode == "getelementptr"
    assert gep.flags == ["inbounds", "nuw"] and gep.source_type == T.i8
    assert isinstance(s, ConstantString) and s.data == b"x\ny"
    assert isinstance(p2i, ConstantExpr) and p2i.type == T.i64
    assert packed.type.packed
    assert_roundtrip(ir)


HEADERS_IR = r"""
$c1 = comdat any
$c2 = comdat largest
$f2 = comdat any

@g = linkonce_odr global i32 0, comdat($c1)

declare hidden i32 @named_decl(i32 noundef %a, ptr nocapture %b) #0
declare extern_weak dllimport void @weakfn()
declare !annotation !0 void @with_md()

define linkonce_odr dso_local hidden fastcc noundef zeroext i1 @f1(i32 signext %x) unnamed_addr addrspace(0) #0 section ".text.hot" comdat($c1) align 16 gc "statepoint-example" prefix i32 123 prologue i8 7 personality ptr @named_decl {
  %r = icmp eq i32 %x, 0
  ret i1 %r
}

define weak_odr protected noalias nonnull dereferenceable(8) ptr @f2(ptr byval(%struct.S) align 8 %s, ptr writable dead_on_unwind noalias %out, i64 range(i64 0, 10) %n, ...) local_unnamed_addr noinline "frame-pointer"="all" partition "part" comdat {
entry:
  ret ptr %s
}

define internal cc 11 void @"quoted $fn"(ptr %"arg with space", i32 %0) {
"entry block":
  %"val 1" = load i32, ptr %"arg with space", align 4
  %1 = add i32 %"val 1", %0
  ret void
}

define private void @numblocks() {
0:
  br label %1
1:
  ret void
}

%struct.S = type { [4 x i64] }

attributes #0 = { nounwind "x"="y" }

!llvm.module.flags = !{!1}
!0 = !{}
!1 = !{i32 2, !"Debug Info Version", i32 3}
"""


def test_function_headers_roundtrip_and_fields():
    assert_roundtrip(HEADERS_IR)
    mod = parse_module(HEADERS_IR)
    f1 = mod.get_function("f1")
    assert (f1.linkage, f1.preemption, f1.visibility, f1.cconv) == \
        ("linkonce_odr", "dso_local", "hidden", "fastcc")
    assert f1.ret_attrs == ["noundef", "zeroext"]
    assert (f1.section, f1.comdat, f1.align, f1.gc) == \
        (".text.hot", "comdat($c1)", 16, "statepoint-example")
    assert (f1.prefix, f1.prologue, f1.personality) == ("i32 123", "i8 7", "ptr @named_decl")
    assert f1.unnamed_addr == "unnamed_addr" and f1.addrspace == 0 and f1.fn_attrs == ["#0"]
    assert f1.args[0].attrs == ["signext"]
    f2 = mod.get_function("f2")
    assert f2.is_varargs and f2.partition == "part" and f2.comdat == "comdat"
    assert f2.args[0].attrs == ["byval(%struct.S)", "align 8"]
    assert f2.args[2].attrs == ["range(i64 0, 10)"]
    assert f2.fn_attrs == ["noinline", '"frame-pointer"="all"']
    decl = mod.get_function("named_decl")
    assert decl.is_declaration and [a.name for a in decl.args] == ["a", "b"]
    assert mod.get_function("with_md").metadata == [("annotation", "!0")]
    q = mod.parse_function("quoted $fn")
    assert q.cconv == "cc 11" and q.args[0].name == "arg with space"
    assert q.entry_block.name == "entry block"
    assert str(q).splitlines()[0] == \
        'define internal cc 11 void @"quoted $fn"(ptr %"arg with space", i32 %0) {'
    nb = mod.parse_function("numblocks")
    assert [b.name for b in nb.blocks] == [None, None]
    assert nb.blocks[0].successors == [nb.blocks[1]]

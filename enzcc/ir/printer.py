"""Printing of modules, functions and instructions as LLVM 22 text.

Unnamed values and blocks are numbered on the fly (``%0``, ``%1`` ...) in
definition order exactly like LLVM's slot tracker, so freshly inserted
unnamed instructions never break the sequential-numbering rule.  Named
values keep their names; duplicates get a numeric suffix.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import types as T
from .block import BasicBlock  # (for value_ref, which prints every operand: not imported per call)
from .instructions import (
    Alloca, AtomicRMW, BinaryOp, Br, Call, Cast, Cmp, CmpXchg, CondBr, DebugRecord,
    ExtractElement, ExtractValue, Fence, Freeze, GetElementPtr, IndirectBr, InsertElement,
    InsertValue, Instruction, Invoke, LandingPad, Load, Phi, Resume, Ret, Select,
    ShuffleVector, Store, Switch, UnaryOp, Unreachable, VAArg,
)
from .values import (
    Argument, ConstantAggregate, ConstantExpr, ConstantFloat, ConstantInt, ConstantNone,
    ConstantNull, ConstantPoison, ConstantSplat, ConstantString, ConstantUndef, ConstantZero,
    GlobalRef, InlineAsm, MetadataValue, OpaqueConstant, Placeholder, Value,
)

if TYPE_CHECKING:  # pragma: no cover
    from .block import BasicBlock
    from .function import Function
    from .module import Module

__all__ = ["SlotTracker", "format_module", "format_function", "format_block",
           "format_instruction", "format_constant", "format_debug_record", "value_ref",
           "typed_ref", "escape_string"]


def escape_string(data: bytes | str) -> str:
    """Escape bytes the way LLVM prints string contents (``\\XX`` for specials)."""
    if isinstance(data, str):
        data = data.encode("utf-8", errors="surrogateescape")
    out = []
    for ch in data:
        if 0x20 <= ch < 0x7F and ch != 0x22 and ch != 0x5C:
            out.append(chr(ch))
        else:
            out.append("\\%02X" % ch)
    return "".join(out)


class SlotTracker:
    """Printed names of a function's local values (args, blocks, instructions)."""

    def __init__(self, fn: "Function | None" = None):
        self.names: dict[int, str] = {}
        """id(value) -> name as printed after ``%``."""
        if fn is None:
            return
        used: set[str] = set()
        counter = 0
        names = self.names

        def assign(v: Value) -> None:
            nonlocal counter
            nm = v.name
            if nm is None:
                names[id(v)] = str(counter)
                counter += 1
                return
            if nm in used:
                k = 1
                while f"{nm}{k}" in used:
                    k += 1
                nm = f"{nm}{k}"
            used.add(nm)
            names[id(v)] = T.quote_name(nm)

        for a in fn.args:
            assign(a)
        for b in fn.blocks:
            assign(b)
            for inst in b.instructions:
                if not inst.type.is_void:
                    assign(inst)

    def local(self, v: Value) -> str:
        """``%name`` of a local value."""
        nm = self.names.get(id(v))
        if nm is None:
            return "%" + (T.quote_name(v.name) if v.name is not None else "<badref>")
        return "%" + nm


_NO_SLOTS = SlotTracker()


def _tracker_for(fn) -> SlotTracker:
    if fn is None or not fn.is_parsed:
        return _NO_SLOTS
    return SlotTracker(fn)


# ---------------------------------------------------------------------------
# Values and constants
# ---------------------------------------------------------------------------

def value_ref(v: Value, slots: SlotTracker | None = None) -> str:
    """Operand spelling without type (``%x``, ``@f``, ``1.0e+00``, ``{ i32 1 }``)."""
    if isinstance(v, (Instruction, Argument, BasicBlock, Placeholder)):
        return (slots or _NO_SLOTS).local(v)
    return format_constant(v)


def typed_ref(v: Value, slots: SlotTracker | None = None) -> str:
    """``<type> <operand>``."""
    return f"{v.type} {value_ref(v, slots)}"


def format_constant(c: Value) -> str:
    """Spelling of a constant (without its type)."""
    if isinstance(c, ConstantInt):
        if c.type.scalar_type == T.i1:
            return "true" if c.value & 1 else "false"
        return str(c.signed_value)
    if isinstance(c, ConstantFloat):
        return c.text
    if isinstance(c, GlobalRef):
        return "@" + T.quote_name(c.symbol)
    if isinstance(c, ConstantNull):
        return "null"
    if isinstance(c, ConstantZero):
        return "zeroinitializer"
    if isinstance(c, ConstantPoison):
        return "poison"
    if isinstance(c, ConstantUndef):
        return "undef"
    if isinstance(c, ConstantNone):
        return "none"
    if isinstance(c, ConstantString):
        return 'c"' + escape_string(c.data) + '"'
    if isinstance(c, ConstantAggregate):
        inner = ", ".join(typed_ref(e) for e in c.elements)
        ty = c.type
        if isinstance(ty, T.ArrayType):
            return f"[{inner}]"
        if isinstance(ty, T.VectorType):
            return f"<{inner}>"
        body = "{ " + inner + " }" if inner else "{}"
        return f"<{body}>" if ty.packed else body
    if isinstance(c, ConstantSplat):
        return f"splat ({typed_ref(c.element)})"
    if isinstance(c, ConstantExpr):
        head = " ".join([c.opcode, *c.flags])
        if c.opcode in ConstantExpr.CASTS:
            return f"{head} ({typed_ref(c.operands[0])} to {c.type})"
        ops = [typed_ref(o) for o in c.operands]
        if c.source_type is not None:
            ops.insert(0, str(c.source_type))
        return f"{head} ({', '.join(ops)})"
    if isinstance(c, (OpaqueConstant, InlineAsm, MetadataValue)):
        return c.text
    raise TypeError(f"cannot print {type(c).__name__} as a constant")


def format_debug_record(rec: DebugRecord, slots: SlotTracker | None = None) -> str:
    """``#dbg_kind(args...)``."""
    parts = []
    for a in rec.args:
        if isinstance(a, str):
            parts.append(a)
        elif isinstance(a, list):
            parts.append("!DIArgList(" + ", ".join(typed_ref(v, slots) for v in a) + ")")
        else:
            parts.append(typed_ref(a, slots))
    return f"#dbg_{rec.kind}({', '.join(parts)})"


# ---------------------------------------------------------------------------
# Instructions
# ---------------------------------------------------------------------------

def _flags(inst: Instruction) -> str:
    return "".join(" " + f for f in inst.flags)


def _sync(scope: str | None) -> str:
    return f' syncscope("{escape_string(scope)}")' if scope is not None else ""


def _align(align: int | None) -> str:
    return f", align {align}" if align is not None else ""


def _format_call(inst: Call, s: SlotTracker) -> str:
    parts = []
    if inst.tail:
        parts.append(inst.tail)
    parts.append(inst.opcode + _flags(inst))
    if inst.cconv:
        parts.append(inst.cconv)
    parts.extend(inst.ret_attrs)
    if inst.addrspace is not None:
        parts.append(f"addrspace({inst.addrspace})")
    fnty = inst.function_type
    parts.append(str(fnty) if fnty.varargs else str(fnty.ret))
    args = []
    for i, a in enumerate(inst.args):
        attrs = inst.arg_attrs[i] if i < len(inst.arg_attrs) else []
        if i in inst.metadata_args:
            args.append(f"metadata {typed_ref(a, s)}")
            continue
        args.append(" ".join([str(a.type), *attrs, value_ref(a, s)]))
    parts.append(value_ref(inst.callee, s) + "(" + ", ".join(args) + ")")
    parts.extend(inst.fn_attrs)
    text = " ".join(parts)
    if inst.bundles:
        bs = []
        for tag, vals in inst.bundle_operands:
            bs.append(f'"{escape_string(tag)}"(' + ", ".join(typed_ref(v, s) for v in vals) + ")")
        text += " [ " + ", ".join(bs) + " ]"
    if isinstance(inst, Invoke):
        text += (f"\n          to label {value_ref(inst.normal_dest, s)}"
                 f" unwind label {value_ref(inst.unwind_dest, s)}")
    return text


def _format_body(inst: Instruction, s: SlotTracker) -> str:
    r = lambda v: value_ref(v, s)  # noqa: E731
    t = lambda v: typed_ref(v, s)  # noqa: E731
    op = inst.opcode
    if isinstance(inst, BinaryOp):
        return f"{op}{_flags(inst)} {inst.type} {r(inst.lhs)}, {r(inst.rhs)}"
    if isinstance(inst, Load):
        text = "load" + (" atomic" if inst.ordering else "") + (" volatile" if inst.volatile else "")
        text += f" {inst.type}, {t(inst.pointer)}"
        if inst.ordering:
            text += _sync(inst.syncscope) + " " + inst.ordering
        return text + _align(inst.align)
    if isinstance(inst, Store):
        text = "store" + (" atomic" if inst.ordering else "") + (" volatile" if inst.volatile else "")
        text += f" {t(inst.value)}, {t(inst.pointer)}"
        if inst.ordering:
            text += _sync(inst.syncscope) + " " + inst.ordering
        return text + _align(inst.align)
    if isinstance(inst, GetElementPtr):
        return (f"getelementptr{_flags(inst)} {inst.source_type}, {t(inst.pointer)}"
                + "".join(f", {t(i)}" for i in inst.indices))
    if isinstance(inst, Call):
        return _format_call(inst, s)
    if isinstance(inst, Cast):
        return f"{op}{_flags(inst)} {t(inst.value)} to {inst.type}"
    if isinstance(inst, Cmp):
        return f"{op}{_flags(inst)} {inst.predicate} {inst.lhs.type} {r(inst.lhs)}, {r(inst.rhs)}"
    if isinstance(inst, Phi):
        pairs = ", ".join(f"[ {r(v)}, {r(b)} ]" for v, b in inst.incoming)
        return f"phi{_flags(inst)} {inst.type} {pairs}"
    if isinstance(inst, Select):
        return f"select{_flags(inst)} {t(inst.condition)}, {t(inst.true_value)}, {t(inst.false_value)}"
    if isinstance(inst, Alloca):
        text = f"alloca{_flags(inst)} {inst.allocated_type}"
        if inst.num_elements is not None:
            text += f", {t(inst.num_elements)}"
        text += _align(inst.align)
        if inst.addrspace:
            text += f", addrspace({inst.addrspace})"
        return text
    if isinstance(inst, Br):
        return f"br label {r(inst.dest)}"
    if isinstance(inst, CondBr):
        return f"br {t(inst.condition)}, label {r(inst.true_dest)}, label {r(inst.false_dest)}"
    if isinstance(inst, Ret):
        return "ret void" if inst.value is None else f"ret {t(inst.value)}"
    if isinstance(inst, UnaryOp):
        return f"{op}{_flags(inst)} {t(inst.value)}"
    if isinstance(inst, ExtractValue):
        return f"extractvalue {t(inst.aggregate)}, " + ", ".join(map(str, inst.indices))
    if isinstance(inst, InsertValue):
        return (f"insertvalue {t(inst.aggregate)}, {t(inst.value)}, "
                + ", ".join(map(str, inst.indices)))
    if isinstance(inst, ExtractElement):
        return f"extractelement {t(inst.vector)}, {t(inst.index_operand)}"
    if isinstance(inst, InsertElement):
        return f"insertelement {t(inst.vector)}, {t(inst.element)}, {t(inst.index_operand)}"
    if isinstance(inst, ShuffleVector):
        a, b = inst.operands
        return f"shufflevector {t(a)}, {t(b)}, {t(inst.mask)}"
    if isinstance(inst, Switch):
        cases = "".join(f"    {t(v)}, label {r(b)}\n" for v, b in inst.cases)
        return f"switch {t(inst.condition)}, label {r(inst.default)} [\n{cases}  ]"
    if isinstance(inst, IndirectBr):
        dests = ", ".join(f"label {r(b)}" for b in inst.successors)
        return f"indirectbr {t(inst.address)}, [{dests}]"
    if isinstance(inst, Unreachable):
        return "unreachable"
    if isinstance(inst, Resume):
        return f"resume {t(inst.value)}"
    if isinstance(inst, LandingPad):
        text = f"landingpad {inst.type}"
        if inst.cleanup:
            text += "\n          cleanup"
        for kind, v in inst.clauses:
            text += f"\n          {kind} {t(v)}"
        return text
    if isinstance(inst, Freeze):
        return f"freeze {t(inst.value)}"
    if isinstance(inst, Fence):
        return "fence" + _sync(inst.syncscope) + " " + inst.ordering
    if isinstance(inst, CmpXchg):
        p, c, n = inst.operands
        return ("cmpxchg" + (" weak" if inst.weak else "") + (" volatile" if inst.volatile else "")
                + f" {t(p)}, {t(c)}, {t(n)}" + _sync(inst.syncscope)
                + f" {inst.success_ordering} {inst.failure_ordering}" + _align(inst.align))
    if isinstance(inst, AtomicRMW):
        p, v = inst.operands
        return ("atomicrmw" + (" volatile" if inst.volatile else "")
                + f" {inst.operation} {t(p)}, {t(v)}" + _sync(inst.syncscope)
                + f" {inst.ordering}" + _align(inst.align))
    if isinstance(inst, VAArg):
        return f"va_arg {t(inst.operands[0])}, {inst.type}"
    raise TypeError(f"cannot print instruction {type(inst).__name__}")


def format_instruction(inst: Instruction, slots: SlotTracker | None = None,
                       with_debug_records: bool = False) -> str:
    """One instruction as printed inside a function body (without indentation).

    Without ``slots`` the names are computed from the containing function.
    """
    if slots is None:
        slots = _tracker_for(inst.function)
    text = _format_body(inst, slots)
    if not inst.type.is_void:
        text = f"{slots.local(inst)} = {text}"
    for kind, md in inst.metadata:
        text += f", !{kind} {md}"
    if with_debug_records and inst.debug_records:
        recs = "".join(format_debug_record(r, slots) + "\n    " for r in inst.debug_records)
        text = recs + text
    return text


def format_block(block: "BasicBlock", slots: SlotTracker | None = None,
                 is_entry: bool | None = None) -> str:
    """A block with its label line (if any) and instructions."""
    if slots is None:
        slots = _tracker_for(block.parent)
    if is_entry is None:
        is_entry = block.parent is not None and block.parent.blocks and block.parent.blocks[0] is block
    lines = []
    if block.name is not None or not is_entry:
        label = slots.local(block)[1:] + ":"
        preds = block.predecessors
        if preds:
            label = label.ljust(50) + "; preds = " + ", ".join(slots.local(p) for p in preds)
        elif not is_entry:
            label = label.ljust(50) + "; No predecessors!"
        lines.append(label)
    for inst in block.instructions:
        for rec in inst.debug_records:
            lines.append("    " + format_debug_record(rec, slots))
        lines.append("  " + format_instruction(inst, slots))
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# Functions and modules
# ---------------------------------------------------------------------------

def _format_header(fn: "Function", define: bool) -> str:
    parts = ["define" if define else "declare"]
    if not define:  # LLVM prints a declaration's attachments right after 'declare'
        parts.extend(f"!{kind} {md}" for kind, md in fn.metadata)
    for x in (fn.linkage, fn.preemption, fn.visibility, fn.dll_storage, fn.cconv):
        if x:
            parts.append(x)
    parts.extend(fn.ret_attrs)
    parts.append(str(fn.return_type))
    counter = 0
    params = []
    for a in fn.args:
        piece = " ".join([str(a.type), *a.attrs])
        if a.name is not None:
            piece += " %" + T.quote_name(a.name)
        elif define:
            piece += f" %{counter}"
            counter += 1
        params.append(piece)
    if fn.is_varargs:
        params.append("...")
    parts.append("@" + T.quote_name(fn.name) + "(" + ", ".join(params) + ")")
    if fn.unnamed_addr:
        parts.append(fn.unnamed_addr)
    if fn.addrspace is not None:
        parts.append(f"addrspace({fn.addrspace})")
    parts.extend(fn.fn_attrs)
    if fn.section is not None:
        parts.append(f'section "{escape_string(fn.section)}"')
    if fn.partition is not None:
        parts.append(f'partition "{escape_string(fn.partition)}"')
    if fn.comdat:
        parts.append(fn.comdat)
    if fn.align is not None:
        parts.append(f"align {fn.align}")
    if fn.gc is not None:
        parts.append(f'gc "{escape_string(fn.gc)}"')
    if fn.prefix is not None:
        parts.append(f"prefix {fn.prefix}")
    if fn.prologue is not None:
        parts.append(f"prologue {fn.prologue}")
    if fn.personality is not None:
        parts.append(f"personality {fn.personality}")
    if define:
        parts.extend(f"!{kind} {md}" for kind, md in fn.metadata)
    return " ".join(parts)


def format_function(fn: "Function") -> str:
    """A function definition or declaration."""
    if fn.is_declaration:
        return _format_header(fn, define=False) + "\n"
    header = _format_header(fn, define=True)
    if not fn.is_parsed:
        return header + " {\n" + fn._body_text + "\n}\n"
    slots = SlotTracker(fn)
    blocks = fn.blocks
    body = "\n\n".join(format_block(b, slots, is_entry=(i == 0)) for i, b in enumerate(blocks))
    return header + " {\n" + body + "\n}\n"


def format_module(mod: "Module") -> str:
    """The whole module as LLVM text."""
    out: list[str] = []
    if mod.source_filename is not None:
        out.append(f'source_filename = "{escape_string(mod.source_filename)}"')
    if mod.datalayout is not None:
        out.append(f'target datalayout = "{escape_string(mod.datalayout)}"')
    if mod.triple is not None:
        out.append(f'target triple = "{escape_string(mod.triple)}"')
    out.extend(mod.module_asm)
    sections = []
    if mod.named_types:
        sections.append("\n".join(t.definition() for t in mod.named_types.values()))
    if mod.comdats:
        sections.append("\n".join(mod.comdats))
    if mod.globals:
        sections.append("\n".join(g.text for g in mod.globals.values()))
    text = "\n".join(out)
    for sec in sections:
        text += "\n\n" + sec
    for fn in mod.functions.values():
        text += "\n\n" + format_function(fn).rstrip("\n")
    if mod.attribute_groups:
        text += "\n\n" + "\n".join(f"attributes #{k} = {{ {v} }}"
                                   for k, v in mod.attribute_groups.items())
    md = list(mod.named_metadata) + [f"!{k} = {v}" for k, v in mod.metadata.items()]
    if md:
        text += "\n\n" + "\n".join(md)
    if mod.other:
        text += "\n\n" + "\n".join(mod.other)
    return text + "\n"

"""Parser for LLVM 22 textual IR.

:func:`parse_module` splits a module into top-level entities and keeps
everything except function bodies as text (named struct types are parsed
into the type table, function headers into :class:`Function` fields).
Bodies are parsed on demand by :func:`parse_function_body`.
"""

from __future__ import annotations

import re
from typing import Iterator

from . import types as T
from .block import BasicBlock
from .errors import IRParseError
from .function import Function
from .instructions import (
    CAST_OPS, FLOAT_BINOPS, INT_BINOPS, Alloca, AtomicRMW, BinaryOp, Br, Call, Cast,
    CmpXchg, CondBr, DebugRecord, ExtractElement, ExtractValue, FCmp, Fence, Freeze,
    GetElementPtr, ICmp, IndirectBr, InsertElement, InsertValue, Instruction, Invoke,
    LandingPad, Load, Phi, Resume, Ret, Select, ShuffleVector, Store, Switch, UnaryOp,
    Unreachable, VAArg,
)
from .lexer import Token, iter_tokens, tokenize, unescape_bytes, unescape_name
from .module import GlobalVariable, Module
from .values import (
    ConstantAggregate, ConstantExpr, ConstantFloat, ConstantInt, ConstantNone,
    ConstantNull, ConstantPoison, ConstantSplat, ConstantString, ConstantUndef,
    ConstantZero, InlineAsm, MetadataValue, OpaqueConstant, Placeholder, Value,
)

__all__ = ["parse_module", "parse_function_body", "parse_type"]

_INT_TYPE_RE = re.compile(r"i(\d+)\Z")

LINKAGES = frozenset({"private", "internal", "available_externally", "linkonce", "weak",
                      "common", "appending", "extern_weak", "linkonce_odr", "weak_odr",
                      "external"})
PREEMPTION = frozenset({"dso_local", "dso_preemptable"})
VISIBILITIES = frozenset({"default", "hidden", "protected"})
DLL_STORAGE = frozenset({"dllimport", "dllexport"})
_CCONV_PREFIXES = ("x86_", "arm_", "aarch64_", "amdgpu_", "ptx_", "spir_", "riscv_",
                   "msp430_", "avr_", "m68k_", "cfguard_", "preserve_", "intel_ocl", "win64",
                   "webkit_", "anyreg", "swift", "tail", "cxx_fast", "ghc", "hhvm", "cold",
                   "fast", "graal")
INSTRUCTION_FLAGS = frozenset({"nuw", "nsw", "exact", "disjoint", "nneg", "samesign",
                               "inbounds", "nusw", "fast", "nnan", "ninf", "nsz", "arcp",
                               "contract", "afn", "reassoc"})
_TYPE_KEYWORDS = frozenset({"void", "half", "bfloat", "float", "double", "x86_fp80", "fp128",
                            "ppc_fp128", "ptr", "label", "metadata", "token", "x86_amx",
                            "target"})
_VALUE_KEYWORDS = frozenset({"true", "false", "null", "undef", "poison", "zeroinitializer",
                             "none", "splat", "asm", "blockaddress", "dso_local_equivalent",
                             "no_cfi", "ptrauth", "getelementptr", "extractelement",
                             "insertelement", "shufflevector", "icmp", "fcmp", "select",
                             "add", "sub", "mul", "shl", "xor", "and", "or", "lshr", "ashr"}
                            | CAST_OPS)
_CONST_EXPR_OPS = frozenset({"getelementptr", "extractelement", "insertelement",
                             "shufflevector", "icmp", "fcmp", "select", "add", "sub", "mul",
                             "shl", "xor", "and", "or", "lshr", "ashr"} | CAST_OPS)
_ORDERINGS = frozenset({"unordered", "monotonic", "acquire", "release", "acq_rel", "seq_cst"})


def _is_cconv(word: str) -> bool:
    return word == "cc" or word == "ccc" or (word.endswith("cc") and word != "cc") or \
        word.startswith(_CCONV_PREFIXES) and word not in ("x86_fp80", "x86_amx")


# ---------------------------------------------------------------------------
# Token-level parsing shared by module headers and function bodies
# ---------------------------------------------------------------------------

class _Parser:
    """Recursive-descent parser over a lazily tokenized text."""

    def __init__(self, module: Module, text: str, line_offset: int = 0, lazy: bool = True):
        self.module = module
        self.text = text
        self.pos = 0
        if lazy:  # tokenize on demand (headers of huge global initializers)
            self._gen: Iterator[Token] | None = iter_tokens(text, line_offset)
            self.toks: list[Token] = []
        else:
            self._gen = None
            self.toks = tokenize(text, line_offset)
            self.toks.extend([self.toks[-1]] * 4)

    # -- token access -----------------------------------------------------------
    def _fill(self, need: int) -> Token:
        toks = self.toks
        while len(toks) <= need:
            if toks and toks[-1].kind == "eof":
                toks.append(toks[-1])
            elif self._gen is not None:
                toks.append(next(self._gen))
        return toks[need]

    def peek(self, k: int = 0) -> Token:
        try:
            return self.toks[self.pos + k]
        except IndexError:
            return self._fill(self.pos + k)

    def next(self) -> Token:
        try:
            tok = self.toks[self.pos]
        except IndexError:
            tok = self._fill(self.pos)
        self.pos += 1
        return tok

    def at(self, text: str) -> bool:
        return self.peek().text == text

    def accept(self, text: str) -> bool:
        if self.peek().text == text:
            self.pos += 1
            return True
        return False

    def expect(self, text: str) -> Token:
        tok = self.next()
        if tok.text != text:
            raise self.error(f"expected '{text}' but found '{tok.text or 'end of input'}'", tok)
        return tok

    def expect_kind(self, kind: str, what: str) -> Token:
        tok = self.next()
        if tok.kind != kind:
            raise self.error(f"expected {what} but found '{tok.text or 'end of input'}'", tok)
        return tok

    def expect_int(self) -> int:
        tok = self.next()
        if tok.kind != "num" or not re.fullmatch(r"[-+]?\d+", tok.text):
            raise self.error(f"expected integer but found '{tok.text}'", tok)
        return int(tok.text)

    def error(self, message: str, tok: Token | None = None) -> IRParseError:
        tok = tok or self.peek()
        start = self.text.rfind("\n", 0, tok.start) + 1
        end = self.text.find("\n", tok.start)
        line_text = self.text[start:end if end >= 0 else len(self.text)]
        return IRParseError(message, tok.line, line_text)

    def slice(self, start_tok: Token, end_pos: int) -> str:
        return self.text[start_tok.start:end_pos]

    def last_end(self) -> int:
        return self.toks[self.pos - 1].end

    def skip_group(self) -> None:
        """Consume a balanced ``(...)``, ``[...]`` or ``{...}`` group starting at the cursor."""
        opening = {"(": ")", "[": "]", "{": "}"}
        tok = self.next()
        if tok.text not in opening:
            raise self.error(f"expected a bracketed group but found '{tok.text}'", tok)
        depth = 1
        while depth:
            t = self.next()
            if t.kind == "eof":
                raise self.error("unbalanced brackets", tok)
            if t.kind == "punct":
                if t.text in opening:
                    depth += 1
                elif t.text in (")", "]", "}"):
                    depth -= 1

    # -- types ------------------------------------------------------------------
    def is_type_start(self, tok: Token) -> bool:
        if tok.kind == "ident":
            return tok.text in _TYPE_KEYWORDS or bool(_INT_TYPE_RE.match(tok.text))
        if tok.kind == "punct":
            return tok.text in ("[", "<", "{")
        return tok.kind == "local"

    def parse_type(self) -> T.Type:
        tok = self.next()
        kind, text = tok.kind, tok.text
        ty: T.Type
        if kind == "ident":
            m = _INT_TYPE_RE.match(text)
            if m:
                ty = T.IntType(int(m.group(1)))
            elif text in T.FLOAT_KINDS:
                ty = T.FloatType(text)
            elif text == "ptr":
                if self.at("addrspace"):
                    self.next()
                    self.expect("(")
                    n = self.expect_int()
                    self.expect(")")
                    ty = T.PointerType(n)
                else:
                    ty = T.ptr
            elif text == "void":
                ty = T.void
            elif text == "label":
                ty = T.label
            elif text == "metadata":
                ty = T.metadata
            elif text == "token":
                ty = T.token
            elif text == "x86_amx":
                ty = T.X86AMXType()
            elif text == "target":
                self.skip_group()
                ty = T.TargetExtType(self.text[tok.start:self.last_end()])
            else:
                raise self.error(f"expected a type but found '{text}'", tok)
        elif text == "[":
            n = self.expect_int()
            self.expect("x")
            elem = self.parse_type()
            self.expect("]")
            ty = T.ArrayType(n, elem)
        elif text == "<":
            if self.at("{"):
                self.next()
                elems = self._parse_type_list("}")
                self.expect(">")
                ty = T.StructType(tuple(elems), packed=True)
            else:
                scalable = self.accept("vscale")
                if scalable:
                    self.expect("x")
                n = self.expect_int()
                self.expect("x")
                elem = self.parse_type()
                self.expect(">")
                ty = T.VectorType(n, elem, scalable)
        elif text == "{":
            ty = T.StructType(tuple(self._parse_type_list("}")))
        elif kind == "local":
            name = unescape_name(text[1:])
            named = self.module.named_types.get(name)
            if named is None:
                raise self.error(f"use of undefined type '%{name}'", tok)
            ty = named
        else:
            raise self.error(f"expected a type but found '{text or 'end of input'}'", tok)
        if self.at("*"):
            raise self.error("typed pointers are not supported (LLVM >= 17 uses 'ptr')")
        return ty

    def _parse_type_list(self, close: str) -> list[T.Type]:
        elems: list[T.Type] = []
        if self.accept(close):
            return elems
        while True:
            elems.append(self.parse_type())
            if self.accept(close):
                return elems
            self.expect(",")

    def parse_param_type_list(self) -> tuple[list[T.Type], bool]:
        """``(T1, T2, ...)`` of a function type; returns (params, varargs)."""
        self.expect("(")
        params: list[T.Type] = []
        varargs = False
        if self.accept(")"):
            return params, varargs
        while True:
            if self.accept("..."):
                varargs = True
                self.expect(")")
                return params, varargs
            params.append(self.parse_type())
            if self.accept(")"):
                return params, varargs
            self.expect(",")

    # -- attributes -------------------------------------------------------------
    def parse_attribute(self) -> str:
        """One attribute (``noundef``, ``align 8``, ``dereferenceable(8)``, ``"k"="v"``)."""
        tok = self.next()
        if tok.kind == "str":
            if self.accept("="):
                self.expect_kind("str", "string")
        elif tok.kind == "attrgrp":
            pass
        elif tok.kind == "ident":
            if self.at("("):
                self.skip_group()
            elif tok.text in ("align", "alignstack") and self.peek().kind == "num":
                self.next()
        else:
            raise self.error(f"expected an attribute but found '{tok.text}'", tok)
        return self.slice(tok, self.last_end())

    def is_param_attr(self, tok: Token) -> bool:
        if tok.kind == "str":
            return True
        return tok.kind == "ident" and tok.text not in _VALUE_KEYWORDS

    def parse_param_attrs(self) -> list[str]:
        attrs = []
        while self.is_param_attr(self.peek()):
            attrs.append(self.parse_attribute())
        return attrs

    # -- metadata ---------------------------------------------------------------
    def parse_metadata_text(self) -> str:
        """A metadata reference/node (``!12``, ``!{...}``, ``!"s"``, ``!DIExpression(...)``) as text."""
        tok = self.next()
        if tok.kind != "meta":
            raise self.error(f"expected metadata but found '{tok.text}'", tok)
        if tok.text == "!":
            if self.peek().kind == "str":
                self.next()
            elif self.at("{"):
                self.skip_group()
            else:
                raise self.error("malformed metadata", tok)
        elif self.at("(") and self.peek().start == tok.end:
            self.skip_group()
        return self.slice(tok, self.last_end())

    # -- values -----------------------------------------------------------------
    def parse_typed_value(self) -> Value:
        ty = self.parse_type()
        return self.parse_value(ty)

    def local_value(self, name: str, ty: T.Type, tok: Token) -> Value:
        raise self.error(f"local value '%{name}' outside a function body", tok)

    def parse_value(self, ty: T.Type) -> Value:
        tok = self.next()
        kind, text = tok.kind, tok.text
        if kind == "local":
            return self.local_value(unescape_name(text[1:]), ty, tok)
        if kind == "global":
            return self.module.global_ref(unescape_name(text[1:]), ty)
        if kind == "num":
            if ty.scalar_type.is_floating:
                return ConstantFloat(ty, text=text)
            if not ty.scalar_type.is_integer or not re.fullmatch(r"[-+]?\d+", text):
                raise self.error(f"invalid constant '{text}' for type {ty}", tok)
            return ConstantInt(ty, int(text))
        if kind == "hexfp":
            if ty.scalar_type.is_floating:
                return ConstantFloat(ty, text=text)
            raise self.error(f"floating-point constant '{text}' for non-float type {ty}", tok)
        if kind == "hexint":
            v = int(text[3:], 16)
            if text[0] == "s":
                bits = ty.scalar_type.bits
                if v >> (bits - 1):
                    v -= 1 << bits
            return ConstantInt(ty, v)
        if kind == "cstr":
            return ConstantString(ty, unescape_bytes(text[2:-1]))
        if kind == "meta":
            self.pos -= 1
            return MetadataValue(self.parse_metadata_text())
        if kind == "ident":
            if text == "true" or text == "false":
                return ConstantInt(ty, 1 if text == "true" else 0)
            if text == "null":
                return ConstantNull(ty)
            if text == "undef":
                return ConstantUndef(ty)
            if text == "poison":
                return ConstantPoison(ty)
            if text == "zeroinitializer":
                return ConstantZero(ty)
            if text == "none":
                return ConstantNone(ty)
            if text == "splat":
                self.expect("(")
                elem = self.parse_typed_value()
                self.expect(")")
                return ConstantSplat(ty, elem)
            if text == "asm":
                while self.peek().kind == "ident":
                    self.next()
                self.expect_kind("str", "asm string")
                self.expect(",")
                self.expect_kind("str", "asm constraints")
                return InlineAsm(self.slice(tok, self.last_end()), ty)
            if text in ("blockaddress", "ptrauth"):
                self.skip_group()
                return OpaqueConstant(ty, self.slice(tok, self.last_end()))
            if text in ("dso_local_equivalent", "no_cfi"):
                self.expect_kind("global", "global name")
                return OpaqueConstant(ty, self.slice(tok, self.last_end()))
            if text in _CONST_EXPR_OPS:
                return self._parse_constant_expr(ty, text)
            raise self.error(f"expected a value but found '{text}'", tok)
        if text == "{":
            elems = self._parse_typed_list("}")
            return ConstantAggregate(ty, elems)
        if text == "[":
            elems = self._parse_typed_list("]")
            return ConstantAggregate(ty, elems)
        if text == "<":
            if self.accept("{"):
                elems = self._parse_typed_list("}")
                self.expect(">")
                return ConstantAggregate(ty, elems)
            elems = self._parse_typed_list(">")
            return ConstantAggregate(ty, elems)
        raise self.error(f"expected a value but found '{text or 'end of input'}'", tok)

    def _parse_typed_list(self, close: str) -> list[Value]:
        elems: list[Value] = []
        if self.accept(close):
            return elems
        while True:
            elems.append(self.parse_typed_value())
            if self.accept(close):
                return elems
            self.expect(",")

    def _parse_constant_expr(self, ty: T.Type, opcode: str) -> Value:
        flags: list[str] = []
        while not self.at("("):
            tok = self.next()
            if tok.kind != "ident":
                raise self.error(f"unexpected '{tok.text}' in constant expression", tok)
            if tok.text == "inrange" and self.at("("):
                self.skip_group()
                flags.append(self.slice(tok, self.last_end()))
            else:
                flags.append(tok.text)
        self.expect("(")
        if opcode in CAST_OPS:
            v = self.parse_typed_value()
            self.expect("to")
            dest = self.parse_type()
            self.expect(")")
            return ConstantExpr(dest, opcode, [v], flags)
        if opcode == "getelementptr":
            src = self.parse_type()
            ops = []
            while self.accept(","):
                ops.append(self.parse_typed_value())
            self.expect(")")
            return ConstantExpr(ty, opcode, ops, flags, source_type=src)
        ops = self._parse_typed_list(")")
        return ConstantExpr(ty, opcode, ops, flags)


# ---------------------------------------------------------------------------
# Module level
# ---------------------------------------------------------------------------

def _unquote_str(text: str) -> str:
    return unescape_bytes(text[1:-1]).decode("utf-8", errors="surrogateescape")


def parse_type(text: str, module: Module | None = None) -> T.Type:
    """Parse a type spelling such as ``{ i32, [4 x double] }``."""
    p = _Parser(module or Module(), text)
    ty = p.parse_type()
    if p.peek().kind != "eof":
        raise p.error(f"unexpected '{p.peek().text}' after type")
    return ty


def parse_module(text: str) -> Module:
    """Parse a module. Function bodies are kept as text until requested."""
    mod = Module()
    lines = text.split("\n")
    n = len(lines)
    typedefs: list[tuple[int, str]] = []
    headers: list[tuple[int, str, str | None, int]] = []  # (line idx, header, body, body line)
    global_lines: list[tuple[int, str]] = []
    i = 0
    while i < n:
        line = lines[i]
        stripped = line.strip()
        if not stripped or stripped.startswith(";"):
            i += 1
            continue
        if stripped.startswith("define"):
            start = i
            header_lines = [line]
            while True:
                cur = header_lines[-1].rstrip()
                if cur.endswith("{") or (cur.endswith("}") and "{" in cur):
                    break
                i += 1
                if i >= n:
                    raise IRParseError("unterminated function header", start + 1, lines[start])
                header_lines.append(lines[i])
            header = "\n".join(header_lines)
            if header.rstrip().endswith("}") and not header.rstrip().endswith("{"):
                headers.append((start, header, None, i + 1))  # one-line function
                i += 1
                continue
            j = i + 1
            while j < n and lines[j].rstrip() != "}":
                j += 1
            if j >= n:
                raise IRParseError("function body is not closed by '}'", start + 1, lines[start])
            headers.append((start, header, "\n".join(lines[i + 1:j]), i + 1))
            i = j + 1
            continue
        if stripped.startswith("declare"):
            headers.append((i, stripped, None, 0))
        elif stripped.startswith("@"):
            global_lines.append((i, stripped))
        elif stripped.startswith("%"):
            typedefs.append((i, stripped))
        elif stripped.startswith("attributes #"):
            m = re.match(r"attributes #(\d+) = \{\s*(.*?)\s*\}\s*$", stripped)
            if not m:
                raise IRParseError("malformed attribute group", i + 1, line)
            mod.attribute_groups[int(m.group(1))] = m.group(2)
        elif stripped.startswith("!"):
            m = re.match(r"!(\d+)\s*=\s*(.*)$", stripped)
            if m:
                mod.metadata[int(m.group(1))] = m.group(2)
            else:
                mod.named_metadata.append(stripped)
        elif stripped.startswith("$"):
            mod.comdats.append(stripped)
        elif stripped.startswith("source_filename"):
            m = re.match(r'source_filename\s*=\s*("[^"]*")\s*$', stripped)
            if not m:
                raise IRParseError("malformed source_filename", i + 1, line)
            mod.source_filename = _unquote_str(m.group(1))
        elif stripped.startswith("target"):
            m = re.match(r'target\s+(datalayout|triple)\s*=\s*("[^"]*")\s*$', stripped)
            if not m:
                raise IRParseError("malformed target line", i + 1, line)
            if m.group(1) == "datalayout":
                mod.datalayout = _unquote_str(m.group(2))
            else:
                mod.triple = _unquote_str(m.group(2))
        elif stripped.startswith("module asm"):
            mod.module_asm.append(stripped)
        else:
            mod.other.append(stripped)
        i += 1

    _parse_typedefs(mod, typedefs, text, lines)
    for idx, line in global_lines:
        gv = _parse_global_header(mod, line, idx)
        mod.globals[gv.name] = gv
    for idx, header, body, body_line in headers:
        fn = _parse_function_header(mod, header, idx, body, body_line)
        if fn.name in mod.functions:
            raise IRParseError(f"redefinition of function '@{fn.name}'", idx + 1, lines[idx])
        mod.functions[fn.name] = fn
    return mod


def _parse_typedefs(mod: Module, typedefs: list[tuple[int, str]], text: str,
                    lines: list[str]) -> None:
    pending = []
    for idx, line in typedefs:
        p = _Parser(mod, line, idx)
        tok = p.expect_kind("local", "type name")
        p.expect("=")
        p.expect("type")
        name = unescape_name(tok.text[1:])
        if name in mod.named_types:
            raise IRParseError(f"redefinition of type '%{name}'", idx + 1, line)
        mod.named_types[name] = T.NamedStructType(name)
        pending.append((p, name))
    for p, name in pending:
        if p.accept("opaque"):
            body = None
        else:
            ty = p.parse_type()
            if not isinstance(ty, T.StructType):
                raise p.error("named types must be structs")
            body = ty
        if p.peek().kind != "eof":
            raise p.error(f"unexpected '{p.peek().text}' after type definition")
        mod.named_types[name].body = body


def _parse_global_header(mod: Module, line: str, idx: int) -> GlobalVariable:
    p = _Parser(mod, line, idx)
    tok = p.expect_kind("global", "global name")
    name = unescape_name(tok.text[1:])
    p.expect("=")
    linkage = None
    addrspace = 0
    while True:
        t = p.next()
        if t.kind == "eof":
            raise p.error("expected 'global', 'constant', 'alias' or 'ifunc'", t)
        if t.text in ("global", "constant", "alias", "ifunc"):
            kind = t.text
            break
        if t.text in LINKAGES:
            linkage = t.text
        elif t.text == "addrspace" and p.at("("):
            p.next()
            addrspace = p.expect_int()
            p.expect(")")
        elif p.at("("):
            p.skip_group()  # thread_local(...)
    value_type = p.parse_type()
    return GlobalVariable(name, line, "global" if kind in ("global", "constant") else kind,
                          value_type, kind == "constant", addrspace, linkage)


def _parse_function_header(mod: Module, header: str, idx: int, body: str | None,
                           body_line: int) -> Function:
    p = _Parser(mod, header, idx)
    kw = p.next()
    if kw.text not in ("define", "declare"):
        raise p.error("expected 'define' or 'declare'", kw)
    linkage = preemption = visibility = dll = cconv = None
    ret_attrs: list[str] = []
    metadata: list[tuple[str, str]] = []
    while not p.is_type_start(p.peek()):
        t = p.peek()
        if t.kind == "meta":  # declarations print attachments right after 'declare'
            p.next()
            metadata.append((t.text[1:], p.parse_metadata_text()))
        elif t.kind == "ident" and t.text in LINKAGES:
            linkage = p.next().text
        elif t.kind == "ident" and t.text in PREEMPTION:
            preemption = p.next().text
        elif t.kind == "ident" and t.text in VISIBILITIES:
            visibility = p.next().text
        elif t.kind == "ident" and t.text in DLL_STORAGE:
            dll = p.next().text
        elif t.kind == "ident" and _is_cconv(t.text):
            p.next()
            cconv = t.text
            if t.text == "cc":
                cconv += " " + str(p.expect_int())
        elif t.kind in ("ident", "str"):
            ret_attrs.append(p.parse_attribute())
        else:
            raise p.error(f"unexpected '{t.text}' in function header", t)
    ret = p.parse_type()
    name_tok = p.expect_kind("global", "function name")
    name = unescape_name(name_tok.text[1:])
    p.expect("(")
    params: list[T.Type] = []
    names: list[str | None] = []
    attrs: list[list[str]] = []
    varargs = False
    if not p.accept(")"):
        while True:
            if p.accept("..."):
                varargs = True
                p.expect(")")
                break
            ty = p.parse_type()
            params.append(ty)
            attrs.append(p.parse_param_attrs())
            if p.peek().kind == "local":
                names.append(unescape_name(p.next().text[1:]))
            else:
                names.append(None)
            if p.accept(")"):
                break
            p.expect(",")
    fn = Function(name, T.FunctionType(ret, tuple(params), varargs), names, mod)
    for arg, a in zip(fn.args, attrs):
        arg.attrs = a
    fn.linkage, fn.preemption, fn.visibility, fn.dll_storage, fn.cconv = \
        linkage, preemption, visibility, dll, cconv
    fn.ret_attrs = ret_attrs
    fn.metadata = metadata
    body_start: Token | None = None
    while True:
        t = p.peek()
        if t.kind == "eof":
            break
        if t.text == "{" and t.kind == "punct":
            body_start = p.next()
            break
        if t.text in ("unnamed_addr", "local_unnamed_addr"):
            fn.unnamed_addr = p.next().text
        elif t.text == "addrspace" and p.peek(1).text == "(":
            p.next()
            p.next()
            fn.addrspace = p.expect_int()
            p.expect(")")
        elif t.text in ("section", "partition", "gc") and p.peek(1).kind == "str":
            p.next()
            setattr(fn, t.text, _unquote_str(p.next().text))
        elif t.text == "comdat":
            p.next()
            if p.at("("):
                p.skip_group()
            fn.comdat = p.slice(t, p.last_end())
        elif t.text == "align" and p.peek(1).kind == "num":
            p.next()
            fn.align = p.expect_int()
        elif t.text in ("prefix", "prologue", "personality"):
            p.next()
            first = p.peek()
            p.parse_typed_value()
            setattr(fn, t.text, p.slice(first, p.last_end()))
        elif t.kind == "meta":
            p.next()
            fn.metadata.append((t.text[1:], p.parse_metadata_text()))
        elif t.kind in ("attrgrp", "ident", "str"):
            fn.fn_attrs.append(p.parse_attribute())
        else:
            raise p.error(f"unexpected '{t.text}' in function header", t)
    if kw.text == "define":
        if body_start is None:
            raise p.error("expected '{' to start the function body")
        if body is None:  # one-line function: body between the braces
            inner = header[body_start.end:].rstrip()
            if not inner.endswith("}"):
                raise p.error("function body is not closed by '}'")
            body = inner[:-1]
            body_line = idx + header.count("\n", 0, body_start.end)
        fn._body_text = body
        fn._body_line = body_line
    elif body_start is not None:
        raise p.error("declarations cannot have a body", body_start)
    return fn


# ---------------------------------------------------------------------------
# Function bodies
# ---------------------------------------------------------------------------

def parse_function_body(fn: Function) -> None:
    """Parse the pending body text of ``fn`` into blocks (in place)."""
    if fn._body_text is None:
        return
    text = fn._body_text
    parser = _FunctionParser(fn, text, fn._body_line)
    blocks = parser.parse_body()
    fn._blocks = blocks
    fn._body_text = None


class _FunctionParser(_Parser):
    def __init__(self, fn: Function, text: str, line_offset: int):
        super().__init__(fn.module, text, line_offset, lazy=False)
        self.fn = fn
        self.values: dict[str, Value] = {}
        self.forward: dict[str, tuple[Placeholder, Token]] = {}
        self.block_map: dict[str, BasicBlock] = {}
        self.block_refs: dict[str, Token] = {}
        self.defined_blocks: set[str] = set()
        self.next_slot = 0

    # -- symbol table ---------------------------------------------------------
    def define(self, key: str, value: Value, tok: Token) -> None:
        if key in self.values:
            raise self.error(f"redefinition of value '%{key}'", tok)
        fwd = self.forward.pop(key, None)
        if fwd is not None:
            ph, _ = fwd
            if ph.type != value.type:
                raise self.error(f"'%{key}' defined with type {value.type} "
                                 f"but used as {ph.type}", tok)
            ph.replace_all_uses_with(value, check_type=False)
        self.values[key] = value

    def local_value(self, name: str, ty: T.Type, tok: Token) -> Value:
        if ty == T.label:
            return self.get_block(name, tok)
        v = self.values.get(name)
        if v is not None:
            if v.type != ty:
                raise self.error(f"'%{name}' defined with type {v.type} but expected {ty}", tok)
            return v
        fwd = self.forward.get(name)
        if fwd is not None:
            if fwd[0].type != ty:
                raise self.error(f"'%{name}' used with types {fwd[0].type} and {ty}", tok)
            return fwd[0]
        ph = Placeholder(ty, name)
        self.forward[name] = (ph, tok)
        return ph

    def get_block(self, name: str, tok: Token) -> BasicBlock:
        blk = self.block_map.get(name)
        if blk is None:
            blk = BasicBlock(name, parent=self.fn)
            self.block_map[name] = blk
            self.block_refs[name] = tok
        return blk

    def parse_label_ref(self) -> BasicBlock:
        self.expect("label")
        tok = self.expect_kind("local", "block label")
        return self.get_block(unescape_name(tok.text[1:]), tok)

    # -- body -----------------------------------------------------------------
    def parse_body(self) -> list[BasicBlock]:
        for arg in self.fn.args:
            if arg.name is None:
                key = str(self.next_slot)
                self.next_slot += 1
            else:
                key = arg.name
            self.values[key] = arg
        blocks: list[BasicBlock] = []
        current: BasicBlock | None = None
        records: list[DebugRecord] = []
        while True:
            tok = self.peek()
            if tok.kind == "eof":
                break
            if tok.kind == "label":
                self.next()
                if records:
                    raise self.error("debug record not followed by an instruction", tok)
                name = unescape_name(tok.text[:-1])
                if name in self.defined_blocks:
                    raise self.error(f"redefinition of block '%{name}'", tok)
                if name.isdigit():
                    self.next_slot = int(name) + 1
                current = self.get_block(name, tok)
                self.defined_blocks.add(name)
                blocks.append(current)
                if name in self.values:
                    raise self.error(f"redefinition of value '%{name}'", tok)
                self.values.setdefault(name, current)
                continue
            if current is None:
                key = str(self.next_slot)
                self.next_slot += 1
                current = self.get_block(key, tok)
                self.defined_blocks.add(key)
                blocks.append(current)
            if tok.kind == "dbgrec":
                records.append(self.parse_debug_record())
                continue
            inst = self.parse_instruction()
            nxt = self.peek()
            if nxt.kind != "eof" and nxt.line == self.toks[self.pos - 1].line:
                raise self.error(f"unexpected '{nxt.text}' after instruction", nxt)
            for rec in records:
                inst.add_debug_record(rec)
            records = []
            current.append(inst)
        if records:
            raise self.error("debug record not followed by an instruction")
        for name, (ph, tok) in self.forward.items():
            if name in self.block_map:
                raise self.error(f"block label '%{name}' used as a value of type {ph.type}", tok)
            raise self.error(f"use of undefined value '%{name}'", tok)
        for name, tok in self.block_refs.items():
            if name not in self.defined_blocks:
                raise self.error(f"use of undefined label '%{name}'", tok)
        for b in blocks:
            if not b.instructions:
                raise self.error(f"block '%{b.name or '?'}' has no instructions")
        return blocks

    def parse_debug_record(self) -> DebugRecord:
        tok = self.next()
        kind = tok.text[len("#dbg_"):]
        self.expect("(")
        args: list[object] = []
        if not self.accept(")"):
            while True:
                t = self.peek()
                if t.kind == "meta":
                    if t.text == "!DIArgList":
                        self.next()
                        self.expect("(")
                        args.append(self._parse_typed_list(")"))
                    else:
                        args.append(self.parse_metadata_text())
                else:
                    args.append(self.parse_typed_value())
                if self.accept(")"):
                    break
                self.expect(",")
        return DebugRecord(kind, args)

    def parse_instruction(self) -> Instruction:
        tok = self.peek()
        result_tok = None
        if tok.kind == "local" and self.peek(1).text == "=":
            result_tok = tok
            self.pos += 2
        op_tok = self.next()
        if op_tok.kind != "ident":
            raise self.error(f"expected an instruction but found '{op_tok.text or 'end of input'}'",
                             op_tok)
        op = op_tok.text
        handler = _HANDLERS.get(op)
        if handler is None:
            if op in INT_BINOPS or op in FLOAT_BINOPS:
                handler = _FunctionParser.p_binop
            elif op in CAST_OPS:
                handler = _FunctionParser.p_cast
            else:
                raise self.error(f"unknown or unsupported instruction '{op}'", op_tok)
        inst = handler(self, op_tok)
        while self.at(",") and self.peek(1).kind == "meta":
            self.next()
            kind_tok = self.next()
            inst.metadata.append((kind_tok.text[1:], self.parse_metadata_text()))
        if result_tok is not None:
            if inst.type.is_void:
                raise self.error("instructions returning void cannot have a name", result_tok)
            key = unescape_name(result_tok.text[1:])
            if key.isdigit():
                self.next_slot = int(key) + 1
            else:
                inst.name = key
            self.define(key, inst, result_tok)
        elif not inst.type.is_void:
            key = str(self.next_slot)
            self.next_slot += 1
            self.define(key, inst, op_tok)
        return inst

    # -- helpers --------------------------------------------------------------
    def parse_flags(self) -> list[str]:
        flags = []
        while self.peek().kind == "ident" and self.peek().text in INSTRUCTION_FLAGS:
            flags.append(self.next().text)
        return flags

    def parse_syncscope(self) -> str | None:
        if self.accept("syncscope"):
            self.expect("(")
            s = _unquote_str(self.expect_kind("str", "sync scope").text)
            self.expect(")")
            return s
        return None

    def parse_ordering(self) -> str:
        tok = self.next()
        if tok.text not in _ORDERINGS:
            raise self.error(f"expected an atomic ordering but found '{tok.text}'", tok)
        return tok.text

    def more_operands(self) -> bool:
        """True if a ``,`` follows that is not the start of metadata attachments."""
        return self.at(",") and self.peek(1).kind != "meta"

    def parse_align_suffix(self) -> int | None:
        align = None
        while self.more_operands():
            self.next()
            if self.accept("align"):
                align = self.expect_int()
            else:
                raise self.error(f"unexpected '{self.peek().text}'")
        return align

    # -- instruction handlers -----------------------------------------------------
    def p_binop(self, op_tok: Token) -> Instruction:
        flags = self.parse_flags()
        ty = self.parse_type()
        a = self.parse_value(ty)
        self.expect(",")
        b = self.parse_value(ty)
        return BinaryOp(op_tok.text, a, b, flags=flags)

    def p_fneg(self, op_tok: Token) -> Instruction:
        flags = self.parse_flags()
        return UnaryOp("fneg", self.parse_typed_value(), flags=flags)

    def p_cast(self, op_tok: Token) -> Instruction:
        flags = self.parse_flags()
        v = self.parse_typed_value()
        self.expect("to")
        return Cast(op_tok.text, v, self.parse_type(), flags=flags)

    def p_cmp(self, op_tok: Token) -> Instruction:
        flags = self.parse_flags()
        pred_tok = self.next()
        ty = self.parse_type()
        a = self.parse_value(ty)
        self.expect(",")
        b = self.parse_value(ty)
        cls = ICmp if op_tok.text == "icmp" else FCmp
        if pred_tok.text not in cls.PREDICATES:
            raise self.error(f"bad {op_tok.text} predicate '{pred_tok.text}'", pred_tok)
        return cls(pred_tok.text, a, b, flags=flags)

    def p_select(self, op_tok: Token) -> Instruction:
        flags = self.parse_flags()
        c = self.parse_typed_value()
        self.expect(",")
        a = self.parse_typed_value()
        self.expect(",")
        b = self.parse_typed_value()
        return Select(c, a, b, flags=flags)

    def p_freeze(self, op_tok: Token) -> Instruction:
        return Freeze(self.parse_typed_value())

    def p_phi(self, op_tok: Token) -> Instruction:
        flags = self.parse_flags()
        ty = self.parse_type()
        phi = Phi(ty, flags=flags)
        while True:
            self.expect("[")
            v = self.parse_value(ty)
            self.expect(",")
            btok = self.expect_kind("local", "block label")
            blk = self.get_block(unescape_name(btok.text[1:]), btok)
            self.expect("]")
            phi.add_incoming(v, blk)
            if self.at(",") and self.peek(1).text == "[":
                self.next()
                continue
            return phi

    def p_alloca(self, op_tok: Token) -> Instruction:
        flags = []
        while self.peek().text in ("inalloca", "swifterror"):
            flags.append(self.next().text)
        ty = self.parse_type()
        count = None
        align = None
        addrspace = 0
        while self.more_operands():
            self.next()
            if self.accept("align"):
                align = self.expect_int()
            elif self.accept("addrspace"):
                self.expect("(")
                addrspace = self.expect_int()
                self.expect(")")
            else:
                count = self.parse_typed_value()
        return Alloca(ty, count, align, addrspace, flags=flags)

    def p_load(self, op_tok: Token) -> Instruction:
        atomic = self.accept("atomic")
        volatile = self.accept("volatile")
        ty = self.parse_type()
        self.expect(",")
        p = self.parse_typed_value()
        syncscope = ordering = None
        if atomic:
            syncscope = self.parse_syncscope()
            ordering = self.parse_ordering()
        align = self.parse_align_suffix()
        return Load(ty, p, align, volatile, ordering, syncscope)

    def p_store(self, op_tok: Token) -> Instruction:
        atomic = self.accept("atomic")
        volatile = self.accept("volatile")
        v = self.parse_typed_value()
        self.expect(",")
        p = self.parse_typed_value()
        syncscope = ordering = None
        if atomic:
            syncscope = self.parse_syncscope()
            ordering = self.parse_ordering()
        align = self.parse_align_suffix()
        return Store(v, p, align, volatile, ordering, syncscope)

    def p_fence(self, op_tok: Token) -> Instruction:
        syncscope = self.parse_syncscope()
        return Fence(self.parse_ordering(), syncscope)

    def p_cmpxchg(self, op_tok: Token) -> Instruction:
        weak = self.accept("weak")
        volatile = self.accept("volatile")
        p = self.parse_typed_value()
        self.expect(",")
        c = self.parse_typed_value()
        self.expect(",")
        nv = self.parse_typed_value()
        syncscope = self.parse_syncscope()
        succ = self.parse_ordering()
        fail = self.parse_ordering()
        align = self.parse_align_suffix()
        return CmpXchg(p, c, nv, succ, fail, align, weak, volatile, syncscope)

    def p_atomicrmw(self, op_tok: Token) -> Instruction:
        volatile = self.accept("volatile")
        operation = self.expect_kind("ident", "atomicrmw operation").text
        p = self.parse_typed_value()
        self.expect(",")
        v = self.parse_typed_value()
        syncscope = self.parse_syncscope()
        ordering = self.parse_ordering()
        align = self.parse_align_suffix()
        return AtomicRMW(operation, p, v, ordering, align, volatile, syncscope)

    def p_gep(self, op_tok: Token) -> Instruction:
        flags = self.parse_flags()
        src = self.parse_type()
        self.expect(",")
        p = self.parse_typed_value()
        indices = []
        while self.more_operands():
            self.next()
            indices.append(self.parse_typed_value())
        return GetElementPtr(src, p, indices, flags=flags)

    def _parse_const_indices(self) -> list[int]:
        indices = []
        while self.at(",") and self.peek(1).kind == "num":
            self.next()
            indices.append(self.expect_int())
        return indices

    def p_extractvalue(self, op_tok: Token) -> Instruction:
        agg = self.parse_typed_value()
        return ExtractValue(agg, self._parse_const_indices())

    def p_insertvalue(self, op_tok: Token) -> Instruction:
        agg = self.parse_typed_value()
        self.expect(",")
        v = self.parse_typed_value()
        return InsertValue(agg, v, self._parse_const_indices())

    def p_extractelement(self, op_tok: Token) -> Instruction:
        v = self.parse_typed_value()
        self.expect(",")
        return ExtractElement(v, self.parse_typed_value())

    def p_insertelement(self, op_tok: Token) -> Instruction:
        v = self.parse_typed_value()
        self.expect(",")
        e = self.parse_typed_value()
        self.expect(",")
        return InsertElement(v, e, self.parse_typed_value())

    def p_shufflevector(self, op_tok: Token) -> Instruction:
        a = self.parse_typed_value()
        self.expect(",")
        b = self.parse_typed_value()
        self.expect(",")
        return ShuffleVector(a, b, self.parse_typed_value())

    def p_va_arg(self, op_tok: Token) -> Instruction:
        v = self.parse_typed_value()
        self.expect(",")
        return VAArg(v, self.parse_type())

    def p_ret(self, op_tok: Token) -> Instruction:
        if self.accept("void"):
            return Ret()
        return Ret(self.parse_typed_value())

    def p_br(self, op_tok: Token) -> Instruction:
        if self.at("label"):
            return Br(self.parse_label_ref())
        c = self.parse_typed_value()
        self.expect(",")
        t = self.parse_label_ref()
        self.expect(",")
        return CondBr(c, t, self.parse_label_ref())

    def p_switch(self, op_tok: Token) -> Instruction:
        c = self.parse_typed_value()
        self.expect(",")
        sw = Switch(c, self.parse_label_ref())
        self.expect("[")
        while not self.accept("]"):
            v = self.parse_typed_value()
            self.expect(",")
            sw.add_case(v, self.parse_label_ref())
        return sw

    def p_indirectbr(self, op_tok: Token) -> Instruction:
        a = self.parse_typed_value()
        self.expect(",")
        self.expect("[")
        dests = []
        if not self.accept("]"):
            while True:
                dests.append(self.parse_label_ref())
                if self.accept("]"):
                    break
                self.expect(",")
        return IndirectBr(a, dests)

    def p_unreachable(self, op_tok: Token) -> Instruction:
        return Unreachable()

    def p_resume(self, op_tok: Token) -> Instruction:
        return Resume(self.parse_typed_value())

    def p_landingpad(self, op_tok: Token) -> Instruction:
        ty = self.parse_type()
        cleanup = False
        clauses = []
        while True:
            if self.accept("cleanup"):
                cleanup = True
            elif self.peek().text in ("catch", "filter"):
                k = self.next().text
                clauses.append((k, self.parse_typed_value()))
            else:
                break
        return LandingPad(ty, cleanup, clauses)

    def p_tail(self, op_tok: Token) -> Instruction:
        self.expect("call")
        return self._parse_call(op_tok, tail=op_tok.text, invoke=False)

    def p_call(self, op_tok: Token) -> Instruction:
        return self._parse_call(op_tok, tail=None, invoke=False)

    def p_invoke(self, op_tok: Token) -> Instruction:
        return self._parse_call(op_tok, tail=None, invoke=True)

    def _parse_call(self, op_tok: Token, tail: str | None, invoke: bool) -> Instruction:
        flags = self.parse_flags()
        cconv = None
        addrspace = None
        ret_attrs: list[str] = []
        while not self.is_type_start(self.peek()):
            t = self.peek()
            if t.kind == "ident" and _is_cconv(t.text):
                self.next()
                cconv = t.text
                if t.text == "cc":
                    cconv += " " + str(self.expect_int())
            elif t.text == "addrspace" and self.peek(1).text == "(":
                self.next()
                self.next()
                addrspace = self.expect_int()
                self.expect(")")
            elif t.kind in ("ident", "str"):
                ret_attrs.append(self.parse_attribute())
            else:
                raise self.error(f"unexpected '{t.text}' in call", t)
        ret = self.parse_type()
        fnty = None
        if self.at("("):
            params, varargs = self.parse_param_type_list()
            fnty = T.FunctionType(ret, tuple(params), varargs)
        callee = self.parse_value(T.PointerType(addrspace or 0))
        self.expect("(")
        args: list[Value] = []
        arg_attrs: list[list[str]] = []
        md_args: list[int] = []
        arg_types: list[T.Type] = []
        if not self.accept(")"):
            while True:
                if self.at("..."):
                    raise self.error("musttail '...' argument forwarding is not supported")
                ty = self.parse_type()
                attrs = self.parse_param_attrs()
                if ty == T.metadata and self.peek().kind != "meta":
                    md_args.append(len(args))
                    args.append(self.parse_typed_value())
                else:
                    args.append(self.parse_value(ty))
                arg_types.append(ty)
                arg_attrs.append(attrs)
                if self.accept(")"):
                    break
                self.expect(",")
        close_line = self.toks[self.pos - 1].line
        if fnty is None:
            fnty = T.FunctionType(ret, tuple(arg_types), False)
        fn_attrs: list[str] = []
        while True:
            t = self.peek()
            if t.line != close_line or t.kind not in ("attrgrp", "ident", "str"):
                break
            if t.kind == "ident" and (t.text in ("to", "unwind") or t.text in _VALUE_KEYWORDS):
                break
            fn_attrs.append(self.parse_attribute())
        bundles: list[tuple[str, list[Value]]] = []
        if self.at("[") and self.peek().line == close_line:
            self.next()
            while True:
                tag = _unquote_str(self.expect_kind("str", "bundle tag").text)
                self.expect("(")
                bundles.append((tag, self._parse_typed_list(")")))
                if self.accept("]"):
                    break
                self.expect(",")
        kw = dict(flags=flags, arg_attrs=arg_attrs, cconv=cconv, ret_attrs=ret_attrs,
                  fn_attrs=fn_attrs, addrspace=addrspace, bundles=bundles,
                  metadata_args=md_args)
        if invoke:
            self.expect("to")
            normal = self.parse_label_ref()
            self.expect("unwind")
            unwind = self.parse_label_ref()
            return Invoke(callee, args, fnty, normal, unwind, **kw)
        return Call(callee, args, fnty, tail=tail, **kw)


_HANDLERS = {
    "fneg": _FunctionParser.p_fneg,
    "icmp": _FunctionParser.p_cmp,
    "fcmp": _FunctionParser.p_cmp,
    "select": _FunctionParser.p_select,
    "freeze": _FunctionParser.p_freeze,
    "phi": _FunctionParser.p_phi,
    "alloca": _FunctionParser.p_alloca,
    "load": _FunctionParser.p_load,
    "store": _FunctionParser.p_store,
    "fence": _FunctionParser.p_fence,
    "cmpxchg": _FunctionParser.p_cmpxchg,
    "atomicrmw": _FunctionParser.p_atomicrmw,
    "getelementptr": _FunctionParser.p_gep,
    "extractvalue": _FunctionParser.p_extractvalue,
    "insertvalue": _FunctionParser.p_insertvalue,
    "extractelement": _FunctionParser.p_extractelement,
    "insertelement": _FunctionParser.p_insertelement,
    "shufflevector": _FunctionParser.p_shufflevector,
    "va_arg": _FunctionParser.p_va_arg,
    "ret": _FunctionParser.p_ret,
    "br": _FunctionParser.p_br,
    "switch": _FunctionParser.p_switch,
    "indirectbr": _FunctionParser.p_indirectbr,
    "unreachable": _FunctionParser.p_unreachable,
    "resume": _FunctionParser.p_resume,
    "landingpad": _FunctionParser.p_landingpad,
    "call": _FunctionParser.p_call,
    "tail": _FunctionParser.p_tail,
    "musttail": _FunctionParser.p_tail,
    "notail": _FunctionParser.p_tail,
    "invoke": _FunctionParser.p_invoke,
}

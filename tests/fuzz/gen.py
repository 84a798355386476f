"""A seeded generator of random differentiable C programs, each carrying its own gradient check.

A program is a function ``f`` over an active array ``x`` (updated in place), optionally an active scalar
``s`` and an output buffer ``out``, and a constant length ``n``; its body mixes arithmetic, libm functions on
safe domains, fixed / data-dependent / nested loops, ``while`` with ``break``, branches, local arrays, a
struct, heap buffers (malloc/calloc/realloc/free), ``memcpy``, and helper functions (static, extern,
in-place, recursive, called through a function pointer). The objective is

    L(x, s) = f(x, s, n, out) + w . x_final + v . out_final

and the generated ``check`` function compares L's gradient from ``__enzyme_autodiff`` (seeds ``dx = w``,
``dout = v``), from ``__enzyme_fwddiff`` (one run per coordinate) and from central finite differences at two
step sizes (a coordinate whose two quotients disagree is near a kink or branch and is not judged). It prints
one line ``FUZZ <name> <class> <detail>``; the classes are listed in :data:`CHECK_CLASSES`.

Programs are ASTs (:class:`Program`) so the shrinker can delete statements and simplify expressions; every
local is declared (and initialized) before the statements, so any statement can go.
"""

from __future__ import annotations

import copy
import json
import random
import re
from dataclasses import dataclass, field

#: what a program's own check can print (besides crashing)
CHECK_CLASSES = ("pass", "inconclusive", "invalid", "wrong-reverse", "wrong-forward", "wrong-both",
                 "ad-mismatch", "wrong-primal")

# ---- expressions ---------------------------------------------------------------------------------------

#: libm calls on safe domains: a template over the argument(s); ``{f}`` is the float suffix ("" or "f").
#: Each one keeps its argument where the function is smooth and finite.
UNARY = [
    "sin{f}({0})", "cos{f}({0})", "tanh{f}({0})", "atan{f}({0})", "erf{f}({0})", "erfc{f}({0})",
    "exp{f}(tanh{f}({0}))", "exp2{f}(sin{f}({0}))", "expm1{f}(tanh{f}({0}))", "log{f}({0} * {0} + 0.5)",
    "log2{f}({0} * {0} + 0.75)", "log10{f}({0} * {0} + 0.25)", "log1p{f}({0} * {0})",
    "sqrt{f}({0} * {0} + 0.25)", "cbrt{f}({0} * {0} + 1.0)", "sinh{f}(tanh{f}({0}))",
    "cosh{f}(sin{f}({0}))", "tan{f}(0.9 * tanh{f}({0}))", "asin{f}(0.9 * tanh{f}({0}))",
    "acos{f}(0.8 * sin{f}({0}))", "asinh{f}({0})", "acosh{f}({0} * {0} + 1.5)", "atanh{f}(0.8 * tanh{f}({0}))",
    "pow{f}({0} * {0} + 0.5, 1.5)", "fabs{f}({0})", "({0} / (1.0 + {0} * {0}))",
]
BINARY = [
    "pow{f}({0} * {0} + 0.5, 0.5 * tanh{f}({1}))", "fmax{f}({0}, {1})", "fmin{f}({0}, {1})",
    "hypot{f}({0}, {1} * {1} + 0.5)", "atan2{f}({0}, {1} * {1} + 0.5)", "fma{f}({0}, {1}, 0.25)",
    "({0} / (1.5 + sin{f}({1})))",
]


@dataclass
class Expr:
    """An expression node: ``template`` filled with the rendered ``args`` ({0}, {1}, ...; {f} for the float
    suffix). Leaves have no args."""

    template: str
    args: list["Expr"] = field(default_factory=list)

    def render(self, fs: str) -> str:
        return self.template.format(*(a.render(fs) for a in self.args), f=fs)

    def nodes(self):
        yield self
        for a in self.args:
            yield from a.nodes()


def leaf(text: str) -> Expr:
    return Expr(text.replace("{", "{{").replace("}", "}}"))


# ---- statements ----------------------------------------------------------------------------------------

@dataclass
class Stmt:
    """A statement: ``head`` and ``tail`` lines around nested ``body``/``orelse`` blocks; ``exprs`` fill
    the ``{0}``... slots of head (and of a one-line statement)."""

    head: str
    exprs: list[Expr] = field(default_factory=list)
    body: list["Stmt"] | None = None
    orelse: list["Stmt"] | None = None
    tail: str = "}"
    pinned: bool = False
    """Structural (allocation, initialization, free): the shrinker keeps it."""

    def render(self, fs: str, indent: str) -> list[str]:
        head = self.head.format(*(e.render(fs) for e in self.exprs), f=fs)
        if self.body is None:
            return [indent + head]
        lines = [indent + head]
        for s in self.body:
            lines += s.render(fs, indent + "  ")
        if self.orelse is not None:
            lines.append(indent + "} else {")
            for s in self.orelse:
                lines += s.render(fs, indent + "  ")
        lines.append(indent + self.tail)
        return lines

    def blocks(self):
        return [b for b in (self.body, self.orelse) if b is not None]


def esc(text: str) -> str:
    """Literal C text as a statement head (no slots)."""
    return text.replace("{", "{{").replace("}", "}}")


@dataclass
class Helper:
    """A function ``f`` calls: its C text is ``head`` + body lines, with one expression slot set."""

    name: str
    kind: str
    """``static``, ``extern``, ``inplace``, ``recursive`` or ``fnptr``."""
    template: str
    """The whole definition, with ``{NAME}``, ``{T}``, ``{f}`` and ``{0}``/``{1}`` for the expressions."""
    exprs: list[Expr]

    def render(self, fs: str, T: str) -> str:
        text = self.template.replace("{NAME}", self.name).replace("{T}", T)
        return text.format(*(e.render(fs) for e in self.exprs), f=fs)


@dataclass
class Program:
    """One generated program: the function ``f``, its helpers, and the check's inputs."""

    name: str
    T: str
    """``double`` or ``float``."""
    fs: str
    """Suffix of libm calls: ``f`` (float versions) or ``""``."""
    nx: int
    has_s: bool
    nout: int
    void: bool
    """``f`` returns nothing (its outputs are ``x`` and ``out``)."""
    decls: list[Stmt]
    body: list[Stmt]
    ret: Expr | None
    epilogue: list[Stmt]
    helpers: list[Helper]
    struct: bool
    x0: list[float]
    s0: float
    w: list[float]
    out0: list[float]
    v: list[float]
    features: set[str] = field(default_factory=set)
    text: str | None = None
    """The function text as written (a stored regression), instead of rendering the statements."""

    # -- rendering --------------------------------------------------------------------------------------

    def params(self) -> str:
        T = self.T
        ps = [f"{T} *x"] + ([f"{T} s"] if self.has_s else []) + ["int n"] + ([f"{T} *out"] if self.nout else [])
        return ", ".join(ps)

    def function_text(self) -> str:
        """Helpers, the struct and ``f`` (named ``<name>_f``)."""
        if self.text is not None:
            return self.text
        T, p = self.T, self.name
        out = []
        if self.struct:
            out.append(f"struct {p}_S {{ {T} a; {T} v[3]; int k; }};")
        for h in self.helpers:
            out.append(h.render(self.fs, T))
        out.append(f"{'void' if self.void else T} {p}_f({self.params()}) {{")
        for s in self.decls + self.body:
            out += s.render(self.fs, "  ")
        if not self.void:  # computed before the epilogue frees the heap buffers it may read
            out.append(f"  {self.T} result = {self.ret.render(self.fs)};")
        for s in self.epilogue:
            out += s.render(self.fs, "  ")
        if not self.void:
            out.append("  return result;")
        out.append("}")
        return "\n".join(out).replace("@", p + "_")

    def check_text(self) -> str:
        """``<name>_check()``: runs the primal, both AD modes and finite differences, prints the verdict."""
        T, p, nx, no = self.T, self.name, self.nx, max(self.nout, 1)
        lit = lambda vs: "{" + ", ".join(repr(float(v)) for v in vs) + "}"  # noqa: E731
        call_args = lambda xs, ss, os_: ", ".join(  # noqa: E731
            [xs] + ([ss] if self.has_s else []) + [str(nx)] + ([os_] if self.nout else []))
        rev = ["enzyme_dup, xr, dx"] + (["enzyme_out, s0"] if self.has_s else []) + [f"enzyme_const, {nx}"] \
            + (["enzyme_dup, outr, dout"] if self.nout else [])
        fwd = ["enzyme_dup, xf, tx"] + (["s0, ts"] if self.has_s else []) + [f"enzyme_const, {nx}"] \
            + (["enzyme_dup, outf, tout"] if self.nout else [])
        ret = "" if self.void else "r = "
        eps, hrel, rtol, mtol = (("2.2e-16", "1e-5", "1e-5", "1e-8") if T == "double"
                                 else ("1.2e-7", "1e-2", "2e-2", "1e-3"))
        return f"""
static const {T} {p}_x0[{nx}] = {lit(self.x0)}, {p}_w[{nx}] = {lit(self.w)};
static const {T} {p}_out0[{no}] = {lit(self.out0 or [0])}, {p}_v[{no}] = {lit(self.v or [0])};
/* L at the inputs with coordinate c moved by *d (set to the step actually taken); fills x and out */
static double {p}_L(int c, double *d, {T} *x, {T} *out) {{
  {T} s = ({T}){self.s0!r}, r = 0;
  (void)s; (void)r;
  memcpy(x, {p}_x0, sizeof {p}_x0); memcpy(out, {p}_out0, sizeof {p}_out0);
  if (d) {{
    {T} *at = c < {nx} ? &x[c] : &s, old = *at;
    *at = ({T})(old + *d); *d = (double)(*at - old);
  }}
  {ret}{p}_f({call_args("x", "s", "out")});
  double L = (double)r, mag = fabs((double)r);
  for (int i = 0; i < {nx}; i++) {{ L += (double){p}_w[i] * x[i]; mag += fabs((double){p}_w[i] * x[i]); }}
  for (int i = 0; i < {self.nout}; i++) {{ L += (double){p}_v[i] * out[i]; mag += fabs((double){p}_v[i] * out[i]); }}
  {p}_mag = mag > {p}_mag ? mag : {p}_mag;
  return L;
}}
static void {p}_check(void) {{
  const int N = {nx + int(self.has_s)};
  {T} x[{nx}], out[{no}], xr[{nx}], dx[{nx}], outr[{no}], dout[{no}], xf[{nx}], tx[{nx}], outf[{no}], tout[{no}];
  {T} s0 = ({T}){self.s0!r}, ds = 0, r = 0;
  double grev[{nx + 1}], gfwd[{nx + 1}], L0 = {p}_L(0, 0, x, out), gmax = 0;
  (void)s0; (void)r; (void)ds;
  if (!isfinite(L0) || fabs(L0) > 1e6 || {p}_mag > 1e6) {{ printf("FUZZ {p} invalid L=%g\\n", L0); return; }}
  memcpy(xr, {p}_x0, sizeof xr); memcpy(dx, {p}_w, sizeof dx);
  memcpy(outr, {p}_out0, sizeof outr); memcpy(dout, {p}_v, sizeof dout);
  {"ds = " if self.has_s else ""}__enzyme_autodiff_{T}((void *){p}_f, {", ".join(rev)});
  for (int i = 0; i < {nx}; i++) grev[i] = dx[i];
  grev[{nx}] = ds;
  for (int i = 0; i < {nx}; i++)
    if (fabs((double)xr[i] - x[i]) > {mtol} * (1 + fabs((double)x[i]))) {{
      printf("FUZZ {p} wrong-primal x[%d]: after autodiff %.17g, primal %.17g\\n", i, (double)xr[i], (double)x[i]);
      return;
    }}
  for (int i = 0; i < {self.nout}; i++)
    if (fabs((double)outr[i] - out[i]) > {mtol} * (1 + fabs((double)out[i]))) {{
      printf("FUZZ {p} wrong-primal out[%d]: after autodiff %.17g, primal %.17g\\n", i, (double)outr[i], (double)out[i]);
      return;
    }}
  for (int c = 0; c < N; c++) {{
    {T} ts = c == {nx};
    (void)ts;
    memcpy(xf, {p}_x0, sizeof xf); memcpy(outf, {p}_out0, sizeof outf);
    for (int i = 0; i < {nx}; i++) tx[i] = i == c;
    for (int i = 0; i < {no}; i++) tout[i] = 0;
    {T} t = 0;
    {"t = " if not self.void else ""}__enzyme_fwddiff_{T}((void *){p}_f, {", ".join(fwd)});
    double g = t;
    for (int i = 0; i < {nx}; i++) g += (double){p}_w[i] * tx[i];
    for (int i = 0; i < {self.nout}; i++) g += (double){p}_v[i] * tout[i];
    gfwd[c] = g;
    gmax = fmax(gmax, fmax(fabs(g), fabs(grev[c])));
  }}
  int judged = 0;
  for (int c = 0; c < N; c++) {{
    double base = c < {nx} ? {p}_x0[c] : (double)s0;
    double h = {hrel} * fmax(1.0, fabs(base)), h1 = h, h2 = -h, h3 = h / 2, h4 = -h / 2;
    double fd1 = ({p}_L(c, &h1, x, out) - {p}_L(c, &h2, x, out)) / (h1 - h2);
    double fd2 = ({p}_L(c, &h3, x, out) - {p}_L(c, &h4, x, out)) / (h3 - h4);
    double noise = 1000 * {eps} * {p}_mag / h;
    double a = grev[c], b = gfwd[c];
    int same = fabs(a - b) <= {mtol} * (fabs(a) + fabs(b)) + 1e-3 * {mtol} * (gmax + {p}_mag);
    int smooth = fabs(fd1 - fd2) <= {rtol} * fmax(fabs(fd1), fabs(fd2)) + 2 * noise;
    int rok = fabs(a - fd2) <= {rtol} * fmax(fabs(a), fabs(fd2)) + 2 * noise;
    int fok = fabs(b - fd2) <= {rtol} * fmax(fabs(b), fabs(fd2)) + 2 * noise;
    /* a kink inside the stencil (|v| near 0) moves the two quotients apart by a fraction of their distance
       to the one-sided derivative AD gives: only a miss far beyond that spread is a wrong gradient */
    double spread = fabs(fd1 - fd2);
    int rbad = !rok && fabs(a - fd2) > 20 * spread, fbad = !fok && fabs(b - fd2) > 20 * spread;
    if (smooth && (!rok || !fok) && !rbad && !fbad) smooth = 0;
    const char *bad = 0;
    if (smooth && (rbad || fbad)) bad = rbad && fbad ? "wrong-both" : rbad ? "wrong-reverse" : "wrong-forward";
    else if (!same) bad = "ad-mismatch";
    if (bad) {{
      printf("FUZZ {p} %s coordinate %d of %d: reverse %.10g forward %.10g fd %.10g (fd at h/2 %.10g)\\n",
             bad, c, N, a, b, fd1, fd2);
      return;
    }}
    judged += smooth;
  }}
  printf("FUZZ {p} %s %d of %d coordinates\\n", judged ? "pass" : "inconclusive", judged, N);
}}
"""

    def source(self) -> str:
        """A whole C file holding only this program."""
        return render_file([self])

    def size(self) -> int:
        return sum(1 for _ in self._all_stmts()) + sum(1 for e in self.all_exprs() for _ in e.nodes())

    def _all_stmts(self):
        def walk(block):
            for s in block:
                yield s
                for b in s.blocks():
                    yield from walk(b)
        yield from walk(self.decls + self.body + self.epilogue)

    def all_exprs(self):
        for s in self._all_stmts():
            yield from s.exprs
        if self.ret is not None:
            yield self.ret
        for h in self.helpers:
            yield from h.exprs


CHECK_FIELDS = ("name", "T", "nx", "has_s", "nout", "void", "x0", "s0", "w", "out0", "v")


def regression_text(p: Program, comment: str) -> str:
    """A reduced program as stored in ``tests/fuzz/regressions``: what it is, the check's inputs, and the
    function text; the check itself is generated again when it is read (:func:`read_regression`)."""
    inputs = json.dumps({k: getattr(p, k) for k in CHECK_FIELDS})
    return f"/* {comment}\n   check: {inputs} */\n{p.function_text()}\n"


def read_regression(text: str) -> Program:
    m = re.search(r"check: (\{.*\}) \*/\n", text)
    fields = json.loads(m.group(1))
    return Program(fs="", decls=[], body=[], ret=None, epilogue=[], helpers=[], struct=False,
                   text=text[m.end():].rstrip("\n"), **fields)


def render_file(programs: list[Program]) -> str:
    """One C file: a prelude, every program with its check, and ``main`` running the checks in order."""
    parts = [PRELUDE]
    for p in programs:
        parts.append(f"static double {p.name}_mag;")
        parts.append(p.function_text())
        parts.append(p.check_text())
    parts.append("int main(void) {")
    parts += [f"  {p.name}_check(); fflush(stdout);" for p in programs]
    parts.append("  return 0;\n}\n")
    return "\n".join(parts)


PRELUDE = """/* generated by tests/fuzz/gen.py */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __cplusplus
extern "C" {
#endif
extern int enzyme_dup, enzyme_dupnoneed, enzyme_const, enzyme_out;
double __enzyme_autodiff_double(void *, ...);
double __enzyme_fwddiff_double(void *, ...);
float __enzyme_autodiff_float(void *, ...);
float __enzyme_fwddiff_float(void *, ...);
#ifdef __cplusplus
}
#endif
"""


# ---- the generator -------------------------------------------------------------------------------------

class Gen:
    """Builds one random :class:`Program` from a ``random.Random``."""

    def __init__(self, rng: random.Random, name: str):
        self.r = rng
        self.name = name
        self.features: set[str] = set()

    # arrays: name -> length; scalars: names of T variables readable in f
    def program(self) -> Program:
        r = self.r
        self.T = "float" if r.random() < 0.25 else "double"
        self.fs = "f" if self.T == "float" and r.random() < 0.8 else ""
        self.nx = r.randint(2, 6)
        self.has_s = r.random() < 0.6
        self.nout = r.choice([0, 0, 1, 2, 3])
        self.void = self.nout > 0 and r.random() < 0.3
        self.arrays: dict[str, int] = {"x": self.nx}
        if self.nout:
            self.arrays["out"] = self.nout
        self.scalars = ["s"] if self.has_s else []
        self.loopvars: list[tuple[str, int]] = []  # (name, bound: a safe index below it)
        self.counter = 0
        self.helpers: list[Helper] = []
        self.callables: list[tuple[str, int]] = []  # expression-level calls: (C callee text, arity)
        decls, epilogue = [], []
        T = self.T
        for i in range(r.randint(1, 4)):
            v = f"a{i}"
            decls.append(Stmt(f"{T} {v} = {{0}};", [self.expr(2)]))
            self.scalars.append(v)
        self.struct = r.random() < 0.25
        if self.struct:
            self.features.add("struct")
            decls.append(Stmt(f"struct @S st = {{{{ ({T})({{0}}), {{{{ ({T})({{1}}), ({T})({{2}}), 0.5 }}}}, 2 }}}};",
                              [self.expr(1), self.expr(1), self.expr(1)], pinned=True))
            self.scalars.append("st.a")
            self.arrays["st.v"] = 3
        for i in range(r.choice([0, 0, 1, 1, 2])):
            t, m = f"t{i}", r.randint(2, 6)
            decls.append(Stmt(f"{T} {t}[{m}];", pinned=True))
            decls.append(self._fill(t, m))
            self.arrays[t] = m
            self.features.add("local-array")
        for i in range(r.choice([0, 0, 1, 1, 2])):
            h, m = f"h{i}", r.randint(2, 6)
            alloc = r.choice(["malloc", "malloc", "calloc"])
            size = f"sizeof({T}) * {m}"
            call = f"calloc({m}, sizeof({T}))" if alloc == "calloc" else f"malloc({size})"
            decls.append(Stmt(esc(f"{T} *{h} = ({T} *){call};"), pinned=True))
            decls.append(self._fill(h, m))
            epilogue.append(Stmt(esc(f"free({h});"), pinned=True))
            self.arrays[h] = m
            self.features.add(alloc)
        for _ in range(r.choice([0, 0, 1, 1, 2, 3])):
            self._helper()
        body = self.block(r.randint(2, 6), depth=0)
        ret = None if self.void else self.ret_expr()
        prog = Program(
            name=self.name, T=T, fs=self.fs, nx=self.nx, has_s=self.has_s, nout=self.nout, void=self.void,
            decls=decls, body=body, ret=ret, epilogue=epilogue, helpers=self.helpers, struct=self.struct,
            x0=[self._input() for _ in range(self.nx)], s0=round(r.uniform(0.3, 1.2), 3),
            w=[round(r.uniform(-1, 1), 3) for _ in range(self.nx)],
            out0=[round(r.uniform(-1, 1), 3) for _ in range(self.nout)],
            v=[round(r.uniform(-1, 1), 3) for _ in range(self.nout)], features=self.features)
        return prog

    def _input(self) -> float:
        v = self.r.uniform(0.15, 1.4)
        return round(v if self.r.random() < 0.7 else -v, 4)

    def _fill(self, arr: str, m: int) -> Stmt:
        c = self.r.choice(["0.5", "0.25", "1.0", "-0.75"])
        return Stmt(esc(f"for (int k = 0; k < {m}; k++) {arr}[k] = {c} * x[k % n] + 0.125 * k;"), pinned=True)

    def fresh(self, stem: str) -> str:
        self.counter += 1
        return f"{stem}{self.counter}"

    # -- expressions --
    def index(self, arr: str) -> str:
        m = self.arrays[arr]
        r = self.r
        if self.loopvars and r.random() < 0.75:
            v, bound = r.choice(self.loopvars)
            if bound <= m and r.random() < 0.5:
                return v
            return f"({v} + {r.randint(0, m - 1)}) % {m}" if m > 1 else "0"
        return str(r.randint(0, m - 1))

    def lvalues(self) -> list[str]:
        return self.scalars[1:] if self.has_s else list(self.scalars)

    def atom(self) -> Expr:
        r = self.r
        k = r.random()
        if (k < 0.3 or not self.arrays) and self.scalars:
            return leaf(r.choice(self.scalars))
        if k < 0.8 and self.arrays:
            arr = r.choice(list(self.arrays))
            return leaf(f"{arr}[{self.index(arr)}]")
        return leaf(r.choice(["0.5", "1.5", "-0.25", "2.0", "0.75"]))

    def expr(self, depth: int) -> Expr:
        r = self.r
        if depth <= 0 or r.random() < 0.25:
            return self.atom()
        k = r.random()
        if k < 0.35:
            op = r.choice([" + ", " - ", " * ", " * ", " + "])
            return Expr("({0}" + op + "{1})", [self.expr(depth - 1), self.expr(depth - 1)])
        if k < 0.7:
            return Expr(r.choice(UNARY), [self.expr(depth - 1)])
        if k < 0.85 or not self.callables:
            return Expr(r.choice(BINARY), [self.expr(depth - 1), self.expr(depth - 1)])
        template, arity = r.choice(self.callables)
        return Expr(template, [self.expr(depth - 1) for _ in range(arity)])

    def ret_expr(self) -> Expr:
        terms = [leaf(v) for v in self.r.sample(self.scalars, min(len(self.scalars), 3))]
        terms.append(self.expr(2))
        e = terms[0]
        for t in terms[1:]:
            e = Expr("({0} + {1})", [e, t])
        return e

    # -- statements --
    def block(self, n: int, depth: int) -> list[Stmt]:
        return [self.stmt(depth) for _ in range(n)]

    def stmt(self, depth: int) -> Stmt:
        r = self.r
        k = r.random()
        if depth < 2 and k < 0.3:
            return self.loop(depth)
        if depth < 3 and k < 0.4:
            self.features.add("if")
            return Stmt(f"if ({{0}} > {r.choice(['0.0', '0.3', '-0.2', '1.0'])}) {{{{",
                        [self.expr(2)], self.block(r.randint(1, 2), depth + 1),
                        self.block(r.randint(0, 2), depth + 1) if r.random() < 0.5 else None)
        if k < 0.47 and any(h.kind == "inplace" for h in self.helpers):
            h = r.choice([h for h in self.helpers if h.kind == "inplace"])
            arr = r.choice([a for a in self.arrays if a != "st.v"])
            return Stmt(esc(f"{h.name}({arr}, {self.arrays[arr]});"))
        if k < 0.5 and any(a.startswith("h") for a in self.arrays):
            h = r.choice([a for a in self.arrays if a.startswith("h")])
            self.features.add("realloc")
            return Stmt(esc(f"{h} = ({self.T} *)realloc({h}, sizeof({self.T}) * {self.arrays[h] + r.randint(1, 8)});"))
        if k < 0.53 and len([a for a in self.arrays if a != "st.v"]) > 1:
            a, b = r.sample([a for a in self.arrays if a != "st.v"], 2)
            m = min(self.arrays[a], self.arrays[b])
            self.features.add("memcpy")
            return Stmt(esc(f"memcpy({a}, {b}, sizeof({self.T}) * {r.randint(1, m)});"))
        return self.assign()

    def assign(self) -> Stmt:
        r = self.r
        lvs = self.lvalues()
        arrays = list(self.arrays)
        if lvs and r.random() < 0.5:
            target = r.choice(lvs)
        else:
            arr = r.choice(arrays)
            target = f"{arr}[{self.index(arr)}]"
            if arr == "x":
                self.features.add("in-place")
        k = r.random()
        e = self.expr(3)
        if self.loopvars:  # repeated: bounded, so that no value overflows (0 * inf is NaN in any AD tool)
            e = Expr("tanh{f}({0})", [e])
        if k < 0.45:
            return Stmt(f"{target} = {{0}};", [e])
        if k < 0.8:
            return Stmt(f"{target} {r.choice(['+=', '-='])} {r.choice(['0.5', '0.25', '0.1'])} * {{0}};", [e])
        return Stmt(f"{target} *= 1.0 + 0.25 * tanh{{f}}({{0}});", [e])

    def loop(self, depth: int) -> Stmt:
        r = self.r
        v = self.fresh("i")
        k = r.random()
        if k < 0.4:
            bound, safe = str(r.randint(2, 6)), None
            self.features.add("loop-fixed")
        elif k < 0.75:
            bound, safe = "n", self.nx
            self.features.add("loop-n")
        else:
            bound, safe = str(r.randint(2, 8)), None
            self.features.add("while-break")
        limit = safe if safe is not None else int(bound)
        self.loopvars.append((v, limit))
        if depth > 0:
            self.features.add("nested-loop")
        body = self.block(r.randint(1, 3), depth + 1)
        if k >= 0.75:
            cond = self.expr(2)
            self.loopvars.pop()
            thresh = r.choice(["0.5", "1.0", "-0.3", "2.0"])
            return Stmt(f"for (int {v} = 0; {v} < {bound}; {v}++) {{{{", [], body + [
                Stmt(f"if ({{0}} > {thresh}) break;", [cond])])
        self.loopvars.pop()
        return Stmt(f"for (int {v} = 0; {v} < {bound}; {v}++) {{{{", [], body)

    # -- helpers --
    def _helper(self) -> None:
        r = self.r
        i = len(self.helpers)
        name = f"@g{i}"
        k = r.random()
        noinline = "__attribute__((noinline)) " if r.random() < 0.4 else ""
        ab = self._param_expr(["a", "b"])
        if k < 0.3:
            tpl = noinline + "static {T} {NAME}({T} a, {T} b) {{ return {0}; }}"
            self.helpers.append(Helper(name, "static", tpl, [ab]))
            self.callables.append((name + "({0}, {1})", 2))
            self.features.add("helper-static")
        elif k < 0.5:
            tpl = (noinline + "{T} {NAME}(const {T} *p, int m) {{\n  {T} acc = 0.125;\n"
                   "  for (int i = 0; i < m; i++) acc = tanh{f}({0});\n  return acc;\n}}")
            self.helpers.append(Helper(name, "extern", tpl, [self._param_expr(["p[i]", "acc"])]))
            arr = r.choice([a for a in self.arrays if a != "st.v"])
            self.callables.append((f"{name}({arr}, {self.arrays[arr]})", 0))
            self.features.add("helper-extern")
        elif k < 0.7:
            tpl = noinline + "static void {NAME}({T} *p, int m) {{\n  for (int i = 0; i < m; i++) p[i] = tanh{f}({0});\n}}"
            self.helpers.append(Helper(name, "inplace", tpl, [self._param_expr(["p[i]", "p[(i + 1) % m]"])]))
            self.features.add("helper-inplace")
        elif k < 0.82:
            tpl = ("{T} {NAME}({T} a, int d) {{\n  if (d <= 0) return {0};\n"
                   "  return {1};\n}}")
            rec = Expr(f"({{0}} + 0.5 * {name}({{1}}, d - 1))", [self._param_expr(["a"]), self._param_expr(["a"])])
            self.helpers.append(Helper(name, "recursive", tpl, [self._param_expr(["a"]), rec]))
            self.callables.append((f"{name}({{0}}, {r.randint(1, 3)})", 1))
            self.features.add("recursion")
        else:
            e1, e2 = self._param_expr(["a", "b"]), ab
            tpl = ("static {T} {NAME}_a({T} a, {T} b) {{ return {0}; }}\n"
                   "static {T} {NAME}_b({T} a, {T} b) {{ return {1}; }}\n"
                   "static {T} (*const {NAME}_tab[2])({T}, {T}) = {{{NAME}_a, {NAME}_b}};\n"
                   "static {T} {NAME}({T} a, {T} b, int n) {{ return {NAME}_tab[n % 2](a, b); }}")
            self.helpers.append(Helper(name, "fnptr", tpl, [e1, e2]))
            self.callables.append((name + "({0}, {1}, n)", 2))
            self.features.add("function-pointer")

    def _param_expr(self, names: list[str]) -> Expr:
        """An expression over a helper's parameters only."""
        saved = (self.scalars, self.arrays, self.loopvars, self.callables)
        self.scalars, self.arrays, self.loopvars, self.callables = list(names), {}, [], []
        try:
            return self.expr(2)
        finally:
            self.scalars, self.arrays, self.loopvars, self.callables = saved


def generate(seed: int, index: int) -> Program:
    """Program ``index`` of run ``seed``: independent of how many others are generated or batched."""
    rng = random.Random(f"enzcc-fuzz:{seed}:{index}")
    return Gen(rng, f"p{index}").program()


def clone(p: Program) -> Program:
    return copy.deepcopy(p)

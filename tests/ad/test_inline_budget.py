"""Calls inside differentiated code that are not inlined because the callee, with everything it would inline in
turn, is too large (``enzcc.ad.prepare.MAX_EXPANDED_SIZE``): small functions calling each other many times over
(REBOUND's integrators) expanded exponentially when everything was inlined ('too many calls to inline' after
minutes). Such a callee is differentiated once, as a function of its own; a derivative refused inside it stops
the program only if a run reaches the call. Gradients against finite differences; structure from the symbols of
the program (the cut callee's augmented primal)."""

import subprocess

from adharness import PRELUDE, assert_tree_gradient, call_tree_program
from enzcc_testing import need

pytestmark = need("clang-22", "nm")

DEPTH = 16  # 2**16 calls to the leaf: far past what inlining everything could take


def _dag_source() -> str:
    """level0 calls level1 twice, which calls level2 twice... (noinline: LLVM keeps the tree); the leaves step a
    pair of bodies. ``other`` (called only with an argument on the command line) is as large and has a stack
    array of variable size, which a function differentiated as a call cannot have."""
    return call_tree_program(DEPTH, 0, "level0(b, 0);\n  if (mode) other(b, mode + 2);", defs=r"""
__attribute__((noinline)) void other(struct body *b, int n) {
  double tmp[n];
  for (int i = 0; i < n; i++) tmp[i] = b[i & 1].x * (i + 1);
  level11(b, n); level11(b, n + 1);
  for (int i = 0; i < n; i++) b[i & 1].v += 1e-3 * tmp[n - 1 - i];
}
int mode;""", setup="mode = argc > 1;")


def test_exponential_call_tree_is_cut_and_differentiated(enzcc):
    enzcc.write("dag.c", PRELUDE + _dag_source())
    enzcc("-O2", "dag.c", "-lm", "-o", "dag", env={"ENZCC_AD_LARGE_EXPANSION": "0"})  # (the large budgets)
    assert_tree_gradient(enzcc.run("./dag").stdout, 1.0)
    symbols = subprocess.run(["nm", str(enzcc.cwd / "dag")], capture_output=True, text=True).stdout
    # (the cut: the first level whose expansion is past the limit is called through its augmented primal)
    assert "augmented_level10" in symbols, symbols
    # a refused derivative inside a cut callee stops the program where the call is reached, before any
    # derivative is returned
    r = enzcc.run("./dag", "other", check=False)
    assert r.returncode != 0 and "ad.0" not in r.stdout
    assert "stack allocation of variable size" in r.stderr and r.stderr.startswith("enzcc: "), r.stderr


def test_string_copies_carry_no_derivative(enzcc):
    """strcpy, strncpy and strcat write characters, also into buffers that hang off a struct with derivatives
    (REBOUND's message log): no derivative, where they were 'no derivative rule' before. (Characters written
    over floats stay refused: test_plain_code.)"""
    src = r"""
struct sim { double x[2]; char *log; char **names; };
char msg[16] = "leapfrog";
double f(struct sim *s) {
  strcpy(s->names[1], msg);
  strncpy(s->log, "step", 8);
  strcat(s->log, msg);
  double y = s->x[0] * s->x[1] + sin(s->x[0]);
  s->x[1] = y;
  return y * y;
}
int main(void) {
  char log[32] = "", dlog[32] = "", n0[16], n1[16], dn0[16], dn1[16];
  char *names[2] = {n0, n1}, *dnames[2] = {dn0, dn1};
  struct sim s = {{0.5, 2.0}, log, names}, ds = {{0, 0}, dlog, dnames};
  __enzyme_autodiff((void *)f, enzyme_dup, &s, &ds);
  double x0 = 0.5, x1 = 2.0, y = x0 * x1 + sin(x0);
  report("ad.0", ds.x[0]); report("an.0", 2 * y * (x1 + cos(x0)));
  report("ad.1", ds.x[1]); report("an.1", 2 * y * x0);
  printf("%s %s\n", n1, s.log);
  return 0;
}
"""
    for opt in ("-O0", "-O2"):
        enzcc.write("s.c", PRELUDE + src)
        enzcc(opt, "s.c", "-lm", "-o", "s")
        out = enzcc.run("./s").stdout
        assert "leapfrog stepleapfrog" in out
        v = dict((k, float(x)) for k, x in (line.split() for line in out.splitlines() if line.startswith("a")))
        for i in (0, 1):
            assert abs(v[f"ad.{i}"] - v[f"an.{i}"]) <= 1e-12 * abs(v[f"an.{i}"]), (opt, v)

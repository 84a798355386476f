"""Integer struct fields at -O0, where clang emits no TBAA to say they are integers (GSL's LU decomposition:
``minMN = GSL_MIN(A->size1, A->size2)`` stored as a new vector's size, and the permutation's ``size_t *data``
swapped through ``tmp = p->data[i]``). A size read from a struct's integer field by its declared type
(``getelementptr %struct.S, p, 0, k`` landing on an i64) is no float's bits, and an array whose pointer is read
from a struct field (the same base, the same field) and indexed as ``size_t`` everywhere in the function, with
its elements compared as integers there, holds integers. Before: 'integer bits loaded from memory that has
derivatives are stored here after a phi, select or bit operation' at compile time, then, past that, the program
stopped with 'cannot tell whether the i64 copied here is a floating-point value'. Gradients against the analytic
one and central differences, at -O0 and -O2; a ``void *`` field also indexed as ``double`` stays unknown."""

import pytest

from adharness import PRELUDE, build_and_run
from enzcc_testing import need

pytestmark = need("clang-22")

SRC = r"""struct mat { size_t n1, n2, tda; double *data; };
struct vec { size_t size; unsigned *data; };
struct perm { size_t size; ELEM_T *data; };

static struct vec *vec_alloc(size_t n) {
  struct vec *v = malloc(sizeof *v);
  v->data = malloc(n * sizeof(unsigned));
  v->size = n;
  return v;
}

/* partial pivoting by |a|, as GSL's LU: the pivots into a vector, the permutation swapped in place */
__attribute__((noinline)) static void pivots(struct mat *A, struct perm *p) {
  size_t n = A->n1 < A->n2 ? A->n1 : A->n2;
  struct vec *piv = vec_alloc(n);
  for (size_t i = 0; i < p->size; i++) p->data[i] = i;
  for (size_t j = 0; j < n; j++) {
    size_t best = j;
    for (size_t k = j + 1; k < n; k++)
      if (fabs(A->data[k * A->tda + j]) > fabs(A->data[best * A->tda + j])) best = k;
    piv->data[j] = (unsigned)best;
  }
  for (size_t j = 0; j < n; j++) {
    unsigned b = piv->data[j];
    if (p->data[b] != p->data[j]) {
      ELEM_T tmp = p->data[b];
      p->data[b] = p->data[j];
      p->data[j] = tmp;
    }
  }
#ifdef ALSO_DOUBLE
  ((double *)p->data)[0] += 0.0;
#endif
  free(piv->data);
  free(piv);
}

double f(double *a) {
  struct mat *A = malloc(sizeof *A);  /* (on the heap, as GSL's: memory with derivatives, its sizes too) */
  *A = (struct mat){3, 3, 3, a};
  struct perm *p = malloc(sizeof *p);
  p->size = 3;
  p->data = malloc(3 * sizeof(ELEM_T));
  pivots(A, p);
  double s = 0;
  for (size_t i = 0; i < 3; i++) s += (i + 1.0) * a[p->data[i] * 3 + i] * a[p->data[i] * 3 + i];
  free(p->data);
  free(p);
  free(A);
  return s;
}

int main(void) {
  double a[9] = {0.1, 2.0, 0.3, 1.5, -0.2, 0.8, -0.4, 0.6, 2.5}, da[9] = {0};
  __enzyme_autodiff((void *)f, enzyme_dup, a, da);
  /* the pivots do not move under a small change: d/da[p_i, i] = 2 (i + 1) a[p_i, i] */
  struct mat A = {3, 3, 3, a};
  struct perm p = {3, malloc(3 * sizeof(size_t))};
  pivots(&A, &p);
  double an[9] = {0};
  for (int i = 0; i < 3; i++) an[p.data[i] * 3 + i] = 2 * (i + 1.0) * a[p.data[i] * 3 + i];
  free(p.data);
  for (int i = 0; i < 9; i++) {
    double h = 1e-6, t = a[i];
    a[i] = t + h; double up = f(a);
    a[i] = t - h; double dn = f(a);
    a[i] = t;
    char k[16];
    sprintf(k, "ad.%d", i); report(k, da[i]);
    sprintf(k, "an.%d", i); report(k, an[i]);
    sprintf(k, "fd.%d", i); report(k, (up - dn) / (2 * h));
  }
  return 0;
}
"""


@pytest.mark.parametrize("opt,inline", [("-O0", "auto"), ("-O0", "none"), ("-O2", "auto")])
def test_integer_fields_and_index_arrays(enzcc, opt, inline):
    v = build_and_run(enzcc, SRC, opt, extra=("-DELEM_T=size_t", f"--ad-inline={inline}"))
    assert any(abs(v[f"an.{i}"]) > 0.1 for i in range(9)), v  # (not a zero gradient)
    for i in range(9):
        assert abs(v[f"ad.{i}"] - v[f"an.{i}"]) <= 1e-12 * max(1.0, abs(v[f"an.{i}"])), (i, v)
        assert abs(v[f"ad.{i}"] - v[f"fd.{i}"]) <= 1e-6 * max(1.0, abs(v[f"fd.{i}"])), (i, v)


def test_array_also_indexed_as_double_stays_unknown(enzcc):
    """The same field read as ``double *`` too: what the i64 copied holds is not known (a run-time stop or a
    compile-time refusal with the message, never a wrong gradient)."""
    enzcc.write("t.c", PRELUDE + SRC)
    r = enzcc("-O0", "-w", "t.c", "-DELEM_T=size_t", "-DALSO_DOUBLE", "-lm", "-o", "t", check=False)
    if r.returncode == 0:
        r = enzcc.run("./t", check=False)
    assert r.returncode != 0, r.stdout
    assert "cannot tell whether the i64 copied here is a floating-point value" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr

"""The frames of derived calls (a callee that is not inlined: its augmented primal allocates a frame, its reverse
function releases it) are kept in a pool of their pair and serve the next call instead of a ``malloc`` and a
``free`` each (:func:`enzcc.ad.split._new_frame`), and so do the buffers of their tapes
(:meth:`enzcc.ad.tape.Tape.finish`). ``-Wl,--wrap=malloc`` (and ``realloc``, ``free``) counts the program's heap
allocations:
a gradient of a loop of N such calls, run again, allocates no frame; a thread that ends gives its pool back;
``__enzyme_augmentfwd``'s tapes released out of order; gradients against central differences."""

import pytest

from adharness import build_and_run
from enzcc_testing import need

pytestmark = need("clang-22", "llvm-objcopy-22")

STEPS = 200

SOURCE = r"""
#include <pthread.h>
void *__real_malloc(size_t);
void *__real_realloc(void *, size_t);
void __real_free(void *);
static long n_malloc, n_live;
void *__wrap_malloc(size_t n) { n_malloc++; n_live++; return __real_malloc(n); }
void *__wrap_realloc(void *p, size_t n) { if (!p) { n_malloc++; n_live++; } return __real_realloc(p, n); }
void __wrap_free(void *p) { if (p) n_live--; __real_free(p); }

typedef struct { void *tape; double y; } aug_t;
aug_t __enzyme_augmentfwd(void *, ...);
double __enzyme_reverse(void *, ...);

/* recursive: never inlined, so each call in the loop gets a frame of its own */
double stage(double *s, int depth, int n) {
  if (depth == 0) return s[0];
  for (int j = 0; j < n; j++) {
    s[1] -= 0.01 * sin(s[0]);
    if (s[1] > 0) s[0] = s[0] * cos(0.01 * s[1]) + 0.01 * s[1];
    else s[0] = s[0] * s[0] - 0.1;
  }
  return stage(s, depth - 1, n) * 0.5 + cos(s[1]);
}

double run(const double *x, int steps, int n) {
  double s[2] = {x[0], x[1]}, out = 0;
  for (int k = 0; k < steps; k++) out += stage(s, 1, n) / steps;
  return out + s[0] * s[1];
}

double f(double x) { return stage((double[2]){x, 0.25}, 1, 3); }

static void *in_thread(void *arg) {
  double x[2] = {0.3, -0.4}, dx[2] = {0};
  __enzyme_autodiff((void *)run, enzyme_dup, x, dx, enzyme_const, STEPS, enzyme_const, 5);
  *(double *)arg = dx[0];
  return 0;
}

int main(void) {
  double x[2] = {0.3, -0.4}, dx[2] = {0}, h = 1e-6;
  __enzyme_autodiff((void *)run, enzyme_dup, x, dx, enzyme_const, STEPS, enzyme_const, 5);
  long before = n_malloc;
  dx[0] = dx[1] = 0;
  __enzyme_autodiff((void *)run, enzyme_dup, x, dx, enzyme_const, STEPS, enzyme_const, 5);
  report("second_call_mallocs", n_malloc - before);
  for (int i = 0; i < 2; i++) {
    double xp[2] = {x[0], x[1]}, xm[2] = {x[0], x[1]};
    xp[i] += h; xm[i] -= h;
    report(i ? "fd.1" : "fd.0", (run(xp, STEPS, 5) - run(xm, STEPS, 5)) / (2 * h));
    report(i ? "rev.1" : "rev.0", dx[i]);
  }
  long live = n_live;
  double got = 0;
  pthread_t t;
  pthread_create(&t, 0, in_thread, &got);
  pthread_join(t, 0);
  report("thread_live_after", n_live - live);
  report("thread.rev", got);
  report("thread.expect", dx[0]);
  /* two tapes of one pair, released in the order they were made */
  aug_t a = __enzyme_augmentfwd((void *)f, 0.5);
  aug_t b = __enzyme_augmentfwd((void *)f, 0.9);
  double da = __enzyme_reverse((void *)f, 0.5, 1.0, a.tape);
  double db = __enzyme_reverse((void *)f, 0.9, 1.0, b.tape);
  report("fifo.a", da);
  report("fifo.b", db);
  report("fifo.fd.a", (f(0.5 + h) - f(0.5 - h)) / (2 * h));
  report("fifo.fd.b", (f(0.9 + h) - f(0.9 - h)) / (2 * h));
  return 0;
}
""".replace("STEPS", str(STEPS))


def close(a: float, b: float, rel: float = 1e-6) -> bool:
    return abs(a - b) <= 1e-8 + rel * max(abs(a), abs(b))


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_frames_are_reused(enzcc, opt):
    v = build_and_run(enzcc, SOURCE, opt, extra=("-pthread", "-Wl,--wrap=malloc,--wrap=realloc,--wrap=free"))
    for i in (0, 1):
        assert close(v[f"rev.{i}"], v[f"fd.{i}"]), v
    # a frame and a tape buffer per derived call made the second gradient allocate 2 STEPS blocks; pooled, none
    assert v["second_call_mallocs"] < STEPS // 10, v
    # a thread's first call allocates its own frames and gives them back when it ends
    assert v["thread_live_after"] == 0, v
    assert v["thread.rev"] == v["thread.expect"], v
    for k in ("a", "b"):
        assert close(v[f"fifo.{k}"], v[f"fifo.fd.{k}"]), v


SLOTS = r"""
long __enzyme_augmentsize(void *, ...);

/* adjoints flow through many values and two branches; recursive, so differentiated as a call */
double step(double *s, int depth) {
  if (depth == 0) return 0;
  double a = s[0], b = s[1], c = s[2];
  double e = sin(a) * cos(b), f = exp(-c * c) + a * b, g = tanh(e - f);
  if (a > 0) { s[0] = a + 0.01 * g * f; s[1] = b - 0.01 * e * c; }
  else { s[0] = a - 0.02 * f; s[1] = b + 0.01 * g; }
  s[2] = c + 0.01 * (e + f + g);
  return g + step(s, depth - 1);
}

double run(const double *x) {
  double s[3] = {x[0], x[1], x[2]}, out = 0;
  for (int k = 0; k < 50; k++) out += step(s, 2);
  return out + s[0] * s[2];
}

int main(void) {
  report("frame_bytes", __enzyme_augmentsize((void *)step, enzyme_dup, enzyme_const));
  double x[3] = {0.4, -0.3, 0.2}, dx[3] = {0}, h = 1e-6;
  __enzyme_autodiff((void *)run, enzyme_dup, x, dx);
  char name[16];
  for (int i = 0; i < 3; i++) {
    double xp[3] = {x[0], x[1], x[2]}, xm[3] = {x[0], x[1], x[2]};
    xp[i] += h; xm[i] -= h;
    snprintf(name, sizeof name, "fd.%d", i); report(name, (run(xp) - run(xm)) / (2 * h));
    snprintf(name, sizeof name, "rev.%d", i); report(name, dx[i]);
  }
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_frame_holds_what_crosses(enzcc, opt):
    """The frame holds what the reverse call needs from the augmented one (a handful of values, the callee's
    tape, the flag of its use: 12 slots at most), not the adjoints' slots, which the augmented primal zeroed
    for it (160 bytes at -O0, 192 at -O2 before); those are the reverse function's own."""
    v = build_and_run(enzcc, SLOTS, opt)
    assert v["frame_bytes"] <= 12 * 8, v
    for i in range(3):
        assert close(v[f"rev.{i}"], v[f"fd.{i}"]), v

"""Checkpointed time loops (``<enzyme/checkpoint.h>``), at -O0..-O3: ``__enzyme_checkpoint_for`` and
``__enzyme_checkpoint_while`` driven by the reference schemes (Revolve, Periodic, StoreAll). Checked against the
gradient of the same loop without checkpointing (to 1e-12), central differences, and the protocol: each step is
taped once, Revolve keeps at most its budget of snapshots, the memory after the gradient is what the forward
pass left (a global the step writes is in the snapshots), forward mode gives the plain loop's tangent, nested
checkpointed loops, and the one-line errors."""

import pytest

from adharness import PRELUDE, assert_close, build_and_run
from enzcc_testing import need

pytestmark = need("clang-22", "llvm-objcopy-22")

OPTS = ["-O0", "-O1", "-O2", "-O3"]

FOR_LOOP = r"""
#include <enzyme/checkpoint.h>
enum { N = 5 };
static double glob[N];   /* written by every step: the snapshots must hold it */
static double kappa = 0.1;
__attribute__((noinline)) static void step(int64_t i, double *u) {
  double t[N];
  for (int k = 0; k < N; k++)
    t[k] = u[k] + kappa * (u[(k + 1) % N] - 2 * u[k] + u[(k + N - 1) % N]) + 0.01 * sin(glob[k] + 0.1 * (double)i);
  for (int k = 0; k < N; k++) { glob[k] = 0.9 * glob[k] + 0.1 * t[k] * t[k]; u[k] = t[k]; }
}
static double loss(const double *u) {
  double s = 0;
  for (int k = 0; k < N; k++) s += u[k] * u[k] + glob[k];
  return s;
}
static double plain(double *u, int64_t n) {
  for (int64_t i = 0; i < n; i++) step(i, u);
  return loss(u);
}
static double ckpt(double *u, int64_t n, const EnzymeCheckpointScheme *s, EnzymeCkptConfig *c) {
  __enzyme_checkpoint_for((void *)step, 0, n, enzyme_scheme, s, c, enzyme_checkpoint_region, u,
                          (int64_t)(N * sizeof(double)), u);
  return loss(u);
}
static void init(double *u) {
  for (int k = 0; k < N; k++) { u[k] = 1.0 + 0.5 * sin((double)k); glob[k] = 0.25 * k; }
}
int main(void) {
  const EnzymeCheckpointScheme *schemes[3] = {&EnzymeCkptRevolve, &EnzymeCkptPeriodic, &EnzymeCkptStoreAll};
  const char *names[3] = {"revolve", "periodic", "storeall"};
  int64_t steps[] = {0, 1, 2, 7, 20};
  int64_t snaps[] = {1, 2, 3};
  char key[96];
  for (unsigned a = 0; a < sizeof steps / sizeof *steps; a++) {
    int64_t n = steps[a];
    double u[N], du[N] = {0}, uref[N], gref[N];
    init(u);
    __enzyme_autodiff((void *)plain, enzyme_dup, u, du, enzyme_const, n);
    memcpy(uref, u, sizeof u); memcpy(gref, glob, sizeof glob);
    for (int k = 0; k < N; k++) {
      double h = 1e-6, up, dn;
      init(u); u[k] += h; up = plain(u, n);
      init(u); u[k] -= h; dn = plain(u, n);
      snprintf(key, sizeof key, "plain.n%lld.%d", (long long)n, k); report(key, du[k]);
      snprintf(key, sizeof key, "fd.n%lld.%d", (long long)n, k); report(key, (up - dn) / (2 * h));
    }
    for (int s = 0; s < 3; s++)
      for (unsigned c = 0; c < sizeof snaps / sizeof *snaps; c++) {
        EnzymeCkptStats stats;
        EnzymeCkptConfig config = {snaps[c], 0, NULL, 0, &stats};
        double v[N], dv[N] = {0};
        memset(&stats, 0, sizeof stats);
        init(v);
        __enzyme_autodiff((void *)ckpt, enzyme_dup, v, dv, enzyme_const, n, enzyme_const, schemes[s],
                          enzyme_const, &config);
        for (int k = 0; k < N; k++) {
          snprintf(key, sizeof key, "%s%lld.n%lld.%d", names[s], (long long)snaps[c], (long long)n, k);
          report(key, dv[k]);
        }
        snprintf(key, sizeof key, "state.%s%lld.n%lld", names[s], (long long)snaps[c], (long long)n);
        report(key, memcmp(v, uref, sizeof v) != 0 || memcmp(glob, gref, sizeof glob) != 0);
        snprintf(key, sizeof key, "taped.%s%lld.n%lld", names[s], (long long)snaps[c], (long long)n);
        report(key, (double)(stats.taped_steps - n));
        snprintf(key, sizeof key, "slots.%s%lld.n%lld", names[s], (long long)snaps[c], (long long)n);
        report(key, (double)stats.max_slots);
      }
    double w[N];
    init(w);
    double p = plain(w, n);
    init(w);
    EnzymeCkptConfig config = {2, 0, NULL, 0, NULL};
    snprintf(key, sizeof key, "primal.n%lld", (long long)n);
    report(key, ckpt(w, n, &EnzymeCkptRevolve, &config) - p);
  }
  return 0;
}
"""


@pytest.mark.parametrize("opt", OPTS)
def test_checkpoint_for_every_scheme(enzcc, opt):
    v = build_and_run(enzcc, FOR_LOOP, opt)
    for n in (0, 1, 2, 7, 20):
        for name in ("revolve", "periodic", "storeall"):
            for c in (1, 2, 3):
                assert_close(v, f"{name}{c}.n{n}.", f"plain.n{n}.", rel=1e-12, abs_=1e-14)
                assert v[f"state.{name}{c}.n{n}"] == 0, (name, c, n)
                assert v[f"taped.{name}{c}.n{n}"] == 0, (name, c, n)  # every step taped once
            assert v[f"slots.revolve{c}.n{n}"] <= c
        assert_close(v, f"plain.n{n}.", f"fd.n{n}.", rel=1e-6, abs_=1e-7)
        assert v[f"primal.n{n}"] == 0
    # with one snapshot and 20 steps, store-all and periodic keep far more than revolve does
    assert v["slots.storeall1.n20"] >= 19 and v["slots.revolve1.n20"] == 1


WHILE_LOOP = r"""
#include <enzyme/checkpoint.h>
enum { N = 3 };
/* p is read by every step: its shadow collects the parameters' gradient */
__attribute__((noinline)) static int step(int64_t i, double *u, const double *p, int64_t limit) {
  double t0 = u[0], t1 = u[1], t2 = u[2];
  u[0] = t0 + 0.1 * sin(t1) * p[0];
  u[1] = t1 * (1 + 0.05 * t2) + 0.01 * (double)i;
  u[2] = t2 + 0.1 * t0 * p[1];
  return i + 1 < limit;
}
static double loss(const double *u) { return u[0] * u[1] + u[2] * u[2]; }
static double plain(double *u, const double *p, int64_t limit) {
  int64_t i = 0;
  while (step(i++, u, p, limit)) {
  }
  return loss(u);
}
static EnzymeCkptStats stats;
static double ckpt(double *u, const double *p, int64_t limit) {
  EnzymeCkptConfig config = {0, 0, NULL, 0, &stats};
  __enzyme_checkpoint_while((void *)step, enzyme_scheme, &EnzymeCkptStoreAll, &config, enzyme_checkpoint_region,
                            u, (int64_t)(N * sizeof(double)), u, p, limit);
  return loss(u);
}
/* forward mode through a checkpointed for loop: the tangent of each step, in order */
static double fplain(double *u, const double *p, int64_t n) {
  for (int64_t i = 0; i < n; i++) step(i, u, p, n);
  return loss(u);
}
static double fckpt(double *u, const double *p, int64_t n) {
  EnzymeCkptConfig config = {2, 0, NULL, 0, NULL};
  __enzyme_checkpoint_for((void *)step, 0, n, enzyme_scheme, &EnzymeCkptRevolve, &config,
                          enzyme_checkpoint_region, u, (int64_t)(N * sizeof(double)), u, p, n);
  return loss(u);
}
int main(void) {
  char key[64];
  for (int64_t lim = 1; lim <= 9; lim += 4) {
    double u[N] = {0.3, 0.7, 1.1}, du[N] = {0}, p[N] = {1.5, -0.5, 0}, dp[N] = {0};
    double v[N] = {0.3, 0.7, 1.1}, dv[N] = {0}, dq[N] = {0};
    __enzyme_autodiff((void *)plain, enzyme_dup, u, du, enzyme_dup, p, dp, enzyme_const, lim);
    __enzyme_autodiff((void *)ckpt, enzyme_dup, v, dv, enzyme_dup, p, dq, enzyme_const, lim);
    for (int k = 0; k < N; k++) {
      snprintf(key, sizeof key, "plain.%lld.u%d", (long long)lim, k); report(key, du[k]);
      snprintf(key, sizeof key, "ckpt.%lld.u%d", (long long)lim, k); report(key, dv[k]);
      snprintf(key, sizeof key, "plain.%lld.p%d", (long long)lim, k); report(key, dp[k]);
      snprintf(key, sizeof key, "ckpt.%lld.p%d", (long long)lim, k); report(key, dq[k]);
    }
    snprintf(key, sizeof key, "state.%lld", (long long)lim); report(key, memcmp(u, v, sizeof u) != 0);
    snprintf(key, sizeof key, "taped.%lld", (long long)lim); report(key, (double)stats.taped_steps);
    double a[N] = {0.3, 0.7, 1.1}, da[N] = {1, 0.5, -2}, b[N] = {0.3, 0.7, 1.1}, db[N] = {1, 0.5, -2};
    double dpp[N] = {0.25, 1, 0};
    snprintf(key, sizeof key, "fwd.plain.%lld", (long long)lim);
    report(key, __enzyme_fwddiff((void *)fplain, enzyme_dup, a, da, enzyme_dup, p, dpp, enzyme_const, lim));
    snprintf(key, sizeof key, "fwd.ckpt.%lld", (long long)lim);
    report(key, __enzyme_fwddiff((void *)fckpt, enzyme_dup, b, db, enzyme_dup, p, dpp, enzyme_const, lim));
  }
  return 0;
}
"""


@pytest.mark.parametrize("opt", OPTS)
def test_checkpoint_while_and_forward_mode(enzcc, opt):
    v = build_and_run(enzcc, WHILE_LOOP, opt)
    assert_close(v, "ckpt.", "plain.", rel=1e-12, abs_=1e-14)
    assert_close(v, "fwd.ckpt.", "fwd.plain.", rel=1e-12, abs_=1e-14)
    for lim in (1, 5, 9):
        assert v[f"state.{lim}"] == 0 and v[f"taped.{lim}"] == lim
        assert any(abs(v[f"ckpt.{lim}.p{k}"]) > 1e-3 for k in range(2))  # (the parameters do get a gradient)


NESTED = r"""
#include <enzyme/checkpoint.h>
enum { N = 3 };
/* written by the inner step only: the outer loop's snapshots must hold it too */
static double drift;
__attribute__((noinline)) static void step(int64_t i, double *u) {
  double t0 = u[0], t1 = u[1], t2 = u[2];
  u[0] = t0 + 0.1 * sin(t1);
  u[1] = t1 * (1 + 0.05 * t2) + 0.01 * (double)i + 0.2 * drift * drift;
  u[2] = t2 + 0.1 * t0 * t1;
  drift = 0.5 * drift + 0.3 * t0;
}
typedef struct { int64_t inner; EnzymeCkptConfig *config; } Levels;
/* a segment of the outer loop is itself a checkpointed loop */
__attribute__((noinline)) static void segment(int64_t k, double *u, const Levels *l) {
  __enzyme_checkpoint_for((void *)step, k * l->inner, l->inner, enzyme_scheme, &EnzymeCkptRevolve, l->config,
                          enzyme_checkpoint_region, u, (int64_t)(N * sizeof(double)), u);
}
static double loss(const double *u) { return u[0] * u[1] + u[2] * u[2] + drift; }
static double plain(double *u, int64_t n) {
  for (int64_t i = 0; i < n; i++) step(i, u);
  return loss(u);
}
static double nested(double *u, int64_t outer, const Levels *l, EnzymeCkptConfig *oc) {
  __enzyme_checkpoint_for((void *)segment, 0, outer, enzyme_scheme, &EnzymeCkptPeriodic, oc,
                          enzyme_checkpoint_region, u, (int64_t)(N * sizeof(double)), u, l);
  return loss(u);
}
int main(void) {
  char key[64];
  for (int64_t outer = 0; outer <= 4; outer += 2)
    for (int64_t inner = 1; inner <= 5; inner += 2) {
      EnzymeCkptConfig ic = {2, 0, NULL, 0, NULL}, oc = {2, 0, NULL, 0, NULL};
      Levels l = {inner, &ic};
      double u[N] = {0.3, 0.7, 1.1}, du[N] = {0}, v[N] = {0.3, 0.7, 1.1}, dv[N] = {0};
      drift = 0.4;
      __enzyme_autodiff((void *)plain, enzyme_dup, u, du, enzyme_const, outer * inner);
      double after = drift;
      drift = 0.4;
      __enzyme_autodiff((void *)nested, enzyme_dup, v, dv, enzyme_const, outer, enzyme_const, &l, enzyme_const,
                        &oc);
      for (int k = 0; k < N; k++) {
        snprintf(key, sizeof key, "plain.%lld.%lld.%d", (long long)outer, (long long)inner, k); report(key, du[k]);
        snprintf(key, sizeof key, "nested.%lld.%lld.%d", (long long)outer, (long long)inner, k); report(key, dv[k]);
      }
      snprintf(key, sizeof key, "state.%lld.%lld", (long long)outer, (long long)inner);
      report(key, memcmp(u, v, sizeof u) != 0 || after != drift);
    }
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_nested_checkpointed_loops(enzcc, opt):
    v = build_and_run(enzcc, NESTED, opt)
    assert_close(v, "nested.", "plain.", rel=1e-12, abs_=1e-14)
    assert all(v[k] == 0 for k in v if k.startswith("state."))


def test_checkpoint_without_inlining(enzcc):
    """The step and what it calls stay functions (--ad-inline=none): the same gradients."""
    v = build_and_run(enzcc, FOR_LOOP, "-O1", extra=("--ad-inline=none",))
    for name in ("revolve", "periodic", "storeall"):
        assert_close(v, f"{name}2.", "plain.", rel=1e-12, abs_=1e-14)


ERROR_PREFIX = r"""
#include <enzyme/checkpoint.h>
enum { N = 3 };
static EnzymeCkptConfig config = {2, 0, NULL, 0, NULL};
"""

ERRORS = {
    # the step writes u, but no region covers it: a recomputed step would start from a wrong state
    "uncovered": (r"""
__attribute__((noinline)) static void step(int64_t i, double *u) { u[i % N] = sin(u[(i + 1) % N]); }
static double f(double *u, int64_t n) {
  __enzyme_checkpoint_for((void *)step, 0, n, enzyme_scheme, &EnzymeCkptRevolve, &config, u);
  return u[0];
}""", "writes through its argument 2, whose memory no snapshot holds"),
    "no scheme": (r"""
__attribute__((noinline)) static void step(int64_t i, double *u) { u[i % N] = sin(u[(i + 1) % N]); }
static double f(double *u, int64_t n) {
  __enzyme_checkpoint_for((void *)step, 0, n, enzyme_checkpoint_region, u, (int64_t)sizeof(double) * N, u);
  return u[0];
}""", "needs its scheme: enzyme_scheme, &scheme, data"),
    "signature": (r"""
__attribute__((noinline)) static void step(int64_t i, double *u, double *w) { u[i % N] = sin(w[0]); }
static double f(double *u, int64_t n) {
  __enzyme_checkpoint_for((void *)step, 0, n, enzyme_scheme, &EnzymeCkptRevolve, &config,
                          enzyme_checkpoint_region, u, (int64_t)sizeof(double) * N, u);
  return u[0];
}""", "the step's index, then the arguments given after the markers"),
}


@pytest.mark.parametrize("case", sorted(ERRORS))
def test_checkpoint_errors(enzcc, case):
    body, message = ERRORS[case]
    main = r"""
int main(void) {
  double u[N] = {1, 2, 3}, du[N] = {0};
  __enzyme_autodiff((void *)f, enzyme_dup, u, du, enzyme_const, (int64_t)4);
  printf("%g\n", du[0]);
  return 0;
}"""
    enzcc.write("e.c", PRELUDE + ERROR_PREFIX + body + main)
    r = enzcc("-O2", "e.c", "-lm", "-o", "e", check=False)
    assert r.returncode != 0
    lines = [ln for ln in r.stderr.splitlines() if "error" in ln]
    assert len(lines) == 1 and message in lines[0], r.stderr
    assert "Traceback" not in r.stderr


HVP = r"""
#include <enzyme/checkpoint.h>
enum { N = 3 };
extern int enzyme_width, enzyme_dupv;
__attribute__((noinline)) static void step(int64_t i, double *u, const double *p) {
  double t[N];
  for (int k = 0; k < N; k++) t[k] = u[k] + 0.1 * p[k] * sin(u[(k + 1) % N] * u[k]) + 0.01 * (double)i;
  for (int k = 0; k < N; k++) u[k] = t[k];
}
static double loss(const double *u, const double *p) {
  double s = 0;
  for (int k = 0; k < N; k++) s += u[k] * u[k] * u[k] + p[k] * u[k];
  return s;
}
static double plain(double *u, double *p, int64_t n) {
  for (int64_t i = 0; i < n; i++) step(i, u, p);
  return loss(u, p);
}
static double ckpt(double *u, double *p, int64_t n, EnzymeCkptConfig *c) {
  __enzyme_checkpoint_for((void *)step, 0, n, enzyme_scheme, &EnzymeCkptRevolve, c, enzyme_checkpoint_region, u,
                          (int64_t)sizeof(double) * N, u, p);
  return loss(u, p);
}
/* the gradient with respect to u and p: through the checkpointed loop (c), or the plain one */
__attribute__((noinline)) static void grad(double *u, double *gu, double *p, double *gp, int64_t n,
                                           EnzymeCkptConfig *c) {
  if (c) __enzyme_autodiff((void *)ckpt, enzyme_dup, u, gu, enzyme_dup, p, gp, enzyme_const, n, enzyme_const, c);
  else __enzyme_autodiff((void *)plain, enzyme_dup, u, gu, enzyme_dup, p, gp, enzyme_const, n);
}
static const double u0[N] = {0.5, 0.7, 0.9}, p0[N] = {1.0, 0.8, 1.2}, vu[N] = {1, -1, 0.5}, vp[N] = {0.3, 0.2, -0.4};
static double worst(double a, double b, double w) { double e = fabs(a - b) / (fabs(b) + 1e-3); return e > w ? e : w; }
/* forward over reverse: the gradient g and the product hv along (tu, tp) */
static void hvp(double *u, double *tu, double *p, double *tp, double *g, double *hv, int64_t n, EnzymeCkptConfig *c) {
  __enzyme_fwddiff((void *)grad, enzyme_dup, u, tu, enzyme_dup, g, hv, enzyme_dup, p, tp, enzyme_dup, g + N, hv + N,
                   enzyme_const, n, enzyme_const, c);
}
int main(void) {
  double err_ref = 0, err_fd = 0, err_state = 0, err_lanes = 0, turns_off = 0;
  int64_t steps[] = {1, 5, 9}, snaps[] = {1, 2, 4};
  for (int a = 0; a < 3; a++) {
    int64_t n = steps[a];
    /* the plain loop's product: the reference */
    double ur[N], tur[N], pr[N], tpr[N], gr[2 * N] = {0}, hr[2 * N] = {0};
    memcpy(ur, u0, sizeof ur); memcpy(tur, vu, sizeof tur); memcpy(pr, p0, sizeof pr); memcpy(tpr, vp, sizeof tpr);
    hvp(ur, tur, pr, tpr, gr, hr, n, 0);
    /* central differences of the plain gradient along (vu, vp) */
    double fd[2 * N], gpl[2][2 * N];
    for (int s = 0; s < 2; s++) {
      double u[N], p[N], h = s ? -1e-6 : 1e-6;
      for (int k = 0; k < N; k++) { u[k] = u0[k] + h * vu[k]; p[k] = p0[k] + h * vp[k]; }
      memset(gpl[s], 0, sizeof gpl[s]);
      grad(u, gpl[s], p, gpl[s] + N, n, 0);
    }
    for (int k = 0; k < 2 * N; k++) fd[k] = (gpl[0][k] - gpl[1][k]) / 2e-6;
    for (int b = 0; b < 3; b++) {
      EnzymeCkptStats st = {0};
      EnzymeCkptConfig c = {snaps[b], 0, NULL, 0, &st};
      double u[N], tu[N], p[N], tp[N], g[2 * N] = {0}, hv[2 * N] = {0};
      memcpy(u, u0, sizeof u); memcpy(tu, vu, sizeof tu); memcpy(p, p0, sizeof p); memcpy(tp, vp, sizeof tp);
      hvp(u, tu, p, tp, g, hv, n, &c);
      for (int k = 0; k < 2 * N; k++) {
        err_ref = worst(hv[k], hr[k], worst(g[k], gr[k], err_ref));
        err_fd = worst(hv[k], fd[k], err_fd);
      }
      for (int k = 0; k < N; k++) err_state = worst(u[k], ur[k], worst(tu[k], tur[k], err_state));
      if (st.taped_steps != n) turns_off += 1;
    }
    /* two directions at once (vector mode): (vu, vp), then (vp, vu) against a scalar run along it */
    EnzymeCkptConfig c2 = {2, 0, NULL, 0, NULL};
    double u[N], p[N], g[2 * N] = {0}, tu[2][N], tp[2][N], hu[2][N] = {{0}}, hp[2][N] = {{0}};
    memcpy(u, u0, sizeof u); memcpy(p, p0, sizeof p);
    for (int k = 0; k < N; k++) { tu[0][k] = tp[1][k] = vu[k]; tp[0][k] = tu[1][k] = vp[k]; }
    __enzyme_fwddiff((void *)grad, enzyme_width, 2, enzyme_dupv, sizeof tu[0], u, tu, enzyme_dupv, sizeof hu[0], g,
                     hu, enzyme_dupv, sizeof tp[0], p, tp, enzyme_dupv, sizeof hp[0], g + N, hp, enzyme_const, n,
                     enzyme_const, &c2);
    double u2[N], t2[N], p2[N], s2[N], g2[2 * N] = {0}, h2[2 * N] = {0};
    memcpy(u2, u0, sizeof u2); memcpy(t2, vp, sizeof t2); memcpy(p2, p0, sizeof p2); memcpy(s2, vu, sizeof s2);
    hvp(u2, t2, p2, s2, g2, h2, n, 0);
    for (int k = 0; k < N; k++) {
      err_lanes = worst(hu[0][k], hr[k], worst(hp[0][k], hr[N + k], err_lanes));
      err_lanes = worst(hu[1][k], h2[k], worst(hp[1][k], h2[N + k], err_lanes));
    }
  }
  report("err_ref", err_ref);
  report("err_fd", err_fd);
  report("err_state", err_state);
  report("err_lanes", err_lanes);
  report("turns_off", turns_off);
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2", "-O3"])
def test_hessian_vector_product_through_a_checkpointed_loop(enzcc, opt):
    """Forward over reverse through the checkpointing driver: each snapshot holds the state and its tangent (one
    per vector lane), each step is turned once; the product equals forward over reverse of the plain loop and
    central differences of its gradient, and the state and its tangent after it are the plain loop's."""
    v = build_and_run(enzcc, HVP, opt, extra=("-w",))
    assert v["err_ref"] < 1e-12 and v["err_state"] < 1e-13 and v["err_lanes"] < 1e-12, v
    assert v["err_fd"] < 1e-6 and v["turns_off"] == 0, v


def test_reverse_over_a_checkpointed_gradient_is_refused(enzcc):
    """Reverse mode over the checkpointing driver: one line, at every level (the driver is found after it was
    inlined)."""
    outer = """
static double first(double *u, double *p) {
  double g[2 * N] = {0};
  EnzymeCkptConfig c = {2, 0, NULL, 0, NULL};
  grad(u, g, p, g + N, 3, &c);
  return g[0];
}
int main(void) {
  double u[N] = {1, 2, 3}, du[N] = {0}, p[N] = {1, 1, 1}, dp[N] = {0};
  __enzyme_autodiff((void *)first, enzyme_dup, u, du, enzyme_dup, p, dp);
  printf("%g\\n", du[0]);
  return 0;
}
"""
    enzcc.write("h.c", PRELUDE + HVP[:HVP.index("int main(void)")] + outer)
    for opt in ("-O0", "-O2"):
        r = enzcc(opt, "-w", "h.c", "-lm", "-o", "h", check=False)
        assert r.returncode != 0
        lines = [ln for ln in r.stderr.splitlines() if "error" in ln]
        assert len(lines) == 1 and "reverse mode over that is not supported" in lines[0], r.stderr


ANNOTATED = r"""
enum { N = 4 };
void __enzyme_ptr_size_hint(void *, size_t, size_t);
/* a loop annotated for checkpointing (Enzyme-MLIR's spelling) whose state is behind a pointer argument, with
   its extent given by __enzyme_ptr_size_hint: enzcc differentiates the loop whole (clang drops the annotation,
   with a warning), so the gradient is the plain loop's */
__attribute__((noinline)) static void run(double *u, long n) {
  __enzyme_ptr_size_hint(u, N * sizeof(double), 0);
  __attribute__((enzyme_checkpointing_enable("binomial", 3)))
  for (long i = 0; i < n; i++) {
    double t0 = u[0];
    for (int k = 0; k < N - 1; k++) u[k] = u[k] + 0.1 * sin(u[k + 1]) * (double)(i + 1);
    u[N - 1] = u[N - 1] * (1 + 0.05 * t0);
  }
}
static double f(const double *x, long n) {
  double u[N];
  for (int k = 0; k < N; k++) u[k] = x[k];
  run(u, n);
  double r = 0;
  for (int k = 0; k < N; k++) r += u[k] * u[k];
  return r;
}
int main(void) {
  double x[N] = {0.3, 0.7, 1.1, 1.5}, dx[N] = {0}, h = 1e-6;
  __enzyme_autodiff((void *)f, enzyme_dup, x, dx, enzyme_const, 6L);
  for (int k = 0; k < N; k++) {
    double xp[N], xm[N];
    memcpy(xp, x, sizeof x); memcpy(xm, x, sizeof x); xp[k] += h; xm[k] -= h;
    char key[16];
    snprintf(key, sizeof key, "ad.%d", k); report(key, dx[k]);
    snprintf(key, sizeof key, "fd.%d", k); report(key, (f(xp, 6) - f(xm, 6)) / (2 * h));
  }
  double v[N] = {1, 0, -1, 0.5};
  report("fwd", __enzyme_fwddiff((void *)f, enzyme_dup, x, v, enzyme_const, 6L));
  report("dot", dx[0] - dx[2] + 0.5 * dx[3]);
  return 0;
}
"""


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_ptr_size_hint_and_loop_annotation(enzcc, opt):
    """``__enzyme_ptr_size_hint`` is accepted (no derivative; removed) in reverse and forward mode."""
    v = build_and_run(enzcc, ANNOTATED, opt)
    assert_close(v, "ad.", "fd.", rel=1e-6, abs_=1e-7)
    assert abs(v["fwd"] - v["dot"]) <= 1e-12 * abs(v["dot"])


VECTOR = r"""
#include <enzyme/checkpoint.h>
extern int enzyme_width;
void __enzyme_autodiff_v(void *, ...);
void __enzyme_fwddiff_v(void *, ...);
enum { N = 3, W = 2 };
__attribute__((noinline)) static void step(int64_t i, double *u) {
  double t0 = u[0], t1 = u[1], t2 = u[2];
  u[0] = t0 + 0.1 * sin(t1 * t2);
  u[1] = t1 * (1 + 0.05 * t0) + 0.01 * (double)i;
  u[2] = t2 - 0.1 * t0 * t1;
}
/* two outputs of the final state */
static void outputs(const double *u, double *out) { out[0] = u[0] * u[1]; out[1] = u[2] * u[2] + u[0]; }
static void plain(double *u, double *out, int64_t n) {
  for (int64_t i = 0; i < n; i++) step(i, u);
  outputs(u, out);
}
static void ckpt(double *u, double *out, int64_t n, EnzymeCkptConfig *c) {
  __enzyme_checkpoint_for((void *)step, 0, n, enzyme_scheme, &EnzymeCkptRevolve, c, enzyme_checkpoint_region, u,
                          (int64_t)(N * sizeof(double)), u);
  outputs(u, out);
}
static const double u0[N] = {0.3, 0.7, 1.1};
int main(void) {
  char key[64];
  for (int64_t n = 0; n <= 9; n += 3) {
    for (int j = 0; j < W; j++) {  /* row j through the plain loop, one output at a time */
      double u[N], du[N] = {0}, out[W], dout[W] = {0};
      memcpy(u, u0, sizeof u);
      dout[j] = 1;
      __enzyme_autodiff((void *)plain, enzyme_dup, u, du, enzyme_dup, out, dout, enzyme_const, n);
      for (int k = 0; k < N; k++) { snprintf(key, sizeof key, "plain.%lld.%d.%d", (long long)n, j, k); report(key, du[k]); }
    }
    for (int64_t snaps = 1; snaps <= 2; snaps++) {  /* both rows in one checkpointed sweep */
      EnzymeCkptStats stats;
      memset(&stats, 0, sizeof stats);
      EnzymeCkptConfig config = {snaps, 0, NULL, 0, &stats};
      double u[N], du[W][N] = {{0}}, out[W], dout[W][W] = {{1, 0}, {0, 1}};
      memcpy(u, u0, sizeof u);
      __enzyme_autodiff_v((void *)ckpt, enzyme_width, W, enzyme_dup, u, du[0], du[1], enzyme_dup, out, dout[0],
                          dout[1], enzyme_const, n, enzyme_const, &config);
      for (int j = 0; j < W; j++)
        for (int k = 0; k < N; k++) {
          snprintf(key, sizeof key, "ckpt%lld.%lld.%d.%d", (long long)snaps, (long long)n, j, k);
          report(key, du[j][k]);
        }
      snprintf(key, sizeof key, "taped%lld.%lld", (long long)snaps, (long long)n);
      report(key, (double)(stats.taped_steps - n));
      snprintf(key, sizeof key, "slots%lld.%lld", (long long)snaps, (long long)n);
      report(key, (double)stats.max_slots);
    }
    /* forward mode, two tangents at once: column sums against the rows above */
    double u[N], t[W][N] = {{1, 0, 0.5}, {0, -1, 2}}, out[W], dout[W][W] = {{0}};
    EnzymeCkptConfig config = {2, 0, NULL, 0, NULL};
    memcpy(u, u0, sizeof u);
    __enzyme_fwddiff_v((void *)ckpt, enzyme_width, W, enzyme_dup, u, t[0], t[1], enzyme_dup, out, dout[0], dout[1],
                       enzyme_const, n, enzyme_const, &config);
    for (int l = 0; l < W; l++)
      for (int j = 0; j < W; j++) {
        snprintf(key, sizeof key, "fwd.%lld.%d.%d", (long long)n, l, j);
        report(key, dout[l][j]);
      }
  }
  return 0;
}
"""


@pytest.mark.parametrize("opt", OPTS)
def test_checkpoint_vector_mode(enzcc, opt):
    """enzyme_width through a checkpointed loop: one schedule (each step differentiated once) for every lane;
    each lane's row equals the plain loop's gradient of its output, and forward mode's lanes its tangents."""
    v = build_and_run(enzcc, VECTOR, opt)
    tangents = ((1, 0, 0.5), (0, -1, 2))
    for n in (0, 3, 6, 9):
        for snaps in (1, 2):
            assert_close(v, f"ckpt{snaps}.{n}.", f"plain.{n}.", rel=1e-12, abs_=1e-14)
            assert v[f"taped{snaps}.{n}"] == 0 and v[f"slots{snaps}.{n}"] <= snaps
        for lane, t in enumerate(tangents):
            for j in range(2):
                want = sum(v[f"plain.{n}.{j}.{k}"] * t[k] for k in range(3))
                assert v[f"fwd.{n}.{lane}.{j}"] == pytest.approx(want, rel=1e-12, abs=1e-14), (n, lane, j)
    assert abs(v["plain.9.0.0"] - v["plain.9.1.0"]) > 1e-3  # (the rows differ)

/* REBOUND (PyPI sdist rebound 4.4.11, src/*.c) under __enzyme_autodiff: a star and two planets, integrator
 * leapfrog, fixed dt, G = 1. Compile it with every REBOUND source file in one enzcc link, e.g.
 *     python3 -m enzcc -O2 -Irebound-4.4.11/src rebound_driver.c rebound-4.4.11/src/*.c -lm -o reb
 * (define REB_DRIVER_NO_MAIN to link it into another program; REB_DRIVER_STEPS_ONLY leaves out the
 * entry points through reb_simulation_integrate).
 *
 * Entry points (stable interface; ic holds the 18 initial values x, y, z, vx, vy, vz of body 0, 1, 2; the
 * masses are fixed, REB_DRIVER_MASSES):
 *   double reb_driver_steps(const double *ic, int nsteps)
 *       nsteps calls of reb_simulation_step, dt = REB_DRIVER_DT; returns the objective below.
 *   double reb_driver_integrate(const double *ic, double tmax)
 *       reb_simulation_integrate(sim, tmax) (exact_finish_time: the last step ends at tmax); the objective.
 *   void reb_driver_grad_steps(const double *ic, double *dic, int nsteps)
 *   void reb_driver_grad_integrate(const double *ic, double *dic, double tmax)
 *       reverse mode: dic += d objective / d ic (callers zero dic first).
 *   void reb_driver_initial(double *ic)
 *       a bound, mildly eccentric system to start from.
 * The objective is x of body 1 plus vy of body 2 at the end, so positions and velocities both matter.
 *
 * main (unless REB_DRIVER_NO_MAIN):
 *   reb check NSTEPS   gradients of both entry points against central finite differences; prints the largest
 *                      relative error of each and exits 1 when one is above 1e-6.
 *   reb bench NSTEPS REPS   interleaved timing of primal and gradient (reb_driver_steps); prints
 *                      "primal_us grad_us ratio" for the fastest of REPS rounds.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rebound.h"

#define REB_DRIVER_DT 0.01
#define REB_DRIVER_N 3

static const double REB_DRIVER_MASSES[REB_DRIVER_N] = {1.0, 1e-3, 5e-4};

extern int enzyme_dup, enzyme_const;
void __enzyme_autodiff(void *, ...);

/* The simulation the entry points integrate: leapfrog, fixed step, the three bodies of ic. */
static struct reb_simulation *reb_driver_create(const double *ic) {
    struct reb_simulation *r = reb_simulation_create();
    r->integrator = REB_INTEGRATOR_LEAPFROG;
    r->dt = REB_DRIVER_DT;
    for (int i = 0; i < REB_DRIVER_N; i++) {
        struct reb_particle p = {0};
        p.m = REB_DRIVER_MASSES[i];
        p.x = ic[6 * i + 0];
        p.y = ic[6 * i + 1];
        p.z = ic[6 * i + 2];
        p.vx = ic[6 * i + 3];
        p.vy = ic[6 * i + 4];
        p.vz = ic[6 * i + 5];
        reb_simulation_add(r, p);
    }
    return r;
}

/* The scalar both entry points return, read before the simulation is freed. */
static double reb_driver_objective(struct reb_simulation *r) {
    return r->particles[1].x + r->particles[2].vy;
}

double reb_driver_steps(const double *ic, int nsteps) {
    struct reb_simulation *r = reb_driver_create(ic);
    for (int s = 0; s < nsteps; s++)
        reb_simulation_step(r);
    double out = reb_driver_objective(r);
    reb_simulation_free(r);
    return out;
}

#ifndef REB_DRIVER_STEPS_ONLY
double reb_driver_integrate(const double *ic, double tmax) {
    struct reb_simulation *r = reb_driver_create(ic);
    reb_simulation_integrate(r, tmax);
    double out = reb_driver_objective(r);
    reb_simulation_free(r);
    return out;
}

#endif

void reb_driver_grad_steps(const double *ic, double *dic, int nsteps) {
    __enzyme_autodiff((void *)reb_driver_steps, enzyme_dup, ic, dic, enzyme_const, nsteps);
}

#ifndef REB_DRIVER_STEPS_ONLY
void reb_driver_grad_integrate(const double *ic, double *dic, double tmax) {
    __enzyme_autodiff((void *)reb_driver_integrate, enzyme_dup, ic, dic, enzyme_const, tmax);
}
#endif

void reb_driver_initial(double *ic) {
    static const double start[6 * REB_DRIVER_N] = {
        0.0, 0.0, 0.0, 0.0, 0.0, 0.0,          /* the star */
        1.0, 0.0, 0.0, 0.0, 1.05, 0.02,        /* a planet at 1 */
        0.0, 1.6, 0.05, -0.78, 0.0, 0.0,       /* a planet at 1.6 */
    };
    memcpy(ic, start, sizeof start);
}

#ifndef REB_DRIVER_NO_MAIN
static double reb_driver_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* Largest error of a gradient against central differences of f, relative to max(1, |g|). */
static double reb_driver_check_one(double (*f)(const double *, double), double arg, const double *g) {
    double ic[6 * REB_DRIVER_N], worst = 0;
    reb_driver_initial(ic);
    for (int k = 0; k < 6 * REB_DRIVER_N; k++) {
        const double h = 1e-6, saved = ic[k];
        ic[k] = saved + h;
        double up = f(ic, arg);
        ic[k] = saved - h;
        double down = f(ic, arg);
        ic[k] = saved;
        double fd = (up - down) / (2 * h);
        double err = fabs(fd - g[k]) / fmax(1.0, fabs(g[k]));
        if (err > worst) worst = err;
    }
    return worst;
}

static double reb_driver_steps_d(const double *ic, double n) { return reb_driver_steps(ic, (int)n); }

static int reb_driver_check(int nsteps) {
    double ic[6 * REB_DRIVER_N], g1[6 * REB_DRIVER_N] = {0}, e2 = 0;
    reb_driver_initial(ic);
    reb_driver_grad_steps(ic, g1, nsteps);
    double e1 = reb_driver_check_one(reb_driver_steps_d, nsteps, g1);
    printf("steps: f=%.15g maxrel=%.3g\n", reb_driver_steps(ic, nsteps), e1);
#ifndef REB_DRIVER_STEPS_ONLY
    double g2[6 * REB_DRIVER_N] = {0};
    reb_driver_grad_integrate(ic, g2, nsteps * REB_DRIVER_DT);
    e2 = reb_driver_check_one(reb_driver_integrate, nsteps * REB_DRIVER_DT, g2);
    printf("integrate: f=%.15g maxrel=%.3g\n", reb_driver_integrate(ic, nsteps * REB_DRIVER_DT), e2);
#endif
    for (int k = 0; k < 6 * REB_DRIVER_N; k++) printf("%s%.12g", k ? " " : "grad: ", g1[k]);
    printf("\n");
    return (e1 > 1e-6 || e2 > 1e-6) ? 1 : 0;
}

static void reb_driver_bench(int nsteps, int reps) {
    double ic[6 * REB_DRIVER_N], g[6 * REB_DRIVER_N];
    double best_p = 1e30, best_g = 1e30, sink = 0;
    reb_driver_initial(ic);
    for (int i = 0; i < reps; i++) {
        double t0 = reb_driver_now();
        sink += reb_driver_steps(ic, nsteps);
        double t1 = reb_driver_now();
        memset(g, 0, sizeof g);
        reb_driver_grad_steps(ic, g, nsteps);
        double t2 = reb_driver_now();
        sink += g[0];
        if (t1 - t0 < best_p) best_p = t1 - t0;
        if (t2 - t1 < best_g) best_g = t2 - t1;
    }
    printf("%.3f %.3f %.2f\n", 1e6 * best_p, 1e6 * best_g, best_g / best_p);
    if (sink == 12345.678) printf("!\n");
}

int main(int argc, char **argv) {
    int nsteps = argc > 2 ? atoi(argv[2]) : 100;
    if (argc > 1 && strcmp(argv[1], "bench") == 0) {
        reb_driver_bench(nsteps, argc > 3 ? atoi(argv[3]) : 20);
        return 0;
    }
    return reb_driver_check(nsteps);
}
#endif

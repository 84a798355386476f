/* Timing for the library drivers' "bench" mode (bench/libraries.py): the primal and the gradient are sampled
 * in alternating rounds, so that load from elsewhere on the machine falls on both alike. A sample is the mean
 * time per call of as many back-to-back calls as fill BENCH_MIN_TIME seconds (calibrated once on the primal
 * and once on the gradient); the medians over BENCH_ROUNDS rounds are printed as "bench.primal_s" and
 * "bench.gradient_s". The memory clobber between calls keeps the compiler from hoisting a pure call out of
 * the loop. Both rounds and the minimum time can be set from the environment (bench/libraries.py --quick). */
#ifndef ENZCC_BENCH_TIMER_H
#define ENZCC_BENCH_TIMER_H
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static volatile double bench_sink;

static double bench_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

static double bench_env(const char *name, double fallback) {
  const char *v = getenv(name);
  return v ? atof(v) : fallback;
}

static int bench_cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double bench_median(double *v, int n) {
  qsort(v, n, sizeof *v, bench_cmp);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* calls STMT until min_time has passed, doubling the count: how many calls fill min_time */
#define BENCH_CALIBRATE(reps, min_time, STMT)                                                                    \
  do {                                                                                                           \
    for (reps = 1;; reps *= 2) {                                                                                 \
      double t0_ = bench_now();                                                                                  \
      for (long i_ = 0; i_ < reps; i_++) {                                                                       \
        STMT;                                                                                                    \
        __asm__ volatile("" ::: "memory");                                                                       \
      }                                                                                                          \
      if (bench_now() - t0_ >= min_time || reps >= (1L << 40)) break;                                            \
    }                                                                                                            \
  } while (0)

#define BENCH_SAMPLE(out, reps, STMT)                                                                            \
  do {                                                                                                           \
    double t0_ = bench_now();                                                                                    \
    for (long i_ = 0; i_ < reps; i_++) {                                                                         \
      STMT;                                                                                                      \
      __asm__ volatile("" ::: "memory");                                                                         \
    }                                                                                                            \
    out = (bench_now() - t0_) / reps;                                                                            \
  } while (0)

#define BENCH_INTERLEAVED(PRIMAL, GRADIENT)                                                                      \
  do {                                                                                                           \
    int rounds_ = (int)bench_env("BENCH_ROUNDS", 7);                                                             \
    double min_time_ = bench_env("BENCH_MIN_TIME", 0.05);                                                        \
    if (rounds_ < 1) rounds_ = 1;                                                                                \
    if (rounds_ > 1000) rounds_ = 1000;                                                                          \
    long rp_, rg_;                                                                                               \
    double p_[1000], g_[1000];                                                                                   \
    BENCH_CALIBRATE(rp_, min_time_, PRIMAL);                                                                     \
    BENCH_CALIBRATE(rg_, min_time_, GRADIENT);                                                                   \
    for (int r_ = 0; r_ < rounds_; r_++) {                                                                       \
      if (r_ % 2) {                                                                                              \
        BENCH_SAMPLE(g_[r_], rg_, GRADIENT);                                                                     \
        BENCH_SAMPLE(p_[r_], rp_, PRIMAL);                                                                       \
      } else {                                                                                                   \
        BENCH_SAMPLE(p_[r_], rp_, PRIMAL);                                                                       \
        BENCH_SAMPLE(g_[r_], rg_, GRADIENT);                                                                     \
      }                                                                                                          \
    }                                                                                                            \
    printf("bench.primal_s %.9g\nbench.gradient_s %.9g\nbench.rounds %d\n", bench_median(p_, rounds_),          \
           bench_median(g_, rounds_), rounds_);                                                                  \
  } while (0)

#endif

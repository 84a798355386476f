/* Shared helpers for the enzcc benchmark suite: timing, input reading, finite differences, the gradient
 * check and the one-line JSON report every benchmark prints on stdout.
 *
 * A benchmark packs all its active parameters into one array p[P], provides
 *   double primal(const double *p)             the objective (data comes from file-level globals)
 *   void   gradient(const double *p, double *g) g = d objective / d p, via __enzyme_autodiff
 * and calls bench_run(). Both are called through volatile function pointers, so the compiler cannot inline
 * them into the timing loops or hoist repeated calls out of them.
 */
#ifndef ENZCC_BENCH_COMMON_H
#define ENZCC_BENCH_COMMON_H

#define _DEFAULT_SOURCE /* clock_gettime, M_PI */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

extern int enzyme_dup, enzyme_dupnoneed, enzyme_const, enzyme_out;
void __enzyme_autodiff(void *, ...);

/* ---------------------------------------------------------------------------------------------- */
/* options */

typedef struct {
  const char *data;   /* input file */
  int reps;           /* timed repetitions (the median is reported) */
  double min_time;    /* seconds: each repetition runs the call in a batch at least this long */
  int fd_coords;      /* coordinates timed for the finite-difference gradient when P is larger */
  int fd_full_max;    /* up to this many parameters the FD gradient is timed in full (not extrapolated) */
  int check_coords;   /* coordinates compared between AD and FD */
  int fd_time;        /* 0: skip the FD timing (the runner does it in one build only) */
  int check;          /* 0: skip the gradient check (extra timing rounds) */
  double rtol;        /* relative tolerance of the gradient check */
  unsigned long seed; /* for the choice of coordinates */
} bench_opts;

static void bench_usage(const char *prog) {
  fprintf(stderr,
          "usage: %s DATA [--reps N] [--min-time S] [--fd-coords N] [--fd-full-max N] [--check-coords N]\n"
          "          [--no-fd-time] [--no-check] [--rtol X] [--seed N]\n", prog);
  exit(2);
}

static bench_opts bench_args(int argc, char **argv) {
  bench_opts o = {NULL, 7, 0.05, 64, 512, 32, 1, 1, 1e-4, 12345};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int more = i + 1 < argc;
    if (!strcmp(a, "--reps") && more) o.reps = atoi(argv[++i]);
    else if (!strcmp(a, "--min-time") && more) o.min_time = atof(argv[++i]);
    else if (!strcmp(a, "--fd-coords") && more) o.fd_coords = atoi(argv[++i]);
    else if (!strcmp(a, "--fd-full-max") && more) o.fd_full_max = atoi(argv[++i]);
    else if (!strcmp(a, "--check-coords") && more) o.check_coords = atoi(argv[++i]);
    else if (!strcmp(a, "--no-fd-time")) o.fd_time = 0;
    else if (!strcmp(a, "--no-check")) o.check = 0;
    else if (!strcmp(a, "--rtol") && more) o.rtol = atof(argv[++i]);
    else if (!strcmp(a, "--seed") && more) o.seed = strtoul(argv[++i], NULL, 10);
    else if (a[0] != '-' && !o.data) o.data = a;
    else bench_usage(argv[0]);
  }
  if (!o.data) bench_usage(argv[0]);
  if (o.reps < 1) o.reps = 1;
  if (o.fd_coords < 1) o.fd_coords = 1;
  if (o.check_coords < 1) o.check_coords = 1;
  return o;
}

/* ---------------------------------------------------------------------------------------------- */
/* clock, random numbers */

static double bench_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static unsigned long long bench_rng_state = 0x9E3779B97F4A7C15ULL;

static unsigned long long bench_rand(void) { /* splitmix64 */
  unsigned long long z = (bench_rng_state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

/* ---------------------------------------------------------------------------------------------- */
/* input: whitespace-separated numbers; '#' starts a comment that runs to the end of the line */

typedef struct {
  FILE *f;
  const char *path;
} bench_reader;

static bench_reader bench_open(const char *path) {
  bench_reader r = {fopen(path, "r"), path};
  if (!r.f) {
    fprintf(stderr, "cannot open %s\n", path);
    exit(2);
  }
  return r;
}

static void bench_skip(bench_reader *r) {
  int c;
  while ((c = fgetc(r->f)) != EOF) {
    if (c == '#') {
      while ((c = fgetc(r->f)) != EOF && c != '\n') {}
    } else if (c != ' ' && c != '\n' && c != '\t' && c != '\r') {
      ungetc(c, r->f);
      return;
    }
  }
}

static double bench_read_double(bench_reader *r) {
  double v;
  bench_skip(r);
  if (fscanf(r->f, "%lf", &v) != 1) {
    fprintf(stderr, "%s: bad or missing number\n", r->path);
    exit(2);
  }
  return v;
}

static int bench_read_int(bench_reader *r) { return (int)bench_read_double(r); }

static inline double *bench_read_doubles(bench_reader *r, long n) {
  double *v = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
  for (long i = 0; i < n; i++) v[i] = bench_read_double(r);
  return v;
}

static inline int *bench_read_ints(bench_reader *r, long n) {
  int *v = malloc((size_t)(n > 0 ? n : 1) * sizeof(int));
  for (long i = 0; i < n; i++) v[i] = bench_read_int(r);
  return v;
}

static void bench_close(bench_reader *r) { fclose(r->f); }

/* ---------------------------------------------------------------------------------------------- */
/* the harness */

typedef double (*bench_primal_fn)(const double *p);
typedef void (*bench_grad_fn)(const double *p, double *g);

/* a named slice of p: the gradient check picks coordinates from every block */
typedef struct {
  const char *name;
  long offset, count;
} bench_block;

static double (*volatile bench_primal_ptr)(const double *);
static void (*volatile bench_grad_ptr)(const double *, double *);
static volatile double bench_sink;

static int bench_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* sorts v[0..n) and returns its median; the minimum goes to *min_out when given */
static double bench_median(double *v, int n, double *min_out) {
  qsort(v, (size_t)n, sizeof(double), bench_cmp_double);
  if (min_out) *min_out = v[0];
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Seconds per call of the primal (grad == NULL) or of the gradient, one sample per repetition: a warm-up call
 * calibrates a batch size so that each timed batch lasts at least min_time; samples[r] = batch time / batch.
 * Returns the batch size. */
static long bench_time(const double *p, double *grad, const bench_opts *o, double *samples) {
  double t0 = bench_now();
  if (grad) bench_grad_ptr(p, grad);
  else bench_sink = bench_primal_ptr(p);
  double once = bench_now() - t0;
  long batch = once > 0 ? (long)ceil(o->min_time / once) : 1000;
  if (batch < 1) batch = 1;
  for (int r = 0; r < o->reps; r++) {
    double acc = 0, s = bench_now();
    if (grad)
      for (long b = 0; b < batch; b++) bench_grad_ptr(p, grad);
    else
      for (long b = 0; b < batch; b++) acc += bench_primal_ptr(p);
    samples[r] = (bench_now() - s) / (double)batch;
    bench_sink = grad ? grad[0] : acc;
  }
  return batch;
}

static double bench_fd_step(double x) { return 1e-6 * (fabs(x) > 1 ? fabs(x) : 1.0); }

/* central difference in coordinate i (p is restored) */
static double bench_fd(double *p, long i) {
  double keep = p[i], h = bench_fd_step(keep);
  p[i] = keep + h;
  double up = bench_primal_ptr(p);
  p[i] = keep - h;
  double down = bench_primal_ptr(p);
  p[i] = keep;
  return (up - down) / (2 * h);
}

/* k distinct random indices in [0, n) (k <= n), sorted */
static long *bench_pick(long n, long k) {
  long *idx = malloc(sizeof(long) * (size_t)(k > 0 ? k : 1));
  if (k >= n) {
    for (long i = 0; i < n; i++) idx[i] = i;
    return idx;
  }
  long m = 0;
  while (m < k) {
    long c = (long)(bench_rand() % (unsigned long long)n), dup = 0;
    for (long j = 0; j < m; j++) dup |= idx[j] == c;
    if (!dup) idx[m++] = c;
  }
  for (long a = 1; a < k; a++) /* insertion sort: k is small */
    for (long b = a; b > 0 && idx[b - 1] > idx[b]; b--) {
      long t = idx[b]; idx[b] = idx[b - 1]; idx[b - 1] = t;
    }
  return idx;
}

static void bench_json_samples(const char *key, const double *v, int n) {
  printf("\"%s\": [", key);
  for (int i = 0; i < n; i++) {
    if (isfinite(v[i])) printf("%s%.6g", i ? ", " : "", v[i]);
    else printf("%snull", i ? ", " : "");
  }
  printf("], ");
}

static void bench_json_num(const char *key, double v, int comma) {
  if (isfinite(v)) printf("\"%s\": %.10g", key, v);
  else printf("\"%s\": null", key);
  if (comma) printf(", ");
}

static int bench_run(const char *name, const bench_opts *o, long P, const double *p0, bench_primal_fn primal,
                     bench_grad_fn gradient, const bench_block *blocks, int nblocks) {
  bench_primal_ptr = primal;
  bench_grad_ptr = gradient;
  bench_rng_state ^= (unsigned long long)o->seed * 0xD1B54A32D192ED03ULL;
  double *p = malloc(sizeof(double) * (size_t)P), *g = calloc((size_t)P, sizeof(double));
  memcpy(p, p0, sizeof(double) * (size_t)P);

  double f = bench_primal_ptr(p);
  double *primal_samples = malloc(sizeof(double) * (size_t)o->reps);
  double *grad_samples = malloc(sizeof(double) * (size_t)o->reps);
  long primal_batch = bench_time(p, NULL, o, primal_samples);
  long grad_batch = bench_time(p, g, o, grad_samples);
  bench_grad_ptr(p, g); /* the gradient the check uses (the timing loop already ran it) */
  double gnorm = 0;
  for (long i = 0; i < P; i++) gnorm += g[i] * g[i];
  gnorm = sqrt(gnorm);

  /* finite-difference timing: the whole gradient when P is small, else a random subset, extrapolated */
  double t_fd = NAN;
  long fd_k = P <= o->fd_full_max ? P : (o->fd_coords < P ? o->fd_coords : P);
  int extrapolated = fd_k < P;
  if (o->fd_time) {
    long *idx = bench_pick(P, fd_k);
    int reps = o->reps < 3 ? o->reps : 3;
    double ts[3];
    for (int r = 0; r < reps; r++) {
      double acc = 0, s = bench_now();
      for (long j = 0; j < fd_k; j++) acc += bench_fd(p, idx[j]);
      ts[r] = (bench_now() - s) / (double)fd_k * (double)P;
      bench_sink = acc;
    }
    t_fd = bench_median(ts, reps, NULL);
    free(idx);
  }

  /* gradient check: coordinates spread over the blocks, AD against central differences */
  long nchk = 0, failed = 0;
  double max_rel = 0, max_abs = 0, noise = 100 * DBL_EPSILON * (fabs(f) > 1 ? fabs(f) : 1.0);
  int per_block = (o->check_coords + nblocks - 1) / nblocks;
  for (int b = 0; o->check && b < nblocks; b++) {
    long k = per_block < blocks[b].count ? per_block : blocks[b].count;
    long *idx = bench_pick(blocks[b].count, k);
    for (long j = 0; j < k; j++) {
      long i = blocks[b].offset + idx[j];
      /* atol: the rounding noise of a central difference, ~ eps |f| / h */
      double atol = noise / bench_fd_step(p[i]);
      double fd = bench_fd(p, i), ad = g[i];
      double diff = fabs(ad - fd), scale = fmax(fabs(ad), fabs(fd));
      int ok = diff <= o->rtol * scale + atol;
      nchk++;
      if (!ok) {
        failed++;
        fprintf(stderr, "%s: gradient check failed at p[%ld] (%s[%ld]): ad=%.12g fd=%.12g\n", name, i,
                blocks[b].name, idx[j], ad, fd);
      }
      if (scale > atol && diff / scale > max_rel) max_rel = diff / scale;
      if (diff > max_abs) max_abs = diff;
    }
    free(idx);
  }

  printf("{\"name\": \"%s\", \"n_params\": %ld, ", name, P);
  bench_json_num("f", f, 1);
  bench_json_num("grad_norm", gnorm, 1);
  bench_json_samples("primal_samples_s", primal_samples, o->reps);
  bench_json_samples("grad_samples_s", grad_samples, o->reps);
  double min_primal, min_grad, t_primal = bench_median(primal_samples, o->reps, &min_primal);
  double t_grad = bench_median(grad_samples, o->reps, &min_grad);
  bench_json_num("primal_s", t_primal, 1);
  bench_json_num("primal_min_s", min_primal, 1);
  printf("\"primal_batch\": %ld, ", primal_batch);
  bench_json_num("grad_s", t_grad, 1);
  bench_json_num("grad_min_s", min_grad, 1);
  printf("\"grad_batch\": %ld, \"reps\": %d, ", grad_batch, o->reps);
  bench_json_num("fd_s", t_fd, 1);
  printf("\"fd_extrapolated\": %s, \"fd_coords_timed\": %ld, ", extrapolated ? "true" : "false", fd_k);
  if (o->check) {
    printf("\"check\": {\"coords\": %ld, \"failed\": %ld, ", nchk, failed);
    bench_json_num("max_rel_err", max_rel, 1);
    bench_json_num("max_abs_err", max_abs, 1);
    bench_json_num("rtol", o->rtol, 1);
    bench_json_num("fd_noise", noise, 1); /* atol = fd_noise / h */
    printf("\"passed\": %s}}\n", failed == 0 && isfinite(f) ? "true" : "false");
  } else {
    printf("\"check\": null}\n");
  }
  fflush(stdout);
  free(p); free(g); free(primal_samples); free(grad_samples);
  return failed == 0 && isfinite(f) ? 0 : 1;
}

#endif

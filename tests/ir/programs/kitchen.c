/* C program exercising many IR constructs for round-trip tests. */
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <complex.h>

struct Point { double x, y; float w; int tag[4]; };
union Bits { double d; unsigned long long u; };
struct Flags { unsigned a : 3; unsigned b : 5; signed c : 7; };
typedef double (*unary_fn)(double);
typedef double v4d __attribute__((vector_size(32)));

static const double table[5] = {1.0, 0.5, 0.25, 0.125, 0.0625};
double global_acc = 0.1;
_Thread_local int tls_counter;
_Atomic long atomic_counter;
volatile int volatile_flag;
struct Point origin = {0.0, 0.0, 1.5f, {1, 2, 3, 4}};
const char *names[] = {"zero", "one", "two"};
int weak_symbol __attribute__((weak)) = 3;

double dot(const double *a, const double *b, int n) {
  double s = 0.0;
  for (int i = 0; i < n; i++) s += a[i] * b[i];
  return s;
}

double nested(double *m, int rows, int cols) {
  double acc = 0.0;
  for (int i = 0; i < rows; i++) {
    for (int j = 0; j < cols; j++) {
      if (m[i * cols + j] < 0) break;
      acc += sqrt(fabs(m[i * cols + j])) + exp(m[i * cols + j] * 0.001);
    }
  }
  return acc;
}

int classify(int k) {
  switch (k) {
    case 0: return 10;
    case 1: return 20;
    case 7: return 30;
    case 100: return 40;
    default: return -1;
  }
}

double point_norm(struct Point *p) {
  p->tag[p->tag[0] & 3] += 1;
  return hypot(p->x, p->y) * p->w;
}

struct Point make_point(double x, double y) {
  struct Point p = {x, y, 1.0f, {0, 0, 0, 0}};
  return p;
}

int sum_ints(int n, ...) {
  va_list ap;
  va_start(ap, n);
  int s = 0;
  for (int i = 0; i < n; i++) s += va_arg(ap, int);
  va_end(ap);
  return s;
}

double apply(unary_fn f, double x) { return f(x) + f(x * 2.0); }

double math_mix(double x, float y) {
  return sin(x) * cos(x) + pow(x, 2.5) + log(x + 1.0) + tanh(x) + (double)sqrtf(y) +
         fmax(x, (double)y) + floor(x) + copysign(1.0, x) + fma(x, x, 1.0);
}

long double extended(long double x) { return x * 3.0L + 0.1L; }
__float128 quad(__float128 x) { return x * 2; }
_Float16 halfprec(_Float16 a, _Float16 b) { return a * b + (_Float16)1.5; }

double complex cmul(double complex a, double complex b) { return a * b; }

unsigned long long bits_of(double d) { union Bits u; u.d = d; return u.u >> 3; }

int bitfields(struct Flags *f) { f->b = f->a + 3; return f->c * 2 + f->b; }

int overflow_check(int a, int b) {
  int r;
  if (__builtin_add_overflow(a, b, &r)) return -1;
  return r;
}

long atomics(void) {
  atomic_fetch_add(&atomic_counter, 5);
  long expected = 5;
  atomic_compare_exchange_strong(&atomic_counter, &expected, 7);
  atomic_thread_fence(memory_order_seq_cst);
  volatile_flag = volatile_flag + 1;
  tls_counter++;
  return atomic_load_explicit(&atomic_counter, memory_order_acquire);
}

double vla_sum(int n) {
  double buf[n];
  for (int i = 0; i < n; i++) buf[i] = i * 0.5;
  double s = 0;
  for (int i = 0; i < n; i++) s += buf[i];
  return s;
}

v4d vec_ops(v4d a, v4d b) { return a * b + a; }

int computed_goto(int i) {
  static void *labels[] = {&&L0, &&L1, &&L2};
  goto *labels[i % 3];
L0: return 1;
L1: return 2;
L2: return 3;
}

int asm_add(int a) {
  int out;
  __asm__ volatile("leal 1(%1), %0" : "=r"(out) : "r"(a));
  return out;
}

int loop_two_exits(const int *a, int n, int key) {
  int i = 0;
  while (i < n) {
    if (a[i] == key) return i;
    i++;
  }
  return -1;
}

__attribute__((constructor)) static void init_acc(void) { global_acc = 0.5; }

int main(int argc, char **argv) {
  double *a = malloc(16 * sizeof(double));
  double *b = calloc(16, sizeof(double));
  memset(b, 0, 16 * sizeof(double));
  for (int i = 0; i < 16; i++) a[i] = table[i % 5] * i;
  memcpy(b, a, 8 * sizeof(double));
  struct Point p = make_point(3.0, 4.0);
  struct Flags fl = {1, 2, -3};
  v4d va = {1, 2, 3, 4};
  double complex z = cmul(1.0 + 2.0 * I, 3.0 - 1.0 * I);
  printf("%f %f %d %f %d\n", dot(a, b, 16), nested(a, 4, 4), classify(argc), point_norm(&p),
         sum_ints(3, 1, 2, 3));
  printf("%f %f %Lf %llu %d %d %ld %f\n", apply(sin, 0.5), math_mix(0.3, 2.0f),
         extended(1.0L), bits_of(1.0), bitfields(&fl), overflow_check(argc, 5), atomics(),
         vla_sum(argc + 4));
  printf("%f %f %d %d %d %s %f\n", vec_ops(va, va)[2], creal(z), computed_goto(argc),
         asm_add(argc), loop_two_exits((int *)a, 4, 0), names[argc % 3],
         (double)quad(2) + (double)halfprec(1, 2));
  free(a);
  free(b);
  return 0;
}

// Host emulation of CUDA: libdevice's math (linked into the device module by enzcc's pipeline, its NVVM
// intrinsics and inline PTX emulated by the runtime) against the host's libm. Prints "ok", or the functions that
// differ and exits 1.
#include <cfenv>
#include <cmath>
#include <cstdio>
#include <cstring>

#define NX 16
#define FD 24
#define FF 12

__global__ void math(const double *x, double *d, float *f) {
  int i = threadIdx.x;
  double a = x[i], b = x[(i + 5) % NX];
  double *o = d + i * FD;
  o[0] = sin(a), o[1] = cos(a), o[2] = tan(a), o[3] = exp(a), o[4] = log(fabs(a) + 0.1), o[5] = pow(fabs(a), b);
  o[6] = sqrt(fabs(a)), o[7] = cbrt(a), o[8] = atan2(a, b), o[9] = sinh(a), o[10] = asinh(a), o[11] = expm1(a);
  o[12] = log1p(fabs(a)), o[13] = erf(a), o[14] = erfc(a), o[15] = tgamma(fabs(a) + 0.5), o[16] = lgamma(fabs(a) + 0.5);
  o[17] = fmod(a, b), o[18] = hypot(a, b), o[19] = tanh(a), o[20] = exp2(a), o[21] = log10(fabs(a) + 1), o[22] = rint(a * 3);
  o[23] = round(a * 3);
  float fa = (float)a, fb = (float)b;
  float *p = f + i * FF;
  p[0] = sinf(fa), p[1] = cosf(fa), p[2] = expf(fa), p[3] = logf(fabsf(fa) + 0.1f), p[4] = powf(fabsf(fa), fb);
  p[5] = sqrtf(fabsf(fa)), p[6] = atanf(fa), p[7] = erff(fa), p[8] = tanhf(fa), p[9] = fa / fb, p[10] = rsqrtf(fabsf(fa) + 1);
  p[11] = roundf(fa * 3);
}

// CUDA's intrinsics with rounding modes, conversions and bit operations (each through libdevice's NVVM
// intrinsics), against the host's arithmetic in the same rounding mode
#define NI 24
__global__ void intrinsics(const double *x, double *o) {
  double a = x[0], b = x[1];
  float fa = (float)a, fb = (float)b;
  o[0] = __dadd_rz(a, b), o[1] = __dadd_ru(a, b), o[2] = __dmul_rd(a, b), o[3] = __ddiv_ru(a, b);
  o[4] = __fadd_rz(fa, fb), o[5] = __fmul_ru(fa, fb), o[6] = __fdiv_rd(fa, fb), o[7] = __fsqrt_ru(fa);
  o[8] = __double2int_rz(-a * 1e3), o[9] = __double2int_rd(-a * 1e3), o[10] = __float2int_ru(fa * 1e3f);
  o[11] = __double2uint_rn(-a), o[12] = __double2float_rz(a), o[13] = __int2float_rd(16777217);
  o[14] = __ull2double_ru(0xffffffffffffff01ull), o[15] = __double2hiint(a), o[16] = __double2loint(a);
  o[17] = __hiloint2double(0x40090000, 7), o[18] = __byte_perm(0x11223344, 0x55667788, 0x4051);
  o[19] = __umulhi(0xfffffff0u, 0x12345678u), o[20] = __brev(0x80000003u), o[21] = __clz(0x00f00000);
  o[22] = rsqrt(b), o[23] = sinpi(a);
}

#ifndef __CUDA_ARCH__
#pragma STDC FENV_ACCESS ON  // (the host's arithmetic in the rounding mode fesetround sets)
#endif
template <typename T> static T rounded(int mode, T (*f)(T, T), T a, T b) {
  volatile T x = a, y = b;
  int saved = fegetround();
  fesetround(mode);
  volatile T r = f(x, y);
  fesetround(saved);
  return r;
}
static float float_rz(double a) {
  volatile double x = a;
  int saved = fegetround();
  fesetround(FE_TOWARDZERO);
  volatile float r = (float)x;
  fesetround(saved);
  return r;
}
static double add(double a, double b) { return a + b; }
static double mul(double a, double b) { return a * b; }
static double dvd(double a, double b) { return a / b; }
static float addf(float a, float b) { return a + b; }
static float mulf(float a, float b) { return a * b; }
static float dvdf(float a, float b) { return a / b; }
static float sqrtf_(float a, float) { return sqrtf(a); }

static double hd(int k, double a, double b) {
  switch (k) {
  case 0: return sin(a); case 1: return cos(a); case 2: return tan(a); case 3: return exp(a);
  case 4: return log(fabs(a) + 0.1); case 5: return pow(fabs(a), b); case 6: return sqrt(fabs(a)); case 7: return cbrt(a);
  case 8: return atan2(a, b); case 9: return sinh(a); case 10: return asinh(a); case 11: return expm1(a);
  case 12: return log1p(fabs(a)); case 13: return erf(a); case 14: return erfc(a); case 15: return tgamma(fabs(a) + 0.5);
  case 16: return lgamma(fabs(a) + 0.5); case 17: return fmod(a, b); case 18: return hypot(a, b); case 19: return tanh(a);
  case 20: return exp2(a); case 21: return log10(fabs(a) + 1); case 22: return rint(a * 3); default: return round(a * 3);
  }
}

static float hf(int k, float a, float b) {
  switch (k) {
  case 0: return sinf(a); case 1: return cosf(a); case 2: return expf(a); case 3: return logf(fabsf(a) + 0.1f);
  case 4: return powf(fabsf(a), b); case 5: return sqrtf(fabsf(a)); case 6: return atanf(a); case 7: return erff(a);
  case 8: return tanhf(a); case 9: return a / b; case 10: return 1 / sqrtf(fabsf(a) + 1); default: return roundf(a * 3);
  }
}

int main() {
  double hx[NX], d[NX * FD], *x, *dd;
  float f[NX * FF], *df;
  for (int i = 0; i < NX; i++) hx[i] = -3.7 + 0.53 * i + (i == 7 ? 1e3 : 0);
  cudaMalloc(&x, sizeof hx);
  cudaMalloc(&dd, sizeof d);
  cudaMalloc(&df, sizeof f);
  cudaMemcpy(x, hx, sizeof hx, cudaMemcpyHostToDevice);
  math<<<1, NX>>>(x, dd, df);
  cudaMemcpy(d, dd, sizeof d, cudaMemcpyDeviceToHost);
  cudaMemcpy(f, df, sizeof f, cudaMemcpyDeviceToHost);
  int bad = 0;
  for (int i = 0; i < NX; i++) {
    double a = hx[i], b = hx[(i + 5) % NX];
    for (int k = 0; k < FD; k++) {
      double want = hd(k, a, b), got = d[i * FD + k];
      if (!(got == want || fabs(got - want) <= 1e-14 * fmax(1.0, fabs(want)) || (std::isnan(got) && std::isnan(want))))
        printf("double function %d at %.17g, %.17g: %.17g, libm %.17g\n", k, a, b, got, want), bad++;
    }
    for (int k = 0; k < FF; k++) {
      float want = hf(k, (float)a, (float)b), got = f[i * FF + k];
      if (!(got == want || fabsf(got - want) <= 4e-7f * fmaxf(1.0f, fabsf(want)) || (std::isnan(got) && std::isnan(want))))
        printf("float function %d at %.9g, %.9g: %.9g, libm %.9g\n", k, (float)a, (float)b, got, want), bad++;
    }
  }
  // the intrinsics
  double hi[2] = {M_PI / 3, 0.7}, oi[NI], *xi, *di;
  cudaMalloc(&xi, sizeof hi);
  cudaMalloc(&di, sizeof oi);
  cudaMemcpy(xi, hi, sizeof hi, cudaMemcpyHostToDevice);
  intrinsics<<<1, 1>>>(xi, di);
  cudaMemcpy(oi, di, sizeof oi, cudaMemcpyDeviceToHost);
  double a = hi[0], b = hi[1];
  float fa = (float)a, fb = (float)b;
  unsigned long long bits;
  memcpy(&bits, &a, 8);
  double want[NI] = {
      rounded(FE_TOWARDZERO, add, a, b), rounded(FE_UPWARD, add, a, b), rounded(FE_DOWNWARD, mul, a, b),
      rounded(FE_UPWARD, dvd, a, b), rounded(FE_TOWARDZERO, addf, fa, fb), rounded(FE_UPWARD, mulf, fa, fb),
      rounded(FE_DOWNWARD, dvdf, fa, fb), rounded(FE_UPWARD, sqrtf_, fa, 0.0f), trunc(-a * 1e3), floor(-a * 1e3),
      ceil(fa * 1e3f), 0, float_rz(a), 16777216, 18446744073709551616.0,
      (double)(int)(bits >> 32), (double)(int)(unsigned)bits, 0, 0x88447733u, 0x12345676u, 0xc0000001u, 8,
      1 / sqrt(b), sin(M_PI * a)};
  unsigned long long h17 = (0x40090000ull << 32) | 7;
  memcpy(&want[17], &h17, 8);
  for (int k = 0; k < NI; k++)
    if (!(oi[k] == want[k] || (k >= 22 && fabs(oi[k] - want[k]) <= 1e-14 * fabs(want[k]))))
      printf("intrinsic %d: %.17g, expected %.17g\n", k, oi[k], want[k]), bad++;

  if (bad) return printf("FAIL %d\n", bad), 1;
  printf("ok\n");
  return 0;
}

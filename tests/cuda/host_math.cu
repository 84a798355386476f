// Host emulation of CUDA: libdevice's math (linked into the device module by enzcc's pipeline, its NVVM
// intrinsics and inline PTX emulated by the runtime) against the host's libm. Prints "ok", or the functions that
// differ and exits 1.
#include <cmath>
#include <cstdio>

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
  if (bad) return printf("FAIL %d\n", bad), 1;
  printf("ok\n");
  return 0;
}

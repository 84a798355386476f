/* Self-contained kernels (no headers) compiled for other targets:
   nvptx64 (address spaces) and aarch64+SVE (scalable vectors). */
__attribute__((address_space(3))) double shared_buf[64];

void saxpy(int n, float a, const float *restrict x, float *restrict y) {
  for (int i = 0; i < n; i++) y[i] = a * x[i] + y[i];
}

double reduce(const double *v, int n) {
  double s = 0.0;
  for (int i = 0; i < n; i++) {
    shared_buf[i & 63] = v[i];
    s += shared_buf[(i * 7) & 63] * v[i];
  }
  return s;
}

void stencil(int n, const double *restrict in, double *restrict out) {
  for (int i = 1; i + 1 < n; i++) out[i] = 0.25 * in[i - 1] + 0.5 * in[i] + 0.25 * in[i + 1];
}

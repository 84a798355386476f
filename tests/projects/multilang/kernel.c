/* A CUDA-style kernel in C: y[i] = a * x[i] + y[i] */
__attribute__((nvptx_kernel)) void saxpy(int n, float a, const float *x, float *y) {
  int i = __nvvm_read_ptx_sreg_ctaid_x() * __nvvm_read_ptx_sreg_ntid_x() + __nvvm_read_ptx_sreg_tid_x();
  if (i < n) y[i] = a * x[i] + y[i];
}

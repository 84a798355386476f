/* enzcc: clang's CUDA wrapper (__clang_cuda_runtime_wrapper.h) force-includes this cuRAND header, which the
 * CUDA 13 toolkit no longer ships. Searched after the user's include paths (-idirafter), so the real header
 * from a cuRAND installation (the nvidia-curand wheel, a full toolkit) wins when the user points at it. A
 * program that uses cuRAND's MTGP32 generator includes <curand_kernel.h> itself and needs that installation. */
#ifndef ENZCC_CURAND_MTGP32_KERNEL_STUB_H
#define ENZCC_CURAND_MTGP32_KERNEL_STUB_H
#endif

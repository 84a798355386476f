/* enzcc_plugins' batch loop: one entry point of an ABI 3 library (plugins/ABI.md) run over the examples of a
 * torch.func.vmap in one native call, instead of one Python-level call per example.
 *
 * The entry point takes n address arrays (1: primal; 2: vjp, jvp; 4: vjp_jvp, jvp_jvp) of P entries each.
 * base and stride hold n * P entries: call b gets base[j] + b * stride[j] as entry j (a stride of 0: the same
 * buffer for every example, as a shared input, an integer or a scratch buffer; a base of 0 stays NULL).
 * The examples run one after the other, so a shared scratch buffer is never written by two at once. */
#include <stddef.h>
#include <stdint.h>

typedef void (*enzcc_entry1)(void *const *);
typedef void (*enzcc_entry2)(void *const *, void *const *);
typedef void (*enzcc_entry4)(void *const *, void *const *, void *const *, void *const *);

int enzcc_batched_call(void *fn, int64_t n, int64_t P, const uintptr_t *base, const int64_t *stride, int64_t B) {
  if (n != 1 && n != 2 && n != 4) return 1;
  if (P < 0 || B < 0) return 2;
  const int64_t m = n * P;
  void *a[m > 0 ? m : 1];
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t j = 0; j < m; ++j)
      a[j] = base[j] ? (void *)(base[j] + (uintptr_t)(b * stride[j])) : NULL;
    if (n == 1)
      ((enzcc_entry1)fn)(a);
    else if (n == 2)
      ((enzcc_entry2)fn)(a, a + P);
    else
      ((enzcc_entry4)fn)(a, a + P, a + 2 * P, a + 3 * P);
  }
  return 0;
}

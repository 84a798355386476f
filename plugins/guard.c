/* The checked mode of enzcc_plugins (plugins/guard.py): buffers between inaccessible pages, and a call of an
 * entry point that turns a fault into a return value instead of the death of the process.
 *
 * A fault (SIGSEGV, SIGBUS) in a thread that is inside enzcc_guarded_call jumps back out of the called
 * function (siglongjmp) with the faulting address and whether it was a write; a fault anywhere else goes to
 * the handler that was there before (Python's faulthandler, the default action). The handler is installed
 * once and stays, so concurrent checked calls in several threads never race on sigaction. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

static __thread sigjmp_buf *enzcc_jump;
static __thread uintptr_t enzcc_fault_address;
static __thread int enzcc_fault_write;
static struct sigaction enzcc_previous[2];
static pthread_once_t enzcc_once = PTHREAD_ONCE_INIT;

static void enzcc_chain(int sig, siginfo_t *info, void *context) {
  struct sigaction *old = &enzcc_previous[sig == SIGBUS];
  if (old->sa_flags & SA_SIGINFO) {
    if (old->sa_sigaction) old->sa_sigaction(sig, info, context);
    return;
  }
  if (old->sa_handler == SIG_IGN) return;
  if (old->sa_handler == SIG_DFL) {
    signal(sig, SIG_DFL);  /* the instruction faults again, now with the default action */
    return;
  }
  old->sa_handler(sig);
}

static void enzcc_handler(int sig, siginfo_t *info, void *context) {
  if (!enzcc_jump) {
    enzcc_chain(sig, info, context);
    return;
  }
  enzcc_fault_address = (uintptr_t)info->si_addr;
  enzcc_fault_write = -1;
#if defined(__x86_64__) && defined(REG_ERR)
  enzcc_fault_write = (((ucontext_t *)context)->uc_mcontext.gregs[REG_ERR] & 2) != 0;
#endif
  sigjmp_buf *to = enzcc_jump;
  enzcc_jump = NULL;
  siglongjmp(*to, sig);
}

static void enzcc_install(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = enzcc_handler;
  sa.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, &enzcc_previous[0]);
  sigaction(SIGBUS, &sa, &enzcc_previous[1]);
}

/* Calls fn (an ABI entry point taking nargs address arrays). Returns 0, or the signal number of a fault,
 * with its address and whether it was a write (1), a read (0) or unknown (-1). */
int enzcc_guarded_call(void *fn, int nargs, void *const *a, void *const *d, void *const *ta, void *const *td,
                       uintptr_t *fault_address, int *fault_write) {
  pthread_once(&enzcc_once, enzcc_install);
  sigjmp_buf here;
  int sig = sigsetjmp(here, 1);
  if (sig == 0) {
    enzcc_jump = &here;
    switch (nargs) {
    case 1: ((void (*)(void *const *))fn)(a); break;
    case 2: ((void (*)(void *const *, void *const *))fn)(a, d); break;
    default: ((void (*)(void *const *, void *const *, void *const *, void *const *))fn)(a, d, ta, td); break;
    }
    enzcc_jump = NULL;
    *fault_address = 0;
    *fault_write = 0;
    return 0;
  }
  *fault_address = enzcc_fault_address;
  *fault_write = enzcc_fault_write;
  return sig;
}

/* A buffer of n bytes whose last byte is the last of a page, between inaccessible pages: the mapping starts at
 * *base and is *length bytes long. NULL when mmap fails. */
void *enzcc_guard_alloc(size_t n, void **base, size_t *length) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  size_t data = (n + page - 1) / page * page;
  size_t len = data + 2 * page;
  char *m = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return NULL;
  if (data && mprotect(m + page, data, PROT_READ | PROT_WRITE) != 0) {
    munmap(m, len);
    return NULL;
  }
  *base = m;
  *length = len;
  return m + page + data - n;
}

/* Make a guarded buffer's pages read-only (an input) or writable again. */
int enzcc_guard_protect(void *base, size_t length, int writable) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  if (length <= 2 * page) return 0;
  return mprotect((char *)base + page, length - 2 * page, writable ? PROT_READ | PROT_WRITE : PROT_READ);
}

void enzcc_guard_free(void *base, size_t length) { munmap(base, length); }

/* The message of a fault at address at in a checked call of n guarded buffers (plugins/guard.py's wording). */
static void enzcc_describe_fault(const char *owner, int sig, uintptr_t at, int write, int64_t n, void *const *data,
                                 void *const *base, const int64_t *nbytes, const int32_t *writable,
                                 const int32_t *itemsize, const char *const *what, char *msg, size_t cap) {
  const char *access = write == 1 ? "wrote" : write == 0 ? "read" : "accessed";
  const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
  for (int64_t j = 0; j < n; ++j) {
    if (!base[j]) continue;
    const uintptr_t start = (uintptr_t)data[j], end = start + (uintptr_t)nbytes[j];
    const long long off = (long long)(at - start), size = (long long)nbytes[j];
    const long long item = itemsize[j] > 0 ? itemsize[j] : 1;
    if (start <= at && at < end && !writable[j]) {
      snprintf(msg, cap, "%s: the function wrote into %s, which is declared read-only (at byte %lld of %lld): it "
               "would overwrite the caller's array (checked mode)", owner, what[j], off, size);
      return;
    }
    if (end <= at && at < end + page) {
      char element[48] = "";
      if (item > 1) snprintf(element, sizeof element, ", element %lld", off / item);
      snprintf(msg, cap, "%s: the function %s past the end of %s: at byte %lld%s, but it has %lld bytes (%lld "
               "elements); the declared shape is smaller than what the code accesses (checked mode)", owner, access,
               what[j], off, element, size, size / item);
      return;
    }
    if ((uintptr_t)base[j] <= at && at < (uintptr_t)base[j] + page) {
      snprintf(msg, cap, "%s: the function %s before the start of %s (checked mode)", owner, access, what[j]);
      return;
    }
  }
  const char *name = sig == SIGSEGV ? "SIGSEGV" : sig == SIGBUS ? "SIGBUS" : "a signal";
  snprintf(msg, cap, "%s: the function faulted (%s, %s address %#llx) outside the arrays it was given (checked "
           "mode)", owner, name, access, (unsigned long long)at);
}

/* The checked call of the native handlers (plugins/native/xla_ffi.cc, tf_op.cc), which know each buffer's size
 * but cannot call back into Python: fn (an entry point taking nargs arrays of P pointers) runs on guarded
 * copies of the n = nargs * P buffers addr[j] of nbytes[j] bytes (a NULL address or a negative size: passed as
 * it is), the read-only ones (writable[j] == 0) behind PROT_READ; the writable copies go back to the caller's
 * buffers after a call that did not fault. Returns 0; 1 after a fault, 2 when no memory could be mapped, with a
 * one-line message in msg (at most cap bytes), worded as plugins/guard.py words it: owner is the function's
 * name, what[j] what buffer j is ("output 'y' (shape (3,), float64)"), itemsize[j] its element size. */
int enzcc_guarded_slots(void *fn, int nargs, int64_t P, void *const *addr, const int64_t *nbytes,
                        const int32_t *writable, const int32_t *itemsize, const char *const *what,
                        const char *owner, char *msg, size_t cap) {
  const int64_t n = (int64_t)nargs * P;
  if ((nargs != 1 && nargs != 2 && nargs != 4) || P < 0) {
    snprintf(msg, cap, "%s: the checked call was given %d arrays of %lld pointers", owner, nargs, (long long)P);
    return 2;
  }
  void **ptr = calloc((size_t)(n > 0 ? n : 1), sizeof *ptr);
  void **base = calloc((size_t)(n > 0 ? n : 1), sizeof *base);
  size_t *len = calloc((size_t)(n > 0 ? n : 1), sizeof *len);
  int rc = 0;
  if (!ptr || !base || !len) {
    snprintf(msg, cap, "%s: the checked mode is out of memory", owner);
    rc = 2;
    goto done;
  }
  for (int64_t j = 0; j < n; ++j) {
    ptr[j] = addr[j];
    if (!addr[j] || nbytes[j] < 0) continue;
    char *data = enzcc_guard_alloc((size_t)nbytes[j], &base[j], &len[j]);
    if (!data) {
      snprintf(msg, cap, "%s: the checked mode cannot map %lld bytes for %s", owner, (long long)nbytes[j], what[j]);
      rc = 2;
      goto done;
    }
    if (nbytes[j]) memcpy(data, addr[j], (size_t)nbytes[j]);
    if (!writable[j]) enzcc_guard_protect(base[j], len[j], 0);
    ptr[j] = data;
  }
  uintptr_t at = 0;
  int write = 0;
  int sig = enzcc_guarded_call(fn, nargs, ptr, ptr + (nargs > 1 ? P : 0), ptr + (nargs > 2 ? 2 * P : 0),
                               ptr + (nargs > 2 ? 3 * P : 0), &at, &write);
  if (sig) {
    enzcc_describe_fault(owner, sig, at, write, n, ptr, base, nbytes, writable, itemsize, what, msg, cap);
    rc = 1;
    goto done;
  }
  for (int64_t j = 0; j < n; ++j)
    if (base[j] && writable[j] && nbytes[j]) memcpy(addr[j], ptr[j], (size_t)nbytes[j]);
done:
  for (int64_t j = 0; base && j < n; ++j)
    if (base[j]) enzcc_guard_free(base[j], len[j]);
  free(ptr);
  free(base);
  free(len);
  return rc;
}

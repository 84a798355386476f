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

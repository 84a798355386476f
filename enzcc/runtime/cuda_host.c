/* Host emulation of CUDA device code: the runtime.
 *
 * enzcc/backend/cuda_host.py turns a device module (LLVM IR for nvptx64-nvidia-cuda, as enzcc's pipeline left
 * it) into a host module. Linked with this file and with the program's host side (clang++ --cuda-host-only),
 * the program runs its kernels on the CPU, so that the gradients of kernels are checked without a GPU.
 *
 * What it emulates, and why it is made this way:
 *  - Every GPU thread of a launch is a user-level context (a stack each, ENZCC_CUDA_HOST_STACK bytes, 256 KiB by
 *    default; on x86-64 a switch of 8 registers, which unlike swapcontext makes no system call; elsewhere, or
 *    with -DENZCC_CUDA_HOST_UCONTEXT, ucontext). All blocks of a wave (up to ENZCC_CUDA_HOST_MAX_THREADS
 *    threads, default 8192: whole grids in the tests; larger grids run wave after wave) are live at once, each
 *    with its own shared memory. The scheduler runs the threads of block 0 until each reaches a barrier or ends,
 *    then those of block 1, ...; when no thread can go on, it releases the barrier of each block: phase by
 *    phase, block by block. A barrier is thus real, and a missing one gives a wrong result deterministically.
 *  - The order in which the threads (and blocks) of a phase run is chosen by ENZCC_CUDA_HOST_ORDER=forward,
 *    reverse or shuffle[:seed]: a race shows in at least one order.
 *  - Shared memory and cudaMalloc'd memory start as 0xff bytes (a NaN as float and double): a shadow or buffer
 *    that is read before it is written shows.
 *  - A barrier that not all threads of a block reach (divergent __syncthreads: some exited, or they wait at
 *    different barriers), or a warp-synchronous operation that lanes of its mask never reach, is an error
 *    (a message and exit status 1), not a hang.
 *  - One OS thread runs everything, so atomics are plain read-modify-writes.
 *  - Each block's shared memory ends at a guard page, each thread's stack starts at one: an access past the end
 *    of shared memory, a stack overflow or any invalid access in a kernel is an error that names the kernel,
 *    block and thread (exit status 1), not a bare segmentation fault.
 *  - Device malloc has CUDA's heap limit (8 MiB, cudaDeviceSetLimit(cudaLimitMallocHeapSize, n)) and returns
 *    NaN bytes; beyond the limit it returns NULL, as on a GPU. More than 48 KiB of shared memory needs the
 *    kernel's opt-in (cudaFuncSetAttribute), as on a GPU.
 *  - __activemask() is the set of lanes that reach it while the rest of the warp cannot go on; lanes that exited
 *    do not count in a warp operation's mask (PTX: "non-exited threads"), and a value read from one is all ones.
 *
 * The device module calls: __enzcc_host_shared_base (its __shared__ variables are offsets into the block's
 * area), __enzcc_nvvm_* (one per NVVM intrinsic: special registers, barriers, warp operations, the math of
 * libdevice), __enzcc_nv_* (libdevice functions that host libm lacks), __enzcc_host_vprintf /
 * __enzcc_host_assertfail / __enzcc_host_nvvm_reflect / __enzcc_host_malloc / __enzcc_host_free,
 * __enzcc_ptx_* (libdevice's inline PTX), and registers its kernels and variables with
 * __enzcc_host_register_kernel / __enzcc_host_register_var from a constructor.
 * The host side calls the CUDA runtime API below (CUDA's signatures) and clang's registration and launch
 * entry points (__cudaRegisterFunction, __cudaPushCallConfiguration, cudaLaunchKernel, ...).
 *
 * Plain C11 with GNU extensions (statement expressions), compiled by clang-22; no pthreads.
 */
#define _GNU_SOURCE
#include <fenv.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/mman.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#pragma STDC FENV_ACCESS ON

/* ------------------------------------------------------------------------------------------------------------
 * CUDA's types, as cuda_runtime_api.h / driver_types.h define them (ABI-compatible)
 * ------------------------------------------------------------------------------------------------------------ */
typedef struct dim3 {
    unsigned int x, y, z;
} dim3;
typedef int cudaError_t;
typedef void *cudaStream_t;
typedef void *cudaEvent_t;

enum {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidSymbol = 13,
    cudaErrorInvalidDevicePointer = 17,
    cudaErrorInvalidMemcpyDirection = 21,
    cudaErrorInvalidDeviceFunction = 98,
    cudaErrorInvalidDevice = 101,
    cudaErrorLaunchOutOfResources = 701,
    cudaErrorUnknown = 999,
};

enum { cudaMemcpyHostToHost = 0, cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2,
       cudaMemcpyDeviceToDevice = 3, cudaMemcpyDefault = 4 };

#define EXPORT __attribute__((visibility("default")))

/* ------------------------------------------------------------------------------------------------------------
 * Diagnostics
 * ------------------------------------------------------------------------------------------------------------ */
static void fatal(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

/* An error of the emulated program that has no CUDA error code (a divergent barrier...): one line, exit 1. */
static void fatal(const char *fmt, ...)
{
    va_list ap;
    fflush(stdout);
    fputs("enzcc-cuda-host: error: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        fatal("out of memory (%zu bytes)", n);
    return p;
}

static void *xrealloc(void *p, size_t n)
{
    p = realloc(p, n ? n : 1);
    if (!p)
        fatal("out of memory (%zu bytes)", n);
    return p;
}

/* ------------------------------------------------------------------------------------------------------------
 * Registries: what the host side and the device modules register in their constructors (in any order: names
 * are resolved at the first launch or copy that needs them)
 * ------------------------------------------------------------------------------------------------------------ */
typedef void (*trampoline_fn)(void **args);

typedef struct {
    const void *stub;       /* the host side's launch stub (what cudaLaunchKernel gets) */
    const char *name;       /* the kernel's device name */
    size_t max_dynamic;     /* cudaFuncAttributeMaxDynamicSharedMemorySize, 0 when not set */
} stub_entry;

typedef struct {
    const char *name;
    trampoline_fn tramp;
    size_t shared_static; /* bytes of the static __shared__ area the kernel uses (dynamic memory follows) */
    size_t shared_align;  /* the alignment of the block's area */
} kernel_entry;

typedef struct {
    const void *host; /* the host side's stand-in variable */
    const char *name;
} hostvar_entry;

typedef struct {
    const char *name;
    void *addr;
    size_t size;
    int constant;
} devvar_entry;

static stub_entry *stubs;
static size_t n_stubs;
static kernel_entry *kernels;
static size_t n_kernels;
static hostvar_entry *hostvars;
static size_t n_hostvars;
static devvar_entry *devvars;
static size_t n_devvars;

#define PUSH(arr, n, item)                                    \
    do {                                                      \
        (arr) = xrealloc((arr), ((n) + 1) * sizeof *(arr));   \
        (arr)[(n)++] = (item);                                \
    } while (0)

/* Called by a converted device module's constructor, once per kernel. */
EXPORT void __enzcc_host_register_kernel(const char *name, trampoline_fn tramp, size_t shared_static,
                                         size_t shared_align)
{
    kernel_entry e = {name, tramp, shared_static, shared_align < 16 ? 16 : shared_align};
    PUSH(kernels, n_kernels, e);
}

/* Called by a converted device module's constructor, once per __device__ / __constant__ variable. */
EXPORT void __enzcc_host_register_var(const char *name, void *addr, size_t size, int constant)
{
    devvar_entry e = {name, addr, size, constant};
    PUSH(devvars, n_devvars, e);
}

static int fake_handle;

EXPORT void **__cudaRegisterFatBinary(void *fatbin)
{
    (void)fatbin; /* host emulation runs the converted device module, not the embedded binary */
    return (void **)&fake_handle;
}

EXPORT void __cudaRegisterFatBinaryEnd(void **handle) { (void)handle; }

EXPORT void __cudaUnregisterFatBinary(void **handle) { (void)handle; }

EXPORT int __cudaRegisterFunction(void **handle, const char *host_fun, char *device_fun, const char *device_name,
                                  int thread_limit, void *tid, void *bid, void *bdim, void *gdim, int *wsize)
{
    (void)handle, (void)device_fun, (void)thread_limit, (void)tid, (void)bid, (void)bdim, (void)gdim, (void)wsize;
    stub_entry e = {host_fun, device_name, 0};
    PUSH(stubs, n_stubs, e);
    return 0;
}

EXPORT void __cudaRegisterVar(void **handle, char *host_var, char *device_address, const char *device_name,
                              int ext, size_t size, int constant, int global)
{
    (void)handle, (void)device_address, (void)ext, (void)size, (void)constant, (void)global;
    hostvar_entry e = {host_var, device_name};
    PUSH(hostvars, n_hostvars, e);
}

EXPORT void __cudaRegisterManagedVar(void **handle, void **host_var_ptr, char *device_address,
                                     const char *device_name, int ext, size_t size, int constant, int global)
{
    (void)handle, (void)device_address, (void)device_name, (void)ext, (void)size, (void)constant, (void)global;
    (void)host_var_ptr;
    fatal("__managed__ variables are not supported by host emulation (%s)", device_name);
}

static const kernel_entry *kernel_named(const char *name)
{
    for (size_t i = n_kernels; i-- > 0;)
        if (strcmp(kernels[i].name, name) == 0)
            return &kernels[i];
    return NULL;
}

static const char *stub_name(const void *stub)
{
    for (size_t i = 0; i < n_stubs; i++)
        if (stubs[i].stub == stub)
            return stubs[i].name;
    return NULL;
}

static const devvar_entry *devvar_named(const char *name)
{
    for (size_t i = n_devvars; i-- > 0;)
        if (strcmp(devvars[i].name, name) == 0)
            return &devvars[i];
    return NULL;
}

/* The device variable a host-side symbol (its stand-in's address) or a device address stands for. */
static const devvar_entry *devvar_of_symbol(const void *symbol)
{
    for (size_t i = 0; i < n_hostvars; i++)
        if (hostvars[i].host == symbol)
            return devvar_named(hostvars[i].name);
    for (size_t i = 0; i < n_devvars; i++)
        if (devvars[i].addr == symbol)
            return &devvars[i];
    return NULL;
}

/* ------------------------------------------------------------------------------------------------------------
 * Device memory: cudaMalloc'd blocks, recorded so that copies can check their device side
 * ------------------------------------------------------------------------------------------------------------ */
typedef struct {
    char *base;
    size_t size;
} allocation;

static allocation *allocs;
static size_t n_allocs;

/* Whether [p, p + n) lies in device memory: a cudaMalloc'd block or a device variable. */
static int is_device_range(const void *p, size_t n)
{
    const char *c = p;
    for (size_t i = 0; i < n_allocs; i++)
        if (c >= allocs[i].base && c + n <= allocs[i].base + allocs[i].size)
            return 1;
    for (size_t i = 0; i < n_devvars; i++) {
        const char *b = devvars[i].addr;
        if (c >= b && c + n <= b + devvars[i].size)
            return 1;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------------------------
 * Errors of the CUDA API
 * ------------------------------------------------------------------------------------------------------------ */
static cudaError_t last_error = cudaSuccess;

static cudaError_t fail(cudaError_t err)
{
    last_error = err;
    return err;
}

EXPORT cudaError_t cudaGetLastError(void)
{
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}

EXPORT cudaError_t cudaPeekAtLastError(void) { return last_error; }

EXPORT const char *cudaGetErrorName(cudaError_t err)
{
    switch (err) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidSymbol: return "cudaErrorInvalidSymbol";
    case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorInvalidDeviceFunction: return "cudaErrorInvalidDeviceFunction";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorLaunchOutOfResources: return "cudaErrorLaunchOutOfResources";
    default: return "cudaErrorUnknown";
    }
}

EXPORT const char *cudaGetErrorString(cudaError_t err)
{
    switch (err) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidSymbol: return "invalid device symbol";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorInvalidDeviceFunction: return "invalid device function";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    default: return "unknown error";
    }
}

/* ------------------------------------------------------------------------------------------------------------
 * The scheduler: emulated threads and blocks
 * ------------------------------------------------------------------------------------------------------------ */
enum thread_state { T_RUN, T_BAR, T_WARP, T_DONE };
enum reduction { RED_NONE, RED_POPC, RED_AND, RED_OR };
enum warp_op { W_SYNC, W_SHFL_IDX, W_SHFL_UP, W_SHFL_DOWN, W_SHFL_BFLY, W_VOTE_ALL, W_VOTE_ANY, W_VOTE_UNI,
               W_VOTE_BALLOT, W_ACTIVEMASK };

static const char *const warp_op_names[] = {"__syncwarp", "__shfl_sync", "__shfl_up_sync", "__shfl_down_sync",
                                            "__shfl_xor_sync", "__all_sync", "__any_sync", "__uni_sync",
                                            "__ballot_sync", "__activemask"};

typedef struct emu_block emu_block;

/* ---- contexts: the stacks of emulated threads, and switching between them ---- */
#if defined(__x86_64__) && !defined(ENZCC_CUDA_HOST_UCONTEXT)
/* enzcc_ctx_switch(save, load): pushes the callee-saved registers and the floating-point control words, stores
 * the stack pointer in *save, takes load as the stack pointer and pops what a switch (or ctx_make) left there. */
__asm__(".text\n"
        ".p2align 4\n"
        ".globl enzcc_ctx_switch\n"
        ".hidden enzcc_ctx_switch\n"
        ".type enzcc_ctx_switch,@function\n"
        "enzcc_ctx_switch:\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  subq $8, %rsp\n  stmxcsr (%rsp)\n  fnstcw 4(%rsp)\n"
        "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
        "  ldmxcsr (%rsp)\n  fldcw 4(%rsp)\n  addq $8, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
        "  ret\n"
        ".size enzcc_ctx_switch, .-enzcc_ctx_switch\n");
__attribute__((visibility("hidden"))) void enzcc_ctx_switch(void **save, void *load);

typedef struct {
    void *sp;
} emu_ctx;

/* A context that starts entry() on the stack [stack, stack + size), with this thread's floating-point modes. */
static void ctx_make(emu_ctx *c, char *stack, size_t size, void (*entry)(void))
{
    void **sp = (void **)(((uintptr_t)(stack + size)) & ~(uintptr_t)15);
    uint32_t modes[2];
    __asm__ volatile("stmxcsr %0" : "=m"(modes[0]));
    __asm__ volatile("fnstcw %0" : "=m"(modes[1]));
    *--sp = NULL;           /* entry's return address: it never returns */
    *--sp = (void *)entry;  /* where the first switch's ret goes */
    for (int i = 0; i < 6; i++)
        *--sp = NULL;       /* rbp, rbx, r12-r15 */
    sp--;
    memcpy(sp, modes, sizeof modes);
    c->sp = sp;
}

static void ctx_switch(emu_ctx *save, emu_ctx *load) { enzcc_ctx_switch(&save->sp, load->sp); }
#else
typedef ucontext_t emu_ctx;

static void ctx_make(emu_ctx *c, char *stack, size_t size, void (*entry)(void))
{
    if (getcontext(c) != 0)
        fatal("getcontext failed");
    c->uc_stack.ss_sp = stack;
    c->uc_stack.ss_size = size;
    c->uc_link = NULL;
    makecontext(c, entry, 0);
}

static void ctx_switch(emu_ctx *save, emu_ctx *load)
{
    if (swapcontext(save, load) != 0)
        fatal("swapcontext failed");
}
#endif

typedef struct emu_thread {
    emu_ctx ctx;
    char *stack;
    size_t stack_len;
    enum thread_state state;
    unsigned tid[3];
    unsigned lin; /* linear thread index in the block */
    emu_block *blk;
    /* at a block barrier */
    const void *bar_site;
    int bar_id, bar_red, bar_pred, bar_count, bar_result;
    /* at a warp-synchronous operation */
    enum warp_op wop;
    unsigned wmask;
    uint32_t wval;
    int wb, wc;
    uint32_t wres;
} emu_thread;

struct emu_block {
    unsigned ctaid[3];
    char *shared;
    emu_thread *threads;
};

static struct {
    const kernel_entry *kernel;
    void **args;
    dim3 grid, block;
    unsigned nthreads; /* per block */
    size_t shared_bytes;
    size_t dynamic_shared;
    char *shared_slots; /* the wave's shared areas, each followed by a guard page */
    size_t shared_slot, shared_nslots;
} launch;

static emu_thread *cur;            /* the emulated thread that runs now (NULL outside kernels) */
static emu_ctx scheduler_ctx;
static unsigned long long clock_counter;

/* The order of a phase: ENZCC_CUDA_HOST_ORDER */
enum order { ORDER_FORWARD, ORDER_REVERSE, ORDER_SHUFFLE };
static enum order order_kind = ORDER_FORWARD;
static uint64_t order_state;
static int order_read;

static void read_order(void)
{
    const char *s = getenv("ENZCC_CUDA_HOST_ORDER");
    order_read = 1;
    if (!s || !*s || strcmp(s, "forward") == 0)
        order_kind = ORDER_FORWARD;
    else if (strcmp(s, "reverse") == 0)
        order_kind = ORDER_REVERSE;
    else if (strncmp(s, "shuffle", 7) == 0 && (s[7] == 0 || s[7] == ':')) {
        char *end = NULL;
        order_kind = ORDER_SHUFFLE;
        order_state = s[7] ? strtoull(s + 8, &end, 10) : 1;
        if (s[7] && (end == s + 8 || *end))
            fatal("ENZCC_CUDA_HOST_ORDER=%s: the seed of shuffle:SEED is a number", s);
    } else
        fatal("ENZCC_CUDA_HOST_ORDER=%s: expected forward, reverse or shuffle[:SEED]", s);
}

/* splitmix64: the shuffle order's random numbers, reproducible from the seed */
static uint64_t next_random(void)
{
    uint64_t z = (order_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* perm[0..n) = the order in which n items run in this phase */
static void make_order(unsigned *perm, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        perm[i] = order_kind == ORDER_REVERSE ? n - 1 - i : i;
    if (order_kind == ORDER_SHUFFLE)
        for (unsigned i = n; i > 1; i--) {
            unsigned j = (unsigned)(next_random() % i), t = perm[i - 1];
            perm[i - 1] = perm[j];
            perm[j] = t;
        }
}

static size_t env_size(const char *name, size_t fallback)
{
    const char *s = getenv(name);
    char *end = NULL;
    if (!s || !*s)
        return fallback;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end || v == 0)
        fatal("%s=%s: expected a positive number", name, s);
    return (size_t)v;
}

/* Stacks: one mapping for the most threads live at once, a guard page under each stack */
static char *stack_pool;
static size_t stack_slots, stack_size, page_size;

static char *stack_of(size_t slot) { return stack_pool + slot * (stack_size + page_size) + page_size; }

static void ensure_stacks(size_t n)
{
    if (n <= stack_slots)
        return;
    if (stack_pool)
        munmap(stack_pool, stack_slots * (stack_size + page_size));
    page_size = (size_t)sysconf(_SC_PAGESIZE);
    stack_size = (env_size("ENZCC_CUDA_HOST_STACK", 256 * 1024) + page_size - 1) / page_size * page_size;
    size_t total = n * (stack_size + page_size);
    stack_pool = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (stack_pool == MAP_FAILED)
        fatal("cannot map %zu stacks of %zu bytes for the emulated threads", n, stack_size);
    for (size_t i = 0; i < n; i++)
        mprotect(stack_pool + i * (stack_size + page_size), page_size, PROT_NONE);
    stack_slots = n;
}

static emu_thread *current(const char *what)
{
    if (!cur)
        fatal("%s called outside a kernel", what);
    return cur;
}

/* Back to the scheduler; returns when the scheduler runs this thread again. */
static void yield_to_scheduler(emu_thread *t) { ctx_switch(&t->ctx, &scheduler_ctx); }

static void thread_main(void)
{
    launch.kernel->tramp(launch.args);
    cur->state = T_DONE;
    ctx_switch(&cur->ctx, &scheduler_ctx); /* never resumed */
    fatal("an emulated thread was resumed after its end");
}

static void run_thread(emu_thread *t)
{
    cur = t;
    ctx_switch(&scheduler_ctx, &t->ctx);
    cur = NULL;
}

static void format_block(char *buf, size_t n, const emu_block *b)
{
    snprintf(buf, n, "(%u,%u,%u)", b->ctaid[0], b->ctaid[1], b->ctaid[2]);
}

static void format_thread(char *buf, size_t n, const emu_thread *t)
{
    snprintf(buf, n, "(%u,%u,%u)", t->tid[0], t->tid[1], t->tid[2]);
}

/* ---- warp-synchronous operations ---- */

static unsigned warp_lanes(unsigned warp)
{
    unsigned first = warp * 32, n = launch.nthreads - first;
    return n >= 32 ? 0xffffffffu : (1u << n) - 1;
}

/* The value lane `lane` gets from a shuffle, as PTX's shfl.sync defines it (b: lane, offset or xor mask;
 * c: clamp in bits 0-4, segment mask in bits 8-12). A lane outside the operation gives all ones (undefined). */
static uint32_t shuffle_result(emu_thread *w, unsigned lane, unsigned arrived)
{
    emu_thread *t = &w[lane];
    unsigned segmask = (t->wc >> 8) & 0x1f, clamp = t->wc & 0x1f;
    unsigned max_lane = (lane & segmask) | (clamp & ~segmask), min_lane = lane & segmask;
    int j, ok;
    switch (t->wop) {
    case W_SHFL_UP: j = (int)lane - t->wb; ok = j >= (int)max_lane; break;
    case W_SHFL_DOWN: j = (int)lane + t->wb; ok = j <= (int)max_lane; break;
    case W_SHFL_BFLY: j = (int)(lane ^ (unsigned)t->wb); ok = j <= (int)max_lane; break;
    default: j = (int)(min_lane | ((unsigned)t->wb & ~segmask & 0x1f)); ok = j <= (int)max_lane; break;
    }
    if (!ok)
        j = (int)lane;
    if (j < 0 || j > 31 || !(arrived >> j & 1))
        return 0xffffffffu;
    return w[j].wval;
}

/* Completes the warp operations of block b whose lanes have all arrived; returns whether any did. */
/* __activemask(): once no lane of the warp can run on, the lanes that wait at it are the active ones (the
 * others exited, took another path to a barrier or a warp operation); returns whether it completed. */
static int resolve_activemask(emu_thread *w, unsigned lanes)
{
    unsigned active = 0;
    for (unsigned l = 0; l < 32; l++) {
        if (!(lanes >> l & 1))
            continue;
        if (w[l].state == T_RUN)
            return 0;
        if (w[l].state == T_WARP && w[l].wop == W_ACTIVEMASK)
            active |= 1u << l;
    }
    for (unsigned l = 0; l < 32; l++)
        if (active >> l & 1) {
            w[l].wres = active;
            w[l].state = T_RUN;
        }
    return active != 0;
}

static int resolve_warps(emu_block *b)
{
    int progress = 0;
    for (unsigned warp = 0; warp * 32 < launch.nthreads; warp++) {
        emu_thread *w = &b->threads[warp * 32];
        unsigned lanes = warp_lanes(warp);
        if (resolve_activemask(w, lanes)) {
            progress = 1;
            continue; /* its lanes run on first */
        }
        for (unsigned lane = 0; lane < 32; lane++) {
            if (!(lanes >> lane & 1) || w[lane].state != T_WARP || w[lane].wop == W_ACTIVEMASK)
                continue;
            unsigned mask = w[lane].wmask & lanes, arrived = 0, ready = 1;
            for (unsigned l = 0; l < 32; l++) {
                if (!(mask >> l & 1))
                    continue;
                if (w[l].state == T_WARP && w[l].wop != W_ACTIVEMASK)
                    arrived |= 1u << l;
                else if (w[l].state != T_DONE)
                    ready = 0;
            }
            if (!ready)
                continue;
            for (unsigned l = 0; l < 32; l++) {
                if (!(arrived >> l & 1))
                    continue;
                if (w[l].wop != w[lane].wop || (w[l].wmask & lanes) != mask) {
                    char bb[48], t1[48], t2[48];
                    format_block(bb, sizeof bb, b);
                    format_thread(t1, sizeof t1, &w[lane]);
                    format_thread(t2, sizeof t2, &w[l]);
                    fatal("divergent warp-synchronous operations: in block %s, thread %s runs %s with mask "
                          "0x%08x while thread %s runs %s with mask 0x%08x", bb, t1, warp_op_names[w[lane].wop],
                          w[lane].wmask, t2, warp_op_names[w[l].wop], w[l].wmask);
                }
            }
            uint32_t ballot = 0, all = 1, any = 0, uni = 1;
            for (unsigned l = 0; l < 32; l++)
                if (arrived >> l & 1) {
                    ballot |= (w[l].wval != 0) << l;
                    all &= w[l].wval != 0;
                    any |= w[l].wval != 0;
                    uni &= (w[l].wval != 0) == (w[lane].wval != 0);
                }
            for (unsigned l = 0; l < 32; l++) {
                if (!(arrived >> l & 1))
                    continue;
                switch (w[l].wop) {
                case W_SYNC: w[l].wres = 0; break;
                case W_VOTE_ALL: w[l].wres = all; break;
                case W_VOTE_ANY: w[l].wres = any; break;
                case W_VOTE_UNI: w[l].wres = uni; break;
                case W_VOTE_BALLOT: w[l].wres = ballot; break;
                default: w[l].wres = shuffle_result(w, l, arrived); break;
                }
            }
            for (unsigned l = 0; l < 32; l++)
                if (arrived >> l & 1)
                    w[l].state = T_RUN;
            progress = 1;
        }
    }
    return progress;
}

static uint32_t warp_op(enum warp_op op, unsigned mask, uint32_t val, int b, int c)
{
    emu_thread *t = current(warp_op_names[op]);
    unsigned lane = t->lin % 32;
    if (!(mask >> lane & 1)) {
        char tt[48];
        format_thread(tt, sizeof tt, t);
        fatal("thread %s calls %s with mask 0x%08x, which leaves out its own lane %u", tt, warp_op_names[op], mask,
              lane);
    }
    t->state = T_WARP;
    t->wop = op;
    t->wmask = mask;
    t->wval = val;
    t->wb = b;
    t->wc = c;
    yield_to_scheduler(t);
    return t->wres;
}

/* ---- block barriers ---- */

static int block_barrier(int id, int red, int pred, int count, const void *site)
{
    emu_thread *t = current("__syncthreads()");
    t->state = T_BAR;
    t->bar_id = id;
    t->bar_red = red;
    t->bar_pred = pred;
    t->bar_count = count;
    t->bar_site = site;
    yield_to_scheduler(t);
    return t->bar_result;
}

/* When no thread of the wave can run: releases block b's barrier (returns 1), or finds the block finished
 * (returns 0), or reports why its threads can never go on. */
static int release_barrier(emu_block *b)
{
    unsigned n = launch.nthreads, waiting = 0, done = 0;
    emu_thread *first = NULL, *gone = NULL, *in_warp = NULL;
    char bb[48], t1[48], t2[48];
    format_block(bb, sizeof bb, b);
    for (unsigned i = 0; i < n; i++) {
        emu_thread *t = &b->threads[i];
        if (t->state == T_DONE) {
            done++;
            gone = gone ? gone : t;
        } else if (t->state == T_WARP)
            in_warp = in_warp ? in_warp : t;
        else if (t->state == T_BAR) {
            waiting++;
            first = first ? first : t;
        }
    }
    if (done == n)
        return 0;
    if (in_warp) {
        format_thread(t1, sizeof t1, in_warp);
        fatal("in block %s, thread %s waits at %s (mask 0x%08x) for lanes that never reach it (they exited or wait "
              "at __syncthreads)", bb, t1, warp_op_names[in_warp->wop], in_warp->wmask);
    }
    if (gone) {
        format_thread(t1, sizeof t1, first);
        format_thread(t2, sizeof t2, gone);
        fatal("divergent __syncthreads: in block %s, thread %s waits at a barrier that thread %s never reaches "
              "(it exited); %u of %u threads wait", bb, t1, t2, waiting, n);
    }
    int popc = 0, all = 1, any = 0;
    for (unsigned i = 0; i < n; i++) {
        emu_thread *t = &b->threads[i];
        if (t->bar_site != first->bar_site || t->bar_id != first->bar_id || t->bar_red != first->bar_red) {
            format_thread(t1, sizeof t1, first);
            format_thread(t2, sizeof t2, t);
            fatal("divergent __syncthreads: in block %s, threads %s and %s wait at different barriers", bb, t1, t2);
        }
        if (t->bar_count >= 0 && (unsigned)t->bar_count != n)
            fatal("a barrier for %d threads in a block of %u threads (block %s): barriers with a thread count "
                  "are not supported by host emulation", t->bar_count, n, bb);
        popc += t->bar_pred != 0;
        all &= t->bar_pred != 0;
        any |= t->bar_pred != 0;
    }
    for (unsigned i = 0; i < n; i++) {
        emu_thread *t = &b->threads[i];
        t->bar_result = t->bar_red == RED_POPC ? popc : t->bar_red == RED_AND ? all : any;
        t->state = T_RUN;
    }
    return 1;
}

/* Runs the blocks blocks[0..nb) (all live at once) to completion, phase by phase. */
static void run_wave(emu_block *blocks, unsigned nb, unsigned *block_perm, unsigned *thread_perm)
{
    for (;;) {
        int progress;
        do {
            progress = 0;
            make_order(block_perm, nb);
            for (unsigned bi = 0; bi < nb; bi++) {
                emu_block *b = &blocks[block_perm[bi]];
                make_order(thread_perm, launch.nthreads);
                for (unsigned ti = 0; ti < launch.nthreads; ti++) {
                    emu_thread *t = &b->threads[thread_perm[ti]];
                    if (t->state == T_RUN) {
                        run_thread(t);
                        progress = 1;
                    }
                }
            }
            for (unsigned bi = 0; bi < nb; bi++)
                progress |= resolve_warps(&blocks[bi]);
        } while (progress);
        int live = 0;
        for (unsigned bi = 0; bi < nb; bi++)
            live |= release_barrier(&blocks[bi]);
        if (!live)
            return;
    }
}

static void start_thread(emu_thread *t, emu_block *b, unsigned lin, size_t slot)
{
    unsigned bx = launch.block.x, by = launch.block.y;
    memset(t, 0, sizeof *t);
    t->lin = lin;
    t->tid[0] = lin % bx;
    t->tid[1] = lin / bx % by;
    t->tid[2] = lin / bx / by;
    t->blk = b;
    t->state = T_RUN;
    t->stack = stack_of(slot);
    t->stack_len = stack_size;
    ctx_make(&t->ctx, t->stack, t->stack_len, thread_main);
}

/* ---- faults in kernels: which thread, and what it touched ---- */

static char fault_stack[64 * 1024];
static int fault_handler_installed;

static void on_fault(int sig, siginfo_t *info, void *uctx)
{
    (void)uctx;
    char msg[512], where[160] = "";
    const char *addr = info->si_addr, *what = "an invalid memory access";
    emu_thread *t = cur;
    if (t && launch.kernel)
        snprintf(where, sizeof where, " in kernel %s, block (%u,%u,%u), thread (%u,%u,%u)", launch.kernel->name,
                 t->blk->ctaid[0], t->blk->ctaid[1], t->blk->ctaid[2], t->tid[0], t->tid[1], t->tid[2]);
    if (stack_pool && addr >= stack_pool && addr < stack_pool + stack_slots * (stack_size + page_size) &&
        (size_t)(addr - stack_pool) % (stack_size + page_size) < page_size)
        what = "a stack overflow (raise ENZCC_CUDA_HOST_STACK)";
    else if (launch.shared_slots && addr >= launch.shared_slots &&
             addr < launch.shared_slots + launch.shared_nslots * launch.shared_slot &&
             (size_t)(addr - launch.shared_slots) % launch.shared_slot >= launch.shared_slot - page_size)
        what = "an access past the end of the block's shared memory";
    fflush(stdout);
    int n = snprintf(msg, sizeof msg, "enzcc-cuda-host: error: %s at address %p%s%s\n", what, (void *)addr, where,
                     sig == SIGBUS ? " (bus error)" : "");
    if (n > 0)
        (void)!write(2, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1);
    _exit(1);
}

/* Faults of kernels are reported by the handler above (on its own stack: a thread's may be exhausted). */
static void install_fault_handler(void)
{
    stack_t ss;
    struct sigaction sa;
    if (fault_handler_installed)
        return;
    fault_handler_installed = 1;
    ss.ss_sp = fault_stack;
    ss.ss_size = sizeof fault_stack;
    ss.ss_flags = 0;
    sigaltstack(&ss, NULL);
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, NULL);
    sigaction(SIGBUS, &sa, NULL);
}

/* Runs a whole grid: in waves of as many blocks as ENZCC_CUDA_HOST_MAX_THREADS allows. */
static void run_grid(void)
{
    unsigned gx = launch.grid.x, gy = launch.grid.y;
    size_t nblocks = (size_t)launch.grid.x * launch.grid.y * launch.grid.z;
    size_t max_threads = env_size("ENZCC_CUDA_HOST_MAX_THREADS", 8192);
    size_t per_wave = max_threads / launch.nthreads ? max_threads / launch.nthreads : 1;
    if (per_wave > nblocks)
        per_wave = nblocks;
    size_t align = launch.kernel->shared_align;
    size_t area = (launch.shared_bytes + align - 1) / align * align;
    unsigned *all_blocks = xmalloc(nblocks * sizeof *all_blocks);
    unsigned *block_perm = xmalloc(per_wave * sizeof *block_perm);
    unsigned *thread_perm = xmalloc(launch.nthreads * sizeof *thread_perm);
    emu_block *blocks = xmalloc(per_wave * sizeof *blocks);
    emu_thread *threads = xmalloc(per_wave * launch.nthreads * sizeof *threads);
    ensure_stacks(per_wave * launch.nthreads); /* (sets page_size) */
    size_t slot = (area + page_size - 1) / page_size * page_size + page_size;
    char *shared = mmap(NULL, per_wave * slot, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (shared == MAP_FAILED)
        fatal("out of memory for shared memory (%zu blocks of %zu bytes)", per_wave, area);
    for (size_t i = 0; i < per_wave; i++) /* a guard page right after each block's area */
        mprotect(shared + (i + 1) * slot - page_size, page_size, PROT_NONE);
    launch.shared_slots = shared;
    launch.shared_slot = slot;
    launch.shared_nslots = per_wave;
    for (size_t i = 0; i < nblocks; i++)
        all_blocks[i] = (unsigned)(order_kind == ORDER_REVERSE ? nblocks - 1 - i : i);
    if (order_kind == ORDER_SHUFFLE)
        for (size_t i = nblocks; i > 1; i--) {
            size_t j = next_random() % i;
            unsigned t = all_blocks[i - 1];
            all_blocks[i - 1] = all_blocks[j];
            all_blocks[j] = t;
        }
    for (size_t first = 0; first < nblocks; first += per_wave) {
        unsigned nb = (unsigned)(nblocks - first < per_wave ? nblocks - first : per_wave);
        for (unsigned bi = 0; bi < nb; bi++) {
            emu_block *b = &blocks[bi];
            unsigned id = all_blocks[first + bi];
            b->ctaid[0] = id % gx;
            b->ctaid[1] = id / gx % gy;
            b->ctaid[2] = id / gx / gy;
            b->shared = shared + (bi + 1) * slot - page_size - area; /* its end at the guard page */
            memset(b->shared, 0xff, area);
            b->threads = &threads[(size_t)bi * launch.nthreads];
            for (unsigned ti = 0; ti < launch.nthreads; ti++)
                start_thread(&b->threads[ti], b, ti, (size_t)bi * launch.nthreads + ti);
        }
        run_wave(blocks, nb, block_perm, thread_perm);
    }
    launch.shared_slots = NULL;
    munmap(shared, per_wave * slot);
    free(threads);
    free(blocks);
    free(thread_perm);
    free(block_perm);
    free(all_blocks);
}

/* ------------------------------------------------------------------------------------------------------------
 * Launches
 * ------------------------------------------------------------------------------------------------------------ */
typedef struct {
    dim3 grid, block;
    size_t shmem;
    cudaStream_t stream;
} call_config;

static call_config configs[64];
static int n_configs;

EXPORT unsigned __cudaPushCallConfiguration(dim3 grid, dim3 block, size_t shmem, cudaStream_t stream)
{
    if (n_configs == 64)
        fatal("kernel launches nested more than 64 deep");
    configs[n_configs].grid = grid;
    configs[n_configs].block = block;
    configs[n_configs].shmem = shmem;
    configs[n_configs].stream = stream;
    n_configs++;
    return 0;
}

EXPORT cudaError_t __cudaPopCallConfiguration(dim3 *grid, dim3 *block, size_t *shmem, cudaStream_t *stream)
{
    if (n_configs == 0)
        return cudaErrorInvalidConfiguration;
    n_configs--;
    *grid = configs[n_configs].grid;
    *block = configs[n_configs].block;
    *shmem = configs[n_configs].shmem;
    *stream = configs[n_configs].stream;
    return cudaSuccess;
}

static cudaError_t launch_failed(cudaError_t err, const char *name, const char *why)
{
    fprintf(stderr, "enzcc-cuda-host: warning: launch of %s failed: %s\n", name ? name : "a kernel", why);
    return fail(err);
}

EXPORT cudaError_t cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args, size_t shmem,
                                    cudaStream_t stream)
{
    (void)stream; /* every launch runs to completion before it returns */
    const char *name = stub_name(func);
    const kernel_entry *k = name ? kernel_named(name) : NULL;
    if (!name)
        return launch_failed(cudaErrorInvalidDeviceFunction, NULL,
                             "no kernel was registered for this host stub (compile the host side with "
                             "-fcuda-include-gpubinary)");
    if (!k)
        return launch_failed(cudaErrorInvalidDeviceFunction, name, "no converted device module defines it");
    unsigned long long nthreads = (unsigned long long)block.x * block.y * block.z;
    if (!grid.x || !grid.y || !grid.z || grid.y > 65535 || grid.z > 65535 || !nthreads || nthreads > 1024 ||
        block.x > 1024 || block.y > 1024 || block.z > 64)
        return launch_failed(cudaErrorInvalidConfiguration, name, "invalid grid or block dimensions");
    size_t max_dynamic = 0;
    for (size_t i = 0; i < n_stubs; i++)
        if (stubs[i].stub == func)
            max_dynamic = stubs[i].max_dynamic;
    if (!max_dynamic)
        max_dynamic = k->shared_static < 48 * 1024 ? 48 * 1024 - k->shared_static : 0;
    if (k->shared_static > 48 * 1024 || shmem > max_dynamic || k->shared_static + shmem > 227 * 1024)
        return launch_failed(cudaErrorInvalidValue, name, "too much shared memory (more than 48 KiB needs "
                             "cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes))");
    if (cur)
        fatal("a kernel launch from device code (dynamic parallelism) is not supported by host emulation");
    if (!order_read)
        read_order();
    install_fault_handler();
    launch.kernel = k;
    launch.args = args;
    launch.grid = grid;
    launch.block = block;
    launch.nthreads = (unsigned)nthreads;
    launch.dynamic_shared = shmem;
    launch.shared_bytes = k->shared_static + shmem;
    run_grid();
    launch.kernel = NULL;
    return cudaSuccess;
}

/* ------------------------------------------------------------------------------------------------------------
 * Memory API
 * ------------------------------------------------------------------------------------------------------------ */
EXPORT cudaError_t cudaMalloc(void **ptr, size_t size)
{
    if (!ptr)
        return fail(cudaErrorInvalidValue);
    char *p = aligned_alloc(256, (size + 255) / 256 * 256 + 256);
    if (!p)
        return fail(cudaErrorMemoryAllocation);
    memset(p, 0xff, size); /* like a GPU's fresh memory, and a NaN: reading before writing shows */
    allocation a = {p, size};
    PUSH(allocs, n_allocs, a);
    *ptr = p;
    return cudaSuccess;
}

EXPORT cudaError_t cudaMallocManaged(void **ptr, size_t size, unsigned flags)
{
    (void)flags;
    return cudaMalloc(ptr, size);
}

EXPORT cudaError_t cudaFree(void *ptr)
{
    if (!ptr)
        return cudaSuccess;
    for (size_t i = 0; i < n_allocs; i++)
        if (allocs[i].base == ptr) {
            free(ptr);
            allocs[i] = allocs[--n_allocs];
            return cudaSuccess;
        }
    return fail(cudaErrorInvalidDevicePointer);
}

EXPORT cudaError_t cudaMallocHost(void **ptr, size_t size)
{
    if (!ptr)
        return fail(cudaErrorInvalidValue);
    *ptr = malloc(size ? size : 1);
    return *ptr ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}

EXPORT cudaError_t cudaHostAlloc(void **ptr, size_t size, unsigned flags)
{
    (void)flags;
    return cudaMallocHost(ptr, size);
}

EXPORT cudaError_t cudaFreeHost(void *ptr)
{
    free(ptr);
    return cudaSuccess;
}

/* Checks the device sides of a copy as its kind names them. */
static cudaError_t check_copy(void *dst, const void *src, size_t n, int kind)
{
    if (n == 0)
        return cudaSuccess;
    if (!dst || !src)
        return fail(cudaErrorInvalidValue);
    switch (kind) {
    case cudaMemcpyHostToHost:
    case cudaMemcpyDefault: return cudaSuccess;
    case cudaMemcpyHostToDevice: return is_device_range(dst, n) ? cudaSuccess : fail(cudaErrorInvalidValue);
    case cudaMemcpyDeviceToHost: return is_device_range(src, n) ? cudaSuccess : fail(cudaErrorInvalidValue);
    case cudaMemcpyDeviceToDevice:
        return is_device_range(dst, n) && is_device_range(src, n) ? cudaSuccess : fail(cudaErrorInvalidValue);
    default: return fail(cudaErrorInvalidMemcpyDirection);
    }
}

EXPORT cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, int kind)
{
    cudaError_t e = check_copy(dst, src, n, kind);
    if (e == cudaSuccess && n)
        memmove(dst, src, n);
    return e;
}

EXPORT cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, int kind, cudaStream_t stream)
{
    (void)stream;
    return cudaMemcpy(dst, src, n, kind);
}

EXPORT cudaError_t cudaMemset(void *dst, int value, size_t n)
{
    if (n == 0)
        return cudaSuccess;
    if (!is_device_range(dst, n))
        return fail(cudaErrorInvalidValue);
    memset(dst, value, n);
    return cudaSuccess;
}

EXPORT cudaError_t cudaMemsetAsync(void *dst, int value, size_t n, cudaStream_t stream)
{
    (void)stream;
    return cudaMemset(dst, value, n);
}

EXPORT cudaError_t cudaMemcpyToSymbol(const void *symbol, const void *src, size_t n, size_t offset, int kind)
{
    const devvar_entry *v = devvar_of_symbol(symbol);
    if (!v)
        return fail(cudaErrorInvalidSymbol);
    if (offset > v->size || n > v->size - offset || (kind != cudaMemcpyHostToDevice &&
                                                     kind != cudaMemcpyDeviceToDevice && kind != cudaMemcpyDefault))
        return fail(cudaErrorInvalidValue);
    memmove((char *)v->addr + offset, src, n);
    return cudaSuccess;
}

EXPORT cudaError_t cudaMemcpyFromSymbol(void *dst, const void *symbol, size_t n, size_t offset, int kind)
{
    const devvar_entry *v = devvar_of_symbol(symbol);
    if (!v)
        return fail(cudaErrorInvalidSymbol);
    if (offset > v->size || n > v->size - offset || (kind != cudaMemcpyDeviceToHost &&
                                                     kind != cudaMemcpyDeviceToDevice && kind != cudaMemcpyDefault))
        return fail(cudaErrorInvalidValue);
    memmove(dst, (char *)v->addr + offset, n);
    return cudaSuccess;
}

EXPORT cudaError_t cudaMemcpyToSymbolAsync(const void *symbol, const void *src, size_t n, size_t offset, int kind,
                                           cudaStream_t stream)
{
    (void)stream;
    return cudaMemcpyToSymbol(symbol, src, n, offset, kind);
}

EXPORT cudaError_t cudaMemcpyFromSymbolAsync(void *dst, const void *symbol, size_t n, size_t offset, int kind,
                                             cudaStream_t stream)
{
    (void)stream;
    return cudaMemcpyFromSymbol(dst, symbol, n, offset, kind);
}

EXPORT cudaError_t cudaGetSymbolAddress(void **dev_ptr, const void *symbol)
{
    const devvar_entry *v = devvar_of_symbol(symbol);
    if (!v || !dev_ptr)
        return fail(cudaErrorInvalidSymbol);
    *dev_ptr = v->addr;
    return cudaSuccess;
}

EXPORT cudaError_t cudaGetSymbolSize(size_t *size, const void *symbol)
{
    const devvar_entry *v = devvar_of_symbol(symbol);
    if (!v || !size)
        return fail(cudaErrorInvalidSymbol);
    *size = v->size;
    return cudaSuccess;
}

/* ------------------------------------------------------------------------------------------------------------
 * Device malloc and free: the host's, within CUDA's heap limit, NaN bytes
 * ------------------------------------------------------------------------------------------------------------ */
static size_t heap_limit = 8 * 1024 * 1024, heap_used;

EXPORT void *__enzcc_host_malloc(size_t n)
{
    if (n > heap_limit - heap_used)
        return NULL; /* as a GPU's malloc does when its heap (cudaLimitMallocHeapSize) is full */
    size_t *p = malloc(n + 16);
    if (!p)
        return NULL;
    p[0] = n;
    heap_used += n;
    memset(p + 2, 0xff, n);
    return p + 2;
}

EXPORT void __enzcc_host_free(void *ptr)
{
    if (!ptr)
        return;
    size_t *p = (size_t *)ptr - 2;
    heap_used -= p[0];
    free(p);
}

enum { cudaLimitStackSize = 0, cudaLimitPrintfFifoSize = 1, cudaLimitMallocHeapSize = 2 };

EXPORT cudaError_t cudaDeviceSetLimit(int limit, size_t value)
{
    if (limit == cudaLimitMallocHeapSize)
        heap_limit = value;
    else if (limit != cudaLimitStackSize && limit != cudaLimitPrintfFifoSize)
        return fail(cudaErrorInvalidValue);
    return cudaSuccess;
}

EXPORT cudaError_t cudaDeviceGetLimit(size_t *value, int limit)
{
    if (!value)
        return fail(cudaErrorInvalidValue);
    switch (limit) {
    case cudaLimitMallocHeapSize: *value = heap_limit; return cudaSuccess;
    case cudaLimitStackSize: *value = 1024; return cudaSuccess;
    case cudaLimitPrintfFifoSize: *value = 1 << 20; return cudaSuccess;
    default: return fail(cudaErrorInvalidValue);
    }
}

/* ------------------------------------------------------------------------------------------------------------
 * Devices, streams, events: one device, every operation synchronous
 * ------------------------------------------------------------------------------------------------------------ */
EXPORT cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
EXPORT cudaError_t cudaThreadSynchronize(void) { return cudaSuccess; }
EXPORT cudaError_t cudaDeviceReset(void) { return cudaSuccess; }

EXPORT cudaError_t cudaGetDeviceCount(int *count)
{
    if (!count)
        return fail(cudaErrorInvalidValue);
    *count = 1;
    return cudaSuccess;
}

EXPORT cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : fail(cudaErrorInvalidDevice); }

EXPORT cudaError_t cudaGetDevice(int *device)
{
    if (!device)
        return fail(cudaErrorInvalidValue);
    *device = 0;
    return cudaSuccess;
}

/* what a host side asks of the device: an sm_90 with one multiprocessor (the emulation runs one block after
 * another); other attributes are an error, so that a program does not go on with a made-up value */
EXPORT cudaError_t cudaDeviceGetAttribute(int *value, int attr, int device)
{
    if (!value || device != 0)
        return fail(device != 0 ? cudaErrorInvalidDevice : cudaErrorInvalidValue);
    switch (attr) {
    case 1: *value = 1024; break;                     /* cudaDevAttrMaxThreadsPerBlock */
    case 2: case 3: *value = 1024; break;             /* cudaDevAttrMaxBlockDimX, Y */
    case 4: *value = 64; break;                       /* cudaDevAttrMaxBlockDimZ */
    case 5: *value = 2147483647; break;               /* cudaDevAttrMaxGridDimX */
    case 6: case 7: *value = 65535; break;            /* cudaDevAttrMaxGridDimY, Z */
    case 8: *value = 48 * 1024; break;                /* cudaDevAttrMaxSharedMemoryPerBlock */
    case 10: *value = 32; break;                      /* cudaDevAttrWarpSize */
    case 16: *value = 1; break;                       /* cudaDevAttrMultiProcessorCount */
    case 39: *value = 2048; break;                    /* cudaDevAttrMaxThreadsPerMultiProcessor */
    case 75: *value = 9; break;                       /* cudaDevAttrComputeCapabilityMajor */
    case 76: *value = 0; break;                       /* cudaDevAttrComputeCapabilityMinor */
    case 97: *value = 227 * 1024; break;              /* cudaDevAttrMaxSharedMemoryPerBlockOptin */
    default: return fail(cudaErrorInvalidValue);
    }
    return cudaSuccess;
}

/* cudaFuncAttributeMaxDynamicSharedMemorySize (8): the opt-in to more than 48 KiB of shared memory */
EXPORT cudaError_t cudaFuncSetAttribute(const void *func, int attr, int value)
{
    for (size_t i = 0; i < n_stubs; i++)
        if (stubs[i].stub == func) {
            if (attr == 8) {
                if (value < 0 || value > 227 * 1024)
                    return fail(cudaErrorInvalidValue);
                stubs[i].max_dynamic = (size_t)value;
            }
            return cudaSuccess;
        }
    return fail(cudaErrorInvalidDeviceFunction);
}

static int stream_token;

EXPORT cudaError_t cudaStreamCreate(cudaStream_t *s)
{
    if (!s)
        return fail(cudaErrorInvalidValue);
    *s = &stream_token;
    return cudaSuccess;
}

EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
    (void)flags;
    return cudaStreamCreate(s);
}

EXPORT cudaError_t cudaStreamDestroy(cudaStream_t s) { (void)s; return cudaSuccess; }
EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t s) { (void)s; return cudaSuccess; }

EXPORT cudaError_t cudaEventCreate(cudaEvent_t *e)
{
    if (!e)
        return fail(cudaErrorInvalidValue);
    *e = xmalloc(sizeof(double));
    *(double *)*e = 0;
    return cudaSuccess;
}

EXPORT cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags)
{
    (void)flags;
    return cudaEventCreate(e);
}

EXPORT cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    struct timespec ts;
    (void)s;
    if (!e)
        return fail(cudaErrorInvalidValue);
    clock_gettime(CLOCK_MONOTONIC, &ts);
    *(double *)e = ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
    return cudaSuccess;
}

EXPORT cudaError_t cudaEventSynchronize(cudaEvent_t e) { (void)e; return cudaSuccess; }

EXPORT cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
    if (!ms || !start || !end)
        return fail(cudaErrorInvalidValue);
    *ms = (float)(*(double *)end - *(double *)start);
    return cudaSuccess;
}

EXPORT cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    free(e);
    return cudaSuccess;
}

/* ------------------------------------------------------------------------------------------------------------
 * What device code calls: shared memory, special registers, barriers, warp operations
 * ------------------------------------------------------------------------------------------------------------ */
EXPORT void *__enzcc_host_shared_base(void) { return current("shared memory")->blk->shared; }

#define SREG(name, expr) EXPORT unsigned __enzcc_nvvm_read_ptx_sreg_##name(void) { return (expr); }
SREG(tid_x, current("threadIdx")->tid[0])
SREG(tid_y, current("threadIdx")->tid[1])
SREG(tid_z, current("threadIdx")->tid[2])
SREG(ntid_x, launch.block.x)
SREG(ntid_y, launch.block.y)
SREG(ntid_z, launch.block.z)
SREG(ctaid_x, current("blockIdx")->blk->ctaid[0])
SREG(ctaid_y, current("blockIdx")->blk->ctaid[1])
SREG(ctaid_z, current("blockIdx")->blk->ctaid[2])
SREG(nctaid_x, launch.grid.x)
SREG(nctaid_y, launch.grid.y)
SREG(nctaid_z, launch.grid.z)
SREG(warpsize, 32)
SREG(laneid, current("laneid")->lin % 32)
SREG(warpid, current("warpid")->lin / 32)
SREG(nwarpid, (launch.nthreads + 31) / 32)
SREG(smid, 0)
SREG(nsmid, 1)
SREG(lanemask_eq, 1u << (current("lanemask")->lin % 32))
SREG(lanemask_le, (unsigned)((2ull << (current("lanemask")->lin % 32)) - 1))
SREG(lanemask_lt, (1u << (current("lanemask")->lin % 32)) - 1)
SREG(lanemask_ge, ~((1u << (current("lanemask")->lin % 32)) - 1))
SREG(lanemask_gt, (unsigned)~((2ull << (current("lanemask")->lin % 32)) - 1))
#undef SREG

/* clock(), clock64(), globaltimer: a counter that goes up at each read, so that differences are positive */
EXPORT unsigned __enzcc_nvvm_read_ptx_sreg_clock(void) { return (unsigned)(clock_counter += 16); }
EXPORT unsigned long long __enzcc_nvvm_read_ptx_sreg_clock64(void) { return clock_counter += 16; }
EXPORT unsigned long long __enzcc_nvvm_read_ptx_sreg_globaltimer(void) { return clock_counter += 16; }
EXPORT unsigned long long __enzcc_nvvm_read_ptx_sreg_gridid(void) { return 1; }

#define SITE __builtin_return_address(0)
EXPORT __attribute__((noinline)) void __enzcc_nvvm_barrier_cta_sync_aligned_all(int id)
{
    block_barrier(id, RED_NONE, 0, -1, SITE);
}
EXPORT __attribute__((noinline)) void __enzcc_nvvm_barrier_cta_sync_all(int id)
{
    block_barrier(id, RED_NONE, 0, -1, SITE);
}
EXPORT __attribute__((noinline)) void __enzcc_nvvm_barrier_cta_sync_aligned_count(int id, int n)
{
    block_barrier(id, RED_NONE, 0, n, SITE);
}
EXPORT __attribute__((noinline)) void __enzcc_nvvm_barrier_cta_sync_count(int id, int n)
{
    block_barrier(id, RED_NONE, 0, n, SITE);
}
EXPORT __attribute__((noinline)) void __enzcc_nvvm_barrier0(void) { block_barrier(0, RED_NONE, 0, -1, SITE); }
EXPORT __attribute__((noinline)) void __enzcc_nvvm_bar_sync(int id) { block_barrier(id, RED_NONE, 0, -1, SITE); }
EXPORT __attribute__((noinline)) void __enzcc_nvvm_barrier_sync(int id)
{
    block_barrier(id, RED_NONE, 0, -1, SITE);
}
EXPORT __attribute__((noinline)) void __enzcc_nvvm_barrier_sync_cnt(int id, int n)
{
    block_barrier(id, RED_NONE, 0, n, SITE);
}
EXPORT __attribute__((noinline)) int __enzcc_nvvm_barrier_cta_red_popc_aligned_all(int id, _Bool p)
{
    return block_barrier(id, RED_POPC, p, -1, SITE);
}
EXPORT __attribute__((noinline)) _Bool __enzcc_nvvm_barrier_cta_red_and_aligned_all(int id, _Bool p)
{
    return block_barrier(id, RED_AND, p, -1, SITE) != 0;
}
EXPORT __attribute__((noinline)) _Bool __enzcc_nvvm_barrier_cta_red_or_aligned_all(int id, _Bool p)
{
    return block_barrier(id, RED_OR, p, -1, SITE) != 0;
}
EXPORT __attribute__((noinline)) int __enzcc_nvvm_barrier0_popc(int p)
{
    return block_barrier(0, RED_POPC, p != 0, -1, SITE);
}
EXPORT __attribute__((noinline)) int __enzcc_nvvm_barrier0_and(int p)
{
    return block_barrier(0, RED_AND, p != 0, -1, SITE);
}
EXPORT __attribute__((noinline)) int __enzcc_nvvm_barrier0_or(int p)
{
    return block_barrier(0, RED_OR, p != 0, -1, SITE);
}

/* fences and memory barriers: one OS thread runs everything */
EXPORT void __enzcc_nvvm_membar_cta(void) {}
EXPORT void __enzcc_nvvm_membar_gl(void) {}
EXPORT void __enzcc_nvvm_membar_sys(void) {}

/* the lanes of the warp that reach this __activemask() while the others cannot go on (resolve_activemask) */
EXPORT unsigned __enzcc_nvvm_activemask(void)
{
    emu_thread *t = current("__activemask()");
    t->state = T_WARP;
    t->wop = W_ACTIVEMASK;
    t->wmask = 1u << (t->lin % 32);
    yield_to_scheduler(t);
    return t->wres;
}

EXPORT void __enzcc_nvvm_bar_warp_sync(unsigned mask) { warp_op(W_SYNC, mask, 0, 0, 0); }

static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

EXPORT int __enzcc_nvvm_shfl_sync_idx_i32(unsigned m, int v, int b, int c) { return (int)warp_op(W_SHFL_IDX, m, (uint32_t)v, b, c); }
EXPORT int __enzcc_nvvm_shfl_sync_up_i32(unsigned m, int v, int b, int c) { return (int)warp_op(W_SHFL_UP, m, (uint32_t)v, b, c); }
EXPORT int __enzcc_nvvm_shfl_sync_down_i32(unsigned m, int v, int b, int c) { return (int)warp_op(W_SHFL_DOWN, m, (uint32_t)v, b, c); }
EXPORT int __enzcc_nvvm_shfl_sync_bfly_i32(unsigned m, int v, int b, int c) { return (int)warp_op(W_SHFL_BFLY, m, (uint32_t)v, b, c); }
EXPORT float __enzcc_nvvm_shfl_sync_idx_f32(unsigned m, float v, int b, int c) { return u2f(warp_op(W_SHFL_IDX, m, f2u(v), b, c)); }
EXPORT float __enzcc_nvvm_shfl_sync_up_f32(unsigned m, float v, int b, int c) { return u2f(warp_op(W_SHFL_UP, m, f2u(v), b, c)); }
EXPORT float __enzcc_nvvm_shfl_sync_down_f32(unsigned m, float v, int b, int c) { return u2f(warp_op(W_SHFL_DOWN, m, f2u(v), b, c)); }
EXPORT float __enzcc_nvvm_shfl_sync_bfly_f32(unsigned m, float v, int b, int c) { return u2f(warp_op(W_SHFL_BFLY, m, f2u(v), b, c)); }
EXPORT _Bool __enzcc_nvvm_vote_all_sync(unsigned m, _Bool p) { return warp_op(W_VOTE_ALL, m, p, 0, 0) != 0; }
EXPORT _Bool __enzcc_nvvm_vote_any_sync(unsigned m, _Bool p) { return warp_op(W_VOTE_ANY, m, p, 0, 0) != 0; }
EXPORT _Bool __enzcc_nvvm_vote_uni_sync(unsigned m, _Bool p) { return warp_op(W_VOTE_UNI, m, p, 0, 0) != 0; }
EXPORT unsigned __enzcc_nvvm_vote_ballot_sync(unsigned m, _Bool p) { return warp_op(W_VOTE_BALLOT, m, p, 0, 0); }

/* which memory a generic pointer points to */
EXPORT _Bool __enzcc_nvvm_isspacep_shared(const void *p)
{
    const char *c = p, *base = current("__isShared")->blk->shared;
    return c >= base && c < base + launch.shared_bytes;
}

EXPORT _Bool __enzcc_nvvm_isspacep_local(const void *p)
{
    emu_thread *t = current("__isLocal");
    const char *c = p;
    return c >= t->stack && c < t->stack + t->stack_len;
}

EXPORT _Bool __enzcc_nvvm_isspacep_const(const void *p)
{
    for (size_t i = 0; i < n_devvars; i++) {
        const char *b = devvars[i].addr;
        if (devvars[i].constant && (const char *)p >= b && (const char *)p < b + devvars[i].size)
            return 1;
    }
    return 0;
}

EXPORT _Bool __enzcc_nvvm_isspacep_global(const void *p)
{
    return !__enzcc_nvvm_isspacep_shared(p) && !__enzcc_nvvm_isspacep_local(p) && !__enzcc_nvvm_isspacep_const(p);
}

/* atomics with a scope (atomicAdd_block, atomicAdd_system...): plain read-modify-writes, one OS thread */
#define ATOMIC_OPS(scope)                                                                                        \
    EXPORT double __enzcc_nvvm_atomic_add_gen_f_##scope##_f64_p(double *p, double v) { double o = *p; *p = o + v; return o; } \
    EXPORT float __enzcc_nvvm_atomic_add_gen_f_##scope##_f32_p(float *p, float v) { float o = *p; *p = o + v; return o; } \
    EXPORT int __enzcc_nvvm_atomic_add_gen_i_##scope##_i32_p(int *p, int v) { int o = *p; *p = (int)((unsigned)o + (unsigned)v); return o; } \
    EXPORT long long __enzcc_nvvm_atomic_add_gen_i_##scope##_i64_p(long long *p, long long v) { long long o = *p; *p = (long long)((unsigned long long)o + (unsigned long long)v); return o; } \
    EXPORT int __enzcc_nvvm_atomic_exch_gen_i_##scope##_i32_p(int *p, int v) { int o = *p; *p = v; return o; } \
    EXPORT long long __enzcc_nvvm_atomic_exch_gen_i_##scope##_i64_p(long long *p, long long v) { long long o = *p; *p = v; return o; } \
    EXPORT int __enzcc_nvvm_atomic_max_gen_i_##scope##_i32_p(int *p, int v) { int o = *p; *p = o > v ? o : v; return o; } \
    EXPORT long long __enzcc_nvvm_atomic_max_gen_i_##scope##_i64_p(long long *p, long long v) { long long o = *p; *p = o > v ? o : v; return o; } \
    EXPORT int __enzcc_nvvm_atomic_min_gen_i_##scope##_i32_p(int *p, int v) { int o = *p; *p = o < v ? o : v; return o; } \
    EXPORT long long __enzcc_nvvm_atomic_min_gen_i_##scope##_i64_p(long long *p, long long v) { long long o = *p; *p = o < v ? o : v; return o; } \
    EXPORT unsigned __enzcc_nvvm_atomic_max_gen_ui_##scope##_i32_p(unsigned *p, unsigned v) { unsigned o = *p; *p = o > v ? o : v; return o; } \
    EXPORT unsigned long long __enzcc_nvvm_atomic_max_gen_ui_##scope##_i64_p(unsigned long long *p, unsigned long long v) { unsigned long long o = *p; *p = o > v ? o : v; return o; } \
    EXPORT unsigned __enzcc_nvvm_atomic_min_gen_ui_##scope##_i32_p(unsigned *p, unsigned v) { unsigned o = *p; *p = o < v ? o : v; return o; } \
    EXPORT unsigned long long __enzcc_nvvm_atomic_min_gen_ui_##scope##_i64_p(unsigned long long *p, unsigned long long v) { unsigned long long o = *p; *p = o < v ? o : v; return o; } \
    EXPORT unsigned __enzcc_nvvm_atomic_inc_gen_i_##scope##_i32_p(unsigned *p, unsigned v) { unsigned o = *p; *p = o >= v ? 0 : o + 1; return o; } \
    EXPORT unsigned __enzcc_nvvm_atomic_dec_gen_i_##scope##_i32_p(unsigned *p, unsigned v) { unsigned o = *p; *p = (o == 0 || o > v) ? v : o - 1; return o; } \
    EXPORT int __enzcc_nvvm_atomic_and_gen_i_##scope##_i32_p(int *p, int v) { int o = *p; *p = o & v; return o; } \
    EXPORT long long __enzcc_nvvm_atomic_and_gen_i_##scope##_i64_p(long long *p, long long v) { long long o = *p; *p = o & v; return o; } \
    EXPORT int __enzcc_nvvm_atomic_or_gen_i_##scope##_i32_p(int *p, int v) { int o = *p; *p = o | v; return o; } \
    EXPORT long long __enzcc_nvvm_atomic_or_gen_i_##scope##_i64_p(long long *p, long long v) { long long o = *p; *p = o | v; return o; } \
    EXPORT int __enzcc_nvvm_atomic_xor_gen_i_##scope##_i32_p(int *p, int v) { int o = *p; *p = o ^ v; return o; } \
    EXPORT long long __enzcc_nvvm_atomic_xor_gen_i_##scope##_i64_p(long long *p, long long v) { long long o = *p; *p = o ^ v; return o; } \
    EXPORT int __enzcc_nvvm_atomic_cas_gen_i_##scope##_i32_p(int *p, int c, int v) { int o = *p; if (o == c) *p = v; return o; } \
    EXPORT long long __enzcc_nvvm_atomic_cas_gen_i_##scope##_i64_p(long long *p, long long c, long long v) { long long o = *p; if (o == c) *p = v; return o; }
ATOMIC_OPS(cta)
ATOMIC_OPS(sys)
#undef ATOMIC_OPS

/* ------------------------------------------------------------------------------------------------------------
 * NVVM math intrinsics (those of libdevice and of clang's CUDA headers): rounding modes through fenv, flush
 * to zero (.ftz) by hand, approximations computed exactly
 * ------------------------------------------------------------------------------------------------------------ */
#define ROUNDED(mode, type, expr)                  \
    ({                                             \
        int saved_ = fegetround();                 \
        fesetround(mode);                          \
        volatile type r_ = (expr);                 \
        fesetround(saved_);                        \
        (type)r_;                                  \
    })

static float ftz(float x) { return fpclassify(x) == FP_SUBNORMAL ? copysignf(0.0f, x) : x; }
static double ftzd(double x) { return fpclassify(x) == FP_SUBNORMAL ? copysign(0.0, x) : x; }

/* add, mul, div, fma, rcp, sqrt in each rounding mode */
#define ARITH(rm, mode)                                                                                           \
    EXPORT double __enzcc_nvvm_add_##rm##_d(double a, double b) { return ROUNDED(mode, double, a + b); }          \
    EXPORT double __enzcc_nvvm_mul_##rm##_d(double a, double b) { return ROUNDED(mode, double, a * b); }          \
    EXPORT double __enzcc_nvvm_div_##rm##_d(double a, double b) { return ROUNDED(mode, double, a / b); }          \
    EXPORT double __enzcc_nvvm_fma_##rm##_d(double a, double b, double c) { return ROUNDED(mode, double, fma(a, b, c)); } \
    EXPORT double __enzcc_nvvm_rcp_##rm##_d(double a) { return ROUNDED(mode, double, 1.0 / a); }                  \
    EXPORT double __enzcc_nvvm_sqrt_##rm##_d(double a) { return ROUNDED(mode, double, sqrt(a)); }                 \
    EXPORT float __enzcc_nvvm_add_##rm##_f(float a, float b) { return ROUNDED(mode, float, a + b); }              \
    EXPORT float __enzcc_nvvm_mul_##rm##_f(float a, float b) { return ROUNDED(mode, float, a * b); }              \
    EXPORT float __enzcc_nvvm_div_##rm##_f(float a, float b) { return ROUNDED(mode, float, a / b); }              \
    EXPORT float __enzcc_nvvm_fma_##rm##_f(float a, float b, float c) { return ROUNDED(mode, float, fmaf(a, b, c)); } \
    EXPORT float __enzcc_nvvm_rcp_##rm##_f(float a) { return ROUNDED(mode, float, 1.0f / a); }                    \
    EXPORT float __enzcc_nvvm_sqrt_##rm##_f(float a) { return ROUNDED(mode, float, sqrtf(a)); }                   \
    EXPORT float __enzcc_nvvm_add_##rm##_ftz_f(float a, float b) { return ftz(ROUNDED(mode, float, ftz(a) + ftz(b))); } \
    EXPORT float __enzcc_nvvm_mul_##rm##_ftz_f(float a, float b) { return ftz(ROUNDED(mode, float, ftz(a) * ftz(b))); } \
    EXPORT float __enzcc_nvvm_div_##rm##_ftz_f(float a, float b) { return ftz(ROUNDED(mode, float, ftz(a) / ftz(b))); } \
    EXPORT float __enzcc_nvvm_fma_##rm##_ftz_f(float a, float b, float c) { return ftz(ROUNDED(mode, float, fmaf(ftz(a), ftz(b), ftz(c)))); } \
    EXPORT float __enzcc_nvvm_rcp_##rm##_ftz_f(float a) { return ftz(ROUNDED(mode, float, 1.0f / ftz(a))); }     \
    EXPORT float __enzcc_nvvm_sqrt_##rm##_ftz_f(float a) { return ftz(ROUNDED(mode, float, sqrtf(ftz(a)))); }
ARITH(rn, FE_TONEAREST)
ARITH(rz, FE_TOWARDZERO)
ARITH(rm, FE_DOWNWARD)
ARITH(rp, FE_UPWARD)
#undef ARITH

EXPORT float __enzcc_nvvm_sqrt_f(float a) { return sqrtf(a); }
EXPORT double __enzcc_nvvm_sqrt_d(double a) { return sqrt(a); }

/* inline PTX of libdevice: sub in each rounding mode, bfind.shiftamt, setp.equ + selp */
#define SUB(rm)                                                                                                   \
    EXPORT double __enzcc_ptx_sub_##rm##_f64(double a, double b) { return __enzcc_nvvm_add_##rm##_d(a, -b); }     \
    EXPORT float __enzcc_ptx_sub_##rm##_f32(float a, float b) { return __enzcc_nvvm_add_##rm##_f(a, -b); }        \
    EXPORT float __enzcc_ptx_sub_##rm##_ftz_f32(float a, float b) { return __enzcc_nvvm_add_##rm##_ftz_f(a, -b); }
SUB(rn)
SUB(rz)
SUB(rm)
SUB(rp)
#undef SUB
EXPORT unsigned __enzcc_ptx_bfind_shiftamt_u32(unsigned a) { return a ? (unsigned)__builtin_clz(a) : 0xffffffffu; }
EXPORT double __enzcc_ptx_setp_equ_selp_f64(double a, double b, double t, double f)
{
    return (a == b || isnan(a) || isnan(b)) ? t : f;
}

/* approximations: exact here (libdevice refines them with Newton steps, which exact values leave as they are) */
EXPORT float __enzcc_nvvm_sqrt_approx_f(float a) { return sqrtf(a); }
EXPORT float __enzcc_nvvm_sqrt_approx_ftz_f(float a) { return ftz(sqrtf(ftz(a))); }
EXPORT float __enzcc_nvvm_rsqrt_approx_f(float a) { return 1.0f / sqrtf(a); }
EXPORT float __enzcc_nvvm_rsqrt_approx_ftz_f(float a) { return ftz(1.0f / sqrtf(ftz(a))); }
EXPORT double __enzcc_nvvm_rsqrt_approx_d(double a) { return 1.0 / sqrt(a); }
EXPORT double __enzcc_nvvm_rsqrt_approx_ftz_d(double a) { return ftzd(1.0 / sqrt(ftzd(a))); }
EXPORT double __enzcc_nvvm_rcp_approx_ftz_d(double a) { return ftzd(1.0 / ftzd(a)); }
EXPORT float __enzcc_nvvm_rcp_approx_ftz_f(float a) { return ftz(1.0f / ftz(a)); }
EXPORT float __enzcc_nvvm_div_approx_f(float a, float b) { return a / b; }
EXPORT float __enzcc_nvvm_div_approx_ftz_f(float a, float b) { return ftz(ftz(a) / ftz(b)); }
EXPORT float __enzcc_nvvm_div_full(float a, float b) { return a / b; }
EXPORT float __enzcc_nvvm_div_full_ftz(float a, float b) { return ftz(ftz(a) / ftz(b)); }
EXPORT float __enzcc_nvvm_ex2_approx_f32(float a) { return exp2f(a); }
EXPORT float __enzcc_nvvm_ex2_approx_ftz_f32(float a) { return ftz(exp2f(ftz(a))); }
EXPORT float __enzcc_nvvm_ex2_approx_f(float a) { return exp2f(a); }
EXPORT float __enzcc_nvvm_ex2_approx_ftz_f(float a) { return ftz(exp2f(ftz(a))); }
EXPORT double __enzcc_nvvm_ex2_approx_d(double a) { return exp2(a); }
EXPORT float __enzcc_nvvm_lg2_approx_f(float a) { return log2f(a); }
EXPORT float __enzcc_nvvm_lg2_approx_ftz_f(float a) { return ftz(log2f(ftz(a))); }
EXPORT double __enzcc_nvvm_lg2_approx_d(double a) { return log2(a); }
EXPORT float __enzcc_nvvm_sin_approx_f(float a) { return sinf(a); }
EXPORT float __enzcc_nvvm_sin_approx_ftz_f(float a) { return ftz(sinf(ftz(a))); }
EXPORT float __enzcc_nvvm_cos_approx_f(float a) { return cosf(a); }
EXPORT float __enzcc_nvvm_cos_approx_ftz_f(float a) { return ftz(cosf(ftz(a))); }

EXPORT float __enzcc_nvvm_fabs_f32(float a) { return fabsf(a); }
EXPORT float __enzcc_nvvm_fabs_ftz_f32(float a) { return ftz(fabsf(a)); }
EXPORT double __enzcc_nvvm_fabs_f64(double a) { return fabs(a); }
EXPORT float __enzcc_nvvm_fabs_f(float a) { return fabsf(a); }
EXPORT float __enzcc_nvvm_fabs_ftz_f(float a) { return ftz(fabsf(a)); }
EXPORT double __enzcc_nvvm_fabs_d(double a) { return fabs(a); }

/* min and max as PTX has them: a NaN operand gives the other one; -0 is below +0 */
static double min_d(double a, double b)
{
    if (isnan(a) || isnan(b))
        return isnan(a) ? b : a;
    if (a == b)
        return signbit(a) ? a : b;
    return a < b ? a : b;
}

static double max_d(double a, double b)
{
    if (isnan(a) || isnan(b))
        return isnan(a) ? b : a;
    if (a == b)
        return signbit(a) ? b : a;
    return a > b ? a : b;
}

EXPORT float __enzcc_nvvm_fmin_f(float a, float b) { return (float)min_d(a, b); }
EXPORT float __enzcc_nvvm_fmin_ftz_f(float a, float b) { return ftz((float)min_d(ftz(a), ftz(b))); }
EXPORT double __enzcc_nvvm_fmin_d(double a, double b) { return min_d(a, b); }
EXPORT float __enzcc_nvvm_fmax_f(float a, float b) { return (float)max_d(a, b); }
EXPORT float __enzcc_nvvm_fmax_ftz_f(float a, float b) { return ftz((float)max_d(ftz(a), ftz(b))); }
EXPORT double __enzcc_nvvm_fmax_d(double a, double b) { return max_d(a, b); }

/* integral rounding of floats: round is to nearest even (cvt.rni) */
EXPORT float __enzcc_nvvm_trunc_f(float a) { return truncf(a); }
EXPORT float __enzcc_nvvm_trunc_ftz_f(float a) { return ftz(truncf(ftz(a))); }
EXPORT double __enzcc_nvvm_trunc_d(double a) { return trunc(a); }
EXPORT float __enzcc_nvvm_round_f(float a) { return nearbyintf(a); }
EXPORT float __enzcc_nvvm_round_ftz_f(float a) { return ftz(nearbyintf(ftz(a))); }
EXPORT double __enzcc_nvvm_round_d(double a) { return nearbyint(a); }
EXPORT float __enzcc_nvvm_floor_f(float a) { return floorf(a); }
EXPORT float __enzcc_nvvm_floor_ftz_f(float a) { return ftz(floorf(ftz(a))); }
EXPORT double __enzcc_nvvm_floor_d(double a) { return floor(a); }
EXPORT float __enzcc_nvvm_ceil_f(float a) { return ceilf(a); }
EXPORT float __enzcc_nvvm_ceil_ftz_f(float a) { return ftz(ceilf(ftz(a))); }
EXPORT double __enzcc_nvvm_ceil_d(double a) { return ceil(a); }

static double saturate(double a) { return isnan(a) ? 0.0 : a < 0.0 ? 0.0 : a > 1.0 ? 1.0 : a; }
EXPORT float __enzcc_nvvm_saturate_f(float a) { return (float)saturate(a); }
EXPORT float __enzcc_nvvm_saturate_ftz_f(float a) { return ftz((float)saturate(ftz(a))); }
EXPORT double __enzcc_nvvm_saturate_d(double a) { return saturate(a); }

/* float -> integer: rounded in the mode, then saturated to the range (NaN gives 0), as cvt does */
static double round_in(double x, int rm)
{
    switch (rm) {
    case 0: return nearbyint(x);
    case 1: return trunc(x);
    case 2: return floor(x);
    default: return ceil(x);
    }
}

static long long to_signed(double x, int rm, double lo, double hi_excl, long long lo_v, long long hi_v)
{
    if (isnan(x))
        return 0;
    double r = round_in(x, rm);
    return r < lo ? lo_v : r >= hi_excl ? hi_v : (long long)r;
}

static unsigned long long to_unsigned(double x, int rm, double hi_excl, unsigned long long hi_v)
{
    if (isnan(x))
        return 0;
    double r = round_in(x, rm);
    return r <= 0 ? 0 : r >= hi_excl ? hi_v : (unsigned long long)r;
}

#define F2I(rm, k)                                                                                                \
    EXPORT int __enzcc_nvvm_d2i_##rm(double a) { return (int)to_signed(a, k, -2147483648.0, 2147483648.0, INT_MIN, INT_MAX); } \
    EXPORT unsigned __enzcc_nvvm_d2ui_##rm(double a) { return (unsigned)to_unsigned(a, k, 4294967296.0, UINT_MAX); } \
    EXPORT long long __enzcc_nvvm_d2ll_##rm(double a) { return to_signed(a, k, -9223372036854775808.0, 9223372036854775808.0, LLONG_MIN, LLONG_MAX); } \
    EXPORT unsigned long long __enzcc_nvvm_d2ull_##rm(double a) { return to_unsigned(a, k, 18446744073709551616.0, ULLONG_MAX); } \
    EXPORT int __enzcc_nvvm_f2i_##rm(float a) { return __enzcc_nvvm_d2i_##rm(a); }                                \
    EXPORT int __enzcc_nvvm_f2i_##rm##_ftz(float a) { return __enzcc_nvvm_d2i_##rm(ftz(a)); }                     \
    EXPORT unsigned __enzcc_nvvm_f2ui_##rm(float a) { return __enzcc_nvvm_d2ui_##rm(a); }                         \
    EXPORT unsigned __enzcc_nvvm_f2ui_##rm##_ftz(float a) { return __enzcc_nvvm_d2ui_##rm(ftz(a)); }              \
    EXPORT long long __enzcc_nvvm_f2ll_##rm(float a) { return __enzcc_nvvm_d2ll_##rm(a); }                        \
    EXPORT long long __enzcc_nvvm_f2ll_##rm##_ftz(float a) { return __enzcc_nvvm_d2ll_##rm(ftz(a)); }             \
    EXPORT unsigned long long __enzcc_nvvm_f2ull_##rm(float a) { return __enzcc_nvvm_d2ull_##rm(a); }             \
    EXPORT unsigned long long __enzcc_nvvm_f2ull_##rm##_ftz(float a) { return __enzcc_nvvm_d2ull_##rm(ftz(a)); }
F2I(rn, 0)
F2I(rz, 1)
F2I(rm, 2)
F2I(rp, 3)
#undef F2I

/* integer -> float and double -> float in each rounding mode */
#define I2F(rm, mode)                                                                                             \
    EXPORT float __enzcc_nvvm_i2f_##rm(int a) { return ROUNDED(mode, float, (float)a); }                          \
    EXPORT float __enzcc_nvvm_ui2f_##rm(unsigned a) { return ROUNDED(mode, float, (float)a); }                    \
    EXPORT float __enzcc_nvvm_ll2f_##rm(long long a) { return ROUNDED(mode, float, (float)a); }                   \
    EXPORT float __enzcc_nvvm_ull2f_##rm(unsigned long long a) { return ROUNDED(mode, float, (float)a); }         \
    EXPORT double __enzcc_nvvm_i2d_##rm(int a) { return (double)a; }                                              \
    EXPORT double __enzcc_nvvm_ui2d_##rm(unsigned a) { return (double)a; }                                        \
    EXPORT double __enzcc_nvvm_ll2d_##rm(long long a) { return ROUNDED(mode, double, (double)a); }                \
    EXPORT double __enzcc_nvvm_ull2d_##rm(unsigned long long a) { return ROUNDED(mode, double, (double)a); }      \
    EXPORT float __enzcc_nvvm_d2f_##rm(double a) { return ROUNDED(mode, float, (float)a); }                       \
    EXPORT float __enzcc_nvvm_d2f_##rm##_ftz(double a) { return ftz(ROUNDED(mode, float, (float)a)); }
I2F(rn, FE_TONEAREST)
I2F(rz, FE_TOWARDZERO)
I2F(rm, FE_DOWNWARD)
I2F(rp, FE_UPWARD)
#undef I2F

/* float -> half (round to nearest even), bit pattern in an unsigned short */
EXPORT unsigned short __enzcc_nvvm_f2h_rn(float f)
{
    uint32_t x = f2u(f), sign = (x >> 16) & 0x8000, ax = x & 0x7fffffff;
    if (ax > 0x7f800000)
        return 0x7fff;
    if (ax >= 0x477ff000) /* 65520 and above (inf too) round to inf */
        return (unsigned short)(sign | 0x7c00);
    if (ax <= 0x33000000) /* at most 2^-25: rounds to zero */
        return (unsigned short)sign;
    unsigned e = ax >> 23;
    if (e >= 113) {
        uint32_t h = ((e - 112) << 10) | ((ax >> 13) & 0x3ff), rem = ax & 0x1fff;
        if (rem > 0x1000 || (rem == 0x1000 && (h & 1)))
            h++;
        return (unsigned short)(sign | h);
    }
    uint32_t m = (ax & 0x7fffff) | 0x800000, shift = 126 - e, h = m >> shift, rem = m & ((1u << shift) - 1),
             half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1)))
        h++;
    return (unsigned short)(sign | h);
}

EXPORT unsigned short __enzcc_nvvm_f2h_rn_ftz(float f) { return __enzcc_nvvm_f2h_rn(ftz(f)); }

/* the halves of a double */
EXPORT int __enzcc_nvvm_d2i_hi(double a) { uint64_t u; memcpy(&u, &a, 8); return (int)(uint32_t)(u >> 32); }
EXPORT int __enzcc_nvvm_d2i_lo(double a) { uint64_t u; memcpy(&u, &a, 8); return (int)(uint32_t)u; }
EXPORT double __enzcc_nvvm_lohi_i2d(int lo, int hi)
{
    uint64_t u = ((uint64_t)(uint32_t)hi << 32) | (uint32_t)lo;
    double d;
    memcpy(&d, &u, 8);
    return d;
}

/* integer operations */
EXPORT int __enzcc_nvvm_mulhi_i(int a, int b) { return (int)(((long long)a * b) >> 32); }
EXPORT unsigned __enzcc_nvvm_mulhi_ui(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }
EXPORT long long __enzcc_nvvm_mulhi_ll(long long a, long long b) { return (long long)(((__int128)a * b) >> 64); }
EXPORT unsigned long long __enzcc_nvvm_mulhi_ull(unsigned long long a, unsigned long long b)
{
    return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
EXPORT int __enzcc_nvvm_mul24_i(int a, int b)
{
    return (int)((unsigned)(((int)((unsigned)a << 8) >> 8) * ((int)((unsigned)b << 8) >> 8)));
}
EXPORT unsigned __enzcc_nvvm_mul24_ui(unsigned a, unsigned b) { return (a & 0xffffff) * (b & 0xffffff); }
EXPORT int __enzcc_nvvm_sad_i(int a, int b, int c) { return (int)((unsigned)(a > b ? (long long)a - b : (long long)b - a) + (unsigned)c); }
EXPORT unsigned __enzcc_nvvm_sad_ui(unsigned a, unsigned b, unsigned c) { return (a > b ? a - b : b - a) + c; }
EXPORT unsigned __enzcc_nvvm_prmt(unsigned a, unsigned b, unsigned c)
{
    uint64_t bytes = ((uint64_t)b << 32) | a;
    unsigned r = 0;
    for (int i = 0; i < 4; i++) {
        unsigned sel = (c >> (4 * i)) & 0xf, byte = (unsigned)(bytes >> (8 * (sel & 7))) & 0xff;
        if (sel & 8)
            byte = byte & 0x80 ? 0xff : 0;
        r |= byte << (8 * i);
    }
    return r;
}

/* __nvvm_reflect: what libdevice asks of the compile (no flush to zero; precise division and square root) */
EXPORT int __enzcc_host_nvvm_reflect(const char *what)
{
    if (strcmp(what, "__CUDA_PREC_DIV") == 0 || strcmp(what, "__CUDA_PREC_SQRT") == 0)
        return 1;
    if (strcmp(what, "__CUDA_ARCH") == 0)
        return 900;
    return 0;
}

/* ------------------------------------------------------------------------------------------------------------
 * libdevice functions that host libm lacks (the others map to libm directly)
 * ------------------------------------------------------------------------------------------------------------ */
EXPORT double __enzcc_nv_rsqrt(double a) { return 1.0 / sqrt(a); }
EXPORT float __enzcc_nv_rsqrtf(float a) { return 1.0f / sqrtf(a); }
EXPORT double __enzcc_nv_rcbrt(double a) { return 1.0 / cbrt(a); }
EXPORT float __enzcc_nv_rcbrtf(float a) { return 1.0f / cbrtf(a); }
EXPORT double __enzcc_nv_sinpi(double a) { return sin(M_PI * a); }
EXPORT float __enzcc_nv_sinpif(float a) { return (float)sin(M_PI * a); }
EXPORT double __enzcc_nv_cospi(double a) { return cos(M_PI * a); }
EXPORT float __enzcc_nv_cospif(float a) { return (float)cos(M_PI * a); }
EXPORT void __enzcc_nv_sincospi(double a, double *s, double *c) { *s = sin(M_PI * a); *c = cos(M_PI * a); }
EXPORT void __enzcc_nv_sincospif(float a, float *s, float *c) { *s = (float)sin(M_PI * a); *c = (float)cos(M_PI * a); }
EXPORT double __enzcc_nv_normcdf(double a) { return 0.5 * erfc(-a / M_SQRT2); }
EXPORT float __enzcc_nv_normcdff(float a) { return (float)(0.5 * erfc(-a / M_SQRT2)); }
EXPORT double __enzcc_nv_erfcx(double a) { return exp(a * a) * erfc(a); }
EXPORT float __enzcc_nv_erfcxf(float a) { return (float)(exp((double)a * a) * erfc(a)); }
EXPORT double __enzcc_nv_powi(double a, int n) { return pow(a, n); }
EXPORT float __enzcc_nv_powif(float a, int n) { return (float)pow(a, n); }
EXPORT float __enzcc_nv_saturatef(float a) { return (float)saturate(a); }
EXPORT float __enzcc_nv_fast_fdividef(float a, float b) { return a / b; }
EXPORT float __enzcc_nv_fdividef(float a, float b) { return a / b; }
EXPORT double __enzcc_nv_fdivide(double a, double b) { return a / b; }
EXPORT void __enzcc_nv_fast_sincosf(float a, float *s, float *c) { *s = sinf(a); *c = cosf(a); }
EXPORT int __enzcc_nv_isinfd(double a) { return isinf(a) != 0; }
EXPORT int __enzcc_nv_isnand(double a) { return isnan(a) != 0; }
EXPORT int __enzcc_nv_isfinited(double a) { return isfinite(a) != 0; }
EXPORT int __enzcc_nv_signbitd(double a) { return signbit(a) != 0; }
EXPORT int __enzcc_nv_isinff(float a) { return isinf(a) != 0; }
EXPORT int __enzcc_nv_isnanf(float a) { return isnan(a) != 0; }
EXPORT int __enzcc_nv_finitef(float a) { return isfinite(a) != 0; }
EXPORT int __enzcc_nv_signbitf(float a) { return signbit(a) != 0; }
EXPORT double __enzcc_nv_hiloint2double(int hi, int lo) { return __enzcc_nvvm_lohi_i2d(lo, hi); }
EXPORT double __enzcc_nv_longlong_as_double(long long a) { double d; memcpy(&d, &a, 8); return d; }
EXPORT long long __enzcc_nv_double_as_longlong(double a) { long long l; memcpy(&l, &a, 8); return l; }
EXPORT float __enzcc_nv_int_as_float(int a) { return u2f((uint32_t)a); }
EXPORT int __enzcc_nv_float_as_int(float a) { return (int)f2u(a); }
EXPORT float __enzcc_nv_uint_as_float(unsigned a) { return u2f(a); }
EXPORT unsigned __enzcc_nv_float_as_uint(float a) { return f2u(a); }
EXPORT float __enzcc_nv_half2float(unsigned short h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    if (e == 31)
        return u2f(sign | 0x7f800000 | (m << 13));
    if (e == 0)
        return (sign ? -1.0f : 1.0f) * ldexpf((float)m, -24);
    return u2f(sign | ((e + 112) << 23) | (m << 13));
}
EXPORT int __enzcc_nv_popc(unsigned a) { return __builtin_popcount(a); }
EXPORT int __enzcc_nv_popcll(unsigned long long a) { return __builtin_popcountll(a); }
EXPORT int __enzcc_nv_clz(unsigned a) { return a ? __builtin_clz(a) : 32; }
EXPORT int __enzcc_nv_clzll(unsigned long long a) { return a ? __builtin_clzll(a) : 64; }
EXPORT int __enzcc_nv_ffs(int a) { return __builtin_ffs(a); }
EXPORT int __enzcc_nv_ffsll(long long a) { return __builtin_ffsll(a); }
EXPORT unsigned __enzcc_nv_brev(unsigned a) { return __builtin_bitreverse32(a); }
EXPORT unsigned long long __enzcc_nv_brevll(unsigned long long a) { return __builtin_bitreverse64(a); }
EXPORT int __enzcc_nv_mulhi(int a, int b) { return __enzcc_nvvm_mulhi_i(a, b); }
EXPORT unsigned __enzcc_nv_umulhi(unsigned a, unsigned b) { return __enzcc_nvvm_mulhi_ui(a, b); }
EXPORT long long __enzcc_nv_mul64hi(long long a, long long b) { return __enzcc_nvvm_mulhi_ll(a, b); }
EXPORT unsigned long long __enzcc_nv_umul64hi(unsigned long long a, unsigned long long b) { return __enzcc_nvvm_mulhi_ull(a, b); }
EXPORT int __enzcc_nv_mul24(int a, int b) { return __enzcc_nvvm_mul24_i(a, b); }
EXPORT unsigned __enzcc_nv_umul24(unsigned a, unsigned b) { return __enzcc_nvvm_mul24_ui(a, b); }
EXPORT int __enzcc_nv_sad(int a, int b, unsigned c) { return __enzcc_nvvm_sad_i(a, b, (int)c); }
EXPORT unsigned __enzcc_nv_usad(unsigned a, unsigned b, unsigned c) { return __enzcc_nvvm_sad_ui(a, b, c); }
EXPORT int __enzcc_nv_hadd(int a, int b) { return (int)(((long long)a + b) >> 1); }
EXPORT unsigned __enzcc_nv_uhadd(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a + b) >> 1); }
EXPORT int __enzcc_nv_rhadd(int a, int b) { return (int)(((long long)a + b + 1) >> 1); }
EXPORT unsigned __enzcc_nv_urhadd(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a + b + 1) >> 1); }
EXPORT unsigned __enzcc_nv_byte_perm(unsigned a, unsigned b, unsigned c) { return __enzcc_nvvm_prmt(a, b, c & 0x7777); }
EXPORT int __enzcc_nv_min(int a, int b) { return a < b ? a : b; }
EXPORT unsigned __enzcc_nv_umin(unsigned a, unsigned b) { return a < b ? a : b; }
EXPORT long long __enzcc_nv_llmin(long long a, long long b) { return a < b ? a : b; }
EXPORT unsigned long long __enzcc_nv_ullmin(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
EXPORT int __enzcc_nv_max(int a, int b) { return a > b ? a : b; }
EXPORT unsigned __enzcc_nv_umax(unsigned a, unsigned b) { return a > b ? a : b; }
EXPORT long long __enzcc_nv_llmax(long long a, long long b) { return a > b ? a : b; }
EXPORT unsigned long long __enzcc_nv_ullmax(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
EXPORT int __enzcc_nv_abs(int a) { return a < 0 ? (int)(0u - (unsigned)a) : a; }
EXPORT long long __enzcc_nv_llabs(long long a) { return a < 0 ? (long long)(0ull - (unsigned long long)a) : a; }

/* the rounding-mode arithmetic and conversions of CUDA's intrinsics (__dadd_rn, __float2int_rz, ...) */
#define NV_ROUNDED(rm, nvrm)                                                                                            \
    EXPORT double __enzcc_nv_dadd_##rm(double a, double b) { return __enzcc_nvvm_add_##nvrm##_d(a, b); }            \
    EXPORT double __enzcc_nv_dsub_##rm(double a, double b) { return __enzcc_nvvm_add_##nvrm##_d(a, -b); }           \
    EXPORT double __enzcc_nv_dmul_##rm(double a, double b) { return __enzcc_nvvm_mul_##nvrm##_d(a, b); }            \
    EXPORT double __enzcc_nv_ddiv_##rm(double a, double b) { return __enzcc_nvvm_div_##nvrm##_d(a, b); }            \
    EXPORT double __enzcc_nv_drcp_##rm(double a) { return __enzcc_nvvm_rcp_##nvrm##_d(a); }                         \
    EXPORT double __enzcc_nv_dsqrt_##rm(double a) { return __enzcc_nvvm_sqrt_##nvrm##_d(a); }                       \
    EXPORT double __enzcc_nv_fma_##rm(double a, double b, double c) { return __enzcc_nvvm_fma_##nvrm##_d(a, b, c); } \
    EXPORT float __enzcc_nv_fadd_##rm(float a, float b) { return __enzcc_nvvm_add_##nvrm##_f(a, b); }               \
    EXPORT float __enzcc_nv_fsub_##rm(float a, float b) { return __enzcc_nvvm_add_##nvrm##_f(a, -b); }              \
    EXPORT float __enzcc_nv_fmul_##rm(float a, float b) { return __enzcc_nvvm_mul_##nvrm##_f(a, b); }               \
    EXPORT float __enzcc_nv_fdiv_##rm(float a, float b) { return __enzcc_nvvm_div_##nvrm##_f(a, b); }               \
    EXPORT float __enzcc_nv_frcp_##rm(float a) { return __enzcc_nvvm_rcp_##nvrm##_f(a); }                           \
    EXPORT float __enzcc_nv_fsqrt_##rm(float a) { return __enzcc_nvvm_sqrt_##nvrm##_f(a); }                         \
    EXPORT float __enzcc_nv_fmaf_##rm(float a, float b, float c) { return __enzcc_nvvm_fma_##nvrm##_f(a, b, c); }   \
    EXPORT int __enzcc_nv_float2int_##rm(float a) { return __enzcc_nvvm_f2i_##nvrm(a); }                            \
    EXPORT unsigned __enzcc_nv_float2uint_##rm(float a) { return __enzcc_nvvm_f2ui_##nvrm(a); }                     \
    EXPORT long long __enzcc_nv_float2ll_##rm(float a) { return __enzcc_nvvm_f2ll_##nvrm(a); }                      \
    EXPORT unsigned long long __enzcc_nv_float2ull_##rm(float a) { return __enzcc_nvvm_f2ull_##nvrm(a); }           \
    EXPORT int __enzcc_nv_double2int_##rm(double a) { return __enzcc_nvvm_d2i_##nvrm(a); }                          \
    EXPORT unsigned __enzcc_nv_double2uint_##rm(double a) { return __enzcc_nvvm_d2ui_##nvrm(a); }                   \
    EXPORT long long __enzcc_nv_double2ll_##rm(double a) { return __enzcc_nvvm_d2ll_##nvrm(a); }                    \
    EXPORT unsigned long long __enzcc_nv_double2ull_##rm(double a) { return __enzcc_nvvm_d2ull_##nvrm(a); }         \
    EXPORT float __enzcc_nv_int2float_##rm(int a) { return __enzcc_nvvm_i2f_##nvrm(a); }                            \
    EXPORT float __enzcc_nv_uint2float_##rm(unsigned a) { return __enzcc_nvvm_ui2f_##nvrm(a); }                     \
    EXPORT float __enzcc_nv_ll2float_##rm(long long a) { return __enzcc_nvvm_ll2f_##nvrm(a); }                      \
    EXPORT float __enzcc_nv_ull2float_##rm(unsigned long long a) { return __enzcc_nvvm_ull2f_##nvrm(a); }           \
    EXPORT double __enzcc_nv_ll2double_##rm(long long a) { return __enzcc_nvvm_ll2d_##nvrm(a); }                    \
    EXPORT double __enzcc_nv_ull2double_##rm(unsigned long long a) { return __enzcc_nvvm_ull2d_##nvrm(a); }         \
    EXPORT float __enzcc_nv_double2float_##rm(double a) { return __enzcc_nvvm_d2f_##nvrm(a); }
NV_ROUNDED(rn, rn)
NV_ROUNDED(rz, rz)
NV_ROUNDED(rd, rm)
NV_ROUNDED(ru, rp)
#undef NV_ROUNDED
EXPORT double __enzcc_nv_int2double_rn(int a) { return a; }
EXPORT double __enzcc_nv_uint2double_rn(unsigned a) { return a; }
EXPORT int __enzcc_nv_double2hiint(double a) { return __enzcc_nvvm_d2i_hi(a); }
EXPORT int __enzcc_nv_double2loint(double a) { return __enzcc_nvvm_d2i_lo(a); }
EXPORT unsigned short __enzcc_nv_float2half_rn(float a) { return __enzcc_nvvm_f2h_rn(a); }

/* ------------------------------------------------------------------------------------------------------------
 * printf, assert
 * ------------------------------------------------------------------------------------------------------------ */

/* Device printf: clang packs the arguments (promoted: int, long, double, pointers) into a buffer, each at its
 * natural alignment. Each conversion is formatted with the host's snprintf; one write per call. */
EXPORT int __enzcc_host_vprintf(const char *fmt, const char *args)
{
    char out[4096], spec[64], piece[1024];
    size_t len = 0, off = 0;
    int nargs = 0;
#define TAKE(type)                                                    \
    ({                                                                \
        type v_;                                                      \
        off = (off + sizeof(type) - 1) / sizeof(type) * sizeof(type); \
        memcpy(&v_, args + off, sizeof(type));                        \
        off += sizeof(type);                                          \
        nargs++;                                                      \
        v_;                                                           \
    })
#define EMIT(s, n)                                       \
    do {                                                 \
        size_t n_ = (n);                                 \
        if (len + n_ >= sizeof out) {                    \
            fwrite(out, 1, len, stdout);                 \
            len = 0;                                     \
        }                                                \
        if (n_ >= sizeof out)                            \
            fwrite((s), 1, n_, stdout);                  \
        else {                                           \
            memcpy(out + len, (s), n_);                  \
            len += n_;                                   \
        }                                                \
    } while (0)
    for (const char *p = fmt; *p;) {
        if (*p != '%') {
            const char *q = strchr(p, '%');
            size_t n = q ? (size_t)(q - p) : strlen(p);
            EMIT(p, n);
            p += n;
            continue;
        }
        if (p[1] == '%') {
            EMIT("%", 1);
            p += 2;
            continue;
        }
        /* %[flags][width][.precision][length]conversion, with * widths taken from the arguments */
        size_t s = 0;
        int stars[2], n_stars = 0, longs = 0;
        spec[s++] = *p++;
        while (*p && strchr("-+ #0'", *p) && s < 40)
            spec[s++] = *p++;
        for (int part = 0; part < 2; part++) {
            if (part == 1) {
                if (*p != '.')
                    break;
                spec[s++] = *p++;
            }
            if (*p == '*') {
                stars[n_stars++] = TAKE(int);
                spec[s++] = *p++;
            } else
                while (*p >= '0' && *p <= '9' && s < 48)
                    spec[s++] = *p++;
        }
        while (*p && strchr("hlLqjzt", *p)) {
            if (*p == 'l' || *p == 'q' || *p == 'j' || *p == 'z' || *p == 't')
                longs++;
            p++;
        }
        char conv = *p ? *p++ : 0;
        int n = 0;
        switch (conv) {
        case 'd': case 'i':
            spec[s++] = 'l', spec[s++] = 'l', spec[s++] = conv, spec[s] = 0;
            {
                long long v = longs ? TAKE(long long) : TAKE(int);
                n = n_stars == 2 ? snprintf(piece, sizeof piece, spec, stars[0], stars[1], v)
                    : n_stars == 1 ? snprintf(piece, sizeof piece, spec, stars[0], v)
                                   : snprintf(piece, sizeof piece, spec, v);
            }
            break;
        case 'u': case 'o': case 'x': case 'X':
            spec[s++] = 'l', spec[s++] = 'l', spec[s++] = conv, spec[s] = 0;
            {
                unsigned long long v = longs ? TAKE(unsigned long long) : TAKE(unsigned);
                n = n_stars == 2 ? snprintf(piece, sizeof piece, spec, stars[0], stars[1], v)
                    : n_stars == 1 ? snprintf(piece, sizeof piece, spec, stars[0], v)
                                   : snprintf(piece, sizeof piece, spec, v);
            }
            break;
        case 'c':
            spec[s++] = conv, spec[s] = 0;
            {
                int v = TAKE(int);
                n = n_stars == 1 ? snprintf(piece, sizeof piece, spec, stars[0], v) : snprintf(piece, sizeof piece, spec, v);
            }
            break;
        case 'f': case 'F': case 'e': case 'E': case 'g': case 'G': case 'a': case 'A':
            spec[s++] = conv, spec[s] = 0;
            {
                double v = TAKE(double);
                n = n_stars == 2 ? snprintf(piece, sizeof piece, spec, stars[0], stars[1], v)
                    : n_stars == 1 ? snprintf(piece, sizeof piece, spec, stars[0], v)
                                   : snprintf(piece, sizeof piece, spec, v);
            }
            break;
        case 's': case 'p':
            spec[s++] = conv, spec[s] = 0;
            {
                const char *v = TAKE(const char *);
                if (conv == 's' && !v)
                    v = "(null)";
                n = n_stars == 2 ? snprintf(piece, sizeof piece, spec, stars[0], stars[1], v)
                    : n_stars == 1 ? snprintf(piece, sizeof piece, spec, stars[0], v)
                                   : snprintf(piece, sizeof piece, spec, v);
            }
            break;
        default:
            fatal("device printf: unsupported conversion '%%%c' in \"%s\"", conv ? conv : '?', fmt);
        }
        if (n > 0)
            EMIT(piece, (size_t)n < sizeof piece ? (size_t)n : sizeof piece - 1);
    }
    fwrite(out, 1, len, stdout);
#undef TAKE
#undef EMIT
    return nargs;
}

/* Device assert(): CUDA's message, then abort. */
EXPORT void __enzcc_host_assertfail(const char *msg, const char *file, unsigned line, const char *func,
                                    size_t char_size)
{
    (void)char_size;
    fflush(stdout);
    if (cur)
        fprintf(stderr, "%s:%u: %s: block: [%u,%u,%u], thread: [%u,%u,%u] Assertion `%s` failed.\n", file, line, func,
                cur->blk->ctaid[0], cur->blk->ctaid[1], cur->blk->ctaid[2], cur->tid[0], cur->tid[1], cur->tid[2], msg);
    else
        fprintf(stderr, "%s:%u: %s: Assertion `%s` failed.\n", file, line, func, msg);
    abort();
}

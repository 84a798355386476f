/* enzcc: <enzyme/checkpoint_schedule.h> -- the arithmetic of the checkpoint schedules, with no dependencies.
 *
 * <enzyme/checkpoint.h> includes this header; a program may also include it alone (C11 or C++) to work out
 * where a schedule puts its snapshots without running one. Everything here is a pure function of its
 * arguments, so a compiler, a run-time scheme and a frontend reading a loop's annotation all agree.
 *
 * A schedule is named by one of the ENZYME_CKPT_SCHEDULE_* values (or its name, see
 * enzyme_ckpt_schedule_from_name) and a budget: the number of snapshots kept across the loop's reverse
 * sweep -- the slots of the binomial schedules, the segments of the periodic one (never a segment's length).
 * A budget of 0 or less asks for the default: segments of floor(sqrt(n)) steps for the periodic schedule,
 * floor(sqrt(n)) slots, but at least 2, for the binomial one.
 *
 *   enzyme_ckpt_isqrt(n)                  floor(sqrt(n)); 0 for n <= 0.
 *   enzyme_ckpt_binomial_progress(n, s)   how far the binomial schedule advances from a snapshot with n steps
 *                                         still to reverse and s slots (that one included) to place, see below.
 *   enzyme_ckpt_binomial_slots(n, budget) the slots the binomial schedule uses on n steps: the budget (or the
 *                                         default), at most n, at least 1.
 *   enzyme_ckpt_periodic_split(n, budget) the periodic schedule's segments: `outer` segments of `inner` steps
 *                                         each, then one more of `trailing` steps when trailing > 0. inner is
 *                                         n / budget rounded up (so there are at most `budget` segments), or
 *                                         floor(sqrt(n)) by default; n <= 0 gives no segment (inner = 1).
 *   enzyme_ckpt_periodic_segments(s)      outer, plus one for a trailing segment.
 *   enzyme_ckpt_periodic_start(s, k)      the first step of segment k (k = segments: n, the end).
 *   enzyme_ckpt_periodic_length(s, k)     the steps of segment k (0 outside 0..segments-1).
 *   enzyme_ckpt_schedule_from_name(p, len) the schedule whose name is exactly the len characters at p (they
 *                                         need not be followed by a NUL): "none", "periodic" or its synonym
 *                                         "regular", "revolve", "store_all", "binomial"; -1 for anything else.
 *
 * The binomial advance. With s slots and every step run forward at most t more times, Griewank's bound says
 * that beta(s, t) = C(s + t, t) steps can be reversed. For n steps and s slots, let t be the least number with
 * beta(s, t) >= n; an advance d from the snapshot keeps that optimum when the d steps it leaves behind can be
 * reversed with s slots and t-1 repetitions (d <= beta(s, t-1)) and the n - d steps ahead with s-1 slots and t
 * repetitions (d >= n - beta(s-1, t)). enzyme_ckpt_binomial_progress takes the middle of that window (rounded
 * down) after narrowing it to 1..n-1, lowered if need be so that each of the s-1 other slots still gets a step
 * of its own. Corner cases: 0 for n <= 0, 1 for n == 1, n itself for s <= 1 (the last slot covers every step
 * left), so the advances made while placing s slots over n steps add up to n exactly.
 */
#ifndef ENZCC_ENZYME_CHECKPOINT_SCHEDULE_H
#define ENZCC_ENZYME_CHECKPOINT_SCHEDULE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The schedules (the values used by loop annotations and by the frontends). */
enum {
  ENZYME_CKPT_SCHEDULE_NONE = 0,      /* no checkpointing */
  ENZYME_CKPT_SCHEDULE_PERIODIC = 1,  /* segment starts kept, a segment replayed when it is reversed */
  ENZYME_CKPT_SCHEDULE_REVOLVE = 2,   /* Griewank and Walther's binomial checkpointing */
  ENZYME_CKPT_SCHEDULE_STORE_ALL = 3, /* every step's state kept */
  ENZYME_CKPT_SCHEDULE_BINOMIAL = 4   /* Enzyme-MLIR's binomial stack of slots (enzyme_ckpt_binomial_progress) */
};

/* The actions a checkpoint scheme answers (the protocol is described in <enzyme/checkpoint.h>). */
enum {
  ENZYME_CKPT_NONE = 0,
  ENZYME_CKPT_STORE = 1,
  ENZYME_CKPT_RESTORE = 2,
  ENZYME_CKPT_FORWARD = 3,
  ENZYME_CKPT_FIRSTUTURN = 4,
  ENZYME_CKPT_UTURN = 5,
  ENZYME_CKPT_ERROR = 6,
  ENZYME_CKPT_DONE = 7
};

static inline int64_t enzyme_ckpt_isqrt(int64_t n) {
  uint64_t v, x, y;
  if (n <= 0)
    return 0;
  /* Newton's iteration from above, in unsigned arithmetic (no overflow for any int64_t) */
  v = (uint64_t)n;
  x = v;
  y = x / 2 + (x & 1);
  while (y < x) {
    x = y;
    y = (x + v / x) / 2;
  }
  return (int64_t)x;
}

/* Internal: C(a + b, b) for a, b >= 0, INT64_MAX when it does not fit. */
static inline int64_t enzyme_ckpt_sched_choose_(int64_t a, int64_t b) {
  int64_t k = a < b ? a : b, m, r = 1, i;
  if (a < 0 || b < 0)
    return 0;
  if (a > INT64_MAX - b)
    return INT64_MAX;
  m = a + b;
  for (i = 1; i <= k; i++) {
    /* r = C(m - k + i - 1, i - 1) becomes C(m - k + i, i) = r * f / i, with the division done first:
       g = gcd(r, i), and i / g divides f */
    int64_t f = m - k + i, x = r, y = i, g, q;
    while (y != 0) {
      int64_t t = x % y;
      x = y;
      y = t;
    }
    g = x;
    q = f / (i / g);
    if (r / g > INT64_MAX / q)
      return INT64_MAX;
    r = (r / g) * q;
  }
  return r;
}

static inline int64_t enzyme_ckpt_binomial_progress(int64_t n, int64_t s) {
  int64_t lo, hi, t_lo, t_hi, mid, most;
  if (n <= 0)
    return 0;
  if (n == 1)
    return 1;
  if (s <= 1)
    return n;
  if (s >= n - 1)
    return 1; /* a step for each slot: the window narrows to 1 */
  /* the least t >= 1 with C(s + t, t) >= n: double an upper bound, then bisect (C(s + t, t) >= t + 1, so
     t = n - 1 always qualifies) */
  t_hi = 1;
  while (enzyme_ckpt_sched_choose_(s, t_hi) < n)
    t_hi = t_hi > (n - 1) / 2 ? n - 1 : 2 * t_hi;
  t_lo = t_hi / 2 + 1; /* C(s + t_hi / 2, t_hi / 2) < n, unless t_hi == 1 */
  if (t_hi == 1)
    t_lo = 1;
  while (t_lo < t_hi) {
    int64_t t = t_lo + (t_hi - t_lo) / 2;
    if (enzyme_ckpt_sched_choose_(s, t) >= n)
      t_hi = t;
    else
      t_lo = t + 1;
  }
  /* the window of advances that keep t repetitions: n - beta(s-1, t) .. beta(s, t-1) */
  lo = n - enzyme_ckpt_sched_choose_(s - 1, t_hi);
  hi = enzyme_ckpt_sched_choose_(s, t_hi - 1);
  if (lo < 1)
    lo = 1;
  if (hi > n - 1)
    hi = n - 1;
  mid = lo + (hi - lo) / 2;
  most = n - (s - 1);
  if (mid > most)
    mid = most;
  return mid < 1 ? 1 : mid;
}

static inline int64_t enzyme_ckpt_binomial_slots(int64_t n, int64_t budget) {
  int64_t b = budget;
  if (b <= 0) {
    b = enzyme_ckpt_isqrt(n);
    if (b < 2)
      b = 2;
  }
  if (b > n)
    b = n;
  return b < 1 ? 1 : b;
}

typedef struct EnzymeCkptPeriodicSplit {
  int64_t inner;    /* steps of each full segment (>= 1) */
  int64_t outer;    /* full segments */
  int64_t trailing; /* steps of the last, shorter segment; 0: none */
} EnzymeCkptPeriodicSplit;

static inline EnzymeCkptPeriodicSplit enzyme_ckpt_periodic_split(int64_t n, int64_t budget) {
  EnzymeCkptPeriodicSplit s;
  s.inner = 1;
  s.outer = 0;
  s.trailing = 0;
  if (n <= 0)
    return s;
  if (budget > 0)
    s.inner = n / budget + (n % budget != 0);
  else
    s.inner = enzyme_ckpt_isqrt(n);
  if (s.inner < 1)
    s.inner = 1;
  s.outer = n / s.inner;
  s.trailing = n % s.inner;
  return s;
}

static inline int64_t enzyme_ckpt_periodic_segments(EnzymeCkptPeriodicSplit s) {
  return s.outer + (s.trailing > 0 ? 1 : 0);
}

static inline int64_t enzyme_ckpt_periodic_start(EnzymeCkptPeriodicSplit s, int64_t k) {
  if (k <= 0)
    return 0;
  if (k <= s.outer)
    return k * s.inner;
  return s.outer * s.inner + s.trailing;
}

static inline int64_t enzyme_ckpt_periodic_length(EnzymeCkptPeriodicSplit s, int64_t k) {
  if (k < 0 || k >= enzyme_ckpt_periodic_segments(s))
    return 0;
  return k < s.outer ? s.inner : s.trailing;
}

static inline int enzyme_ckpt_schedule_from_name(const char *name, size_t len) {
  static const struct {
    const char *name;
    int schedule;
  } table[] = {{"none", ENZYME_CKPT_SCHEDULE_NONE},           {"periodic", ENZYME_CKPT_SCHEDULE_PERIODIC},
               {"regular", ENZYME_CKPT_SCHEDULE_PERIODIC},     {"revolve", ENZYME_CKPT_SCHEDULE_REVOLVE},
               {"store_all", ENZYME_CKPT_SCHEDULE_STORE_ALL}, {"binomial", ENZYME_CKPT_SCHEDULE_BINOMIAL}};
  size_t e, i;
  if (!name)
    return -1;
  for (e = 0; e < sizeof table / sizeof table[0]; e++) {
    const char *w = table[e].name;
    for (i = 0; i < len && w[i] != '\0' && w[i] == name[i]; i++) {
    }
    if (i == len && w[i] == '\0')
      return table[e].schedule;
  }
  return -1;
}

#ifdef __cplusplus
}
#endif

#endif

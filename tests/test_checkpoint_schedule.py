"""The reference checkpoint schemes of ``<enzyme/checkpoint.h>`` (Revolve, Binomial, Periodic, StoreAll), replayed
by a C model of enzcc's driver, and the schedule arithmetic of ``<enzyme/checkpoint_schedule.h>``.

The C program below is built with plain clang (C11 at -O0 and -O2, with trapping UBSan, and as C++17) and
plays the driver's part: its "memory" encodes which state it holds (the state before step c), the slots the
scheme stores and restores are tracked, and every action is checked against the protocol: a store saves the
current state, a restore reads a slot holding the stated state, a forward run starts where the memory is, each
step is turned exactly once from the state before it, in the order n-1..0, the first turn is the FIRSTUTURN of
step n-1, DONE comes last and the statistics match what happened. Revolve must keep within its slots with the
fewest forward steps (Griewank's bound); Binomial must keep within enzyme_ckpt_binomial_slots and run the plain
steps of a recursive model of Enzyme-MLIR's binomial placement; Periodic must store the starts of the segments of
enzyme_ckpt_periodic_split (ceil(n / budget) steps each, floor(sqrt(n)) by default); StoreAll must follow the
while-loop schedule. The arithmetic is checked against brute force and spot values. The program also checks itself: the same replays with a schedule spoiled (two actions
swapped, one dropped, a turn's kind flipped) must fail.
"""

from __future__ import annotations

import subprocess

import pytest

from enzcc_testing import ROOT, have, need

pytestmark = need("clang-22")

INCLUDE = ROOT / "enzcc" / "include"
WARN = ["-Wall", "-Wextra", "-Werror"]

PROGRAM = r"""
#define _POSIX_C_SOURCE 200809L
#include <enzyme/checkpoint.h>

#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the model program's memory: two regions whose bytes tell which state they hold ---- */

typedef struct Head { int64_t cur; int64_t check; } Head;
static Head head;
static unsigned char tail[13];
static EnzymeCkptRegion regions[2];
#define SNAP ((uint64_t)(sizeof(Head) + sizeof tail))

static void put_state(int64_t c) {
  size_t i;
  head.cur = c;
  head.check = c * 7919 + 3;
  for (i = 0; i < sizeof tail; i++)
    tail[i] = (unsigned char)(c * 31 + (int64_t)i * 5 + 1);
}

static int is_state(int64_t c) {
  size_t i;
  if (head.cur != c || head.check != c * 7919 + 3)
    return 0;
  for (i = 0; i < sizeof tail; i++)
    if (tail[i] != (unsigned char)(c * 31 + (int64_t)i * 5 + 1))
      return 0;
  return 1;
}

static void scramble(void) {
  memset(&head, 0xa5, sizeof head);
  memset(tail, 0x5a, sizeof tail);
}

static char err[512];

static void fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, sizeof err, fmt, ap);
  va_end(ap);
}

static int64_t binom(int64_t a, int64_t b) {
  int64_t r = 1, i;
  if (b < 0 || b > a)
    return 0;
  if (b > a - b)
    b = a - b;
  for (i = 1; i <= b; i++)
    r = r * (a - b + i) / i;
  return r;
}

/* Griewank's minimal number of forward steps for n steps with c slots: r*n - binom(c+r, c+1), r the least
   with binom(c+r, c) >= n. */
static int64_t optimal_forward(int64_t n, int64_t c) {
  int64_t r = 0;
  if (n <= 1)
    return 0;
  while (binom(c + r, c) < n)
    r++;
  return r * n - binom(c + r, c + 1);
}

/* Plain recursive halving with c slots. */
static int64_t halving_forward(int64_t len, int64_t c) {
  int64_t d;
  if (len <= 1)
    return 0;
  if (c <= 1)
    return len * (len - 1) / 2;
  d = len / 2;
  return d + halving_forward(len - d, c - 1) + halving_forward(d, c);
}

static long count_files(const char *dir) {
  long k = 0;
  struct dirent *e;
  DIR *d = opendir(dir);
  if (!d)
    return -1;
  while ((e = readdir(d)) != NULL)
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
      k++;
  closedir(d);
  return k;
}

/* ---- where the actions come from: the scheme, possibly spoiled ---- */

enum { MUT_NONE, MUT_SWAP, MUT_DROP, MUT_FLIP };

typedef struct Source {
  const EnzymeCheckpointScheme *scheme;
  void *st;
  int mut;
  long at, count;
  int has_held;
  EnzymeCkptAction held;
} Source;

static void source_next(Source *src, EnzymeCkptAction *a) {
  long i = src->count++;
  if (src->has_held) {
    *a = src->held;
    src->has_held = 0;
    return;
  }
  src->scheme->next_action(src->st, a);
  if (i != src->at)
    return;
  if (src->mut == MUT_SWAP) {
    src->scheme->next_action(src->st, &src->held);
    {
      EnzymeCkptAction t = *a;
      *a = src->held;
      src->held = t;
    }
    src->has_held = 1;
  } else if (src->mut == MUT_DROP) {
    src->scheme->next_action(src->st, a);
  } else if (src->mut == MUT_FLIP) {
    if (a->flag == ENZYME_CKPT_FIRSTUTURN)
      a->flag = ENZYME_CKPT_UTURN;
    else if (a->flag == ENZYME_CKPT_UTURN)
      a->flag = ENZYME_CKPT_FIRSTUTURN;
  }
}

/* ---- one replay ---- */

enum { LOOP_FOR = 0, WHILE_AT_FORWARD = 1, WHILE_AT_END = 2 };

typedef struct Run {
  const EnzymeCheckpointScheme *scheme;
  int64_t n, budget;
  int loop;               /* LOOP_FOR, or a while loop (the driver calls set_nsteps at FORWARD(n -> n+1), or as
                             soon as the memory holds state n) */
  int64_t slot_limit;     /* slots must lie in 0..slot_limit-1 (0: no limit) */
  const char *spill;      /* spill directory, or NULL */
  uint64_t mem_budget;
  int verbose, null_config;
  int mut;
  long mut_at;
  int keep_log;
  /* results */
  EnzymeCkptStats stats;
  EnzymeCkptAction *log;
  long nlog;
  long max_files, spilled_slots;
} Run;

static void log_action(Run *r, const EnzymeCkptAction *a) {
  if (!r->keep_log)
    return;
  if (r->nlog % 1024 == 0) {
    EnzymeCkptAction *p = (EnzymeCkptAction *)realloc(r->log, (size_t)(r->nlog + 1024) * sizeof *p);
    if (!p)
      abort();
    r->log = p;
  }
  r->log[r->nlog++] = *a;
}

/* Replays r; 0 when every check passed, otherwise 1 with the reason in err. */
static int replay(Run *r) {
  const EnzymeCheckpointScheme *s = r->scheme;
  EnzymeCkptConfig cfg;
  Source src;
  EnzymeCkptAction a;
  int64_t n = r->n, cur = 0, next_turn = r->n - 1, turns = 0, fwd = 0, stores = 0, restores = 0, distinct = 0;
  int64_t *held = NULL, heldcap = 0, k;
  int known = r->loop == LOOP_FOR, done = 0, bad = 1;
  long nact = 0, limit = (long)(8 * n * n + 64 * n + 64);
  void *st;

  memset(&cfg, 0, sizeof cfg);
  memset(&r->stats, 0, sizeof r->stats);
  cfg.snapshots = r->budget;
  cfg.verbose = r->verbose;
  cfg.spill_dir = r->spill;
  cfg.mem_budget = r->mem_budget;
  cfg.stats = &r->stats;
  r->nlog = 0;
  r->max_files = 0;
  r->spilled_slots = 0;
  err[0] = 0;
  st = s->init(r->null_config ? NULL : &cfg, known ? n : -1, SNAP);
  memset(&src, 0, sizeof src);
  src.scheme = s;
  src.st = st;
  src.mut = r->mut;
  src.at = r->mut ? r->mut_at : -1;
  put_state(0);

  while (!done) {
    if (r->loop == WHILE_AT_END && !known && cur == n) {
      s->set_nsteps(st, n);
      known = 1;
    }
    source_next(&src, &a);
    log_action(r, &a);
    if (++nact > limit) {
      fail("no DONE after %ld actions", nact);
      goto out;
    }
    switch (a.flag) {
    case ENZYME_CKPT_STORE:
      k = a.cpnum;
      if (a.iteration != cur) {
        fail("action %ld: STORE of state %lld while the memory holds state %lld", nact, (long long)a.iteration,
             (long long)cur);
        goto out;
      }
      if (k < 0 || (r->slot_limit && k >= r->slot_limit)) {
        fail("action %ld: STORE into slot %lld (limit %lld)", nact, (long long)k, (long long)r->slot_limit);
        goto out;
      }
      if (k >= heldcap) {
        int64_t i, cap = 2 * k + 8;
        held = (int64_t *)realloc(held, (size_t)cap * sizeof *held);
        if (!held)
          abort();
        for (i = heldcap; i < cap; i++)
          held[i] = -1;
        heldcap = cap;
      }
      if (held[k] == cur) {
        fail("action %ld: STORE of state %lld into slot %lld, which holds it already", nact, (long long)cur,
             (long long)k);
        goto out;
      }
      if (held[k] < 0) {
        distinct++;
        if (r->spill && (uint64_t)k * SNAP >= r->mem_budget)
          r->spilled_slots++;
      }
      held[k] = cur;
      stores++;
      s->store(st, k, cur, regions, 2);
      if (r->spill) {
        long f = count_files(r->spill);
        if (f > r->max_files)
          r->max_files = f;
      }
      break;
    case ENZYME_CKPT_RESTORE:
      k = a.cpnum;
      if (k < 0 || k >= heldcap || held[k] < 0) {
        fail("action %ld: RESTORE of slot %lld, never stored", nact, (long long)k);
        goto out;
      }
      if (held[k] != a.iteration) {
        fail("action %ld: RESTORE of state %lld from slot %lld, which holds state %lld", nact,
             (long long)a.iteration, (long long)k, (long long)held[k]);
        goto out;
      }
      scramble();
      s->restore(st, k, a.iteration, regions, 2);
      if (!is_state(a.iteration)) {
        fail("action %ld: slot %lld did not give back state %lld", nact, (long long)k, (long long)a.iteration);
        goto out;
      }
      cur = a.iteration;
      restores++;
      break;
    case ENZYME_CKPT_FORWARD:
      if (a.startiteration != cur || a.iteration <= a.startiteration) {
        fail("action %ld: FORWARD %lld -> %lld while the memory holds state %lld", nact,
             (long long)a.startiteration, (long long)a.iteration, (long long)cur);
        goto out;
      }
      if (r->loop == WHILE_AT_FORWARD && !known && a.startiteration == n) {
        s->set_nsteps(st, n); /* the loop's condition says no: this FORWARD never runs */
        known = 1;
        break;
      }
      if (a.iteration > n || (r->loop == LOOP_FOR && a.iteration > next_turn)) {
        fail("action %ld: FORWARD %lld -> %lld runs past step %lld, the next to turn", nact,
             (long long)a.startiteration, (long long)a.iteration, (long long)next_turn);
        goto out;
      }
      fwd += a.iteration - a.startiteration;
      cur = a.iteration;
      put_state(cur);
      break;
    case ENZYME_CKPT_FIRSTUTURN:
      if (turns != 0 || !known || a.iteration != n || cur != n - 1) {
        fail("action %ld: FIRSTUTURN(%lld) after %lld turns, memory at state %lld (n = %lld)", nact,
             (long long)a.iteration, (long long)turns, (long long)cur, (long long)n);
        goto out;
      }
      /* the driver: slot -2, the last step run plainly, slot -1; the reverse sweep restores -2 and
         differentiates the last step */
      s->store(st, -2, n - 1, regions, 2);
      put_state(n);
      s->store(st, -1, n, regions, 2);
      scramble();
      s->restore(st, -2, n - 1, regions, 2);
      if (!is_state(n - 1)) {
        fail("slot -2 did not give back state %lld", (long long)(n - 1));
        goto out;
      }
      put_state(n);
      cur = n;
      turns++;
      next_turn--;
      break;
    case ENZYME_CKPT_UTURN:
      if (turns == 0) {
        fail("action %ld: the first turn is a UTURN", nact);
        goto out;
      }
      if (a.iteration != next_turn + 1 || cur != a.iteration - 1) {
        fail("action %ld: UTURN(%lld) (step %lld) with the memory at state %lld; step %lld was due", nact,
             (long long)a.iteration, (long long)(a.iteration - 1), (long long)cur, (long long)next_turn);
        goto out;
      }
      put_state(a.iteration);
      cur = a.iteration;
      turns++;
      next_turn--;
      break;
    case ENZYME_CKPT_DONE:
      if (!known || turns != n) {
        fail("action %ld: DONE after %lld of %lld turns", nact, (long long)turns, (long long)n);
        goto out;
      }
      if (n > 0) {
        scramble();
        s->restore(st, -1, n, regions, 2);
        if (!is_state(n)) {
          fail("slot -1 did not give back state %lld", (long long)n);
          goto out;
        }
      }
      done = 1;
      break;
    default:
      fail("action %ld: unexpected flag %d", nact, (int)a.flag);
      goto out;
    }
  }
  if (!r->mut) {
    s->next_action(st, &a);
    if (a.flag != ENZYME_CKPT_DONE) {
      fail("the action after DONE is %d, not DONE", (int)a.flag);
      goto out;
    }
  }
  bad = 0;
out:
  s->finalize(st);
  free(held);
  if (bad)
    return 1;
  if (r->spill) {
    long left = count_files(r->spill);
    if (left != 0) {
      fail("%ld snapshot files left in %s after finalize", left, r->spill);
      return 1;
    }
    if (r->max_files != r->spilled_slots) {
      fail("%ld snapshot files at most, %ld slots spilled", r->max_files, r->spilled_slots);
      return 1;
    }
  }
  if (r->null_config)
    return 0;
  if (r->stats.forward_steps != fwd || r->stats.taped_steps != n || r->stats.stores != stores ||
      r->stats.restores != restores || r->stats.max_slots != distinct ||
      r->stats.max_bytes != (uint64_t)distinct * SNAP) {
    fail("stats: forward %lld/%lld taped %lld/%lld stores %lld/%lld restores %lld/%lld slots %lld/%lld bytes %llu",
         (long long)r->stats.forward_steps, (long long)fwd, (long long)r->stats.taped_steps, (long long)n,
         (long long)r->stats.stores, (long long)stores, (long long)r->stats.restores, (long long)restores,
         (long long)r->stats.max_slots, (long long)distinct, (unsigned long long)r->stats.max_bytes);
    return 1;
  }
  return 0;
}

static int failures;

static void check(int ok, const char *what, const Run *r) {
  if (!ok) {
    failures++;
    if (failures <= 20)
      printf("FAIL %s (n=%lld budget=%lld loop=%d mut=%d at=%ld): %s\n", what, (long long)r->n,
             (long long)r->budget, r->loop, r->mut, r->mut_at, err);
  }
}

static Run make_run(const EnzymeCheckpointScheme *s, int64_t n, int64_t budget, int loop) {
  Run r;
  memset(&r, 0, sizeof r);
  r.scheme = s;
  r.n = n;
  r.budget = budget;
  r.loop = loop;
  r.keep_log = 1;
  return r;
}

/* The periodic segments, worked out here: inner = ceil(n / budget) steps (floor(sqrt(n)) for budget < 1), the
   last segment shorter when inner does not divide n; one segment of n steps for StoreAll. */
static int64_t isqrt_slow(int64_t n) {
  int64_t r = 0;
  while ((r + 1) * (r + 1) <= n)
    r++;
  return r;
}

static int64_t seg_inner(int64_t n, int64_t budget, int storeall) {
  int64_t inner;
  if (storeall)
    return n;
  inner = budget >= 1 ? (n + budget - 1) / budget : isqrt_slow(n);
  return inner < 1 ? 1 : inner;
}

static int64_t seg_start(int64_t k, int64_t n, int64_t inner) { return k * inner < n ? k * inner : n; }

/* ---- the checks of each scheme ---- */

static void revolve_case(int64_t n, int64_t budget) {
  int64_t c = budget < 1 ? 1 : budget;
  Run r;
  if (c > n)
    c = n;
  r = make_run(&EnzymeCkptRevolve, n, budget, LOOP_FOR);
  r.slot_limit = c > 0 ? c : 1;
  check(replay(&r) == 0, "revolve replay", &r);
  if (!err[0]) {
    if (r.stats.max_slots > c) {
      fail("%lld slots used, %lld allowed", (long long)r.stats.max_slots, (long long)c);
      check(0, "revolve slots", &r);
    }
    if (n >= 1 && r.stats.forward_steps != optimal_forward(n, c)) {
      fail("%lld forward steps, the optimum is %lld", (long long)r.stats.forward_steps,
           (long long)optimal_forward(n, c));
      check(0, "revolve forward steps", &r);
    }
  }
  free(r.log);
}

/* Binomial: the plain steps of the reversal of len steps from a snapshot with c slots (that one included), as
   Enzyme-MLIR places them, written as a recursion: advance d = enzyme_ckpt_binomial_progress, reverse the d.. part
   with the slots above, then the ..d part with these c again; with one slot (d == len) replay to the last step,
   turn it, and go on with the len-1 steps before it. */
static int64_t binomial_model(int64_t len, int64_t c) {
  int64_t d;
  if (len <= 1)
    return 0;
  if (c <= 1)
    return len * (len - 1) / 2;
  d = enzyme_ckpt_binomial_progress(len, c < len ? c : len);
  if (d >= len)
    return (len - 1) + binomial_model(len - 1, c);
  return d + binomial_model(len - d, c - 1) + binomial_model(d, c);
}

static void binomial_case(int64_t n, int64_t budget, int keep_log) {
  int64_t c = enzyme_ckpt_binomial_slots(n, budget), want = 0, pos = 0, k, fwd;
  int64_t expect = budget >= 1 ? budget : (isqrt_slow(n) < 2 ? 2 : isqrt_slow(n)); /* at most n, at least 1 */
  long i;
  Run r = make_run(&EnzymeCkptBinomial, n, budget, LOOP_FOR);
  r.keep_log = keep_log;
  r.slot_limit = c;
  if (expect > n)
    expect = n;
  if (expect < 1)
    expect = 1;
  if (c != expect) {
    fail("enzyme_ckpt_binomial_slots(%lld, %lld) = %lld", (long long)n, (long long)budget, (long long)c);
    check(0, "binomial slots", &r);
  }
  check(replay(&r) == 0, "binomial replay", &r);
  if (err[0] || n == 0) {
    free(r.log);
    return;
  }
  /* the forward sweep: slot k gets state p_k, p_{k+1} = p_k + progress(n - p_k, c - k) */
  for (k = 0; k < c; k++) {
    int64_t rem = n - pos, left = c - k < rem ? c - k : rem;
    if (keep_log) {
      for (i = 0; i < r.nlog && r.log[i].flag != ENZYME_CKPT_FIRSTUTURN; i++)
        if (r.log[i].flag == ENZYME_CKPT_STORE && r.log[i].cpnum == k)
          break;
      if (i == r.nlog || r.log[i].flag != ENZYME_CKPT_STORE || r.log[i].iteration != pos) {
        fail("slot %lld: not stored with state %lld in the forward sweep", (long long)k, (long long)pos);
        check(0, "binomial forward sweep", &r);
        break;
      }
    }
    if (k + 1 < c)
      pos += enzyme_ckpt_binomial_progress(rem, left);
  }
  /* Enzyme-MLIR's plain steps less the one the driver runs at the first turn: the sweep (n-1 steps), the replay
     from the last slot to the first turn (n-1-p_{c-1}), then the rest of the reversal */
  want = binomial_model(n, c) + (n - 1 - pos);
  fwd = r.stats.forward_steps;
  if (fwd != want || r.stats.max_slots != c) {
    fail("%lld forward steps (the model: %lld), %lld slots (%lld expected)", (long long)fwd, (long long)want,
         (long long)r.stats.max_slots, (long long)c);
    check(0, "binomial counts", &r);
  }
  free(r.log);
}

static void periodic_case(const EnzymeCheckpointScheme *s, int64_t n, int64_t budget, int storeall) {
  int64_t inner = seg_inner(n, budget, storeall), K = n > 0 ? (n + inner - 1) / inner : 0, k, fwd, stores = 0;
  long i, nstores = 0;
  Run r = make_run(s, n, budget, LOOP_FOR);
  check(replay(&r) == 0, storeall ? "storeall replay" : "periodic replay", &r);
  if (!storeall && n > 0) {
    /* the header's arithmetic agrees: at most `budget` segments, starting where enzyme_ckpt_periodic_start says */
    EnzymeCkptPeriodicSplit sp = enzyme_ckpt_periodic_split(n, budget);
    if (enzyme_ckpt_periodic_segments(sp) != K || (budget >= 1 && K > budget)) {
      fail("%lld segments from the split, %lld expected (budget %lld)", (long long)enzyme_ckpt_periodic_segments(sp),
           (long long)K, (long long)budget);
      check(0, "periodic split", &r);
    }
    for (k = 0; k <= K; k++)
      if (enzyme_ckpt_periodic_start(sp, k) != seg_start(k, n, inner) ||
          (k < K && enzyme_ckpt_periodic_length(sp, k) != seg_start(k + 1, n, inner) - seg_start(k, n, inner))) {
        fail("segment %lld: start %lld, length %lld", (long long)k, (long long)enzyme_ckpt_periodic_start(sp, k),
             (long long)enzyme_ckpt_periodic_length(sp, k));
        check(0, "periodic split", &r);
        break;
      }
  }
  if (!err[0] && n > 0) {
    /* the forward sweep stores the segment starts into slots 0..K-1: the first K stores, all before the first
       turn (the stores after them, still before that turn, are the last segment's own) */
    for (i = 0; i < r.nlog && nstores < K && r.log[i].flag != ENZYME_CKPT_FIRSTUTURN; i++) {
      if (r.log[i].flag != ENZYME_CKPT_STORE)
        continue;
      if (r.log[i].cpnum != nstores || r.log[i].iteration != seg_start(nstores, n, inner) ||
          (!storeall &&
           r.log[i].iteration != enzyme_ckpt_periodic_start(enzyme_ckpt_periodic_split(n, budget), nstores))) {
        fail("forward-sweep store #%ld is state %lld in slot %lld", nstores, (long long)r.log[i].iteration,
             (long long)r.log[i].cpnum);
        check(0, "periodic segment starts", &r);
        break;
      }
      nstores++;
    }
    if (nstores != K) {
      fail("%ld segment starts stored, %lld segments", nstores, (long long)K);
      check(0, "periodic segment starts", &r);
    }
    /* forward: across the first K-1 segments, then all but the last step of each segment; stores: the starts,
       then every state of a segment but its first and last; slots: the starts and the longest segment's inner
       states */
    fwd = seg_start(K - 1, n, inner) + n - K;
    for (k = 0; k < K; k++) {
      int64_t len = seg_start(k + 1, n, inner) - seg_start(k, n, inner);
      stores += 1 + (len > 2 ? len - 2 : 0);
    }
    if (r.stats.forward_steps != fwd || r.stats.stores != stores ||
        r.stats.max_slots != K + (inner > 2 ? inner - 2 : 0)) {
      fail("forward %lld (expected %lld), stores %lld (expected %lld), slots %lld", (long long)r.stats.forward_steps,
           (long long)fwd, (long long)r.stats.stores, (long long)stores, (long long)r.stats.max_slots);
      check(0, "periodic counts", &r);
    }
  }
  free(r.log);
}

static void while_case(int64_t n, int loop) {
  Run r = make_run(&EnzymeCkptStoreAll, n, 3, loop);
  long i, m = 0;
  EnzymeCkptAction *want = (EnzymeCkptAction *)calloc((size_t)(4 * n + 8), sizeof *want);
  int64_t j;
  check(replay(&r) == 0, "storeall while replay", &r);
#define WANT(f, a, b, c)                                                                                           \
  do {                                                                                                             \
    want[m].flag = (f);                                                                                            \
    want[m].startiteration = (a);                                                                                  \
    want[m].iteration = (b);                                                                                       \
    want[m].cpnum = (c);                                                                                           \
    m++;                                                                                                           \
  } while (0)
  for (j = 0; j < n; j++) {
    WANT(ENZYME_CKPT_STORE, 0, j, j);
    WANT(ENZYME_CKPT_FORWARD, j, j + 1, 0);
  }
  if (loop == WHILE_AT_FORWARD) {
    WANT(ENZYME_CKPT_STORE, 0, n, n);
    WANT(ENZYME_CKPT_FORWARD, n, n + 1, 0);
  }
  if (n > 0) {
    WANT(ENZYME_CKPT_RESTORE, 0, n - 1, n - 1);
    WANT(ENZYME_CKPT_FIRSTUTURN, 0, n, 0);
  }
  for (j = n - 2; j >= 0; j--) {
    WANT(ENZYME_CKPT_RESTORE, 0, j, j);
    WANT(ENZYME_CKPT_UTURN, 0, j + 1, 0);
  }
  WANT(ENZYME_CKPT_DONE, 0, 0, 0);
#undef WANT
  if (!err[0]) {
    if (r.nlog != m) {
      fail("%ld actions, %ld expected", r.nlog, m);
      check(0, "storeall while schedule", &r);
    } else {
      for (i = 0; i < m; i++) {
        const EnzymeCkptAction *g = &r.log[i], *w = &want[i];
        int same = g->flag == w->flag && g->iteration == w->iteration;
        if (w->flag == ENZYME_CKPT_FORWARD)
          same = same && g->startiteration == w->startiteration;
        if (w->flag == ENZYME_CKPT_STORE || w->flag == ENZYME_CKPT_RESTORE)
          same = same && g->cpnum == w->cpnum;
        if (!same) {
          fail("action %ld is %d(%lld, %lld, slot %lld); expected %d(%lld, %lld, slot %lld)", i + 1, (int)g->flag,
               (long long)g->startiteration, (long long)g->iteration, (long long)g->cpnum, (int)w->flag,
               (long long)w->startiteration, (long long)w->iteration, (long long)w->cpnum);
          check(0, "storeall while schedule", &r);
          break;
        }
      }
    }
    if (r.stats.forward_steps != n) {
      fail("%lld forward steps in a while loop of %lld steps", (long long)r.stats.forward_steps, (long long)n);
      check(0, "storeall while forward steps", &r);
    }
  }
  free(want);
  free(r.log);
}

/* The checks must catch a spoiled schedule: every swap of two different neighbouring actions (known trip
   counts), every dropped action but a STORE or DONE, every turn of the wrong kind. */
static void mutants(const EnzymeCheckpointScheme *s, int64_t n, int64_t budget, int loop, const char *what) {
  Run base = make_run(s, n, budget, loop), r;
  long i, tried = 0, caught = 0;
  int mut;
  if (replay(&base) != 0) {
    check(0, what, &base);
    free(base.log);
    return;
  }
  for (mut = MUT_SWAP; mut <= MUT_FLIP; mut++) {
    if (mut == MUT_SWAP && loop != LOOP_FOR)
      continue; /* a swap across set_nsteps is no longer a swap of the schedule */
    for (i = 0; i + 1 < base.nlog; i++) {
      const EnzymeCkptAction *x = &base.log[i], *y = &base.log[i + 1];
      if (mut == MUT_SWAP && x->flag == y->flag && x->iteration == y->iteration &&
          x->startiteration == y->startiteration && x->cpnum == y->cpnum)
        continue;
      if (mut == MUT_DROP && (x->flag == ENZYME_CKPT_STORE || x->flag == ENZYME_CKPT_DONE))
        continue;
      if (mut == MUT_FLIP && x->flag != ENZYME_CKPT_FIRSTUTURN && x->flag != ENZYME_CKPT_UTURN)
        continue;
      r = make_run(s, n, budget, loop);
      r.keep_log = 0;
      r.mut = mut;
      r.mut_at = i;
      tried++;
      if (replay(&r) != 0) {
        caught++;
      } else {
        fail("a spoiled schedule passed");
        check(0, what, &r);
      }
    }
  }
  if (tried == 0 || caught != tried) {
    fail("%ld of %ld spoiled schedules caught", caught, tried);
    check(0, what, &base);
  }
  free(base.log);
}

static void spill_case(const EnzymeCheckpointScheme *s, int64_t n, int64_t budget, int loop, uint64_t mem_budget,
                       const char *dir) {
  Run r = make_run(s, n, budget, loop);
  r.spill = dir;
  r.mem_budget = mem_budget;
  r.keep_log = 0;
  check(replay(&r) == 0, "spill replay", &r);
  if (!err[0] && r.spilled_slots == 0) {
    fail("nothing spilled");
    check(0, "spill replay", &r);
  }
}

/* ---- <enzyme/checkpoint_schedule.h> ---- */

static int arith_failures;

static void arith(int ok, const char *what) {
  if (!ok) {
    failures++;
    if (++arith_failures <= 20)
      printf("FAIL arithmetic: %s\n", what);
  }
}

/* The binomial advance as the header documents it, by brute force: t the least with C(s+t, t) >= n, the window
   n - C(s-1+t, t) .. C(s+t-1, t-1) narrowed to 1..n-1, its middle (rounded down), at most n-(s-1), at least 1. */
static int64_t progress_slow(int64_t n, int64_t s) {
  int64_t t = 0, lo, hi, m;
  if (n <= 0)
    return 0;
  if (n == 1)
    return 1;
  if (s <= 1)
    return n;
  while (binom(s + t, t) < n)
    t++;
  lo = n - binom(s - 1 + t, t);
  hi = binom(s + t - 1, t - 1);
  if (lo < 1)
    lo = 1;
  if (hi > n - 1)
    hi = n - 1;
  m = (lo + hi) / 2;
  if (m > n - (s - 1))
    m = n - (s - 1);
  return m < 1 ? 1 : m;
}

static void arith_checks(void) {
  static const struct {
    const char *text;
    size_t len;
    int want;
  } names[] = {{"none", 4, ENZYME_CKPT_SCHEDULE_NONE},
               {"periodic", 8, ENZYME_CKPT_SCHEDULE_PERIODIC},
               {"regular", 7, ENZYME_CKPT_SCHEDULE_PERIODIC},
               {"revolve", 7, ENZYME_CKPT_SCHEDULE_REVOLVE},
               {"store_all", 9, ENZYME_CKPT_SCHEDULE_STORE_ALL},
               {"binomial", 8, ENZYME_CKPT_SCHEDULE_BINOMIAL},
               {"binomial,3", 8, ENZYME_CKPT_SCHEDULE_BINOMIAL}, /* only the first len characters count */
               {"revolve(4)", 7, ENZYME_CKPT_SCHEDULE_REVOLVE},
               {"revolve", 6, -1},                               /* a prefix */
               {"revolves", 8, -1},                              /* longer than the name */
               {"", 0, -1},
               {"none", 5, -1}, /* the NUL is one of the len characters */
               {"Revolve", 7, -1},
               {"store-all", 9, -1},
               {"storeall", 8, -1},
               {"periodi", 7, -1}};
  int64_t n, s, k, b;
  size_t i;
  char line[160];
  EnzymeCkptPeriodicSplit sp;

  /* the tags and the action flags */
  arith(ENZYME_CKPT_SCHEDULE_NONE == 0 && ENZYME_CKPT_SCHEDULE_PERIODIC == 1 && ENZYME_CKPT_SCHEDULE_REVOLVE == 2 &&
            ENZYME_CKPT_SCHEDULE_STORE_ALL == 3 && ENZYME_CKPT_SCHEDULE_BINOMIAL == 4,
        "schedule tags");
  arith(ENZYME_CKPT_NONE == 0 && ENZYME_CKPT_STORE == 1 && ENZYME_CKPT_RESTORE == 2 && ENZYME_CKPT_FORWARD == 3 &&
            ENZYME_CKPT_FIRSTUTURN == 4 && ENZYME_CKPT_UTURN == 5 && ENZYME_CKPT_ERROR == 6 && ENZYME_CKPT_DONE == 7,
        "action flags");

  /* isqrt */
  for (n = 0; n <= 20000; n++)
    if (enzyme_ckpt_isqrt(n) != isqrt_slow(n)) {
      snprintf(line, sizeof line, "isqrt(%lld) = %lld", (long long)n, (long long)enzyme_ckpt_isqrt(n));
      arith(0, line);
    }
  arith(enzyme_ckpt_isqrt(-5) == 0 && enzyme_ckpt_isqrt(35) == 5 && enzyme_ckpt_isqrt(36) == 6 &&
            enzyme_ckpt_isqrt(37) == 6 && enzyme_ckpt_isqrt(INT64_MAX) == 3037000499LL &&
            enzyme_ckpt_isqrt(3037000499LL * 3037000499LL) == 3037000499LL &&
            enzyme_ckpt_isqrt(3037000499LL * 3037000499LL - 1) == 3037000498LL,
        "isqrt spot values");

  /* the binomial advance */
  for (n = -2; n <= 400; n++)
    for (s = -1; s <= 30; s++)
      if (enzyme_ckpt_binomial_progress(n, s) != progress_slow(n, s)) {
        snprintf(line, sizeof line, "binomial_progress(%lld, %lld) = %lld, expected %lld", (long long)n,
                 (long long)s, (long long)enzyme_ckpt_binomial_progress(n, s), (long long)progress_slow(n, s));
        arith(0, line);
      }
  arith(enzyme_ckpt_binomial_progress(10, 3) == 4 && enzyme_ckpt_binomial_progress(1, 5) == 1 &&
            enzyme_ckpt_binomial_progress(7, 1) == 7 && enzyme_ckpt_binomial_progress(0, 4) == 0 &&
            enzyme_ckpt_binomial_progress(20, 3) == 10 && enzyme_ckpt_binomial_progress(100, 2) == 88 &&
            enzyme_ckpt_binomial_progress(6, 5) == 1 && enzyme_ckpt_binomial_progress(6, 4) == 3,
        "binomial_progress spot values");
  /* the advances while placing s slots add up to n, each slot with a step of its own */
  for (n = 1; n <= 200; n++)
    for (s = 1; s <= 12; s++) {
      int64_t pos = 0, slots = s < n ? s : n;
      for (k = 0; k < slots && pos < n; k++) {
        int64_t d = enzyme_ckpt_binomial_progress(n - pos, slots - k);
        if (d < 1 || (k + 1 < slots && d > n - pos - (slots - k - 1)))
          break;
        pos += d;
      }
      if (k != slots || pos != n) {
        snprintf(line, sizeof line, "the advances of %lld slots over %lld steps reach %lld", (long long)slots,
                 (long long)n, (long long)pos);
        arith(0, line);
      }
    }
  /* huge counts: fast, and inside 1..n-1 */
  for (s = 2; s <= 64; s += 31) {
    int64_t big[3] = {1000000000000000000LL, INT64_MAX, (int64_t)1 << 62};
    for (i = 0; i < 3; i++) {
      int64_t d = enzyme_ckpt_binomial_progress(big[i], s);
      if (d < 1 || d > big[i] - (s - 1)) {
        snprintf(line, sizeof line, "binomial_progress(%lld, %lld) = %lld", (long long)big[i], (long long)s,
                 (long long)d);
        arith(0, line);
      }
    }
  }
  arith(enzyme_ckpt_binomial_progress(INT64_MAX, INT64_MAX) == 1 && enzyme_ckpt_binomial_progress(5, INT64_MAX) == 1,
        "binomial_progress with more slots than steps");

  /* the binomial slots */
  arith(enzyme_ckpt_binomial_slots(10, 0) == 3 && enzyme_ckpt_binomial_slots(3, 0) == 2 &&
            enzyme_ckpt_binomial_slots(1, 0) == 1 && enzyme_ckpt_binomial_slots(0, 5) == 1 &&
            enzyme_ckpt_binomial_slots(100, -1) == 10 && enzyme_ckpt_binomial_slots(5, 9) == 5 &&
            enzyme_ckpt_binomial_slots(50, 4) == 4 && enzyme_ckpt_binomial_slots(1000000, 0) == 1000,
        "binomial_slots spot values");

  /* the periodic split */
  sp = enzyme_ckpt_periodic_split(10, 0);
  arith(sp.inner == 3 && sp.outer == 3 && sp.trailing == 1 && enzyme_ckpt_periodic_segments(sp) == 4 &&
            enzyme_ckpt_periodic_start(sp, 3) == 9 && enzyme_ckpt_periodic_start(sp, 4) == 10 &&
            enzyme_ckpt_periodic_length(sp, 2) == 3 && enzyme_ckpt_periodic_length(sp, 3) == 1 &&
            enzyme_ckpt_periodic_length(sp, 4) == 0,
        "periodic_split(10, default)");
  sp = enzyme_ckpt_periodic_split(37, 3);
  arith(sp.inner == 13 && sp.outer == 2 && sp.trailing == 11 && enzyme_ckpt_periodic_segments(sp) == 3 &&
            enzyme_ckpt_periodic_start(sp, 1) == 13 && enzyme_ckpt_periodic_start(sp, 2) == 26 &&
            enzyme_ckpt_periodic_start(sp, 3) == 37,
        "periodic_split(37, 3)");
  sp = enzyme_ckpt_periodic_split(12, 4);
  arith(sp.inner == 3 && sp.outer == 4 && sp.trailing == 0 && enzyme_ckpt_periodic_segments(sp) == 4 &&
            enzyme_ckpt_periodic_start(sp, 4) == 12 && enzyme_ckpt_periodic_length(sp, 3) == 3,
        "periodic_split(12, 4)");
  sp = enzyme_ckpt_periodic_split(0, 4);
  arith(sp.inner == 1 && sp.outer == 0 && sp.trailing == 0 && enzyme_ckpt_periodic_segments(sp) == 0,
        "periodic_split(0, 4)");
  sp = enzyme_ckpt_periodic_split(5, 9);
  arith(sp.inner == 1 && sp.outer == 5 && sp.trailing == 0, "periodic_split(5, 9)");
  sp = enzyme_ckpt_periodic_split(INT64_MAX, 2);
  arith(sp.inner == INT64_MAX / 2 + 1 && sp.outer == 1 && sp.trailing == INT64_MAX / 2,
        "periodic_split(INT64_MAX, 2)");
  for (n = 1; n <= 100; n++)
    for (b = 0; b <= 12; b++) {
      int64_t inner = seg_inner(n, b, 0), segs = (n + inner - 1) / inner;
      sp = enzyme_ckpt_periodic_split(n, b);
      if (sp.inner != inner || enzyme_ckpt_periodic_segments(sp) != segs || sp.outer * sp.inner + sp.trailing != n ||
          (b >= 1 && segs > b)) {
        snprintf(line, sizeof line, "periodic_split(%lld, %lld) = {%lld, %lld, %lld}", (long long)n, (long long)b,
                 (long long)sp.inner, (long long)sp.outer, (long long)sp.trailing);
        arith(0, line);
      }
    }

  /* the names */
  for (i = 0; i < sizeof names / sizeof names[0]; i++)
    if (enzyme_ckpt_schedule_from_name(names[i].text, names[i].len) != names[i].want) {
      snprintf(line, sizeof line, "schedule_from_name(\"%s\", %zu) = %d, expected %d", names[i].text, names[i].len,
               enzyme_ckpt_schedule_from_name(names[i].text, names[i].len), names[i].want);
      arith(0, line);
    }
  arith(enzyme_ckpt_schedule_from_name(NULL, 0) == -1 && enzyme_ckpt_schedule_from_name(NULL, 4) == -1,
        "schedule_from_name(NULL)");
}

static void run_all(const char *spill) {
  int64_t n, b, c, rr;
  EnzymeCkptStats st20;
  Run r;

  regions[0].ptr = &head;
  regions[0].bytes = sizeof head;
  regions[1].ptr = tail;
  regions[1].bytes = sizeof tail;

  arith_checks();

  for (n = 0; n <= 60; n++) {
    for (b = 1; b <= 9; b++) {
      revolve_case(n, b);
      binomial_case(n, b, 1);
      periodic_case(&EnzymeCkptPeriodic, n, b, 0);
    }
    revolve_case(n, 0);               /* snapshots < 1 means 1 */
    binomial_case(n, 0, 1);           /* snapshots < 1: floor(sqrt(n)) slots, at least 2 */
    periodic_case(&EnzymeCkptPeriodic, n, 0, 0); /* snapshots < 1: segments of floor(sqrt(n)) steps */
    periodic_case(&EnzymeCkptStoreAll, n, 3, 1);
  }
  for (n = 61; n <= 400; n += 13)
    for (b = 0; b <= 30; b += 3)
      binomial_case(n, b, 0);
  for (n = 0; n <= 30; n++) {
    while_case(n, WHILE_AT_FORWARD);
    while_case(n, WHILE_AT_END);
  }

  /* binomial, not halving: with c slots and r repetitions Revolve reverses beta(c, r) steps */
  r = make_run(&EnzymeCkptRevolve, 20, 3, LOOP_FOR);
  check(replay(&r) == 0, "revolve n=20", &r);
  free(r.log);
  st20 = r.stats;
  if (st20.forward_steps > halving_forward(20, 3) || st20.forward_steps * 3 > 20 * 19 / 2) {
    fail("%lld forward steps for n=20 with 3 slots (halving: %lld, no checkpoints: %d)",
         (long long)st20.forward_steps, (long long)halving_forward(20, 3), 20 * 19 / 2);
    check(0, "revolve n=20", &r);
  }
  for (c = 1; c <= 5; c++)
    for (rr = 1; rr <= 4; rr++) {
      n = binom(c + rr, c);
      r = make_run(&EnzymeCkptRevolve, n, c, LOOP_FOR);
      r.keep_log = 0;
      check(replay(&r) == 0, "revolve beta(c, r)", &r);
      if (!err[0] && (r.stats.forward_steps > rr * n || r.stats.max_slots > c)) {
        fail("n = beta(%lld, %lld) = %lld: %lld forward steps (at most %lld), %lld slots", (long long)c,
             (long long)rr, (long long)n, (long long)r.stats.forward_steps, (long long)(rr * n),
             (long long)r.stats.max_slots);
        check(0, "revolve beta(c, r)", &r);
      }
    }

  /* a long loop: the schedule is made as it goes */
  r = make_run(&EnzymeCkptRevolve, 1000000, 20, LOOP_FOR);
  r.keep_log = 0;
  r.slot_limit = 20;
  check(replay(&r) == 0, "revolve n=10^6", &r);
  if (!err[0] && r.stats.forward_steps != optimal_forward(1000000, 20)) {
    fail("%lld forward steps, the optimum is %lld", (long long)r.stats.forward_steps,
         (long long)optimal_forward(1000000, 20));
    check(0, "revolve n=10^6", &r);
  }

  binomial_case(1000000, 20, 0);
  binomial_case(1000000, 0, 0); /* 1000 slots */
  binomial_case(1000000, 2, 0);

  /* a NULL config: one slot (Revolve), the defaults (Binomial: 3 slots for 9 steps, Periodic: 3 segments) */
  r = make_run(&EnzymeCkptRevolve, 9, 5, LOOP_FOR);
  r.null_config = 1;
  r.slot_limit = 1;
  check(replay(&r) == 0, "revolve without config", &r);
  free(r.log);
  r = make_run(&EnzymeCkptBinomial, 9, 5, LOOP_FOR);
  r.null_config = 1;
  r.slot_limit = 3;
  check(replay(&r) == 0, "binomial without config", &r);
  free(r.log);
  r = make_run(&EnzymeCkptPeriodic, 9, 5, LOOP_FOR);
  r.null_config = 1;
  r.slot_limit = 3 + 1; /* the starts 0, 3, 6, and state 7 of the last segment */
  check(replay(&r) == 0, "periodic without config", &r);
  free(r.log);

  /* the checks catch spoiled schedules */
  for (n = 1; n <= 13; n += 4) {
    mutants(&EnzymeCkptRevolve, n, 3, LOOP_FOR, "revolve mutants");
    mutants(&EnzymeCkptRevolve, n, 1, LOOP_FOR, "revolve mutants, one slot");
    mutants(&EnzymeCkptBinomial, n, 3, LOOP_FOR, "binomial mutants");
    mutants(&EnzymeCkptBinomial, n, 1, LOOP_FOR, "binomial mutants, one slot");
    mutants(&EnzymeCkptBinomial, n, 0, LOOP_FOR, "binomial mutants, default slots");
    mutants(&EnzymeCkptPeriodic, n, 3, LOOP_FOR, "periodic mutants");
    mutants(&EnzymeCkptPeriodic, n, 0, LOOP_FOR, "periodic mutants, default segments");
    mutants(&EnzymeCkptStoreAll, n, 3, LOOP_FOR, "storeall mutants");
    mutants(&EnzymeCkptStoreAll, n, 3, WHILE_AT_END, "storeall while mutants");
  }

  if (spill) {
    spill_case(&EnzymeCkptRevolve, 30, 4, LOOP_FOR, 2 * SNAP, spill);
    spill_case(&EnzymeCkptRevolve, 17, 3, LOOP_FOR, 0, spill);
    spill_case(&EnzymeCkptBinomial, 30, 4, LOOP_FOR, 2 * SNAP, spill);
    spill_case(&EnzymeCkptBinomial, 17, 0, LOOP_FOR, 0, spill);
    spill_case(&EnzymeCkptPeriodic, 25, 3, LOOP_FOR, 0, spill);
    spill_case(&EnzymeCkptPeriodic, 40, 5, LOOP_FOR, 3 * SNAP + 1, spill);
    spill_case(&EnzymeCkptStoreAll, 17, 1, LOOP_FOR, 3 * SNAP + 1, spill);
    spill_case(&EnzymeCkptStoreAll, 12, 1, WHILE_AT_FORWARD, 5 * SNAP, spill);
    spill_case(&EnzymeCkptStoreAll, 12, 1, WHILE_AT_END, 0, spill);
  }
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "all";
  regions[0].ptr = &head;
  regions[0].bytes = sizeof head;
  regions[1].ptr = tail;
  regions[1].bytes = sizeof tail;
  if (strcmp(mode, "all") == 0) {
    run_all(argc > 2 ? argv[2] : NULL);
    if (failures) {
      printf("%d failures\n", failures);
      return 1;
    }
    printf("ok\n");
    return 0;
  }
  if (strcmp(mode, "verbose") == 0) {
    Run r = make_run(&EnzymeCkptBinomial, 6, 2, LOOP_FOR);
    r.verbose = 2;
    r.keep_log = 0;
    if (replay(&r) != 0) {
      printf("FAIL %s\n", err);
      return 1;
    }
    r = make_run(&EnzymeCkptRevolve, 5, 2, LOOP_FOR);
    r.verbose = 2;
    r.keep_log = 0;
    if (replay(&r) != 0) {
      printf("FAIL %s\n", err);
      return 1;
    }
    printf("ok\n");
    return 0;
  }
  /* the misuses below must abort with a message */
  if (strcmp(mode, "while-revolve") == 0)
    EnzymeCkptRevolve.init(NULL, -1, SNAP);
  else if (strcmp(mode, "while-periodic") == 0)
    EnzymeCkptPeriodic.init(NULL, -1, SNAP);
  else if (strcmp(mode, "while-binomial") == 0)
    EnzymeCkptBinomial.init(NULL, -1, SNAP);
  else if (strcmp(mode, "unstored") == 0) {
    void *st = EnzymeCkptStoreAll.init(NULL, 5, SNAP);
    EnzymeCkptStoreAll.store(st, 0, 0, regions, 2);
    EnzymeCkptStoreAll.restore(st, 3, 3, regions, 2);
  } else if (strcmp(mode, "device") == 0) {
    void *st = EnzymeCkptRevolve.init(NULL, 5, SNAP);
    regions[1].addrspace = 1;
    EnzymeCkptRevolve.store(st, 0, 0, regions, 2);
  } else {
    printf("unknown mode %s\n", mode);
    return 2;
  }
  printf("no abort\n");
  return 0;
}
"""

HEADER_ONLY = "#include <enzyme/checkpoint.h>\nint main(void) { return 0; }\n"

# The arithmetic header alone (it needs nothing from checkpoint.h), then both headers the other way round.
SCHEDULE_ONLY = r"""
#include <enzyme/checkpoint_schedule.h>
int main(void) {
  EnzymeCkptPeriodicSplit s = enzyme_ckpt_periodic_split(10, 0);
  int bad = enzyme_ckpt_schedule_from_name("binomial", 8) != ENZYME_CKPT_SCHEDULE_BINOMIAL ||
            enzyme_ckpt_binomial_progress(10, 3) != 4 || enzyme_ckpt_binomial_slots(10, 0) != 3 ||
            enzyme_ckpt_isqrt(10) != 3 || enzyme_ckpt_periodic_segments(s) != 4 ||
            enzyme_ckpt_periodic_start(s, 1) != 3 || enzyme_ckpt_periodic_length(s, 3) != 1 ||
            ENZYME_CKPT_DONE != 7;
  return bad;
}
"""
BOTH_HEADERS = ("#include <enzyme/checkpoint_schedule.h>\n#include <enzyme/checkpoint.h>\n"
                "int main(void) { return EnzymeCkptBinomial.version != ENZYME_CKPT_ABI_VERSION; }\n")

BUILDS = [
    pytest.param("clang-22", ["-x", "c", "-std=c11", "-O0"], id="c11-O0"),
    pytest.param("clang-22", ["-x", "c", "-std=c11", "-O2"], id="c11-O2"),
    pytest.param("clang-22", ["-x", "c", "-std=c11", "-O1", "-fsanitize=undefined", "-fsanitize-trap=all"],
                 id="c11-ubsan"),
    pytest.param("clang++-22", ["-x", "c++", "-std=c++17", "-O2"], id="cxx17-O2",
                 marks=pytest.mark.skipif(not have("clang++-22"), reason="needs clang++-22 (not installed)")),
]


def _compile(compiler: str, flags: list[str], source, out) -> None:
    proc = subprocess.run([compiler, *flags, *WARN, f"-I{INCLUDE}", str(source), "-o", str(out)],
                          capture_output=True, text=True)
    assert proc.returncode == 0 and not proc.stderr, f"{compiler} {' '.join(flags)} failed:\n{proc.stderr}"


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    """Builds the replay program once per compiler and flags."""
    d = tmp_path_factory.mktemp("ckpt")
    src = d / "replay.c"
    src.write_text(PROGRAM)
    built = {}

    def make(compiler: str, flags: list[str]):
        key = (compiler, tuple(flags))
        if key not in built:
            exe = d / f"replay{len(built)}"
            _compile(compiler, flags, src, exe)
            built[key] = exe
        return built[key]

    return make


@pytest.mark.parametrize("compiler,flags", BUILDS)
def test_schedules_replay(build, tmp_path, compiler, flags):
    exe = build(compiler, flags)
    spill = tmp_path / "spill"
    spill.mkdir()
    proc = subprocess.run([str(exe), "all", str(spill)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "ok" and proc.stderr == ""
    assert list(spill.iterdir()) == []


@pytest.mark.parametrize("compiler,flags", [
    pytest.param("clang-22", ["-x", "c", "-std=c11"], id="c11"),
    pytest.param("clang++-22", ["-x", "c++", "-std=c++17"], id="cxx17",
                 marks=pytest.mark.skipif(not have("clang++-22"), reason="needs clang++-22 (not installed)")),
])
def test_header_alone_compiles_without_warnings(tmp_path, compiler, flags):
    src = tmp_path / "only.c"
    src.write_text(HEADER_ONLY)
    _compile(compiler, [*flags, "-Wpedantic"], src, tmp_path / "only")
    for name, text in (("schedule", SCHEDULE_ONLY), ("both", BOTH_HEADERS)):
        src = tmp_path / f"{name}.c"
        src.write_text(text)
        _compile(compiler, [*flags, "-Wpedantic"], src, tmp_path / name)
        proc = subprocess.run([str(tmp_path / name)], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, (name, proc.stdout + proc.stderr)


def test_verbose_prints_actions_and_summary(build):
    exe = build("clang-22", ["-x", "c", "-std=c11", "-O0"])
    proc = subprocess.run([str(exe), "verbose"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stdout + proc.stderr
    lines = proc.stderr.splitlines()
    assert any("FIRSTUTURN" in x for x in lines) and any("UTURN iteration=1" in x for x in lines)
    assert lines[-1].startswith("enzyme checkpoint (revolve): 5 steps") and "5 taped steps" in lines[-1]
    assert any(x.startswith("enzyme checkpoint (binomial): STORE") for x in lines)
    assert any(x.startswith("enzyme checkpoint (binomial): 6 steps") and "6 taped steps" in x for x in lines)


@pytest.mark.parametrize("mode,message", [
    ("while-revolve", "needs the number of steps"),
    ("while-periodic", "needs the number of steps"),
    ("while-binomial", "needs the number of steps"),
    ("unstored", "never stored"),
    ("device", "device memory"),
])
def test_misuse_aborts_with_a_message(build, mode, message):
    exe = build("clang-22", ["-x", "c", "-std=c11", "-O0"])
    proc = subprocess.run([str(exe), mode], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "no abort" not in proc.stdout
    assert message in proc.stderr, proc.stderr

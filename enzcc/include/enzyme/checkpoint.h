/* enzcc: checkpointed loops -- the scheme ABI and three reference schemes.
 *
 *   EnzymeCkptConfig config = {.snapshots = 8};
 *   __enzyme_checkpoint_for((void *)step, start, n,
 *                           enzyme_scheme, &EnzymeCkptRevolve, &config,
 *                           [enzyme_checkpoint_region, ptr, bytes,]... args...);
 *   __enzyme_checkpoint_while((void *)step,
 *                             enzyme_scheme, &EnzymeCkptStoreAll, &config, ... args...);
 *
 * runs step(start + j, args...) for j = 0..n-1 (the while form runs until step
 * returns 0). When the loop is differentiated in reverse mode, enzcc does not
 * tape every iteration: its generated code (the "driver") asks a checkpoint
 * scheme what to do next and keeps only the snapshots the scheme asks for.
 *
 * Terms. Steps are numbered j = 0..n-1 whatever `start` is. "State c" is the
 * content of the program memory the loop touches (the checkpoint regions)
 * just BEFORE step c runs; state n is the memory after the loop. A snapshot
 * slot is a non-negative integer naming a place where the scheme keeps a copy
 * of one state. Slots -2 and -1 belong to the driver (see FIRSTUTURN); a
 * scheme's store and restore must accept them, and they are not counted in
 * its statistics.
 *
 * The protocol. The driver calls init(data, n, snapshot_bytes) once (n = -1
 * for a while loop whose trip count is not known yet; snapshot_bytes is the
 * total size of the regions), then calls next_action(state, &a) repeatedly,
 * carrying out each action before asking for the next one:
 *
 *   STORE      (iteration = c, cpnum = k) the memory holds state c; the driver
 *              calls store(state, k, c, regions, nregions) and the scheme
 *              copies the regions, in order, into slot k (a slot may be
 *              written again later; the new state replaces the old one).
 *   RESTORE    (iteration = c, cpnum = k) the driver calls restore(state, k,
 *              c, regions, nregions); slot k holds state c, which is copied
 *              back into the regions; the memory now holds state c.
 *   FORWARD    (startiteration = a, iteration = b) the memory holds state a;
 *              the driver runs steps a..b-1 plainly (no tape); the memory
 *              then holds state b.
 *   FIRSTUTURN (iteration = b, always b == n) the first turn, emitted while
 *              the loop is still running forward: the memory holds state
 *              n-1. The driver stores it in slot -2, runs the last step
 *              plainly, stores the result (state n, the loop's output) in
 *              slot -1 and goes on with the code after the loop. When the
 *              reverse sweep reaches the loop, the driver restores slot -2
 *              and differentiates step n-1 (taped forward run plus adjoint);
 *              the memory then holds state n.
 *   UTURN      (iteration = b) the memory holds state b-1; the driver runs
 *              step b-1 with a tape and then its adjoint. Afterwards the
 *              memory holds state b (the step's output), so a scheme must
 *              RESTORE (and maybe FORWARD) before it asks for the next turn.
 *   DONE       the schedule is over: the driver restores slot -1 (when n > 0;
 *              with n = 0 DONE is the very first action and nothing was
 *              stored), leaving the loop's output in memory, and calls
 *              finalize(state), which releases everything.
 *   ERROR      the scheme cannot go on (the reference schemes never answer it:
 *              they print a message to stderr and abort instead).
 *
 * Every step is turned (FIRSTUTURN or UTURN) exactly once, in the order n-1,
 * n-2, ..., 0, and the first turn is the FIRSTUTURN of step n-1. After DONE
 * next_action keeps answering DONE.
 *
 * While loops: init gets n = -1 and the scheme answers as if the loop were
 * endless until the driver learns the trip count and calls set_nsteps(state,
 * n) (the loop ran steps 0..n-1); actions answered before that whose steps
 * lie at or past n (a FORWARD of step n the loop never ran) are void. Only
 * EnzymeCkptStoreAll handles while loops: it answers STORE(j, slot j),
 * FORWARD(j -> j+1) in turn, and after set_nsteps(n) RESTORE(n-1 from slot
 * n-1), FIRSTUTURN(n), then RESTORE(j from slot j), UTURN(j+1) for j = n-2
 * down to 0, then DONE. EnzymeCkptRevolve, EnzymeCkptBinomial and
 * EnzymeCkptPeriodic need the trip count: with n < 0 they print a message and
 * abort. save_state, load_state and set_paths are optional hooks that the
 * reference schemes leave NULL.
 *
 * The reference schemes (config = the EnzymeCkptConfig passed as `data`; a
 * NULL config means all fields zero). Where they put their snapshots is the
 * arithmetic of <enzyme/checkpoint_schedule.h> (included by this header; it
 * also defines the ENZYME_CKPT_* action flags and the ENZYME_CKPT_SCHEDULE_*
 * schedule tags), so a program or a compiler can predict it without running
 * a scheme:
 *
 *   EnzymeCkptRevolve  binomial checkpointing (Griewank & Walther's Revolve):
 *                      at most min(snapshots, n) slots (snapshots < 1 means 1)
 *                      and the least number of plain forward steps possible
 *                      with that many slots. The schedule is made lazily, one
 *                      action at a time, with memory proportional to the
 *                      number of slots (n may be huge).
 *   EnzymeCkptBinomial the snapshots and replays of Enzyme-MLIR's binomial
 *                      schedule: C = enzyme_ckpt_binomial_slots(n, snapshots) slots
 *                      (snapshots < 1: the default, floor(sqrt(n)) but at least
 *                      2; never more than n) used as a stack. The forward
 *                      sweep stores state p_k in slot k, p_0 = 0 and p_{k+1} =
 *                      p_k + enzyme_ckpt_binomial_progress(n - p_k, C - k),
 *                      and runs on to state n-1. Each turn of step c-1 (c = n
 *                      down to 1) restores the top slot's state p and, while
 *                      p + 1 < c, keeps p in the next slot up (the top one
 *                      first) and replays by enzyme_ckpt_binomial_progress(c -
 *                      p, the slots from that one up), stopping at c-1; the
 *                      slots placed stay on the stack (when nothing was
 *                      replayed, the top slot, which held c-1, is popped).
 *                      Like Enzyme-MLIR it reaches the first turn by that
 *                      replay from the top slot too, so its plain forward
 *                      steps are exactly Enzyme-MLIR's less the step the
 *                      driver runs at the first turn -- n-1-p_{C-1} more than
 *                      keeping the sweep's own state n-1 would need. Lazy,
 *                      with memory proportional to C; in general somewhat more
 *                      forward steps than EnzymeCkptRevolve with C slots.
 *   EnzymeCkptPeriodic the segments of enzyme_ckpt_periodic_split(n,
 *                      snapshots): outer segments of inner = ceil(n /
 *                      snapshots) steps then, when inner does not divide n, a
 *                      shorter one (so at most `snapshots` segments;
 *                      snapshots < 1: the default, segments of floor(sqrt(n))
 *                      steps); segment k starts at enzyme_ckpt_periodic_start
 *                      (= k * inner). The forward sweep stores each segment's
 *                      start (slots 0..K-1, K segments); each segment, last
 *                      first, is then reversed from its start: on the way up
 *                      to its last step the states after its start are stored
 *                      (slots K, K+1, ...; the state before the last step is
 *                      not: that step is turned at once), then each earlier
 *                      step is restored and turned.
 *   EnzymeCkptStoreAll every state kept (for a known n, all but the one before
 *                      the last step): Periodic with one segment when n is
 *                      known; the while-loop schedule above when it is not.
 *
 * Snapshots live in malloc'd buffers (one per slot, reused). With spill_dir
 * set, slot k goes to a file in that directory instead when k *
 * snapshot_bytes >= mem_budget (the files are removed by finalize). Regions
 * must be host memory (addrspace 0); their flags field is reserved (0).
 * Restoring a slot that was never stored prints a message and aborts.
 *
 * Statistics (copied to *config->stats by finalize when it is not NULL):
 * forward_steps = steps run by FORWARD actions, taped_steps = turns, stores
 * and restores = store/restore calls on slots >= 0, max_slots = the number of
 * distinct slots >= 0 holding a snapshot (a slot keeps its buffer until
 * finalize), max_bytes = max_slots * snapshot_bytes. verbose >= 1 prints a
 * one-line summary to stderr at finalize, verbose >= 2 also every action.
 */
#ifndef ENZCC_ENZYME_CHECKPOINT_H
#define ENZCC_ENZYME_CHECKPOINT_H

#include <enzyme/checkpoint_schedule.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ENZYME_CKPT_ABI_VERSION 1

/* The action flags (ENZYME_CKPT_NONE .. ENZYME_CKPT_DONE) are defined in <enzyme/checkpoint_schedule.h>. */

typedef struct EnzymeCkptAction {
  int32_t flag;           /* ENZYME_CKPT_* */
  int64_t iteration;      /* STORE/RESTORE: the state c; FORWARD: the end b; turns: b (step b-1) */
  int64_t startiteration; /* FORWARD: the start a */
  int64_t cpnum;          /* STORE/RESTORE: the slot */
} EnzymeCkptAction;

typedef struct EnzymeCkptRegion {
  void *ptr;
  uint64_t bytes;
  uint32_t addrspace; /* 0: host memory; anything else is device memory */
  uint32_t flags;     /* reserved, 0 */
} EnzymeCkptRegion;

typedef struct EnzymeCheckpointScheme {
  uint32_t version; /* ENZYME_CKPT_ABI_VERSION */
  void *(*init)(void *data, int64_t nsteps, uint64_t snapshot_bytes); /* nsteps = -1: a while loop */
  void (*next_action)(void *state, EnzymeCkptAction *out);
  void (*store)(void *state, int64_t slot, int64_t step, const EnzymeCkptRegion *regions, uint64_t nregions);
  void (*restore)(void *state, int64_t slot, int64_t step, const EnzymeCkptRegion *regions, uint64_t nregions);
  void (*set_nsteps)(void *state, int64_t nsteps); /* while loops; may be NULL */
  void (*finalize)(void *state);
  void (*save_state)(void *state, int64_t slot, int64_t step, void *env); /* optional, NULL in ours */
  void (*load_state)(void *state, int64_t slot, int64_t step, void *env); /* optional, NULL in ours */
  void (*set_paths)(void *state, const int64_t *paths, uint64_t len);     /* optional, NULL in ours */
} EnzymeCheckpointScheme;

extern int enzyme_scheme;
extern int enzyme_checkpoint_region;

void __enzyme_checkpoint_for(void *step, int64_t start, int64_t n, ...);
void __enzyme_checkpoint_while(void *step, ...);

typedef struct EnzymeCkptStats {
  int64_t forward_steps;
  int64_t taped_steps;
  int64_t stores;
  int64_t restores;
  int64_t max_slots;
  uint64_t max_bytes;
} EnzymeCkptStats;

typedef struct EnzymeCkptConfig {
  int64_t snapshots;     /* the budget: slots (Revolve, Binomial) or segments (Periodic); see above for < 1 */
  int verbose;           /* 1: summary at finalize, 2: also every action (stderr) */
  const char *spill_dir; /* NULL: every snapshot in memory */
  uint64_t mem_budget;   /* with spill_dir: slot k spills when k * snapshot_bytes >= mem_budget */
  EnzymeCkptStats *stats; /* filled by finalize when not NULL */
} EnzymeCkptConfig;

/* ------------------------------------------------------------------------------------------------------------
 * The reference schemes' implementation. Everything below is internal (names ending in an underscore).
 * ---------------------------------------------------------------------------------------------------------- */

enum { ENZYME_CKPT_REVOLVE_ = 0, ENZYME_CKPT_PERIODIC_ = 1, ENZYME_CKPT_STOREALL_ = 2, ENZYME_CKPT_BINOMIAL_ = 3 };

typedef struct EnzymeCkptSlot_ {
  void *buf;     /* in-memory copy (NULL while spilled or never stored) */
  uint64_t cap;  /* bytes allocated at buf */
  uint64_t size; /* bytes of the stored state */
  int64_t step;  /* the state held */
  int used;      /* stored at least once */
  char *path;    /* the spill file, when the slot lives on disk */
} EnzymeCkptSlot_;

/* Revolve: one pending call rev(s, e, c) reversing steps s..e-1 from state s with c slots; slot C-c holds s. */
typedef struct EnzymeCkptFrame_ {
  int64_t s, e, c, k;
  int phase;
} EnzymeCkptFrame_;

typedef struct EnzymeCkptState_ {
  int kind;
  int64_t n; /* -1: a while loop not ended yet */
  int while_mode;
  uint64_t snapshot_bytes;
  int verbose;
  char *spill_dir;
  uint64_t mem_budget;
  EnzymeCkptStats *stats_out;
  int64_t snapshots; /* config->snapshots, at least 1 */
  int64_t budget;    /* config->snapshots as given (0 without a config) */
  EnzymeCkptStats stats;
  /* slots, index slot + 2 (the driver's -2 and -1 first) */
  EnzymeCkptSlot_ *slots;
  int64_t nslots;
  /* the schedule: actions made but not handed out yet */
  EnzymeCkptAction queue[8];
  int qhead, qlen;
  int turned; /* a turn was handed out: the next ones are UTURNs */
  int done;
  /* Revolve and Binomial */
  int64_t C;      /* slots */
  EnzymeCkptFrame_ *stack;
  int64_t depth;
  int64_t *holds; /* holds[k]: the state slot k holds in the schedule (-1: none) */
  /* Binomial */
  int bphase;     /* 0: forward sweep, 1: a turn's start, 2: replaying towards it, 3: finished */
  int64_t bslot;  /* the slot being placed */
  int64_t bpos;   /* the state the replay is at (cur: it stopped at cur - 1) */
  int64_t cur;    /* the next turn is that of step cur - 1 */
  int64_t sp;     /* slots 0..sp-1 form the stack of snapshots still needed */
  /* Periodic / StoreAll */
  EnzymeCkptPeriodicSplit split; /* the segments */
  int64_t K;     /* segments */
  int64_t seg;   /* the segment being stored (forward sweep) or reversed */
  int64_t j;     /* position inside the segment's reversal */
  int pphase;    /* 0: forward sweep, 1: going up a segment, 2: coming down it, 3: finished */
  int at_start;  /* the memory holds the start of the segment about to be reversed */
  /* while loops */
  int64_t wnext; /* StoreAll while mode: the next state to store */
  int wforward;  /* the next action is the FORWARD after that store */
} EnzymeCkptState_;

static inline void enzyme_ckpt_fail_(const char *what) {
  fprintf(stderr, "enzyme checkpoint: %s\n", what);
  fflush(stderr);
  abort();
}

static inline void *enzyme_ckpt_alloc_(uint64_t bytes) {
  void *p = malloc(bytes ? (size_t)bytes : 1);
  if (!p)
    enzyme_ckpt_fail_("out of memory");
  return p;
}

static inline const char *enzyme_ckpt_kind_name_(int kind) {
  return kind == ENZYME_CKPT_REVOLVE_    ? "revolve"
         : kind == ENZYME_CKPT_PERIODIC_ ? "periodic"
         : kind == ENZYME_CKPT_BINOMIAL_ ? "binomial"
                                         : "storeall";
}

static inline const char *enzyme_ckpt_flag_name_(int32_t flag) {
  switch (flag) {
  case ENZYME_CKPT_STORE: return "STORE";
  case ENZYME_CKPT_RESTORE: return "RESTORE";
  case ENZYME_CKPT_FORWARD: return "FORWARD";
  case ENZYME_CKPT_FIRSTUTURN: return "FIRSTUTURN";
  case ENZYME_CKPT_UTURN: return "UTURN";
  case ENZYME_CKPT_ERROR: return "ERROR";
  case ENZYME_CKPT_DONE: return "DONE";
  default: return "NONE";
  }
}

/* binom(c + r, c), the number of steps c slots reverse with every step run at most r times plainly; capped (at
   about 2^62) so that comparisons with step counts stay right. */
static inline int64_t enzyme_ckpt_beta_(int64_t c, int64_t r) {
  const int64_t cap = (int64_t)1 << 62;
  int64_t k = c < r ? c : r, top = c + r, b = 1, i;
  if (c < 0 || r < 0)
    return 0;
  for (i = 1; i <= k; i++) {
    /* b = binom(top - k + i - 1, i - 1) -> binom(top - k + i, i), exact at every step */
    int64_t f = top - k + i;
    if (b > cap / f)
      return cap;
    b = b * f / i;
  }
  return b;
}

static inline void enzyme_ckpt_emit_(EnzymeCkptState_ *st, int32_t flag, int64_t start, int64_t it, int64_t slot) {
  EnzymeCkptAction *a;
  if (st->qlen >= (int)(sizeof st->queue / sizeof st->queue[0]))
    enzyme_ckpt_fail_("internal error: action queue full");
  a = &st->queue[(st->qhead + st->qlen) % (int)(sizeof st->queue / sizeof st->queue[0])];
  st->qlen++;
  if (flag == ENZYME_CKPT_FIRSTUTURN || flag == ENZYME_CKPT_UTURN) {
    flag = st->turned ? ENZYME_CKPT_UTURN : ENZYME_CKPT_FIRSTUTURN;
    st->turned = 1;
    st->stats.taped_steps++;
  }
  if (flag == ENZYME_CKPT_FORWARD)
    st->stats.forward_steps += it - start;
  a->flag = flag;
  a->startiteration = start;
  a->iteration = it;
  a->cpnum = slot;
}

/* A turn of step b-1 (the first one becomes FIRSTUTURN). */
static inline void enzyme_ckpt_turn_(EnzymeCkptState_ *st, int64_t b) {
  enzyme_ckpt_emit_(st, ENZYME_CKPT_UTURN, 0, b, 0);
}

static inline void enzyme_ckpt_finish_(EnzymeCkptState_ *st) {
  st->done = 1;
  enzyme_ckpt_emit_(st, ENZYME_CKPT_DONE, 0, 0, 0);
}

/* Revolve: the slot of frame f (depth-1) stores s when it does not hold it already. */
static inline void enzyme_ckpt_rev_keep_(EnzymeCkptState_ *st, int64_t slot, int64_t s) {
  if (st->holds[slot] != s) {
    st->holds[slot] = s;
    enzyme_ckpt_emit_(st, ENZYME_CKPT_STORE, 0, s, slot);
  }
}

/* Revolve: runs the frames until some action is queued.
 *   rev(s, e, c), memory at state s:
 *     e - s == 1: turn(e)
 *     c == 1:     keep s in slot C-1; for k = e-1 down to s: [restore s,] forward s -> k, turn(k+1)
 *     otherwise:  keep s in slot C-c; forward s -> m; rev(m, e, c-1); restore s; rev(s, m, c)
 * with the split m = s + d chosen so that the plain forward steps are the fewest possible: r is the least number
 * of repetitions with beta(c, r) >= e - s, and d = min(beta(c, r-1), (e - s) - beta(c-1, r-1)), the largest
 * split of the optimal range (the left part then needs r-1 more repetitions with c slots, the right part r with
 * c-1). The last call, rev(s, m, c), replaces its frame (so the stack holds at most C+1 frames). */
static inline void enzyme_ckpt_revolve_next_(EnzymeCkptState_ *st) {
  while (st->qlen == 0) {
    EnzymeCkptFrame_ *f;
    int64_t slot;
    if (st->depth == 0) {
      enzyme_ckpt_finish_(st);
      return;
    }
    f = &st->stack[st->depth - 1];
    slot = st->C - f->c;
    switch (f->phase) {
    case 0: { /* entry */
      int64_t len = f->e - f->s, r, d;
      if (len <= 1) {
        enzyme_ckpt_turn_(st, f->e);
        st->depth--;
        break;
      }
      if (f->c <= 1) {
        enzyme_ckpt_rev_keep_(st, slot, f->s);
        f->k = f->e - 1;
        f->phase = 2;
        break;
      }
      for (r = 1; enzyme_ckpt_beta_(f->c, r) < len; r++) {
      }
      d = enzyme_ckpt_beta_(f->c, r - 1);
      if (len - enzyme_ckpt_beta_(f->c - 1, r - 1) < d)
        d = len - enzyme_ckpt_beta_(f->c - 1, r - 1);
      if (d > len - 1)
        d = len - 1;
      if (d < 1)
        d = 1;
      enzyme_ckpt_rev_keep_(st, slot, f->s);
      enzyme_ckpt_emit_(st, ENZYME_CKPT_FORWARD, f->s, f->s + d, 0);
      f->k = f->s + d;
      f->phase = 1;
      {
        EnzymeCkptFrame_ *g = &st->stack[st->depth++];
        g->s = f->k;
        g->e = f->e;
        g->c = f->c - 1;
        g->k = 0;
        g->phase = 0;
      }
      break;
    }
    case 1: /* rev(m, e, c-1) is over: the memory holds state e */
      enzyme_ckpt_emit_(st, ENZYME_CKPT_RESTORE, 0, f->s, slot);
      f->e = f->k;
      f->phase = 0;
      break;
    case 2:   /* one slot, first pass: the memory holds s already */
    case 3: { /* one slot, later passes */
      if (f->phase == 3)
        enzyme_ckpt_emit_(st, ENZYME_CKPT_RESTORE, 0, f->s, slot);
      if (f->k > f->s)
        enzyme_ckpt_emit_(st, ENZYME_CKPT_FORWARD, f->s, f->k, 0);
      enzyme_ckpt_turn_(st, f->k + 1);
      f->phase = 3;
      if (--f->k < f->s)
        st->depth--;
      break;
    }
    default:
      enzyme_ckpt_fail_("internal error: bad revolve frame");
    }
  }
}

/* Binomial: Enzyme-MLIR's stack of slots, one action batch at a time.
 *   forward sweep: slot k = 0..C-1 gets state p_k (p_0 = 0), and the sweep advances by
 *                  enzyme_ckpt_binomial_progress(n - p_k, min(C - k, n - p_k)); the last advance reaches n, but
 *                  the sweep stops at n-1, where the first turn starts.
 *   turn of step cur-1 (cur = n, n-1, ..., 1): pos = the state of the top slot (sp - 1), restored; while
 *                  pos + 1 < cur, the slot a (the top one first, then the ones above it) keeps pos and the
 *                  replay advances by enzyme_ckpt_binomial_progress(cur - pos, min(C - a, cur - pos)), stopping
 *                  at cur-1 when that reaches cur; the slots placed (or, when nothing was replayed, all but the
 *                  top one) form the new stack, and step cur-1 is turned.
 * As in Enzyme-MLIR, the first turn is reached by replaying from the top slot too (the sweep's states past it
 * were not kept), so the plain forward steps are Enzyme-MLIR's less the one the driver runs at the first turn. */
static inline void enzyme_ckpt_binomial_next_(EnzymeCkptState_ *st) {
  while (st->qlen == 0) {
    int64_t rem, left, next;
    switch (st->bphase) {
    case 0: /* the forward sweep: place slot bslot at state bpos and advance */
      rem = st->n - st->bpos;
      left = st->C - st->bslot < rem ? st->C - st->bslot : rem;
      enzyme_ckpt_rev_keep_(st, st->bslot, st->bpos);
      next = st->bpos + enzyme_ckpt_binomial_progress(rem, left);
      if (st->bslot + 1 < st->C && next < st->n) {
        enzyme_ckpt_emit_(st, ENZYME_CKPT_FORWARD, st->bpos, next, 0);
        st->bpos = next;
        st->bslot++;
        break;
      }
      if (st->bpos < st->n - 1)
        enzyme_ckpt_emit_(st, ENZYME_CKPT_FORWARD, st->bpos, st->n - 1, 0);
      st->sp = st->bslot + 1;
      st->cur = st->n;
      st->bphase = 1;
      break;
    case 1: /* a turn's start: back to the top slot (unless the sweep stands there, at n-1, already) */
      if (st->sp < 1)
        enzyme_ckpt_fail_("internal error: binomial stack empty");
      st->bslot = st->sp - 1;
      st->bpos = st->holds[st->bslot];
      if (st->turned || st->bpos != st->n - 1)
        enzyme_ckpt_emit_(st, ENZYME_CKPT_RESTORE, 0, st->bpos, st->bslot);
      st->bphase = 2;
      break;
    case 2: /* replaying towards state cur-1 */
      if (st->bpos + 1 >= st->cur) {
        st->sp = st->bslot;
        enzyme_ckpt_turn_(st, st->cur);
        if (--st->cur == 0)
          st->bphase = 3;
        else
          st->bphase = 1;
        break;
      }
      if (st->bslot >= st->C)
        enzyme_ckpt_fail_("internal error: binomial slots exhausted");
      rem = st->cur - st->bpos;
      left = st->C - st->bslot < rem ? st->C - st->bslot : rem;
      enzyme_ckpt_rev_keep_(st, st->bslot, st->bpos);
      next = st->bpos + enzyme_ckpt_binomial_progress(rem, left);
      enzyme_ckpt_emit_(st, ENZYME_CKPT_FORWARD, st->bpos, next < st->cur ? next : st->cur - 1, 0);
      st->bpos = next;
      st->bslot++;
      break;
    default:
      enzyme_ckpt_finish_(st);
      return;
    }
  }
}

/* Periodic: the first step of segment k (k = K: n). */
static inline int64_t enzyme_ckpt_seg_start_(const EnzymeCkptState_ *st, int64_t k) {
  return enzyme_ckpt_periodic_start(st->split, k);
}

/* Periodic: the slot holding state j of segment k during its reversal. */
static inline int64_t enzyme_ckpt_seg_slot_(const EnzymeCkptState_ *st, int64_t k, int64_t j) {
  int64_t a = enzyme_ckpt_seg_start_(st, k);
  return j == a ? k : st->K + (j - a - 1);
}

static inline void enzyme_ckpt_periodic_next_(EnzymeCkptState_ *st) {
  while (st->qlen == 0) {
    int64_t a, b;
    switch (st->pphase) {
    case 0: /* forward sweep: store the start of segment seg, cross it unless it is the last */
      a = enzyme_ckpt_seg_start_(st, st->seg);
      enzyme_ckpt_emit_(st, ENZYME_CKPT_STORE, 0, a, st->seg);
      if (st->seg + 1 < st->K) {
        enzyme_ckpt_emit_(st, ENZYME_CKPT_FORWARD, a, enzyme_ckpt_seg_start_(st, st->seg + 1), 0);
        st->seg++;
      } else {
        st->pphase = 1;
        st->at_start = 1;
        st->j = a;
      }
      break;
    case 1: /* up segment seg: the memory holds state j; store it (but the start) and step, up to the last step */
      a = enzyme_ckpt_seg_start_(st, st->seg);
      b = enzyme_ckpt_seg_start_(st, st->seg + 1);
      if (st->j == a && !st->at_start)
        enzyme_ckpt_emit_(st, ENZYME_CKPT_RESTORE, 0, a, st->seg);
      st->at_start = 0;
      if (st->j == b - 1) {
        enzyme_ckpt_turn_(st, b);
        st->pphase = 2;
        st->j = b - 2;
        break;
      }
      if (st->j > a)
        enzyme_ckpt_emit_(st, ENZYME_CKPT_STORE, 0, st->j, enzyme_ckpt_seg_slot_(st, st->seg, st->j));
      enzyme_ckpt_emit_(st, ENZYME_CKPT_FORWARD, st->j, st->j + 1, 0);
      st->j++;
      break;
    case 2: /* down segment seg: restore state j and turn step j */
      a = enzyme_ckpt_seg_start_(st, st->seg);
      if (st->j < a) {
        if (st->seg == 0) {
          st->pphase = 3;
        } else {
          st->seg--;
          st->j = enzyme_ckpt_seg_start_(st, st->seg);
          st->pphase = 1;
        }
        break;
      }
      enzyme_ckpt_emit_(st, ENZYME_CKPT_RESTORE, 0, st->j, enzyme_ckpt_seg_slot_(st, st->seg, st->j));
      enzyme_ckpt_turn_(st, st->j + 1);
      st->j--;
      break;
    default:
      enzyme_ckpt_finish_(st);
      return;
    }
  }
}

/* StoreAll on a while loop: STORE j, FORWARD j -> j+1, ... until set_nsteps; then down from n-1. */
static inline void enzyme_ckpt_while_next_(EnzymeCkptState_ *st) {
  if (st->n < 0) {
    if (!st->wforward) {
      enzyme_ckpt_emit_(st, ENZYME_CKPT_STORE, 0, st->wnext, st->wnext);
      st->wforward = 1;
    } else {
      enzyme_ckpt_emit_(st, ENZYME_CKPT_FORWARD, st->wnext, st->wnext + 1, 0);
      st->wforward = 0;
      st->wnext++;
    }
    return;
  }
  if (st->j < 0) {
    enzyme_ckpt_finish_(st);
    return;
  }
  enzyme_ckpt_emit_(st, ENZYME_CKPT_RESTORE, 0, st->j, st->j);
  enzyme_ckpt_turn_(st, st->j + 1);
  st->j--;
}

static inline void enzyme_ckpt_next_action_(void *state, EnzymeCkptAction *out) {
  EnzymeCkptState_ *st = (EnzymeCkptState_ *)state;
  if (st->qlen == 0) {
    if (st->done)
      enzyme_ckpt_emit_(st, ENZYME_CKPT_DONE, 0, 0, 0);
    else if (st->while_mode)
      enzyme_ckpt_while_next_(st);
    else if (st->kind == ENZYME_CKPT_REVOLVE_)
      enzyme_ckpt_revolve_next_(st);
    else if (st->kind == ENZYME_CKPT_BINOMIAL_)
      enzyme_ckpt_binomial_next_(st);
    else
      enzyme_ckpt_periodic_next_(st);
  }
  *out = st->queue[st->qhead];
  st->qhead = (st->qhead + 1) % (int)(sizeof st->queue / sizeof st->queue[0]);
  st->qlen--;
  if (st->verbose >= 2)
    fprintf(stderr, "enzyme checkpoint (%s): %s iteration=%lld startiteration=%lld slot=%lld\n",
            enzyme_ckpt_kind_name_(st->kind), enzyme_ckpt_flag_name_(out->flag), (long long)out->iteration,
            (long long)out->startiteration, (long long)out->cpnum);
}

static inline void *enzyme_ckpt_init_(int kind, void *data, int64_t nsteps, uint64_t snapshot_bytes) {
  const EnzymeCkptConfig *cfg = (const EnzymeCkptConfig *)data;
  EnzymeCkptState_ *st;
  if (nsteps < 0 && kind != ENZYME_CKPT_STOREALL_) {
    fprintf(stderr, "enzyme checkpoint: the %s scheme needs the number of steps; a while loop (nsteps = %lld) "
                    "needs EnzymeCkptStoreAll\n",
            enzyme_ckpt_kind_name_(kind), (long long)nsteps);
    fflush(stderr);
    abort();
  }
  st = (EnzymeCkptState_ *)enzyme_ckpt_alloc_(sizeof *st);
  memset(st, 0, sizeof *st);
  st->kind = kind;
  st->n = nsteps < 0 ? -1 : nsteps;
  st->while_mode = nsteps < 0;
  st->snapshot_bytes = snapshot_bytes;
  st->snapshots = 1;
  if (cfg) {
    st->snapshots = cfg->snapshots < 1 ? 1 : cfg->snapshots;
    st->budget = cfg->snapshots;
    st->verbose = cfg->verbose;
    st->mem_budget = cfg->mem_budget;
    st->stats_out = cfg->stats;
    if (cfg->spill_dir) {
      size_t len = strlen(cfg->spill_dir);
      st->spill_dir = (char *)enzyme_ckpt_alloc_(len + 1);
      memcpy(st->spill_dir, cfg->spill_dir, len + 1);
    }
  }
  st->j = -1;
  if (st->while_mode)
    return st;
  if (st->n == 0) {
    st->done = 1;
    return st;
  }
  if (kind == ENZYME_CKPT_REVOLVE_) {
    int64_t i;
    st->C = st->snapshots < st->n ? st->snapshots : st->n;
    st->stack = (EnzymeCkptFrame_ *)enzyme_ckpt_alloc_((uint64_t)(st->C + 1) * sizeof *st->stack);
    st->holds = (int64_t *)enzyme_ckpt_alloc_((uint64_t)st->C * sizeof *st->holds);
    for (i = 0; i < st->C; i++)
      st->holds[i] = -1;
    st->stack[0].s = 0;
    st->stack[0].e = st->n;
    st->stack[0].c = st->C;
    st->stack[0].k = 0;
    st->stack[0].phase = 0;
    st->depth = 1;
  } else if (kind == ENZYME_CKPT_BINOMIAL_) {
    int64_t i;
    st->C = enzyme_ckpt_binomial_slots(st->n, st->budget);
    st->holds = (int64_t *)enzyme_ckpt_alloc_((uint64_t)st->C * sizeof *st->holds);
    for (i = 0; i < st->C; i++)
      st->holds[i] = -1;
  } else if (kind == ENZYME_CKPT_STOREALL_) {
    st->split.inner = st->n; /* one segment */
    st->split.outer = 1;
    st->split.trailing = 0;
    st->K = 1;
  } else {
    st->split = enzyme_ckpt_periodic_split(st->n, st->budget);
    st->K = enzyme_ckpt_periodic_segments(st->split);
  }
  return st;
}

static inline void *enzyme_ckpt_init_revolve_(void *data, int64_t nsteps, uint64_t snapshot_bytes) {
  return enzyme_ckpt_init_(ENZYME_CKPT_REVOLVE_, data, nsteps, snapshot_bytes);
}

static inline void *enzyme_ckpt_init_periodic_(void *data, int64_t nsteps, uint64_t snapshot_bytes) {
  return enzyme_ckpt_init_(ENZYME_CKPT_PERIODIC_, data, nsteps, snapshot_bytes);
}

static inline void *enzyme_ckpt_init_binomial_(void *data, int64_t nsteps, uint64_t snapshot_bytes) {
  return enzyme_ckpt_init_(ENZYME_CKPT_BINOMIAL_, data, nsteps, snapshot_bytes);
}

static inline void *enzyme_ckpt_init_storeall_(void *data, int64_t nsteps, uint64_t snapshot_bytes) {
  return enzyme_ckpt_init_(ENZYME_CKPT_STOREALL_, data, nsteps, snapshot_bytes);
}

static inline void enzyme_ckpt_set_nsteps_(void *state, int64_t nsteps) {
  EnzymeCkptState_ *st = (EnzymeCkptState_ *)state;
  if (!st->while_mode) {
    if (nsteps != st->n) {
      fprintf(stderr, "enzyme checkpoint (%s): set_nsteps(%lld) on a loop of %lld steps\n",
              enzyme_ckpt_kind_name_(st->kind), (long long)nsteps, (long long)st->n);
      fflush(stderr);
      abort();
    }
    return;
  }
  if (nsteps < 0 || st->n >= 0)
    enzyme_ckpt_fail_("set_nsteps: a negative trip count, or the trip count set twice");
  st->n = nsteps;
  /* the plain forward sweep ran steps 0..n-1; a FORWARD answered for step n was never run */
  if (st->stats.forward_steps > nsteps)
    st->stats.forward_steps = nsteps;
  st->qlen = 0;
  st->j = nsteps - 1;
}

static inline EnzymeCkptSlot_ *enzyme_ckpt_slot_(EnzymeCkptState_ *st, int64_t slot, int grow) {
  int64_t idx = slot + 2;
  if (slot < -2) {
    fprintf(stderr, "enzyme checkpoint (%s): bad slot %lld\n", enzyme_ckpt_kind_name_(st->kind), (long long)slot);
    fflush(stderr);
    abort();
  }
  if (idx >= st->nslots) {
    int64_t cap = st->nslots ? st->nslots : 8;
    EnzymeCkptSlot_ *p;
    if (!grow)
      return NULL;
    while (cap <= idx)
      cap *= 2;
    p = (EnzymeCkptSlot_ *)realloc(st->slots, (size_t)cap * sizeof *p);
    if (!p)
      enzyme_ckpt_fail_("out of memory");
    memset(p + st->nslots, 0, (size_t)(cap - st->nslots) * sizeof *p);
    st->slots = p;
    st->nslots = cap;
  }
  return &st->slots[idx];
}

static inline uint64_t enzyme_ckpt_region_bytes_(const EnzymeCkptState_ *st, const EnzymeCkptRegion *regions,
                                                 uint64_t nregions) {
  uint64_t i, total = 0;
  for (i = 0; i < nregions; i++) {
    if (regions[i].addrspace != 0) {
      fprintf(stderr, "enzyme checkpoint (%s): region %llu is in address space %u (device memory); the "
                      "reference schemes snapshot host memory only\n",
              enzyme_ckpt_kind_name_(st->kind), (unsigned long long)i, (unsigned)regions[i].addrspace);
      fflush(stderr);
      abort();
    }
    total += regions[i].bytes;
  }
  return total;
}

static inline int enzyme_ckpt_spills_(const EnzymeCkptState_ *st, int64_t slot) {
  uint64_t sb = st->snapshot_bytes, mb = st->mem_budget;
  if (!st->spill_dir || slot < 0)
    return 0;
  if (sb == 0)
    return mb == 0;
  /* slot * sb >= mb, without overflow */
  return (uint64_t)slot >= mb / sb + (mb % sb != 0);
}

static inline void enzyme_ckpt_store_(void *state, int64_t slot, int64_t step, const EnzymeCkptRegion *regions,
                                      uint64_t nregions) {
  EnzymeCkptState_ *st = (EnzymeCkptState_ *)state;
  uint64_t total = enzyme_ckpt_region_bytes_(st, regions, nregions), i, off = 0;
  EnzymeCkptSlot_ *s = enzyme_ckpt_slot_(st, slot, 1);
  if (enzyme_ckpt_spills_(st, slot)) {
    FILE *fp = NULL;
    if (!s->path) {
      /* a new file of our own: created exclusively ("x", C11), with the next number on a clash (another
         process may spill into the same directory) */
      size_t len = strlen(st->spill_dir) + 96;
      unsigned nonce;
      s->path = (char *)enzyme_ckpt_alloc_(len);
      for (nonce = 0; nonce < 4096 && !fp; nonce++) {
        snprintf(s->path, len, "%s/enzyme-ckpt-%p-%lld-%u.bin", st->spill_dir, state, (long long)slot, nonce);
        fp = fopen(s->path, "wbx");
      }
    } else {
      fp = fopen(s->path, "wb");
    }
    if (!fp) {
      fprintf(stderr, "enzyme checkpoint (%s): cannot write the snapshot file %s\n",
              enzyme_ckpt_kind_name_(st->kind), s->path);
      fflush(stderr);
      abort();
    }
    for (i = 0; i < nregions; i++)
      if (regions[i].bytes && fwrite(regions[i].ptr, 1, (size_t)regions[i].bytes, fp) != regions[i].bytes) {
        fprintf(stderr, "enzyme checkpoint (%s): writing the snapshot file %s failed\n",
                enzyme_ckpt_kind_name_(st->kind), s->path);
        fflush(stderr);
        abort();
      }
    if (fclose(fp) != 0)
      enzyme_ckpt_fail_("closing a snapshot file failed");
  } else {
    if (s->cap < total || !s->buf) {
      free(s->buf);
      s->buf = enzyme_ckpt_alloc_(total);
      s->cap = total;
    }
    for (i = 0; i < nregions; i++) {
      if (regions[i].bytes)
        memcpy((char *)s->buf + off, regions[i].ptr, (size_t)regions[i].bytes);
      off += regions[i].bytes;
    }
  }
  s->size = total;
  s->step = step;
  if (slot >= 0) {
    st->stats.stores++;
    if (!s->used) {
      st->stats.max_slots++;
      st->stats.max_bytes = (uint64_t)st->stats.max_slots * st->snapshot_bytes;
    }
  }
  s->used = 1;
}

static inline void enzyme_ckpt_restore_(void *state, int64_t slot, int64_t step, const EnzymeCkptRegion *regions,
                                        uint64_t nregions) {
  EnzymeCkptState_ *st = (EnzymeCkptState_ *)state;
  uint64_t total = enzyme_ckpt_region_bytes_(st, regions, nregions), i, off = 0;
  EnzymeCkptSlot_ *s = enzyme_ckpt_slot_(st, slot, 0);
  if (!s || !s->used) {
    fprintf(stderr, "enzyme checkpoint (%s): restore of slot %lld (state %lld), which was never stored\n",
            enzyme_ckpt_kind_name_(st->kind), (long long)slot, (long long)step);
    fflush(stderr);
    abort();
  }
  if ((slot >= 0 && s->step != step) || s->size != total) {
    fprintf(stderr, "enzyme checkpoint (%s): restore of slot %lld as state %lld (%llu bytes), but it holds "
                    "state %lld (%llu bytes)\n",
            enzyme_ckpt_kind_name_(st->kind), (long long)slot, (long long)step, (unsigned long long)total,
            (long long)s->step, (unsigned long long)s->size);
    fflush(stderr);
    abort();
  }
  if (s->path) {
    FILE *fp = fopen(s->path, "rb");
    if (!fp) {
      fprintf(stderr, "enzyme checkpoint (%s): cannot read the snapshot file %s\n",
              enzyme_ckpt_kind_name_(st->kind), s->path);
      fflush(stderr);
      abort();
    }
    for (i = 0; i < nregions; i++)
      if (regions[i].bytes && fread(regions[i].ptr, 1, (size_t)regions[i].bytes, fp) != regions[i].bytes) {
        fprintf(stderr, "enzyme checkpoint (%s): reading the snapshot file %s failed\n",
                enzyme_ckpt_kind_name_(st->kind), s->path);
        fflush(stderr);
        abort();
      }
    fclose(fp);
  } else {
    for (i = 0; i < nregions; i++) {
      if (regions[i].bytes)
        memcpy(regions[i].ptr, (const char *)s->buf + off, (size_t)regions[i].bytes);
      off += regions[i].bytes;
    }
  }
  if (slot >= 0)
    st->stats.restores++;
}

static inline void enzyme_ckpt_finalize_(void *state) {
  EnzymeCkptState_ *st = (EnzymeCkptState_ *)state;
  int64_t i;
  if (!st)
    return;
  for (i = 0; i < st->nslots; i++) {
    if (st->slots[i].path) {
      remove(st->slots[i].path);
      free(st->slots[i].path);
    }
    free(st->slots[i].buf);
  }
  if (st->stats_out)
    *st->stats_out = st->stats;
  if (st->verbose >= 1)
    fprintf(stderr, "enzyme checkpoint (%s): %lld steps, %lld forward steps, %lld taped steps, %lld stores, "
                    "%lld restores, %lld slots (%llu bytes)\n",
            enzyme_ckpt_kind_name_(st->kind), (long long)st->n, (long long)st->stats.forward_steps,
            (long long)st->stats.taped_steps, (long long)st->stats.stores, (long long)st->stats.restores,
            (long long)st->stats.max_slots, (unsigned long long)st->stats.max_bytes);
  free(st->slots);
  free(st->stack);
  free(st->holds);
  free(st->spill_dir);
  free(st);
}

static const EnzymeCheckpointScheme EnzymeCkptRevolve = {
    ENZYME_CKPT_ABI_VERSION, enzyme_ckpt_init_revolve_, enzyme_ckpt_next_action_, enzyme_ckpt_store_,
    enzyme_ckpt_restore_, NULL, enzyme_ckpt_finalize_, NULL, NULL, NULL};

static const EnzymeCheckpointScheme EnzymeCkptPeriodic = {
    ENZYME_CKPT_ABI_VERSION, enzyme_ckpt_init_periodic_, enzyme_ckpt_next_action_, enzyme_ckpt_store_,
    enzyme_ckpt_restore_, NULL, enzyme_ckpt_finalize_, NULL, NULL, NULL};

static const EnzymeCheckpointScheme EnzymeCkptBinomial = {
    ENZYME_CKPT_ABI_VERSION, enzyme_ckpt_init_binomial_, enzyme_ckpt_next_action_, enzyme_ckpt_store_,
    enzyme_ckpt_restore_, NULL, enzyme_ckpt_finalize_, NULL, NULL, NULL};

static const EnzymeCheckpointScheme EnzymeCkptStoreAll = {
    ENZYME_CKPT_ABI_VERSION, enzyme_ckpt_init_storeall_, enzyme_ckpt_next_action_, enzyme_ckpt_store_,
    enzyme_ckpt_restore_, enzyme_ckpt_set_nsteps_, enzyme_ckpt_finalize_, NULL, NULL, NULL};

#ifdef __cplusplus
}
#endif

#endif

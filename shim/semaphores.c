/* SPDX-License-Identifier: MIT */
/*
 * shim/semaphores.c — the POSIX semaphore hooks: CPython's locks.
 *
 * On Linux CPython builds threading.Lock (and through it RLock, Condition,
 * Semaphore, Event, queue.Queue, concurrent.futures, the import lock) on a
 * sem_t: PyThread_allocate_lock runs sem_init(s, 0, 1), acquire is
 * sem_trywait then, without the GIL, sem_wait / sem_clockwait /
 * sem_timedwait, release is sem_post.  A semaphore used that way is a lock,
 * and these hooks make it a node of the lock-order graph through the same
 * steps the pthread hooks take (locks.c: hs_acq_before, hs_wait_begin/
 * hs_wait_end, hs_acq_after, hs_release): its acquisitions add edges held -> it, a blocked
 * acquisition publishes HS_WAIT_LOCK with its holder visible in the holder's
 * held stack, its release pops it.
 *
 * The rule for "used as a lock" (a binary semaphore): initialised to 1 by
 * sem_init (not process-shared), and every post made by the thread that
 * holds it.  A semaphore is a counter (never in a finding, never in a held
 * stack) when it is initialised to another value or opened by name
 * (sem_open), and its class becomes one (HS_LOCKF_COUNTER) when an
 * instance is posted by a thread that does not hold it (a signal:
 * Condition's waiter locks, a Lock released by another thread) or waited
 * on, blocking, by the thread that holds it (a hand-off wait:
 * Condition.wait blocks on the waiter lock it took itself).  A failing
 * sem_trywait by the holder is neither (Condition._is_owned probes with
 * acquire(False)).  The choice is final: a counter class stays one.
 *
 * A Python acquisition always starts with sem_trywait (with the GIL, it
 * cannot block), so a trywait adds the same edges as a blocking wait: the
 * blocking call that follows a failed try has none of its own to add.
 * acquire(blocking=False) is therefore an ordered acquisition too (a limit,
 * README "Python locks").  No edge GIL -> semaphore is ever added: CPython
 * drops the GIL before it blocks on one; the edge semaphore -> GIL comes
 * from the release check the pthread hooks make (released with the GIL,
 * taken without it), and every Python lock is held across GIL switches, so
 * it is taken as held without the GIL.
 *
 * Lock classes, as lockdep has them: every semaphore lock created at the
 * same place - the same two innermost Python frames of its sem_init stack
 * (sem_class_key) - is one node of the graph, one hs_lock entry whose
 * addr is a class key (HS_SEM_CLASS | the two frames' pyframe ids, not an
 * address) and whose first_stack is its first lock's whole creation stack;
 * heisen-dump names it by the innermost Python frame.  (A lock created by
 * C with no Python frame on the stack, the interpreter's own, is a node of
 * its own, keyed by its address, as a mutex is.)  CPython creates a lock
 * per Condition.wait, per queue.Queue, per Thread, per import: a node per
 * instance, or per whole creation stack (an import's module lock is made
 * at one line reached through countless import chains), would fill the
 * lock and stack tables within seconds; a node per creation site never
 * grows with the run.  The instance is what a thread holds and waits for
 * (held entries and the wait word carry its address), so hang and
 * deadlock reports name the instance's holder; the order is the class's.
 * Consequences: two locks of one class nested in opposite orders are not
 * seen (an edge from a class to itself is not an order); a class becomes
 * a counter as a whole when one instance does.
 *
 * The instance -> class link is kept in the semaphore itself: glibc's
 * sem_t is 32 bytes and its semaphore uses the first 16 (struct new_sem on
 * 64-bit), so sem_init writes a tag {magic, class id} into the last 8
 * (the magic says the segment generation and whether the lock is fresh,
 * sem_tag_magic, SEM_TAG_FRESH) and the Python frame that made it into the
 * 8 before, and sem_destroy clears the tag.  A semaphore without the tag (initialised to
 * another value, process-shared, opened by sem_open, initialised before the
 * shim) is never looked at: no lookup, no table entry.
 *
 * RLock re-entry never reaches a semaphore (the C RLock counts its owner's
 * re-entries itself).
 */
#include <errno.h>
#include <semaphore.h>
#include <stdlib.h>
#include <string.h>

#include "handover.h" /* the hand-over order (GIL rule) */
#include "hooks.h"
#include "lockpath.h" /* the pair's two halves, inline */
#include "shim.h"

#define RET_ADDR() ((uint64_t)(uintptr_t)__builtin_extract_return_addr(__builtin_return_address(0)))
/* The hook's CFA = its caller's stack pointer at the return address (the shim
 * keeps frame pointers; hs_stack_call checks that RET_ADDR sits at CFA - 8). */
#define CALLER_SP() ((uint64_t)(uintptr_t)__builtin_frame_address(0) + 16)

/* Index of the thread's held entry for addr, -1 when it does not hold it. */
static inline int sem_held(const struct hs_thread *th, uint64_t addr)
{
	uint32_t n = th->held_count < HS_HELD_MAX ? th->held_count : HS_HELD_MAX;
	for (int i = (int)n - 1; i >= 0; i--)
		if (th->held[i].addr == addr)
			return i;
	return -1;
}

/* 1 when the thread holds addr: sem_held with the common stacks (nothing held,
 * one entry: 3.9-3.12's thread-state lock; two: 3.8's main thread, which also
 * holds the faulthandler's lock) inline, without the loop. */
static inline __attribute__((always_inline)) int sem_holds(const struct hs_thread *th, uint64_t addr)
{
	uint32_t n = th->held_count;
	if (HS_LIKELY(n <= 1))
		return n && th->held[0].addr == addr;
	if (n == 2)
		return (th->held[0].addr == addr) | (th->held[1].addr == addr);
	return sem_held(th, addr) >= 0;
}

/* The tag sem_init leaves in the unused tail of a lock semaphore. */
struct sem_tag {
	uint32_t magic;
	uint32_t id;            /* the class's lock id */
};
#define SEM_TAG_MAGIC 0x68734c6bu /* "hsLk" */
#define SEM_TAG_OFF (sizeof(sem_t) - sizeof(struct sem_tag))
#define HS_SEM_CLASS (0xfffeull << 48) /* class key: never a user-space address */
_Static_assert(sizeof(sem_t) >= 16 + sizeof(struct sem_tag), "glibc's semaphore fills sem_t");

/*
 * The magic of this segment's tags: a fork child has a segment of its own
 * (new lock ids), so a tag written in the parent does not match there and
 * the parent's Python locks are not looked at in the child (their ids
 * would name the child's locks).  The locks CPython re-creates after a fork
 * (_at_fork_reinit) and the child's own get tags of the child's segment.
 */
static inline uint32_t sem_tag_magic(void)
{
	/* the low bit stays SEM_TAG_MAGIC's: SEM_TAG_FRESH flips it */
	return SEM_TAG_MAGIC ^ (__atomic_load_n(&hs_seg_gen, __ATOMIC_RELAXED) * 0x9e3779b1u & ~1u);
}

/*
 * A lock semaphore not yet acquired since sem_init has the magic's low bit
 * flipped: fresh, and the Python frame that made it is kept beside the tag
 * (SEM_MAKER_OFF).  Its first acquisition by that same frame, still
 * running, cannot wait for a holder (the lock has had none, and no other
 * code has had it yet), so it adds no edge into it: a thread that makes
 * and takes its own thread-state lock while holding another (threading's
 * _after_fork in a fork child: `with _active_limbo_lock:` around
 * _reset_internal_locks) does not order that lock before the lock every
 * later join of the thread waits for.  A lock made in one function and
 * taken in another is ordered from its first acquisition on.
 */
#define SEM_TAG_FRESH 1u
#define SEM_MAKER_OFF (SEM_TAG_OFF - sizeof(uint64_t))
_Static_assert(sizeof(sem_t) >= 16 + sizeof(uint64_t) + sizeof(struct sem_tag), "glibc's semaphore fills sem_t");

/* 1 when the calling thread's innermost Python frame made the fresh semaphore sem. */
static int sem_made_here(const sem_t *sem)
{
	struct hs_pytoken tk;
	uint64_t maker;
	memcpy(&maker, (const char *)sem + SEM_MAKER_OFF, sizeof maker);
	return maker && hs_py_token_read(&tk) && tk.fp == maker;
}

/* The semaphore was acquired: no longer fresh. */
static inline void sem_tag_used(sem_t *sem)
{
	uint32_t magic = sem_tag_magic();
	memcpy((char *)sem + SEM_TAG_OFF, &magic, sizeof magic);
}

static inline void sem_tag_set(sem_t *sem, uint32_t id)
{
	struct sem_tag tag = {id ? sem_tag_magic() ^ SEM_TAG_FRESH : 0, id};
	memcpy((char *)sem + SEM_TAG_OFF, &tag, sizeof tag);
}

/*
 * The class lock id of the semaphore when it is a lock semaphore whose class
 * is still used as a lock, else 0.  An instance of a counter class still in
 * the thread's own held stack (the class became one while this thread held
 * it) is dropped from it.
 */
/*
 * Python locks are tracked by default; HEISEN_PY_LOCKS=0 turns them off.
 * Off, a sem_* hook only keeps the hand-over order (handover.h: a
 * successful wait reads the semaphore's record, a post onto 0 stamps it)
 * and makes the real call.  On, the common case (an uncontended
 * acquisition under locks already ordered before it, a release of the
 * innermost held entry whose class has its edge to the GIL) takes the
 * fast path: no edge search, the stack kept lazily (docs/design.md "Lock
 * order", "Lazy lock stacks"; cost in bench/README.md "Python locks on
 * by default").
 */
static int sem_mode; /* [atomic] 1 = on; written once by hs_sems_init before any hook records */

static inline int sem_on(void)
{
	/* relaxed: set once at start-up, before hs_recording publishes */
	return __atomic_load_n(&sem_mode, __ATOMIC_RELAXED);
}

void hs_sems_init(void)
{
	__atomic_store_n(&sem_mode, hs_getenv_bool("HEISEN_PY_LOCKS", 1), __ATOMIC_RELAXED);
}

static __attribute__((noinline)) uint32_t sem_lock(struct hs_tls *t, sem_t *sem, int *fresh)
{
	struct sem_tag tag;
	const struct hs_lock *l;
	memcpy(&tag, (const char *)sem + SEM_TAG_OFF, sizeof tag);
	*fresh = (tag.magic & SEM_TAG_FRESH) != (SEM_TAG_MAGIC & SEM_TAG_FRESH);
	if ((tag.magic | SEM_TAG_FRESH) != (sem_tag_magic() | SEM_TAG_FRESH) || tag.id == 0 ||
	    tag.id >= __atomic_load_n(&hs_seg.hdr->tables[HS_T_LOCKS].count, __ATOMIC_ACQUIRE))
		return 0;
	l = &hs_seg.locks[tag.id];
	if (l->kind != HS_LOCK_SEMAPHORE ||
	    ((l->addr >> 48) != (HS_SEM_CLASS >> 48) && l->addr != (uint64_t)(uintptr_t)sem))
		return 0; /* not a lock of this segment (a stale tag) */
	if (__atomic_load_n(&l->flags, __ATOMIC_ACQUIRE) & HS_LOCKF_COUNTER) {
		uint64_t addr = (uint64_t)(uintptr_t)sem;
		if (HS_UNLIKELY(t->slot->held_count) && sem_held(t->slot, addr) >= 0)
			hs_release(t, addr);
		return 0;
	}
	return tag.id;
}

/* From now on the semaphore `id` is a counter. */
static inline void sem_counter(uint32_t id)
{
	__atomic_or_fetch(&hs_seg.locks[id].flags, (uint16_t)HS_LOCKF_COUNTER, __ATOMIC_RELEASE);
}

/*
 * The holder tried its own semaphore and failed (acquire(False) or a
 * timeout of 0): either a probe of a lock it holds (Condition._is_owned) or
 * a hand-off wait that gives up at once (Condition.wait(0)).  Which one is
 * unknown, so the holding stops ordering anything (lock 0: no edges from
 * it); it stays in the held stack until the holder posts or destroys it.
 */
static void sem_probed(struct hs_thread *th, int h)
{
	hs_lockstate_begin(th);
	th->held[h].lock = 0;
	hs_lockstate_end(th);
}

/*
 * A blocking wait (made outside the guard) returned rc: a success acquired
 * the semaphore, ordered after its posts (handover.c).  Returns rc, errno
 * untouched.
 */
static int sem_waited(uint64_t addr, int rc)
{
	struct hs_tls *t;
	if (rc == 0 && (t = hs_enter()) != NULL) {
		hs_order_acquire(t, addr);
		hs_leave(t);
	}
	return rc;
}

/*
 * The semaphore's value (glibc's struct new_sem with 64-bit atomics: the
 * value is the low 32 bits of its first word, little-endian).
 */
static inline unsigned sem_value(const sem_t *sem)
{
	return __atomic_load_n((const uint32_t *)(const void *)sem, __ATOMIC_RELAXED);
}

/* The call a wait hook makes: sem_trywait, or one of the three blocking waits. */
enum sem_kind { SEM_TRY_ONLY, SEM_WAIT, SEM_TIMED, SEM_CLOCK };
struct sem_call {
	enum sem_kind kind;
	clockid_t clock;                /* SEM_CLOCK */
	const struct timespec *abstime; /* SEM_TIMED, SEM_CLOCK */
};

/* The real sem_trywait, or c's blocking call; -1 + errno on failure. */
static int sem_real_try(sem_t *sem)
{
	return HS_REAL(sem_trywait)(sem);
}

static int sem_real_block(sem_t *sem, const struct sem_call *c)
{
	switch (c->kind) {
	case SEM_WAIT:
		return HS_REAL(sem_wait)(sem);
	case SEM_TIMED:
		return HS_REAL(sem_timedwait)(sem, c->abstime);
	case SEM_CLOCK:
		return HS_REAL(sem_clockwait)(sem, c->clock, c->abstime);
	case SEM_TRY_ONLY:
		break;
	}
	return sem_real_try(sem);
}

/*
 * What a wait hook does when the fast path (sem_acquire) does not apply,
 * out of line: a semaphore that is not a lock of the graph (its hand-over
 * order only), the holder's own try (a probe) or blocking wait (a
 * hand-off), and an acquisition that may add an edge, wait or fail (the
 * pthread hooks' steps: hs_acq_before, hs_wait_begin/end, hs_acq_after).
 * a: filled by sem_acquire when id != 0 and the thread does not hold it
 * (tried: the fast path's sem_trywait already failed once).  Returns what
 * the hook returns (0, or -1 + errno).
 */
static __attribute__((noinline, cold)) int sem_acquire_slow(struct hs_tls *t, sem_t *sem, const struct sem_call *c,
							    uint32_t id, int fresh, struct acq *a)
{
	const int is_try = c->kind == SEM_TRY_ONLY;
	uint64_t addr = (uint64_t)(uintptr_t)sem;
	int rc, err, h;
	if (id == 0) {
		/* not a lock of the graph: only its hand-over order (handover.c) */
		if (is_try) {
			rc = sem_real_try(sem);
			if (rc == 0)
				hs_order_acquire(t, addr);
			hs_leave(t);
			return rc;
		}
		hs_leave(t);
		return sem_waited(addr, sem_real_block(sem, c));
	}
	if (t->slot->held_count && (h = sem_held(t->slot, addr)) >= 0) {
		if (is_try) {
			rc = sem_real_try(sem);
			if (rc != 0)
				sem_probed(t->slot, h);
			hs_leave(t);
			return rc;
		}
		/* the holder blocks until another thread posts: a hand-off */
		sem_counter(id);
		hs_release(t, addr);
		hs_leave(t);
		return sem_waited(addr, sem_real_block(sem, c));
	}
	hs_acq_before(t, a, 0);
	rc = sem_real_try(sem) == 0 ? 0 : errno;
	if (rc == EAGAIN)
		rc = EBUSY;
	if (!is_try && rc == EBUSY) {
		a->waited = 1;
		/* it blocks: the wait gets this call's whole stack, Python frames too */
		if ((id = hs_stack_here()) != 0)
			a->stack = id;
		hs_wait_begin(t, a, HS_WAIT_LOCK, addr);
		rc = sem_real_block(sem, c) == 0 ? 0 : errno;
		hs_wait_end(t);
	}
	if (a->id)
		hs_acq_after(t, a, rc);
	if (rc == 0 && fresh)
		sem_tag_used(sem);
	if (rc == 0)
		hs_order_acquire(t, addr);
	hs_leave(t);
	if (rc == 0)
		return 0;
	err = rc == EBUSY ? EAGAIN : rc;
	errno = err;
	return -1;
}

/* A hook entered without recording (no state, inside the shim): the real call only. */
static __attribute__((noinline, cold)) int sem_acquire_real(sem_t *sem, const struct sem_call *c)
{
	return sem_real_block(sem, c);
}

/*
 * Two per-thread memos of the wait hooks' fast path (a `with lock:` in a
 * loop meets the same semaphore under the same held stack again and again):
 *
 * sem_seen: the last semaphore whose tag sem_lock accepted (its address,
 * its whole tag and the segment generation), so that the next acquisition
 * of it reads its tag and compares three words instead of checking the
 * tag against the lock table again.  The tag names its class for as long
 * as it is unchanged: sem_init and sem_destroy rewrite it, and a class
 * entry lives as long as its segment.  Only the class's counter flag can
 * change, and it is read each time.
 *
 * sem_ordered: the held entries under the last acquisition hs_acq_ordered
 * cleared with one or two locks held -- on CPython 3.8 to 3.12 every
 * thread holds its own thread-state lock (threading's _tstate_lock) for
 * its whole life, so one held entry is the common case, and 3.8's main
 * thread holds one more, made by the interpreter in C -- as each one's
 * address, lock id, mode (with its trylock and recursion) and flags, with
 * the classes acquired under them (up to SEM_ORDERED_CLASSES, one per
 * class id modulo that, so the check is one compare; a worker's `with` of
 * two queues and a counter lock under its thread-state lock) with the
 * generation: the same entries under one of
 * those classes again have their edges in the graph already (edges are never
 * removed from a segment), so hs_acq_ordered's edge lookups are skipped.  Kept only for an entry of a semaphore lock
 * (whose release count, relgen in locks.c, no other thread moves: a post
 * by a thread that does not hold it makes the class a counter instead),
 * and never for a fresh acquisition (hs_acq_ordered clears those without
 * looking for the edge).  With no lock held there is no edge to look for.
 */
static __thread struct {
	uint64_t sem, tag;
	uint32_t gen, id;
} sem_seen __attribute__((tls_model("initial-exec")));

#define SEM_ORDERED_MAX 2u
#define SEM_ORDERED_CLASSES 4u
static __thread struct {
	uint64_t id_gen[SEM_ORDERED_CLASSES]; /* classes acquired under them | hs_seg_gen << 32, each at
						 its id modulo SEM_ORDERED_CLASSES; 0: none */
	uint32_t n;             /* entries kept: the held count then (1 or 2) */
	uint32_t flags[SEM_ORDERED_MAX];     /* held[i].flags */
	uint64_t addr[SEM_ORDERED_MAX];      /* held[i].addr */
	uint64_t lock_mode[SEM_ORDERED_MAX]; /* held[i]'s lock, mode, trylock, recursion: one word (sem_held_word) */
} sem_ordered __attribute__((tls_model("initial-exec")));

/* A held entry's lock, mode, trylock and recursion as one word (locks.c writes them so too). */
_Static_assert(offsetof(struct hs_held, lock) == 8 && offsetof(struct hs_held, recursion) == 14,
	       "a held entry's lock..recursion are one 64-bit word");
static inline uint64_t sem_held_word(const struct hs_held *he)
{
	uint64_t w;
	memcpy(&w, &he->lock, sizeof w);
	return w;
}

/* sem_lock through sem_seen. */
static inline __attribute__((always_inline)) uint32_t sem_lock_seen(struct hs_tls *t, sem_t *sem, int *fresh)
{
	uint64_t tag;
	uint32_t id, gen = __atomic_load_n(&hs_seg_gen, __ATOMIC_RELAXED);
	memcpy(&tag, (const char *)sem + SEM_TAG_OFF, sizeof tag);
	if (HS_LIKELY(tag == sem_seen.tag && (uint64_t)(uintptr_t)sem == sem_seen.sem && gen == sem_seen.gen) &&
	    HS_LIKELY(!(__atomic_load_n(&hs_seg.locks[sem_seen.id].flags, __ATOMIC_ACQUIRE) & HS_LOCKF_COUNTER))) {
		*fresh = 0;
		return sem_seen.id;
	}
	id = sem_lock(t, sem, fresh);
	if (id && !*fresh) {
		sem_seen.sem = (uint64_t)(uintptr_t)sem;
		sem_seen.tag = tag;
		sem_seen.gen = gen;
		sem_seen.id = id;
	}
	return id;
}

/* 1 when held entry i is sem_ordered's entry i. */
static inline __attribute__((always_inline)) int sem_ordered_same(const struct hs_held *he, unsigned i)
{
	return he->addr == sem_ordered.addr[i] && sem_held_word(he) == sem_ordered.lock_mode[i] &&
	       he->flags == sem_ordered.flags[i];
}

/* 1 when held entry he can stand in sem_ordered (not a, not a lock whose
 * release count other threads move: a semaphore's, or a probed holding). */
static inline int sem_ordered_keeps(const struct hs_held *he, const struct acq *a)
{
	return he->addr != a->addr && (he->lock == 0 || hs_seg.locks[he->lock].kind == HS_LOCK_SEMAPHORE);
}

/* 1 when the thread's held entries are those sem_ordered kept for class id
 * (its edges from them are in the graph), or nothing is held (no edge into
 * it): hs_acq_ordered would say 1.  Scalars only: the fast path's check. */
static inline __attribute__((always_inline)) int sem_ordered_hit(const struct hs_thread *th, uint32_t id)
{
	const struct hs_held *he = th->held;
	uint32_t n = th->held_count;
	uint64_t id_gen;
	if (n == 0)
		return 1;
	id_gen = (uint64_t)id | (uint64_t)__atomic_load_n(&hs_seg_gen, __ATOMIC_RELAXED) << 32;
	return HS_LIKELY(n == sem_ordered.n && sem_ordered.id_gen[id & (SEM_ORDERED_CLASSES - 1)] == id_gen &&
			 sem_ordered_same(&he[0], 0)) &&
	       (n == 1 || HS_LIKELY(sem_ordered_same(&he[1], 1)));
}

/* hs_acq_ordered for an acquisition sem_ordered_hit did not clear (a: the
 * acquisition, its class a->id), keeping the held entries in sem_ordered
 * when they may stand there. */
static int sem_acq_ordered_learn(struct hs_tls *t, const struct acq *a)
{
	const struct hs_thread *th = t->slot;
	const struct hs_held *he = th->held;
	uint32_t n = th->held_count;
	if (n == 0)
		return 1; /* nothing held: no edge into it */
	if (!hs_acq_ordered(t, a))
		return 0;
	if (n <= SEM_ORDERED_MAX && !a->fresh && sem_ordered_keeps(&he[0], a) &&
	    (n == 1 || sem_ordered_keeps(&he[1], a))) {
		uint64_t id_gen = (uint64_t)a->id | (uint64_t)__atomic_load_n(&hs_seg_gen, __ATOMIC_RELAXED) << 32;
		int same = n == sem_ordered.n && sem_ordered_same(&he[0], 0) && (n == 1 || sem_ordered_same(&he[1], 1));
		if (!same) {
			/* other held entries: the classes cleared under the old ones do not count */
			memset(sem_ordered.id_gen, 0, sizeof sem_ordered.id_gen);
			sem_ordered.n = n;
			for (uint32_t i = 0; i < n; i++) {
				sem_ordered.addr[i] = he[i].addr;
				sem_ordered.lock_mode[i] = sem_held_word(&he[i]);
				sem_ordered.flags[i] = he[i].flags;
			}
		}
		sem_ordered.id_gen[a->id & (SEM_ORDERED_CLASSES - 1)] = id_gen;
	}
	return 1;
}

/* hs_order_acquire (handover.h) of the fast path, its out-of-line copy in
 * the pair's block (hot_bss.ld) rather than anywhere in .text. */
static __attribute__((hot, noinline, flatten)) void sem_order_acquired(struct hs_tls *t, uint64_t addr)
{
	hs_order_acquire(t, addr);
}

/* The acquisition of a lock semaphore (class id) as the pthread hooks describe one. */
static inline void sem_acq_fill(struct acq *a, uint32_t id, uint64_t addr, uint64_t site, uint64_t cfa)
{
	memset(a, 0, sizeof *a);
	a->id = id;
	a->addr = addr;
	a->site = site;
	a->cfa = cfa;
	a->kind = HS_LOCK_SEMAPHORE;
	a->acq_mode = HS_MODE_WRITE;
	a->hold_mode = HS_MODE_WRITE;
	a->gil_safe = 1;
}

/*
 * A lock semaphore's acquisition that sem_ordered does not clear (its first
 * under these held entries, or a fresh lock's): hs_acq_ordered decides,
 * then the fast path's steps when it adds no edge and the try succeeds,
 * sem_acquire_slow otherwise.  Out of line: once per new held stack.
 */
static __attribute__((noinline)) int sem_acquire_unmemo(struct hs_tls *t, sem_t *sem, const struct sem_call *c,
							 uint32_t id, int fresh, uint64_t site, uint64_t cfa)
{
	uint64_t addr = (uint64_t)(uintptr_t)sem;
	struct acq a;
	sem_acq_fill(&a, id, addr, site, cfa);
	a.fresh = fresh && sem_made_here(sem);
	if (sem_acq_ordered_learn(t, &a) && HS_REAL(sem_trywait)(sem) == 0) {
		if (fresh)
			sem_tag_used(sem);
		lock_acq_uncontended(t, id, addr, site, cfa, a.hold_mode, a.trylock);
		sem_order_acquired(t, addr);
		hs_leave(t);
		return 0;
	}
	return sem_acquire_slow(t, sem, c, id, fresh, &a);
}

/* The fast path's try failed (the lock is taken, or the call failed): sem_acquire_slow. */
static __attribute__((noinline, cold)) int sem_acquire_busy(struct hs_tls *t, sem_t *sem, const struct sem_call *c,
							    uint32_t id, uint64_t site, uint64_t cfa)
{
	struct acq a;
	sem_acq_fill(&a, id, (uint64_t)(uintptr_t)sem, site, cfa);
	return sem_acquire_slow(t, sem, c, id, 0, &a);
}

/*
 * The body of the four waits, inlined into each (site and cfa: the hook's
 * return address and CFA).  Its fast path, the common `with lock:` (a lock
 * semaphore the thread does not hold, not fresh, its held entries those
 * sem_ordered cleared for its class, the real sem_trywait succeeding) is
 * kept short, in scalars, and in the pair's block (hot_bss.ld) with the
 * steps it calls; everything else is out of line (sem_acquire_unmemo,
 * sem_acquire_busy, sem_acquire_slow).
 */
static inline __attribute__((always_inline)) int sem_acquire(sem_t *sem, const struct sem_call *c, uint64_t site,
							     uint64_t cfa)
{
	uint64_t addr = (uint64_t)(uintptr_t)sem;
	struct hs_tls *t = hs_py_internal(sem) ? NULL : hs_enter();
	uint32_t id = 0;
	int fresh = 0;
	if (HS_UNLIKELY(!t))
		return sem_acquire_real(sem, c);
	if (HS_UNLIKELY(!sem_on()) || HS_UNLIKELY((id = sem_lock_seen(t, sem, &fresh)) == 0) ||
	    HS_UNLIKELY(sem_holds(t->slot, addr)))
		return sem_acquire_slow(t, sem, c, id, fresh, NULL);
	if (HS_UNLIKELY(fresh) || HS_UNLIKELY(!sem_ordered_hit(t->slot, id)))
		return sem_acquire_unmemo(t, sem, c, id, fresh, site, cfa);
	if (HS_UNLIKELY(HS_REAL(sem_trywait)(sem) != 0))
		return sem_acquire_busy(t, sem, c, id, site, cfa);
	/* the fast path: every held lock is ordered before it already */
	lock_acq_uncontended(t, id, addr, site, cfa, HS_MODE_WRITE, 0);
	sem_order_acquired(t, addr);
	hs_leave(t);
	return 0;
}

HS_EXPORT int sem_wait(sem_t *sem)
{
	const struct sem_call c = {SEM_WAIT, 0, NULL};
	return sem_acquire(sem, &c, RET_ADDR(), CALLER_SP());
}

HS_HOT HS_EXPORT int sem_trywait(sem_t *sem)
{
	const struct sem_call c = {SEM_TRY_ONLY, 0, NULL};
	return sem_acquire(sem, &c, RET_ADDR(), CALLER_SP());
}

HS_EXPORT int sem_timedwait(sem_t *sem, const struct timespec *abstime)
{
	const struct sem_call c = {SEM_TIMED, 0, abstime};
	return sem_acquire(sem, &c, RET_ADDR(), CALLER_SP());
}

HS_EXPORT int sem_clockwait(sem_t *sem, clockid_t clock, const struct timespec *abstime)
{
	const struct sem_call c = {SEM_CLOCK, clock, abstime};
	return sem_acquire(sem, &c, RET_ADDR(), CALLER_SP());
}

/*
 * Which lock classes have their edge to the GIL (class -> GIL, added by
 * hs_release the first time one is released with the GIL held): a
 * process-private direct-mapped memo of lock id and segment generation,
 * so that a release of a class whose edge exists neither asks whether the
 * GIL is held nor looks the edge up.  Edges are never removed from a
 * segment; a class lives as long as its segment.  Instance nodes (keyed by
 * address: a lock made by C, and every Python lock of an interpreter whose
 * frames heisen does not read, 3.6 and 3.7) are memoised too: a dead
 * instance's id is taken again only by a lock of the same kind and the same
 * creation stack (lockgraph.c hs_lock_id, lockdep's classes), which has its
 * edges, the one to the GIL among them (before, every such release looked
 * the edge up: ~440 instructions a `with lock:` on 3.6 and 3.7).
 */
#define SEM_GIL_MEMO 4096u
static uint64_t sem_gil_memo[SEM_GIL_MEMO]; /* [atomic] id | generation << 32 */

static inline uint64_t sem_gil_key(uint32_t id)
{
	return (uint64_t)id | (uint64_t)__atomic_load_n(&hs_seg_gen, __ATOMIC_RELAXED) << 32;
}

static inline int sem_gil_edge_known(uint32_t id)
{
	return __atomic_load_n(&sem_gil_memo[id & (SEM_GIL_MEMO - 1)], __ATOMIC_RELAXED) == sem_gil_key(id);
}

static void sem_gil_edge_learn(uint32_t id)
{
	uint32_t gil = hs_py_gil_lock();
	if (gil && gil != id &&
	    hs_edge_find(&hs_seg, hs_edge_key(id, gil, HS_MODE_WRITE, HS_MODE_WRITE)))
		__atomic_store_n(&sem_gil_memo[id & (SEM_GIL_MEMO - 1)], sem_gil_key(id), __ATOMIC_RELAXED);
}

/*
 * The lock id of a semaphore whose post releases the thread's innermost
 * held entry he (he->addr is the semaphore's): its class id when the entry
 * was pushed for it as a lock (he->lock, the tag's id, this segment's tag)
 * and the class is still one, else 0 (sem_lock then decides).  Skips
 * sem_lock's checks of a stale tag: the entry was pushed after them.
 */
static inline uint32_t sem_top_lock(const sem_t *sem, const struct hs_held *he)
{
	struct sem_tag tag;
	memcpy(&tag, (const char *)sem + SEM_TAG_OFF, sizeof tag);
	if (he->lock == 0 || tag.id != he->lock || (tag.magic | SEM_TAG_FRESH) != (sem_tag_magic() | SEM_TAG_FRESH) ||
	    (__atomic_load_n(&hs_seg.locks[tag.id].flags, __ATOMIC_ACQUIRE) & HS_LOCKF_COUNTER))
		return 0;
	return tag.id;
}

/* sem_post's uncommon cases, out of line: not the innermost entry's lock
 * (sem_lock decides: a lock held deeper, a counter, a post by another
 * thread), or a class whose edge to the GIL is not known yet. */
static __attribute__((noinline, cold)) int sem_post_lock(struct hs_tls *t, sem_t *sem, uint32_t *id)
{
	int fresh, h = -1;
	if ((*id = sem_lock(t, sem, &fresh)) != 0) {
		h = t->slot->held_count ? sem_held(t->slot, (uint64_t)(uintptr_t)sem) : -1;
		if (h < 0)
			sem_counter(*id);
	}
	return h;
}

static __attribute__((noinline, cold)) void sem_post_release(struct hs_tls *t, uint64_t addr, uint32_t id)
{
	hs_release(t, addr);
	sem_gil_edge_learn(id);
}

/*
 * A post by the holder releases the lock; by anyone else, makes it a counter.
 *
 * As the mutex path does (locks.c, RELEASE), the holder's release is
 * bookkept after the real post, outside the critical section: a thread
 * blocked in sem_wait is woken without waiting for heisen too.  Before the
 * post stay only what a thread taking the semaphore next must see: the
 * post's hand-over order (handover.c) and, for a post by a thread that
 * does not hold it, the class marked a counter (the waiter it wakes must
 * not push a held entry for a lock).  Until the release is bookkept the
 * holder's held stack still shows the lock: a reader may briefly see it
 * held by this thread and by the thread that took it next, never held by
 * nobody while it is held.  A post that fails (EOVERFLOW, EINVAL) released
 * nothing: the entry stays.
 */
HS_HOT HS_EXPORT int sem_post(sem_t *sem)
{
	uint64_t addr = (uint64_t)(uintptr_t)sem;
	struct hs_tls *t = hs_py_internal(sem) ? NULL : hs_enter();
	struct hs_thread *th;
	uint32_t id = 0, n;
	int h = -1, rc;
	if (HS_UNLIKELY(!t))
		return HS_REAL(sem_post)(sem);
	th = t->slot;
	if (HS_LIKELY(sem_on())) {
		n = th->held_count;
		if (HS_LIKELY(n && n <= HS_HELD_MAX && th->held[n - 1].addr == addr) &&
		    HS_LIKELY((id = sem_top_lock(sem, &th->held[n - 1])) != 0))
			h = (int)n - 1; /* the common `with lock:`: the innermost entry is its acquisition */
		else if (n && n <= HS_HELD_MAX && th->held[n - 1].addr == addr && th->held[n - 1].lock == 0)
			h = (int)n - 1; /* a holding its holder probed (sem_probed: queue.Queue's notify
					 * under its mutex): it orders nothing, its release no edge */
		else
			h = sem_post_lock(t, sem, &id);
	}
	/* a post that makes it available (0 -> 1) orders every wait that then
	 * succeeds after it; a post onto a positive count orders nothing
	 * (a waiter may have used an earlier one): handover.c */
	if (sem_value(sem) == 0)
		hs_order_release(t, addr);
	rc = HS_REAL(sem_post)(sem);
	if (h >= 0 && HS_LIKELY(rc == 0)) {
		/* its edge to the GIL is there already: hs_release need not ask
		 * whether the GIL is held nor look the edge up */
		if (id == 0 || HS_LIKELY(sem_gil_edge_known(id))) {
			if (!lock_release_top(t, addr)) {
				th->held[h].flags |= HS_HELDF_GIL;
				hs_release(t, addr);
			}
		} else {
			sem_post_release(t, addr, id);
		}
	}
	hs_leave(t);
	return rc;
}

/*
 * The class key of a lock created with Python frames py on the stack: its
 * innermost two Python frames (pyframe ids, each below 2^24: the pyframe
 * table is far smaller), so a lock made by a helper (Condition.__init__,
 * Queue.__init__) is of its caller's class, and the many import-time
 * module locks made at one place are one class, not one per import chain.
 */
static inline uint64_t sem_class_key(const struct hs_pychain *py)
{
	uint64_t inner = py->id[0], outer = py->n > 1 ? py->id[1] : 0;
	if (inner >= (1u << 24) || outer >= (1u << 24))
		outer = 0;
	return HS_SEM_CLASS | outer << 24 | inner;
}

/* A new semaphore: an instance of its creation site's class with value 1, untracked otherwise. */
/* The known class of a new lock made by the token's frame: sem_class_key of
 * the pyframe ids a stack read would give for its two frames; 0 for a new
 * class or frames the token cannot name (then the stack decides). */
static uint32_t sem_class_of_token(const struct hs_pytoken *tk)
{
	struct hs_pychain two;
	uint32_t outer;
	two.id[0] = hs_py_token_frame_ids(&hs_seg, tk, &outer);
	two.id[1] = outer;
	two.n = outer ? 2 : 1;
	if (!two.id[0] || (!tk->caller_code && tk->prev))
		return 0;
	return hs_lock_find(&hs_seg, sem_class_key(&two));
}

HS_EXPORT int sem_init(sem_t *sem, int pshared, unsigned int value)
{
	uint64_t site = RET_ADDR(), cfa = CALLER_SP();
	int rc = HS_REAL(sem_init)(sem, pshared, value);
	struct hs_tls *t;
	uint32_t id = 0, stack;
	if (rc != 0)
		return rc;
	hs_order_forget((uint64_t)(uintptr_t)sem); /* a new semaphore: no order from the last one there */
	if (value == 1 && !pshared && sem_on() && !hs_py_internal(sem) && (t = hs_enter())) {
		/* a known class found from the token's two frames, without a stack read
		 * (sem_class_key of the pyframe ids the chain would have); a new class, or
		 * frames the token cannot name: the chain decides, as it always did */
		struct hs_pytoken tk;
		uint64_t maker = hs_py_token_read(&tk) ? tk.fp : 0;
		if (maker)
			id = sem_class_of_token(&tk);
		if (!id) {
			const struct hs_chain *c = hs_chain_call(site, cfa);
			uint64_t key = c && c->python && c->py.n ? sem_class_key(&c->py) : 0;
			if (key && (id = hs_lock_find(&hs_seg, key)) != 0) {
				/* another lock of a known class: nothing to intern */
			} else if (key) {
				/* a new class: its first lock's whole stack names it */
				stack = hs_chain_stack(c);
				id = hs_lock_id(&hs_seg, key, HS_LOCK_SEMAPHORE, 0, stack, t->tid, hs_now());
			} else {
				stack = c ? hs_chain_stack(c) : hs_stack_call(site, cfa);
				/* created by C with no Python caller (the interpreter's own locks, few):
				 * a node of its own, as a mutex is */
				hs_lock_forget(&hs_seg, (uint64_t)(uintptr_t)sem);
				id = hs_lock_id(&hs_seg, (uint64_t)(uintptr_t)sem, HS_LOCK_SEMAPHORE, 0, stack, t->tid,
						hs_now());
			}
		}
		if (id) /* the frame that made it (sem_made_here) */
			memcpy((char *)sem + SEM_MAKER_OFF, &maker, sizeof maker);
		hs_leave(t);
	}
	sem_tag_set(sem, id);
	return rc;
}

HS_EXPORT int sem_destroy(sem_t *sem)
{
	uint64_t addr = (uint64_t)(uintptr_t)sem;
	struct hs_tls *t = hs_enter();
	if (t) {
		if (t->slot->held_count && sem_held(t->slot, addr) >= 0)
			hs_release(t, addr);
		struct sem_tag tag;
		memcpy(&tag, (const char *)sem + SEM_TAG_OFF, sizeof tag);
		/* an instance node ends with it; a class lives on */
		if ((tag.magic | SEM_TAG_FRESH) == (sem_tag_magic() | SEM_TAG_FRESH) && tag.id &&
		    tag.id < __atomic_load_n(&hs_seg.hdr->tables[HS_T_LOCKS].count, __ATOMIC_ACQUIRE) &&
		    hs_seg.locks[tag.id].addr == addr)
			hs_lock_forget(&hs_seg, addr);
		hs_leave(t);
	}
	sem_tag_set(sem, 0);
	hs_order_forget(addr);
	return HS_REAL(sem_destroy)(sem);
}

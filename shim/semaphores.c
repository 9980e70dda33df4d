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
 * holds it.  A semaphore is a counter (HS_LOCKF_COUNTER, never in a finding,
 * never in a held stack) from the moment it is initialised to another value,
 * opened by name (sem_open), posted by a thread that does not hold it (a
 * signal: Condition's waiter locks, a Lock released by another thread), or
 * waited on, blocking, by the thread that holds it (a hand-off wait:
 * Condition.wait blocks on the waiter lock it took itself).  A failing
 * sem_trywait by the holder is neither (Condition._is_owned probes with
 * acquire(False)).  The choice is final for the semaphore's life: a counter
 * stays one until sem_destroy.
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
 * A lock's name is where it was created: its first_stack is the stack of
 * sem_init, Python frames included (hs_stack_site_python), and heisen-dump
 * names it by the innermost Python frame (lockdep's lock classes are named
 * by their init site the same way).
 *
 * RLock re-entry never reaches a semaphore (the C RLock counts its owner's
 * re-entries itself).
 */
#include <errno.h>
#include <semaphore.h>
#include <string.h>

#include "hooks.h"
#include "shim.h"

#define RET_ADDR() ((uint64_t)(uintptr_t)__builtin_extract_return_addr(__builtin_return_address(0)))

/* Index of the thread's held entry for addr, -1 when it does not hold it. */
static inline int sem_held(const struct hs_thread *th, uint64_t addr)
{
	uint32_t n = th->held_count < HS_HELD_MAX ? th->held_count : HS_HELD_MAX;
	for (int i = (int)n - 1; i >= 0; i--)
		if (th->held[i].addr == addr)
			return i;
	return -1;
}

/*
 * The lock id of the semaphore at addr when it is a binary semaphore still
 * used as a lock, else 0.  A semaphore never seen by sem_init (sem_open, or
 * initialised before the shim) becomes a counter entry.  A counter still in
 * the thread's own held stack (it became one while this thread held it) is
 * dropped from it.
 */
static uint32_t sem_lock(struct hs_tls *t, uint64_t addr)
{
	uint32_t id = hs_lock_id(&hs_seg, addr, HS_LOCK_SEMAPHORE, HS_LOCKF_COUNTER, 0, t->tid, 0);
	const struct hs_lock *l;
	if (!id)
		return 0;
	l = &hs_seg.locks[id];
	if (l->kind != HS_LOCK_SEMAPHORE)
		return 0;
	if (__atomic_load_n(&l->flags, __ATOMIC_ACQUIRE) & HS_LOCKF_COUNTER) {
		if (HS_UNLIKELY(t->slot->held_count) && sem_held(t->slot, addr) >= 0)
			hs_release(t, addr);
		return 0;
	}
	return id;
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
 * The body of the four waits.  TRY is sem_trywait, BLOCK the blocking call
 * (both -1 + errno on failure); is_try for sem_trywait itself.
 */
#define SEM_ACQUIRE(is_try, TRY, BLOCK)                                                          \
	do {                                                                                     \
		uint64_t addr = (uint64_t)(uintptr_t)sem;                                        \
		struct hs_tls *t = hs_py_internal(sem) ? NULL : hs_enter();                      \
		struct acq a;                                                                    \
		uint32_t id;                                                                     \
		int rc, err, h;                                                                  \
		if (!t)                                                                          \
			return is_try ? (TRY) : (BLOCK);                                         \
		if (!(id = sem_lock(t, addr))) {                                                 \
			hs_leave(t);                                                             \
			return is_try ? (TRY) : (BLOCK);                                         \
		}                                                                                \
		if (HS_UNLIKELY(t->slot->held_count) && (h = sem_held(t->slot, addr)) >= 0) {  \
			if (is_try) {                                                            \
				rc = (TRY);                                                      \
				if (rc != 0)                                                     \
					sem_probed(t->slot, h);                                  \
				hs_leave(t);                                                     \
				return rc;                                                       \
			}                                                                        \
			/* the holder blocks until another thread posts: a hand-off */          \
			sem_counter(id);                                                         \
			hs_release(t, addr);                                                        \
			hs_leave(t);                                                             \
			return (BLOCK);                                                          \
		}                                                                                \
		memset(&a, 0, sizeof a);                                                         \
		a.addr = addr;                                                                   \
		a.site = RET_ADDR();                                                             \
		a.kind = HS_LOCK_SEMAPHORE;                                                      \
		a.acq_mode = HS_MODE_WRITE;                                                      \
		a.hold_mode = HS_MODE_WRITE;                                                     \
		a.gil_safe = 1;                                                                  \
		a.stack = hs_stack_site_python(a.site);                                          \
		hs_acq_before(t, &a, 0);                                                            \
		rc = (TRY) == 0 ? 0 : errno;                                                     \
		if (rc == EAGAIN)                                                                \
			rc = EBUSY;                                                              \
		if (!is_try && rc == EBUSY) {                                                    \
			a.waited = 1;                                                            \
			hs_wait_begin(t, &a, HS_WAIT_LOCK, addr);                                   \
			rc = (BLOCK) == 0 ? 0 : errno;                                           \
			hs_wait_end(t);                                                             \
		}                                                                                \
		if (a.id)                                                                        \
			hs_acq_after(t, &a, rc);                                                    \
		hs_leave(t);                                                                     \
		if (rc == 0)                                                                     \
			return 0;                                                                \
		err = rc == EBUSY ? EAGAIN : rc;                                                 \
		errno = err;                                                                     \
		return -1;                                                                       \
	} while (0)

#define SEM_TRY HS_REAL(sem_trywait)(sem)

HS_EXPORT int sem_wait(sem_t *sem)
{
	SEM_ACQUIRE(0, SEM_TRY, HS_REAL(sem_wait)(sem));
}

HS_EXPORT int sem_trywait(sem_t *sem)
{
	SEM_ACQUIRE(1, SEM_TRY, -1);
}

HS_EXPORT int sem_timedwait(sem_t *sem, const struct timespec *abstime)
{
	SEM_ACQUIRE(0, SEM_TRY, HS_REAL(sem_timedwait)(sem, abstime));
}

HS_EXPORT int sem_clockwait(sem_t *sem, clockid_t clock, const struct timespec *abstime)
{
	SEM_ACQUIRE(0, SEM_TRY, HS_REAL(sem_clockwait)(sem, clock, abstime));
}

/* A post by the holder releases the lock; by anyone else, makes it a counter. */
HS_EXPORT int sem_post(sem_t *sem)
{
	uint64_t addr = (uint64_t)(uintptr_t)sem;
	struct hs_tls *t = hs_py_internal(sem) ? NULL : hs_enter();
	uint32_t id;
	if (t) {
		if ((id = sem_lock(t, addr)) != 0) {
			if (t->slot->held_count && sem_held(t->slot, addr) >= 0)
				hs_release(t, addr);
			else
				sem_counter(id);
		}
		hs_leave(t);
	}
	return HS_REAL(sem_post)(sem);
}

/* A new semaphore at sem: a lock candidate with value 1, a counter otherwise. */
HS_EXPORT int sem_init(sem_t *sem, int pshared, unsigned int value)
{
	uint64_t site = RET_ADDR();
	int rc = HS_REAL(sem_init)(sem, pshared, value);
	struct hs_tls *t;
	if (rc != 0 || hs_py_internal(sem) || !(t = hs_enter()))
		return rc;
	hs_lock_forget(&hs_seg, (uint64_t)(uintptr_t)sem);
	if (value == 1 && !pshared)
		hs_lock_id(&hs_seg, (uint64_t)(uintptr_t)sem, HS_LOCK_SEMAPHORE, 0, hs_stack_site_python(site), t->tid,
			   hs_now());
	hs_leave(t);
	return rc;
}

HS_EXPORT int sem_destroy(sem_t *sem)
{
	uint64_t addr = (uint64_t)(uintptr_t)sem;
	struct hs_tls *t = hs_enter();
	if (t) {
		if (t->slot->held_count && sem_held(t->slot, addr) >= 0)
			hs_release(t, addr);
		hs_lock_forget(&hs_seg, addr);
		hs_leave(t);
	}
	return HS_REAL(sem_destroy)(sem);
}

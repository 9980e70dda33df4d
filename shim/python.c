/* SPDX-License-Identifier: MIT */
/*
 * shim/python.c — the Python bridge: CPython's GIL as a lock.
 *
 * CPython is looked for at run time (its symbols, with dlsym) and never
 * required.  When it is there, the entry points through which native code
 * takes and drops the GIL — PyGILState_Ensure/Release, PyEval_SaveThread/
 * RestoreThread, PyEval_AcquireThread/ReleaseThread — are rerouted here by
 * patching the GOT of every object that imports them (elf_got_surgery.c),
 * in both cases: libpython linked into the executable (Debian's and conda's
 * python3, where LD_PRELOAD cannot reach these symbols) and libpython as a
 * shared library.  heisen never exports Py* symbols itself: a library that
 * probes dlsym(RTLD_DEFAULT, "PyGILState_Ensure") must not find Python in a
 * process that has none.
 *
 * The GIL is one node of the lock-order graph, named "GIL" (docs/design.md "Lock
 * order"):
 *   - taking a native lock while holding the GIL adds GIL -> L (locks.c asks
 *     hs_py_holds_gil(), which is PyGILState_Check);
 *   - taking the GIL through an entry point while holding L adds L -> GIL,
 *     before blocking, and publishes "waiting for the GIL" in the thread's
 *     wait word;
 *   - a lock taken without the GIL and released with it held means the GIL
 *     was taken (on a path heisen cannot see, inside the interpreter) while
 *     holding L: L -> GIL too.
 * The GIL's own implementation is a pthread mutex and condition variables
 * inside the interpreter's runtime state (_PyRuntime); those are the GIL's
 * internals, not locks of the program, and are never tracked (otherwise
 * GIL -> gil.mutex -> GIL would be a cycle in every Python program).
 */
#include <dlfcn.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>

#include "hooks.h"
#include "inject.h" /* fault injection and chaos: one line per hook */
#include "shim.h"
#include "lockpath.h" /* the GIL's id and the lock sites' stacks, inline */

#define RET_ADDR() ((uint64_t)(uintptr_t)__builtin_extract_return_addr(__builtin_return_address(0)))

/* The real CPython functions (from the executable or libpython, never ours). */
static struct {
	int (*is_initialized)(void);
	int (*gil_check)(void);
	int (*ensure)(void);
	void (*release)(int);
	void *(*save_thread)(void);
	void (*restore_thread)(void *);
	void (*acquire_thread)(void *);
	void (*release_thread)(void *);
	const char *(*version)(void);
} py;

int hs_py_present;               /* [atomic] CPython found and hooked */
uint64_t hs_py_rt_lo, hs_py_rt_size;  /* _PyRuntime: the GIL's internals live there */
static uint64_t gil_addr;        /* the GIL node's address: _PyRuntime, or a CPython function */
/* The GIL's lock id in the segment of generation hs_py_gil_gen (0: not
 * yet); lockpath.h (lock_gil_id) reads both inline */
uint32_t hs_py_gil_id HS_HIDDEN, hs_py_gil_gen HS_HIDDEN;
static int init_lock;

int hs_py_holds_gil(void)
{
	if (!__atomic_load_n(&hs_py_present, __ATOMIC_ACQUIRE) || !py.is_initialized || !py.gil_check)
		return 0;
	/* PyGILState_Check answers 1 before the interpreter exists: ask only after */
	return py.is_initialized() && py.gil_check();
}

uint32_t hs_py_gil_lock(void)
{
	uint32_t gen = __atomic_load_n(&hs_seg_gen, __ATOMIC_ACQUIRE);
	uint32_t id;
	if (!__atomic_load_n(&hs_py_present, __ATOMIC_ACQUIRE))
		return 0;
	if (hs_py_gil_gen == gen && hs_py_gil_id)
		return hs_py_gil_id;
	/* a new segment (start-up, fork child): the GIL gets its node there */
	id = hs_lock_id(&hs_seg, gil_addr, HS_LOCK_GIL, 0, 0, hs_tls.tid, hs_now());
	if (id) {
		if (!hs_seg.locks[id].name)
			__atomic_store_n(&hs_seg.locks[id].name, hs_str_add(&hs_seg, "GIL", 3), __ATOMIC_RELEASE);
		__atomic_store_n(&hs_seg.hdr->gil_lock, id, __ATOMIC_RELEASE);
		hs_py_gil_id = id;
		hs_py_gil_gen = gen;
	}
	return id;
}

/* ---- the hooks ------------------------------------------------------------- */

/*
 * The held entries whose edges to the GIL were all in the graph at this
 * thread's last take that looked (gil_held_edges): a take under the same
 * entries adds nothing (edges are never removed from a segment) and skips
 * the loop.  A Python thread holds its thread-state lock for life, so
 * every take of a worker under bench/py_workload.py holds one entry and
 * looked its edge up again (~70 instructions a take with the call,
 * bench/README.md "Lock hooks around the GIL's windows").  Kept for at most
 * GIL_TAKE_KNOWN_MAX entries, each as its lock, mode, trylock and recursion
 * word (the held entry's bytes 8..15, lockpath.h held_push4), for the GIL's
 * id gil in the segment of generation gen; n 0: nothing kept.  Written only
 * inside a hook (the guard held): a signal handler's take passes through.
 */
#define GIL_TAKE_KNOWN_MAX 2u
static __thread struct {
	uint32_t n, gen, gil;
	uint64_t word[GIL_TAKE_KNOWN_MAX];
} gil_take_known __attribute__((tls_model("initial-exec")));

static inline uint64_t held_word(const struct hs_held *he)
{
	uint64_t w;
	memcpy(&w, &he->lock, sizeof w);
	return w;
}

/* 1 when held[0 .. n-1] are the entries gil_take_known keeps for gil. */
static inline __attribute__((always_inline)) int gil_take_is_known(const struct hs_thread *th, uint32_t gil,
								    uint32_t n)
{
	return n == gil_take_known.n && gil == gil_take_known.gil &&
	       gil_take_known.gen == __atomic_load_n(&hs_seg_gen, __ATOMIC_RELAXED) &&
	       held_word(&th->held[0]) == gil_take_known.word[0] &&
	       (n == 1 || held_word(&th->held[1]) == gil_take_known.word[1]);
}

/*
 * The edges held -> GIL for the thread's n held entries (n > 0, the GIL's
 * id gil): gil_wait_begin's loop, out of line (most takes hold no native
 * lock, or the entries of the last take, gil_take_known).  When every
 * edge was in the graph (hs_edge_known: not one with its held lock's call
 * site only) and n <= GIL_TAKE_KNOWN_MAX, the entries are kept there.
 */
static __attribute__((noinline)) void gil_held_edges(struct hs_tls *t, uint32_t gil, uint32_t n, uint64_t now)
{
	struct hs_thread *th = t->slot;
	int all = 1; /* every edge in the graph already */
	gil_take_known.n = 0;
	for (uint32_t i = 0; i < n; i++) {
		const struct hs_held *he = &th->held[i];
		int created;
		uint32_t finding, e, from_stack, site_n;
		if (he->lock == 0 || he->lock == gil)
			continue;
		/* an edge in the graph already (edges are never removed): nothing to add,
		 * nothing to report; the process's memo of known edges answers most takes
		 * with a load and a compare (a thread holds its thread-state lock for life) */
		if (hs_edge_known(hs_edge_key(he->lock, gil, he->mode, HS_MODE_WRITE)))
			continue;
		/* a new edge gets the held lock's exact stack, not its site's (its site's when it was
		 * taken on the leaf path: then marked, and no leaf any more) */
		all = 0; /* looked up again next time: it may be new, or recorded with a call site's stack */
		from_stack = hs_locks_held_stack(th, (int)i, &site_n);
		e = hs_graph_add(&hs_seg, he->lock, he->mode, from_stack, site_n, gil, HS_MODE_WRITE, 0, hs_stack_here,
				 t->tid, now, &created, &finding);
		if (created)
			hs_rec(t, now, HS_REC_NEW_EDGE, hs_seg.edges[e].to_stack, e, he->lock, gil);
		if (finding)
			hs_rec(t, now, HS_REC_FINDING, 0, finding - 1, 0, 0);
	}
	if (all && n <= GIL_TAKE_KNOWN_MAX) {
		for (uint32_t i = 0; i < n; i++)
			gil_take_known.word[i] = held_word(&th->held[i]);
		gil_take_known.gil = gil;
		gil_take_known.gen = __atomic_load_n(&hs_seg_gen, __ATOMIC_RELAXED);
		gil_take_known.n = n;
	}
}

/*
 * About to take the GIL through entry point `which`: add held -> GIL for
 * every native lock held (before blocking, so a run that then deadlocks is
 * still predicted), then publish the wait.  Inline in its two callers (as
 * gil_wait_end): a take is then one call and one frame of heisen's, not
 * three (bench/README.md "The GIL take's and the mutex hooks' own
 * instructions").
 */
static inline __attribute__((always_inline)) void gil_wait_begin(struct hs_tls *t, unsigned which, uint64_t site,
								 uint64_t now)
{
	struct hs_thread *th = t->slot;
	uint32_t gil = lock_gil_id();
	/* through the thread's memo of lock sites: a thread takes the GIL back
	 * from a few places (an extension's Py_END_ALLOW_THREADS, the interpreter's
	 * lock waits) thousands of times a second */
	uint32_t stack = lock_site_stack(site, __atomic_load_n(&hs_seg_gen, __ATOMIC_RELAXED));
	uint32_t n = th->held_count < HS_HELD_MAX ? th->held_count : HS_HELD_MAX;

	lock_before_gil_take(th); /* lazily read stacks of locks held without the GIL: complete them now */
	if (gil && n && !gil_take_is_known(th, gil, n))
		gil_held_edges(t, gil, n, now);
	hs_rec(t, now, HS_REC_GIL_WAIT, stack, which, 0, 0);
	hs_lockstate_begin(th);
	th->wait_kind = HS_WAIT_GIL;
	th->wait_addr = gil_addr;
	th->wait_lock = gil;
	th->wait_mode = HS_MODE_WRITE;
	th->wait_flags = 0;
	th->wait_stack = stack;
	th->wait_since_ns = now;
	hs_lockstate_end(th);
}

/*
 * The clock of a GIL cycle (release, wait, take) is the coarse one alone
 * (shim.h hs_now_coarse: the kernel's last tick, read from its vDSO data
 * inline, a few ns), never the precise one: a precise read cost 20-60 ns
 * under a paravirtual clock, at every take, and a threaded Python program
 * makes ~10^5 GIL cycles a second through extension modules (perf of
 * bench/py_workload.py: ~1 % of its CPU, the take's largest single cost;
 * bench/README.md "The lock path by time").  The wait begins
 * at the coarse time (the wait word's since, the GIL_WAIT record and its
 * new edges) and the take ends at the coarse time again: a wait is
 * measured to a tick (4 ms at HZ=250, more where ticks are skipped), and
 * one within a tick is recorded with waited 0, as a lock acquisition that
 * did not wait is (locks.c).  Readers judge GIL waits in seconds
 * (analyze.c, stall.c); hang detection compares the wait word's since with
 * a precise clock, for which it is at most a tick early.  (Coarse and
 * precise readings are never mixed in one measure: the coarse clock lags
 * the precise one by up to a tick or more, 3 to 9 ms on a VM, so a coarse
 * end against a precise start missed every wait shorter than that lag.)
 * No GIL record goes before this thread's last one (gil_last_ns), so a
 * thread's GIL timeline never runs backwards.
 */
static __thread uint64_t gil_last_ns __attribute__((tls_model("initial-exec")));

static inline uint64_t gil_now(void)
{
	uint64_t now = hs_now_coarse();
	return now > gil_last_ns ? now : gil_last_ns;
}

static inline __attribute__((always_inline)) void gil_wait_end(struct hs_tls *t, unsigned which, uint64_t since)
{
	struct hs_thread *th = t->slot;
	uint64_t now = hs_now_coarse();
	if (now < since)
		now = since;
	gil_last_ns = now;
	hs_lockstate_begin(th);
	th->wait_kind = HS_WAIT_NONE;
	hs_lockstate_end(th);
	hs_rec(t, now, HS_REC_GIL_ACQUIRED, 0, which, 0, now - since);
}

static int hook_PyGILState_Ensure(void)
{
	uint64_t site = RET_ADDR();
	struct hs_tls *t = hs_enter();
	uint64_t now;
	int rc;
	if (!t)
		return py.ensure();
	if (hs_py_holds_gil()) {
		/* re-entrant Ensure: nothing is taken */
		rc = py.ensure();
		hs_leave(t);
		return rc;
	}
	now = gil_now();
	HS_CHAOS(HS_CHAOS_GIL_TAKE); /* chaos.c: --chaos */
	gil_wait_begin(t, HS_GIL_ENSURE, site, now);
	rc = py.ensure();
	gil_wait_end(t, HS_GIL_ENSURE, now);
	hs_leave(t);
	return rc;
}

static void hook_PyGILState_Release(int state)
{
	struct hs_tls *t = hs_enter();
	if (t) {
		/* PyGILState_UNLOCKED (1): Ensure took the GIL, Release gives it back */
		if (state == 1)
			hs_rec(t, gil_now(), HS_REC_GIL_RELEASED, 0, HS_GIL_RELEASE, 0, 0);
		hs_leave(t);
	}
	py.release(state);
}

static void *hook_PyEval_SaveThread(void)
{
	struct hs_tls *t = hs_enter();
	if (t) {
		hs_rec(t, gil_now(), HS_REC_GIL_RELEASED, 0, HS_GIL_SAVE, 0, 0);
		HS_CHAOS(HS_CHAOS_GIL_DROP); /* chaos.c: --chaos (before the release: the holder keeps it longer) */
		hs_leave(t);
	}
	return py.save_thread();
}

/* RestoreThread and AcquireThread take the GIL for tstate: one body. */
static void take_for(void (*real)(void *), void *tstate, unsigned which, uint64_t site)
{
	struct hs_tls *t = hs_enter();
	uint64_t now;
	if (!t) {
		real(tstate);
		return;
	}
	now = gil_now();
	HS_CHAOS(HS_CHAOS_GIL_TAKE); /* chaos.c: --chaos */
	gil_wait_begin(t, which, site, now);
	real(tstate);
	gil_wait_end(t, which, now);
	hs_leave(t);
}

static void hook_PyEval_RestoreThread(void *tstate)
{
	take_for(py.restore_thread, tstate, HS_GIL_RESTORE, RET_ADDR());
}

static void hook_PyEval_AcquireThread(void *tstate)
{
	take_for(py.acquire_thread, tstate, HS_GIL_ACQUIRE_THREAD, RET_ADDR());
}

static void hook_PyEval_ReleaseThread(void *tstate)
{
	struct hs_tls *t = hs_enter();
	if (t) {
		hs_rec(t, gil_now(), HS_REC_GIL_RELEASED, 0, HS_GIL_RELEASE_THREAD, 0, 0);
		hs_leave(t);
	}
	py.release_thread(tstate);
}

/* ---- detection ---------------------------------------------------------------- */

static void *sym(const char *name)
{
	/* RTLD_DEFAULT: the executable's or libpython's definition; heisen exports none */
	return dlsym(RTLD_DEFAULT, name);
}

/* Resolve CPython's functions; 0 when this process has no (complete) CPython. */
static int resolve(void)
{
	void *rt;
	Dl_info info;
	const ElfW(Sym) *es = NULL;

	/* no object defines it (the common case): no dlsym, whose failure mallocs */
	if (!hs_elf_may_define("Py_IsInitialized"))
		return 0;
	py.is_initialized = (int (*)(void))sym("Py_IsInitialized");
	if (!py.is_initialized)
		return 0; /* the common case outside Python: one lookup */
	py.gil_check = (int (*)(void))sym("PyGILState_Check");
	py.ensure = (int (*)(void))sym("PyGILState_Ensure");
	py.release = (void (*)(int))sym("PyGILState_Release");
	py.save_thread = (void *(*)(void))sym("PyEval_SaveThread");
	py.restore_thread = (void (*)(void *))sym("PyEval_RestoreThread");
	py.acquire_thread = (void (*)(void *))sym("PyEval_AcquireThread");
	py.release_thread = (void (*)(void *))sym("PyEval_ReleaseThread");
	py.version = (const char *(*)(void))sym("Py_GetVersion");
	if (!py.is_initialized || !py.gil_check || !py.ensure || !py.release || !py.save_thread ||
	    !py.restore_thread || !py.acquire_thread || !py.release_thread)
		return 0;
	rt = sym("_PyRuntime");
	if (rt && dladdr1(rt, &info, (void **)&es, RTLD_DL_SYMENT) && es && es->st_size) {
		hs_py_rt_lo = (uint64_t)(uintptr_t)rt;
		hs_py_rt_size = es->st_size;
	}
	gil_addr = rt ? (uint64_t)(uintptr_t)rt : (uint64_t)(uintptr_t)py.save_thread;
	return 1;
}

static void note_version(void)
{
	struct hs_header *h = hs_seg.hdr;
	const char *v = py.version ? py.version() : "";
	size_t n = 0;
	if (!h || h->python_version[0])
		return;
	while (v[n] && v[n] != ' ' && n < sizeof h->python_version - 1) {
		h->python_version[n] = v[n];
		n++;
	}
	h->python_version[n] = '\0';
}

/* HEISEN_GOT_PATCH=0: never patch a GOT (the off switch of the one risky part). */
static int got_patch_off(void)
{
	static int off = -1;
	if (off < 0) {
		off = !hs_getenv_bool("HEISEN_GOT_PATCH", 1);
	}
	return off;
}

void hs_py_init(void)
{
	static const struct hs_got_hook hooks[] = {
#define HS_HOOK(ret, name, params)
#define HS_HOOK_V(ret, name, params, version)
#define HS_HOOK_GOT(ret, name, params) {#name, (void *)hook_##name},
#include "hooks.def"
#undef HS_HOOK
#undef HS_HOOK_V
#undef HS_HOOK_GOT
	};
	int patched;

	if (!hs_seg.hdr)
		return;
	/* init_lock covers the one-time setup only: it is never held while
	   taking the loader's lock (hs_got_patch takes its own after that one) */
	hs_spin_lock(&init_lock);
	if (!__atomic_load_n(&hs_py_present, __ATOMIC_ACQUIRE)) {
		if (!resolve()) {
			hs_spin_unlock(&init_lock);
			return; /* no CPython (yet): a later dlopen may bring it */
		}
		__atomic_or_fetch(&hs_seg.hdr->python, HS_PY_SEEN, __ATOMIC_RELAXED);
		note_version();
		/* the replacements call the real functions from here on */
		__atomic_store_n(&hs_py_present, 1, __ATOMIC_RELEASE);
	}
	hs_spin_unlock(&init_lock);
	hs_py_frames_init(); /* idempotent */
	if (got_patch_off())
		return; /* GIL edges then come from PyGILState_Check and the release-time inference only */
	/* every call: objects loaded since the last one get patched too */
	patched = hs_got_patch(hooks, sizeof hooks / sizeof hooks[0]);
	if (patched > 0)
		__atomic_or_fetch(&hs_seg.hdr->python, HS_PY_GOT_PATCHED, __ATOMIC_RELAXED);
}

/*
 * Objects may have been loaded (a dlsym follows every dlopen: CPython's
 * import looks up PyInit_*, ctypes its functions): look again, cheaply —
 * only when the loader's count of added objects moved.
 */
static int count_adds(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	*(unsigned long long *)arg = info->dlpi_adds;
	return 1; /* the first object carries the counters: stop */
}

void hs_py_on_new_objects(void)
{
	static unsigned long long seen;
	unsigned long long adds = 0;
	struct hs_tls *t = &hs_tls;
	if (t->in_hook || !__atomic_load_n(&hs_recording, __ATOMIC_ACQUIRE))
		return;
	t->in_hook = 1;
	dl_iterate_phdr(count_adds, &adds);
	if (adds != __atomic_load_n(&seen, __ATOMIC_RELAXED)) {
		__atomic_store_n(&seen, adds, __ATOMIC_RELAXED);
		hs_modules_scan_loaded(); /* into the module table at their load, named in a stack or not */
		hs_py_init();
	}
	t->in_hook = 0;
}

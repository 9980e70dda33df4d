/* SPDX-License-Identifier: MIT */
/*
 * shim/init.c — start-up and the process's life cycle: resolving the real
 * functions behind the hooks, the constructor that creates the session and
 * the segment, fork (the child gets a segment of its own and keeps the locks
 * its forking thread held), exit and _exit (the state word says how the
 * process ended), and the public annotation API.  docs/design.md "Interposition".
 */
#define UNW_LOCAL_ONLY
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "heisen/heisen.h"
#include "hooks.h"
#include "inject.h"
#include "shim.h"
#include "unwind_mask.h"

#define HS_HOOK(ret, name, params) ret(*hs_real_##name) params;
#define HS_HOOK_V(ret, name, params, version) HS_HOOK(ret, name, params)
#include "hooks.def"
#undef HS_HOOK
#undef HS_HOOK_V

static void *resolve(const char *name, const char *version)
{
	void *p = version ? dlvsym(RTLD_NEXT, name, version) : NULL;
	if (!p)
		p = dlsym(RTLD_NEXT, name);
	if (!p) {
		hs_write_err("heisen: cannot resolve the real ");
		hs_write_err(name);
		hs_write_err("; aborting\n");
		abort();
	}
	return p;
}

/* The unversioned hooks' names, in hooks.def's order, and their indexes. */
static const char *const unversioned_names[] = {
#define HS_HOOK(ret, name, params) #name,
#define HS_HOOK_V(ret, name, params, version)
#include "hooks.def"
#undef HS_HOOK
#undef HS_HOOK_V
};
enum {
#define HS_HOOK(ret, name, params) UNVERSIONED_##name,
#define HS_HOOK_V(ret, name, params, version)
#include "hooks.def"
#undef HS_HOOK
#undef HS_HOOK_V
	N_UNVERSIONED
};
_Static_assert(N_UNVERSIONED <= HS_NEXT_FUNCS_MAX, "hs_elf_next_funcs takes every unversioned hook");

/*
 * Every hs_real_ pointer still NULL: the unversioned ones from the hash
 * tables (hs_elf_next_funcs: what dlsym(RTLD_NEXT) gives, at ~420
 * instructions a name instead of ~1,000; bench/README.md "Process start: no
 * symbol scans, no CPUID, fewer system calls"), each one it cannot answer and the
 * versioned ones by dlsym/dlvsym.  Aborts, saying which, when a function
 * is nowhere.
 */
void hs_resolve_all(void)
{
	void *next[N_UNVERSIONED] = {0};
	int missing = 0;
#define HS_HOOK(ret, name, params) missing |= hs_real_##name == NULL;
#define HS_HOOK_V(ret, name, params, version)
#include "hooks.def"
#undef HS_HOOK
#undef HS_HOOK_V
	if (missing)
		hs_elf_next_funcs(unversioned_names, next, N_UNVERSIONED);
#define HS_HOOK(ret, name, params)                                                       \
	if (!hs_real_##name)                                                             \
		__atomic_store_n(&hs_real_##name,                                        \
				 (ret(*) params)(next[UNVERSIONED_##name] ? next[UNVERSIONED_##name] \
									  : resolve(#name, NULL)), \
				 __ATOMIC_RELEASE);
#define HS_HOOK_V(ret, name, params, version)                                            \
	if (!hs_real_##name)                                                             \
		__atomic_store_n(&hs_real_##name, (ret(*) params)resolve(#name, version), __ATOMIC_RELEASE);
#include "hooks.def"
#undef HS_HOOK
#undef HS_HOOK_V
}

/* ---- fork ------------------------------------------------------------------ */

/*
 * A stack of the parent's segment interned into the child's.  Python frames
 * are ids into the parent's frame table, which the child does not have: they
 * are left out (the native frames keep their meaning: same mappings).
 */
static uint32_t reintern_native(const struct hs_stack *os)
{
	uint64_t pcs[HS_STACK_DEPTH];
	unsigned n = 0, depth = os->depth < HS_STACK_DEPTH ? os->depth : HS_STACK_DEPTH;
	for (unsigned i = 0; i < depth; i++)
		if (!HS_PC_IS_PYTHON(os->pc[i]))
			pcs[n++] = os->pc[i];
	return hs_stack_intern(&hs_seg, pcs, n, os->flags & ~HS_STACK_PYTHON);
}

static const enum hs_table_id inherited_arrays[] = {HS_T_STRINGS, HS_T_STACKS, HS_T_PYFRAMES, HS_T_MODULES};
static const enum hs_table_id inherited_indexes[] = {HS_T_STACK_INDEX, HS_T_SITE_INDEX, HS_T_PYFRAME_INDEX};
#define N_ARRAYS (sizeof inherited_arrays / sizeof inherited_arrays[0])
#define N_INDEXES (sizeof inherited_indexes / sizeof inherited_indexes[0])

/* Entries of table k of the parent's segment that inherit_tables copies (a full table's count runs past it). */
static uint32_t inherited_count(const struct hs_table *ft, enum hs_table_id k)
{
	uint32_t n = __atomic_load_n(&ft[k].count, __ATOMIC_ACQUIRE);
	return n > ft[k].capacity ? ft[k].capacity : n;
}

/*
 * The copy itself, through the mappings: the fallback of hs_seg_copy_ranges
 * (no copy_file_range, or the parent's file cannot be opened).  Every page
 * it reads or writes takes a page fault in the child.  The sparse ranges
 * (the hash indexes) are left out: the parent's holes cannot be told from
 * here, and reading one through the mapping would allocate it in the
 * parent's file (SIGBUS when /dev/shm is full).  The child then starts with
 * empty indexes over the parent's entries: a stack met again is interned
 * again under a new id, every id the parent handed out still means what it
 * meant.  0, or -1 when the child's segment has no room.
 */
static int copy_through_mappings(struct hs_seg *to, const struct hs_seg *from, const struct hs_seg_range *r, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		if (!r[i].sparse && hs_seg_commit(to, r[i].off, r[i].len) != 0)
			return -1;
	for (unsigned i = 0; i < n; i++)
		if (!r[i].sparse)
			memcpy((char *)to->hdr + r[i].off, (const char *)from->hdr + r[i].off, (size_t)r[i].len);
	return 0;
}

/*
 * Copy the parent's strings, stacks, Python frames and modules into the
 * child's fresh segment, id for id and offset for offset, so that every id
 * the parent handed out means the same in the child: the allocation stack
 * in a heap block's header, the first free's stack in a quarantined block,
 * the shim's caches of site stacks, the stacks of held locks.  Only the
 * used part of each array is copied; the index tables (whose slots depend
 * on their capacity) are copied whole, but only their pages that hold data
 * get store in the child (they are committed a page at a time).  The copy goes file to file
 * (hs_seg_copy_ranges): a child that execs at once never maps those pages.
 * Returns 1 when copied, 0 when the child's geometry differs from the
 * parent's (a fallback-small segment) or it has no room: then the caller
 * re-interns what it needs.  Async-signal-safe.
 */
static int inherit_tables(struct hs_seg *to, const struct hs_seg *from)
{
	struct hs_table *tt = to->hdr->tables;
	const struct hs_table *ft = from->hdr->tables;
	struct hs_seg_range r[N_ARRAYS + N_INDEXES];
	uint32_t n[N_ARRAYS];
	unsigned nr = 0;
	int indexes = 1;
	for (size_t i = 0; i < N_INDEXES; i++)
		if (tt[inherited_indexes[i]].capacity != ft[inherited_indexes[i]].capacity ||
		    tt[inherited_indexes[i]].entry_size != ft[inherited_indexes[i]].entry_size ||
		    tt[inherited_indexes[i]].offset != ft[inherited_indexes[i]].offset)
			return 0;
	for (size_t i = 0; i < N_ARRAYS; i++)
		if (tt[inherited_arrays[i]].capacity < ft[inherited_arrays[i]].capacity ||
		    tt[inherited_arrays[i]].entry_size != ft[inherited_arrays[i]].entry_size ||
		    tt[inherited_arrays[i]].offset != ft[inherited_arrays[i]].offset)
			return 0;
	for (size_t i = 0; i < N_INDEXES; i++) {
		enum hs_table_id k = inherited_indexes[i];
		r[nr++] = (struct hs_seg_range){ft[k].offset, (uint64_t)ft[k].capacity * ft[k].entry_size, 1};
	}
	for (size_t i = 0; i < N_ARRAYS; i++) {
		enum hs_table_id k = inherited_arrays[i];
		n[i] = inherited_count(ft, k);
		/* a table holding only its entry 0 ("none": stacks, Python frames) has nothing
		   to copy, and its entry 0 may be a hole in the parent (segment.c,
		   reserved_zero_lazy): copying it would give both files a page of zeros */
		if (n[i] > 1 || (n[i] == 1 && k != HS_T_STACKS && k != HS_T_PYFRAMES))
			r[nr++] = (struct hs_seg_range){ft[k].offset, (uint64_t)n[i] * ft[k].entry_size, 0};
	}
	if (hs_seg_copy_ranges(to, from, r, nr) != 0) {
		if (copy_through_mappings(to, from, r, nr) != 0)
			return 0;
		indexes = 0; /* left empty (see copy_through_mappings) */
	}
	for (size_t i = 0; indexes && i < N_INDEXES; i++) {
		enum hs_table_id k = inherited_indexes[i];
		tt[k].count = ft[k].count;
		tt[k].dropped = ft[k].dropped;
	}
	for (size_t i = 0; i < N_ARRAYS; i++) {
		enum hs_table_id k = inherited_arrays[i];
		tt[k].dropped = ft[k].dropped;
		/* the entries are in place before the count publishes them */
		__atomic_store_n(&tt[k].count, n[i], __ATOMIC_RELEASE);
	}
	return 1;
}

/*
 * The forking thread's held locks at the instant of fork(), in this thread's
 * own (private, copied-on-fork) memory: the prepare handler fills it in the
 * parent, and the child reads its copy, which no thread of the parent can
 * change any more.  Reading the parent's slot from the child instead (it is
 * a shared mapping) sees whatever the parent did since the fork: a lock
 * taken right after fork() looked held in the child (a false self-deadlock
 * when the child takes its free copy), one released right after looked free
 * (a child that really blocks on its locked copy went unexplained).  Only
 * the forking thread writes its slot's held[] (locks.c), so a plain copy in
 * the thread itself is exact.  The lock's kind and flags are copied with
 * each entry: the child re-creates the lock from them.  Where the idea comes
 * from: pthread_atfork(3)'s prepare handler, which runs in the forking
 * thread after every other prepare handler registered later (ours is
 * registered first, in the constructor), so locks those handlers take are
 * in the set, and their child handlers' releases then find them held.
 */
struct fork_held {
	uint32_t valid;                  /* 1: filled by this thread's prepare handler for this fork */
	uint32_t count;                  /* entries in held[] */
	struct hs_held held[HS_HELD_MAX];
	uint16_t kind[HS_HELD_MAX];      /* the lock's enum hs_lock_kind */
	uint16_t lflags[HS_HELD_MAX];    /* the lock's HS_LOCKF_* */
};
/* In the forking thread's area (shim.h, hs_area: copied into the child with
 * the thread's memory), not in static TLS; none when it could not be mapped. */
_Static_assert(sizeof(struct fork_held) <= HS_AREA_FORK_SIZE, "fork_held fits the area");
static inline struct fork_held *fork_held_of(void)
{
	char *a = hs_area();
	return a ? (struct fork_held *)(void *)(a + HS_AREA_FORK) : NULL;
}

/* pthread_atfork prepare: capture the forking thread's held locks (see above).
 * Async-signal-safe (plain copies from our own slot). */
static void learn_absorb(void);
static void atfork_prepare(void)
{
	struct hs_tls *t = &hs_tls;
	struct hs_thread *s;
	struct fork_held *fh;
	uint32_t n;
	/* a fork child forking before its first event (a fork that did not come
	   through our fork(): daemon(), a library's): it makes its segment first */
	hs_fork_segment_now();
	if (!t->in_hook && hs_seg.hdr && __atomic_load_n(&hs_recording, __ATOMIC_ACQUIRE)) {
		t->in_hook = 1;
		learn_absorb(); /* what earlier children learnt, for this one */
		t->in_hook = 0;
	}
	s = t->slot && t->seg_gen == __atomic_load_n(&hs_seg_gen, __ATOMIC_ACQUIRE) ? t->slot : NULL;
	/* a thread with no slot maps no area here (nothing would unmap it) */
	fh = s || t->area ? fork_held_of() : NULL;
	if (!fh)
		return;
	if (!s || !hs_seg.hdr || !__atomic_load_n(&hs_recording, __ATOMIC_ACQUIRE)) {
		fh->valid = 0;
		fh->count = 0;
		return;
	}
	n = s->held_count < HS_HELD_MAX ? s->held_count : HS_HELD_MAX;
	if (n == 0) {
		/* nothing held: stores only where the value changes.  After a fork
		   the parent's pages are copy-on-write, and nothing else writes this
		   page of the area: a shell forking with no lock held took a fault
		   here at every command (bench/README.md "Process start: no symbol
		   scans, no CPUID, fewer system calls") */
		if (fh->count)
			fh->count = 0;
		if (!fh->valid)
			fh->valid = 1;
		return;
	}
	fh->valid = 0;
	fh->count = 0;
	for (uint32_t i = 0; i < n; i++) {
		const struct hs_held *h = &s->held[i];
		fh->held[i] = *h;
		if (h->lock < hs_seg.hdr->tables[HS_T_LOCKS].capacity) {
			fh->kind[i] = hs_seg.locks[h->lock].kind;
			fh->lflags[i] = __atomic_load_n(&hs_seg.locks[h->lock].flags, __ATOMIC_RELAXED);
		} else {
			fh->kind[i] = 0;
			fh->lflags[i] = 0;
		}
	}
	fh->count = n;
	fh->valid = 1;
}

/* ---- the fork child's segment, made when first needed --------------------- */

/*
 * A fork child does not make its segment in the fork handler: most children
 * of a shell, make or a process pool exec (or exit) after a few calls, and
 * the segment, the copy of the parent's tables, the inherited fds and the
 * start sample were a third of what a fork + exec cost under heisen.  The
 * handler notes the fork (atfork_child) and turns recording off; the child's
 * first recorded event makes the segment (hs_fork_segment): any hook through
 * hs_enter (locks, fds, Python, semaphores, fork), a heap finding, a large
 * allocation, the (HS_FORK_QUIET_OPS + 1)th heap operation or close of an
 * open fd, a heap operation at a site whose stack the child cannot name by
 * its parent's ids (heap.c pending_stack: the heap's caches, then the
 * parent's site index, hs_fork_site), a close that fails, exit and _exit,
 * a crash or a terminating signal.  Heap operations before it keep exact
 * stacks and the child's tid; closes of the fds it had from its parent are
 * not in its fd table (hs_fork_close).  Until then nothing of the child's is in
 * the session; what survives a SIGKILL then is its parent's fork record (the
 * child's pid) and the reference it holds (the session is kept).  An exec
 * before any event leaves no segment for the fork child at all: the image's
 * own is the process's first (its parent is the forking process).  With
 * fault injection or chaos on, the segment is made at the fork as before
 * (their decisions need the recording state).  docs/design.md "Processes".
 */
HS_HOT_BSS int hs_fork_pending;
HS_HOT_BSS static struct hs_seg fork_parent;    /* the parent's segment, still mapped (read only from here on) */
HS_HOT_BSS static pid_t fork_pid;               /* this child's pid, noted at the fork */
HS_HOT_BSS static pid_t fork_tid;               /* the thread that forked (it holds fork_held) */
HS_HOT_BSS static int fork_oslot;               /* that thread had a slot of the parent's segment */
HS_HOT_BSS static uint64_t fork_mono_ns;
HS_HOT_BSS static uint64_t fork_real_ns; /* when the fork happened */
HS_HOT_BSS static uint32_t fork_quiet_ops;      /* [atomic] heap operations and closes while pending */
HS_HOT_BSS static int fork_joined;              /* hs_session_fork_child counted this child (here, not in
					segment.c: a page the fork handler writes anyway) */

/* ---- sites a fork child learnt, for its parent's next children (shim.h) ---- */

#define LEARN_MAX 64
struct learn_page {
	uint32_t next;                /* [atomic] entries claimed */
	uint32_t pad;
	struct learn_entry {
		uint32_t state;       /* [atomic] LEARN_* */
		uint32_t pad;
		uint64_t key;
		struct hs_stack st;
	} e[LEARN_MAX];
};
enum { LEARN_FREE = 0, LEARN_WRITING = 1, LEARN_READY = 2, LEARN_TAKEN = 3 };
HS_HOT_BSS void *hs_learn_post;       /* the parent's page (a fork child; written by every fork child: with the other fork state) */
HS_HOT_BSS static struct learn_page *learn_own;  /* this process's page, for its children (made at its first fork) */
HS_HOT_BSS static uint32_t learn_done;           /* entries of learn_own before this are taken */
HS_HOT_BSS static uint32_t learn_posted;         /* [atomic] sites this child posted */

void hs_fork_learn_post(uint64_t key, const struct hs_stack *st)
{
	struct learn_page *p = hs_learn_post;
	uint32_t i;
	if (!p || __atomic_add_fetch(&learn_posted, 1, __ATOMIC_RELAXED) > HS_LEARN_PER_CHILD ||
	    (i = __atomic_fetch_add(&p->next, 1, __ATOMIC_ACQ_REL)) >= LEARN_MAX)
		return;
	__atomic_store_n(&p->e[i].state, LEARN_WRITING, __ATOMIC_RELAXED);
	p->e[i].key = key;
	memcpy(&p->e[i].st, st, sizeof *st);
	__atomic_store_n(&p->e[i].state, LEARN_READY, __ATOMIC_RELEASE);
}

/* The parent, before a fork: intern what its children posted (a child killed
 * while writing leaves its entry WRITING: skipped for good). */
static void learn_absorb(void)
{
	HS_HOT_BSS static int lock; /* two threads forking at once: one absorbs */
	struct learn_page *p = learn_own;
	uint32_t n;
	if (!hs_spin_trylock(&lock))
		return;
	if (!p) {
		p = hs_sys.mmap(NULL, sizeof *p, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		learn_own = p == MAP_FAILED ? NULL : p;
		hs_spin_unlock(&lock);
		return;
	}
	n = __atomic_load_n(&p->next, __ATOMIC_ACQUIRE);
	if (n > LEARN_MAX)
		n = LEARN_MAX;
	for (uint32_t i = learn_done; i < n; i++)
		if (__atomic_load_n(&p->e[i].state, __ATOMIC_ACQUIRE) == LEARN_READY) {
			hs_heap_site_learnt(p->e[i].key, hs_stack_site_learn(p->e[i].key, &p->e[i].st));
			__atomic_store_n(&p->e[i].state, LEARN_TAKEN, __ATOMIC_RELEASE);
		}
	while (learn_done < n && __atomic_load_n(&p->e[learn_done].state, __ATOMIC_ACQUIRE) == LEARN_TAKEN)
		learn_done++;
	hs_spin_unlock(&lock);
}

uint32_t hs_fork_site(uint64_t site)
{
	return __atomic_load_n(&hs_fork_pending, __ATOMIC_ACQUIRE) == 1 && fork_parent.hdr
		       ? hs_site_peek(&fork_parent, site)
		       : 0;
}

/*
 * Make the child's segment (hs_segment_create(1)), starting with its
 * parent's strings, stacks, Python frames and modules (inherit_tables); the
 * forking thread attaches to it carrying the locks it held in the parent at
 * the instant of fork() (fork_held: they are held in the child too), and
 * the parent's mapping is dropped so the child can never write into it.
 * Only async-signal-safe work.
 */
static void make_child_segment(struct hs_tls *t)
{
	struct hs_seg old = fork_parent;
	int inherited, joined = fork_joined;
	struct fork_held *fh = NULL;

	fork_joined = 0;
	memset(&fork_parent, 0, sizeof fork_parent);
	memset(&hs_seg, 0, sizeof hs_seg);
	hs_seg.hdr = old.hdr; /* hs_segment_create copies the parent's identity from here */
	if (hs_segment_create(joined ? 2 : 1) != 0) {
		memset(&hs_seg, 0, sizeof hs_seg);
		hs_seg_unbind(&old);
		t->slot = NULL;
		return;
	}
	/* the process started at the fork, not at its first event */
	hs_seg.hdr->start_mono_ns = fork_mono_ns;
	hs_seg.hdr->start_real_ns = fork_real_ns;
	inherited = inherit_tables(&hs_seg, &old);
	/* without the parent's tables: the same objects are mapped, copy the module table */
	for (uint32_t i = 0; !inherited && i < old.hdr->tables[HS_T_MODULES].count &&
			     i < hs_seg.hdr->tables[HS_T_MODULES].capacity;
	     i++) {
		struct hs_module m = old.modules[i];
		if (hs_seg_commit_entry(&hs_seg, HS_T_MODULES, i) != 0)
			break;
		m.path = hs_str_add(&hs_seg, old.strings + old.modules[i].path, old.modules[i].path_len);
		hs_seg.modules[i] = m;
		__atomic_store_n(&hs_seg.hdr->tables[HS_T_MODULES].count, i + 1, __ATOMIC_RELEASE);
	}
	hs_seg_inherited = inherited;
	t->slot = NULL;
	t->dead = 0;
	/* the held locks are the forking thread's: another thread making the segment adopts none */
	if (t->tid == fork_tid)
		fh = fork_held_of();
	if (hs_thread_attach(t) == 0 && fork_oslot && fh && fh->valid) {
		uint64_t now = hs_now();
		for (uint32_t i = 0; i < fh->count; i++) {
			struct hs_held h = fh->held[i];
			/* a Python lock created in the parent is not looked at in the child
			 * (semaphores.c, sem_tag_magic): its release would never be seen */
			if (fh->kind[i] == HS_LOCK_SEMAPHORE)
				continue;
			if (!inherited)
				h.stack = h.stack && h.stack < old.hdr->tables[HS_T_STACKS].capacity
						  ? reintern_native(&old.stacks[h.stack])
						  : 0;
			h.lock = hs_lock_id(&hs_seg, h.addr, fh->kind[i], fh->lflags[i] & ~HS_LOCKF_DEAD,
					    h.stack, t->tid, now);
			hs_locks_adopt_held(t->slot, &h);
		}
	}
	if (fh)
		fh->valid = 0;
	hs_seg_unbind(&old);
	__atomic_store_n(&hs_recording, 1, __ATOMIC_RELEASE);
	/* what the other fork handlers did with the segment, now that there is one */
	if (!inherited)
		hs_guard_after_fork_child();
	/* it takes the quarantine total from the calling thread's own: right in the
	   forking thread; another thread calls it only when the site cache must go */
	if (t->tid == fork_tid || !inherited)
		hs_heap_after_fork_child();
	hs_snapshot_after_fork_child();
	hs_fds_after_fork_child(); /* before the sample: it counts the fds from the table */
	hs_mem_sample(t->slot ? t : NULL, hs_now(), HS_MEMW_START, 0);
}

HS_FORK_TEXT int hs_fork_segment(int heap_op)
{
	struct hs_tls *t = &hs_tls;
	int expect = 1, was;
	if (__atomic_load_n(&hs_fork_pending, __ATOMIC_ACQUIRE) != 1)
		return -1;
	if (heap_op && __atomic_add_fetch(&fork_quiet_ops, 1, __ATOMIC_RELAXED) <= HS_FORK_QUIET_OPS)
		return -1;
	/* a vfork child of this process runs on its memory: never it */
	if (hs_sys.getpid() != fork_pid)
		return -1;
	if (!__atomic_compare_exchange_n(&hs_fork_pending, &expect, 2, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
		return -1;
	was = t->in_hook;
	t->in_hook = 1;
	hs_session_pending_drop(fork_pid);
	make_child_segment(t);
	__atomic_store_n(&hs_fork_pending, 0, __ATOMIC_RELEASE);
	t->in_hook = was;
	return __atomic_load_n(&hs_recording, __ATOMIC_ACQUIRE) ? 0 : -1;
}

HS_FORK_TEXT int hs_fork_close(int fd, int *rc)
{
	if (hs_tls.in_hook || __atomic_load_n(&hs_fork_pending, __ATOMIC_ACQUIRE) != 1 ||
	    __atomic_add_fetch(&fork_quiet_ops, 1, __ATOMIC_RELAXED) > HS_FORK_QUIET_OPS ||
	    hs_sys.fcntl(fd, F_GETFD, 0) < 0)
		return 0;
	*rc = HS_REAL(close)(fd);
	return 1;
}

/*
 * The fork child's handler: only async-signal-safe work.  Notes the fork
 * and leaves the segment to the child's first recorded event (above), or
 * makes it now when the session's pending table is full or fault injection
 * or chaos is on.
 */
HS_FORK_TEXT static void atfork_child(void)
{
	struct hs_tls *t = &hs_tls;
	int was = t->in_hook, full;
	int (*clk)(clockid_t, struct timespec *);
	struct timespec ts;

	if (!__atomic_load_n(&hs_recording, __ATOMIC_ACQUIRE))
		return;
	t->in_hook = 1;
	__atomic_store_n(&hs_recording, 0, __ATOMIC_RELEASE);
	hs_stacks_after_fork_child(); /* before anything here could learn a distance */
	fork_oslot = t->slot && t->seg_gen == hs_seg_gen;
	fork_parent = hs_seg;
	memset(&hs_seg, 0, sizeof hs_seg);
	/* the parent's slots are stale from here on; ids the parent handed out stay
	   valid until the segment is made (hs_seg_inherited is set again then) */
	__atomic_add_fetch(&hs_seg_gen, 1, __ATOMIC_RELEASE);
	hs_seg_inherited = 1;
	t->slot = NULL;
	t->vfork_pid = 0; /* a vfork note of the parent's (fd_vfork.S) is not this process's */
	fork_pid = hs_sys.getpid();
	t->tid = (int32_t)fork_pid; /* the child's one thread (the heap notes it before the segment is made) */
	fork_tid = t->tid;
	/* the vDSO's function straight: libc's wrapper and the PLT entry are two
	   more pages of code for every fork child to fault in before its exec */
	clk = hs_vdso_clock_gettime ? hs_vdso_clock_gettime : clock_gettime;
	clk(CLOCK_MONOTONIC, &ts);
	fork_mono_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	clk(CLOCK_REALTIME, &ts);
	fork_real_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	__atomic_store_n(&fork_quiet_ops, 0, __ATOMIC_RELAXED);
	hs_learn_post = learn_own; /* the parent's page; this child makes its own at its first fork */
	learn_own = NULL;
	learn_done = 0;
	__atomic_store_n(&learn_posted, 0, __ATOMIC_RELAXED);
	hs_proc_after_fork();
	fork_joined = 0;
	__atomic_store_n(&hs_fork_pending, 1, __ATOMIC_RELEASE);
	full = hs_session_fork_child(fork_pid) != 0;
	fork_joined = 1;
	if (full || hs_inject_on || hs_chaos_on)
		hs_fork_segment(0);
	t->in_hook = was;
}

HS_FORK_TEXT HS_EXPORT pid_t fork(void)
{
	pid_t pid;
	hs_fork_segment_now(); /* a fork is an event: the child's parent must be in the tree */
	hs_session_fork_prepare();
	pid = HS_REAL(fork)();
	if (pid != 0)
		hs_session_fork_parent(pid < 0);
	if (pid > 0) {
		struct hs_tls *t = hs_enter();
		if (t) {
			hs_rec(t, hs_now(), HS_REC_FORK, 0, (uint64_t)pid, 0, 0);
			hs_leave(t);
		}
	}
	return pid;
}

/* ---- exit ------------------------------------------------------------------- */

/*
 * The process ends by exit or _exit: its last memory sample, the OOM-kill
 * counter again, then the state word.  Not in a vfork child (posix_spawn,
 * CPython's subprocess): it shares the parent's memory and calls _exit
 * when its exec fails, and the segment is the parent's, which lives on.
 */
static void record_exit(int status)
{
	struct hs_tls *t;
	hs_fork_segment_now(); /* every fork child that ends by exit is in the tree with its status */
	if (!hs_seg.hdr || hs_seg.hdr->pid != (int32_t)hs_sys.getpid())
		return;
	t = hs_enter();
	if (t) {
		hs_rec(t, hs_now(), HS_REC_EXIT, 0, (uint64_t)(status & 0xff), 0, 0);
		hs_proc_end(t, HS_MEMW_EXIT);
		hs_leave(t);
	} else if (!hs_tls.in_hook) {
		hs_tls.in_hook = 1;
		hs_proc_end(NULL, HS_MEMW_EXIT);
		hs_tls.in_hook = 0;
	}
	hs_segment_end(HS_STATE_EXITED, status & 0xff);
	hs_session_leave();
}

static void on_exit_handler(int status, void *arg)
{
	(void)arg;
	record_exit(status);
}

/* _exit and _Exit run no exit handlers: the fds' check at the end is made
 * here (os._exit, multiprocessing's fork children), before the record. */
HS_EXPORT void _exit(int status)
{
	hs_fork_segment_now();
	hs_fds_verify_open();
	record_exit(status);
	HS_REAL(_exit)(status);
	__builtin_unreachable();
}

HS_EXPORT void _Exit(int status)
{
	hs_fork_segment_now();
	hs_fds_verify_open();
	record_exit(status);
	HS_REAL(_Exit)(status);
	__builtin_unreachable();
}

/* ---- start-up ----------------------------------------------------------------- */

/* The vDSO's clock_gettime for hs_now_coarse (shim.h) and the fd records
 * (fd_core.c fd_clock_read), set once by hs_init; NULL: libc's. */
int (*hs_vdso_clock_gettime)(clockid_t, struct timespec *);

/*
 * The address of the vDSO's function `name`, or NULL (no vDSO: valgrind,
 * or no such symbol).  The vDSO is found through the auxiliary vector
 * (getauxval(AT_SYSINFO_EHDR): a read of libc's saved copy, no lock), not
 * through dlopen(RTLD_NOLOAD), which takes the loader's lock: the first fd
 * hook can run inside another library's constructor, under that lock in
 * another thread.  Its dynamic symbols are found through its dynamic
 * section (DT_SYMTAB, DT_STRTAB, and DT_HASH's chain count), which lie in
 * its first page, the page ld.so read at start; the section headers, which
 * the kernel maps too, are the way when there is no DT_HASH (they are at
 * the image's end: on this kernel a second page, a page fault every image
 * paid for nothing, bench/README.md "Process start: page-table pages").
 * The load bias is the image's address less its first PT_LOAD's p_vaddr.
 * Called once, at start (hs_init).
 */
static void *vdso_symbol(const char *name)
{
	uintptr_t base = (uintptr_t)getauxval(AT_SYSINFO_EHDR), bias = 0;
	const ElfW(Ehdr) *eh = (const ElfW(Ehdr) *)base;
	const ElfW(Phdr) *ph;
	const ElfW(Shdr) *sh;
	int loaded = 0;
	if (!base || memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
	    eh->e_shentsize != sizeof(ElfW(Shdr)) || eh->e_phentsize != sizeof(ElfW(Phdr)))
		return NULL;
	ph = (const ElfW(Phdr) *)(base + eh->e_phoff);
	for (unsigned i = 0; i < eh->e_phnum && !loaded; i++)
		if (ph[i].p_type == PT_LOAD) {
			bias = base - (uintptr_t)ph[i].p_vaddr;
			loaded = 1;
		}
	if (!loaded)
		return NULL;
	for (unsigned i = 0; i < eh->e_phnum; i++) {
		const ElfW(Dyn) *d;
		const ElfW(Sym) *sym = NULL;
		const ElfW(Word) *hash = NULL;
		const char *str = NULL;
		if (ph[i].p_type != PT_DYNAMIC)
			continue;
		for (d = (const ElfW(Dyn) *)(bias + (uintptr_t)ph[i].p_vaddr); d->d_tag != DT_NULL; d++)
			if (d->d_tag == DT_SYMTAB)
				sym = (const ElfW(Sym) *)(bias + (uintptr_t)d->d_un.d_ptr);
			else if (d->d_tag == DT_STRTAB)
				str = (const char *)(bias + (uintptr_t)d->d_un.d_ptr);
			else if (d->d_tag == DT_HASH)
				hash = (const ElfW(Word) *)(bias + (uintptr_t)d->d_un.d_ptr);
		if (!sym || !str || !hash)
			break; /* the section headers below */
		for (ElfW(Word) k = 0; k < hash[1]; k++) /* nchain: the number of symbols */
			if (ELF64_ST_TYPE(sym[k].st_info) == STT_FUNC && sym[k].st_shndx != SHN_UNDEF &&
			    strcmp(str + sym[k].st_name, name) == 0)
				return (void *)(bias + (uintptr_t)sym[k].st_value);
		return NULL;
	}
	sh = (const ElfW(Shdr) *)(base + eh->e_shoff);
	for (unsigned i = 0; i < eh->e_shnum; i++) {
		const ElfW(Sym) *sym;
		const char *str;
		size_t n;
		if (sh[i].sh_type != SHT_DYNSYM || sh[i].sh_entsize != sizeof(ElfW(Sym)) || sh[i].sh_link >= eh->e_shnum)
			continue;
		sym = (const ElfW(Sym) *)(base + sh[i].sh_offset);
		str = (const char *)(base + sh[sh[i].sh_link].sh_offset);
		n = sh[i].sh_size / sizeof(ElfW(Sym));
		for (size_t k = 0; k < n; k++)
			if (ELF64_ST_TYPE(sym[k].st_info) == STT_FUNC && sym[k].st_shndx != SHN_UNDEF &&
			    strcmp(str + sym[k].st_name, name) == 0)
				return (void *)(bias + (uintptr_t)sym[k].st_value);
	}
	return NULL;
}


/* glibc calls an ELF constructor with the program's argc, argv and envp
 * (elf/dl-init.c call_init): the segment's argv comes from there. */
__attribute__((constructor(101))) static void hs_init(int argc, char **argv, char **envp)
{
	struct hs_tls *t = &hs_tls;
	int off;
	(void)envp;
	hs_start_argc = argc;
	hs_start_argv = argc > 0 ? argv : NULL;
	t->in_hook = 1;
	hs_warnings_init();
	hs_resolve_all();
	off = hs_getenv_bool("HEISEN_DISABLE", 0);
	if (off)
		goto out;
	hs_vdso_clock_gettime = (int (*)(clockid_t, struct timespec *))vdso_symbol("__vdso_clock_gettime");
	hs_proc_init();
	if (hs_session_setup() != 0 || hs_segment_create(0) != 0)
		goto out;
	hs_modules_scan();
	/* libunwind is loaded, its caching policy set and its masks pointed at
	   unwind_mask.c at the first unwind (unwind_load.c), not here */
	hs_threads_init();
	pthread_atfork(atfork_prepare, NULL, atfork_child);
	on_exit(on_exit_handler, NULL);
	hs_signals_install();
	hs_term_signals_install();
	hs_snapshot_install();
	__atomic_store_n(&hs_recording, 1, __ATOMIC_RELEASE);
	hs_heap_init(); /* needs hs_recording; its fork handlers run after atfork_child */
	hs_guard_init(); /* likewise */
	hs_fds_init();  /* likewise */
	hs_sems_init(); /* HEISEN_PY_LOCKS */
	hs_py_init();
	hs_faults_init(); /* HEISEN_FAIL, HEISEN_FAIL_AFTER, HEISEN_HEAP_LIMIT (after the heap's init) */
	hs_chaos_init();  /* HEISEN_CHAOS */
	hs_cpus_init();   /* HEISEN_CPUS */
	t->in_hook = 0;
	/* attach the main thread now, so it is in the table from the start */
	if ((t = hs_enter()) != NULL) {
		hs_mem_sample(t, hs_now(), HS_MEMW_START, 0);
		hs_leave(t);
	}
	return;
out:
	t->in_hook = 0;
}

/* ---- the annotation API (heisen/heisen.h) ------------------------------------- */

HS_EXPORT int heisen_name_lock(const void *lock, const char *name)
{
	struct hs_tls *t = hs_enter();
	uint32_t id, off;
	int rc = -1;
	if (!t)
		return -1;
	id = hs_lock_id(&hs_seg, (uint64_t)(uintptr_t)lock, 0, 0, 0, t->tid, hs_now());
	if (id) {
		off = hs_str_add(&hs_seg, name, strnlen(name, 63));
		if (off) {
			__atomic_store_n(&hs_seg.locks[id].name, off, __ATOMIC_RELEASE);
			rc = 0;
		}
	}
	hs_leave(t);
	return rc;
}

HS_EXPORT unsigned heisen_abi_version(void)
{
	return HS_ABI_VERSION;
}

/* SPDX-License-Identifier: MIT */
/*
 * shim/shim.h — internal interfaces of libheisen.so.
 *
 * The shim is split by concern, one file each (docs/design.md "Layout"; the
 * README's "Layout" follows them from the entry points):
 *
 *   start-up and life cycle
 *     init.c             constructor, real-function resolution, fork, exit,
 *                        the annotation API
 *     env.c              the one parser of every HEISEN_* setting
 *     hooks.def          every interposed function, listed once (X-macro)
 *     hooks.h            the real functions' pointers and HS_REAL
 *     sysops.c           the shim's own raw system calls, behind a table;
 *                        the one directory walker (hs_dir_each)
 *     dl_trampoline.S    exported dlsym/dlvsym: calls through a library handle
 *     elf_got_surgery.c  GOT patching (the GIL entry points of a static python)
 *   the flight recorder
 *     segment.c          session directory, segment file, modules, strings,
 *                        end states
 *     threads.c          thread slots and their rings
 *     stacks.c           unwinding, lock-acquisition chains, the stack table
 *     quiet.c            going quiet on a state the shim cannot be in
 *                        (HS_HDR_SUSPECT; HS_ASSERT and its predicates below)
 *   locks
 *     locks.c            pthread mutex, rwlock, spin lock and cond-wait hooks
 *     lockgraph.c        lock ids and classes, the lock-order graph, cycles
 *     semaphores.c       POSIX semaphores: CPython's threading locks
 *     platform_glibc.c   glibc's lock types (recursive, rwlock preference)
 *     python.c           the GIL as a lock
 *   Python
 *     python_frames.c    Python frames inside native stacks, 3.8 to 3.13
 *     python_layouts.h   CPython's struct offsets, one row per minor version
 *   heap
 *     heap_hooks.c       malloc and friends, interposed (thin: one core entry each)
 *     heap_core.h        the interface between the heap's hooks and its core
 *     heap_core.c        chunk headers, quarantine, call-site stacks, findings
 *     guarded.c          sampled guard-page allocations (GWP-ASan)
 *     memhooks.c         large allocations and mmap make a memory sample due
 *   file descriptors
 *     fd_hooks.c         the fd interceptors: every call that creates or
 *                        closes an fd, each the real call and one core entry
 *     fd_core.h          the interface between the fd interceptors and core
 *     fd_core.c          fd table, generations, event ring, findings,
 *                        inherited fds, the exit check
 *     fd_vfork.S         exported vfork: nothing recorded in a vfork child
 *   crashes and signals
 *     signals.c          crash handler, terminating signals, hang snapshots
 *     safe_read.S        hs_safe_read16: a read that cannot crash the handler
 *   processes
 *     proc.c             the environment a process saw, memory samples,
 *                        privilege drops (the setuid family)
 *     cpus.c             the CPU count heisen-run --cpus makes it see
 *   reproducing on demand
 *     inject.h           what the hooks call for faults and chaos
 *     faults.c           fault injection, deterministic by seed
 *     chaos.c            chaos schedules, deterministic by seed
 *
 * The design is docs/design.md; the on-shm format is
 * include/heisen/format.h.
 *
 * Rules every file keeps (docs/design.md "Rules of the code"):
 *   - nothing here allocates with malloc, uses stdio or takes a blocking lock
 *     on a hook's path; the one internal lock (the graph lock) is a spin lock
 *     taken only on slow paths and never while calling out;
 *   - a hook does its work between hs_enter() and hs_leave(), which is the
 *     per-thread reentrancy guard: whatever the shim itself calls is never
 *     recorded;
 *   - the fast path is inline here; slow paths live out of line.
 */
#ifndef HEISEN_SHIM_H
#define HEISEN_SHIM_H

#include <stdint.h>
#include <stddef.h>
#include <time.h>

#include "heisen/format.h"

#define HS_EXPORT __attribute__((visibility("default")))
#define HS_HIDDEN __attribute__((visibility("hidden")))
/*
 * A zero-initialised variable every image or fork child writes (start-up,
 * the fork handlers, the exit): libheisen.so's link (shim/hot_bss.ld) puts
 * all of them together before the rest of .bss, on the page ld.so already
 * writes when it zeroes the tail of .data.  Spread over .bss among the big
 * tables they touched a page each: a zero-fill fault in every image, a
 * copy-on-write fault in every fork child and in its parent (bench/README.md
 * "Process start: fewer pages, fewer lookups").  Zero-initialised only.
 */
#define HS_HOT_BSS __attribute__((section(".bss.hs_hot")))
/* A large zero-initialised buffer of which every image writes the first
 * bytes (the session directory's path): right after the HS_HOT_BSS
 * variables, so those bytes share their page. */
#define HS_HOT_BSS_TAIL __attribute__((section(".bss.hs_hot_tail")))
/* A small variable a forking process writes at every fork (before it, so a
 * copy-on-write fault in the parent each time when it sits on a page of its
 * own): first of all, on the page the fork state (init.c) is on. */
#define HS_HOT_BSS_HEAD __attribute__((section(".bss.hs_hot_head")))
/* The code a fork child runs between fork and exec (the fork handlers, the
 * hooks a shell's child calls): together, at the start of .text (the linker
 * puts .text.hot.* there), so the child faults in one or two windows of
 * libheisen's code instead of one per file (file pages are not copied by
 * fork: each 64 KiB window of code a child runs is a page fault; bench/README.md
 * "The fork child's heap"). */
#define HS_FORK_TEXT __attribute__((section(".text.hot.hs_fork")))
#define HS_LIKELY(x) __builtin_expect(!!(x), 1)
#define HS_UNLIKELY(x) __builtin_expect(!!(x), 0)
/*
 * The functions of a fast path that runs between two stretches of the
 * program's own work (a Python `with lock:`: the semaphore hooks and the
 * steps they call): grouped by the compiler into .text.hot, next to each
 * other, so the path touches few code pages and cache lines the program's
 * work has evicted (a front-end cost: on CPython 3.13 the same
 * instructions spread over the library cost ~20 ns more a pair,
 * bench/README.md "Python locks within the lock budget").
 */
#define HS_HOT __attribute__((hot, aligned(64))) /* each starting a cache line: ~3-6 ns less on 3.12/3.13 */

struct hs_seg;

/*
 * The recorder goes quiet (quiet.c): s's header gets HS_HDR_SUSPECT,
 * hs_recording turns 0 (every hook calls straight through from then on)
 * and one line "heisen: the recorder found its own state inconsistent
 * (WHAT) and went quiet ..." goes to stderr, once per process.  For states
 * that cannot happen when the shim is right and nobody wrote into its
 * memory.  Async-signal-safe: atomics and write(2), no malloc, no locks.
 * s may be NULL (no segment to mark).  Returns 0.
 */
int hs_go_quiet(struct hs_seg *s, const char *what);

/*
 * An invariant of the recorder, checked in every build (the predicates
 * below are written to be cheap, as SQLite's ALWAYS/NEVER): the value of
 * e as 0 or 1; when e is false the recorder goes quiet (hs_go_quiet, with
 * "EXPR at FILE:LINE") and the caller leaves without touching the state
 * the invariant guards.  Never aborts the user's program.  Usable in hooks
 * and signal handlers.
 */
int hs_assert_fail(struct hs_seg *s, const char *expr, const char *file, int line) __attribute__((cold));
#define HS_ASSERT(e) HS_ASSERT_IN(&hs_seg, e)
/* The same for code that works on a segment s it was given (the lock-order
 * graph, the stack table: unit tests give them private ones). */
#define HS_ASSERT_IN(s, e) (HS_LIKELY(e) ? 1 : hs_assert_fail((s), #e, __FILE__, __LINE__))

/* ---- predicates written to be asserted ------------------------------------ */

/* The segment header still says what it is: nobody wrote over its magic or
 * its ABI version (checked where a thread attaches and where the process
 * ends: cold paths). */
static inline int hs_header_intact(const struct hs_header *h)
{
	return h && __builtin_memcmp(h->magic, HS_MAGIC, HS_MAGIC_LEN) == 0 && h->abi_version == HS_ABI_VERSION;
}

/* A held-lock stack of count entries, entry i of it about to be removed:
 * within bounds (HS_HELD_MAX; locks held beyond it are counted in
 * held_overflow and never pushed). */
static inline int hs_held_index_ok(uint32_t count, int i)
{
	/* a negative i is a large unsigned one: two compares in all */
	return (uint32_t)i < count && count <= HS_HELD_MAX;
}

/* A ring's head only grows: the record about to be overwritten at head pos
 * was written one lap before (its seq is at most pos; 0 when never
 * written or invalidated).  A larger seq means the head went back. */
static inline int hs_ring_head_ok(uint64_t old_seq, uint64_t pos)
{
	return old_seq <= pos;
}

/* Can an open-addressed index of capacity idx_cap that holds at most
 * keys_bound keys be full?  Indexes get twice the capacity of their table
 * (format.h hs_index_capacity), so one whose keys are bounded by the table
 * never fills: a probe that ran out there means the index was overwritten. */
static inline int hs_index_may_fill(uint32_t idx_cap, uint64_t keys_bound)
{
	return keys_bound >= idx_cap;
}

/*
 * A mapped segment and the typed bases of its tables.  One per process
 * (hs_seg); unit tests make their own.  All pointers point into the mapping.
 */
struct hs_seg {
	struct hs_header *hdr;
	size_t size;
	struct hs_module *modules;
	char *strings;
	struct hs_stack *stacks;
	struct hs_index_slot *stack_index;
	struct hs_index_slot *site_index;
	struct hs_lock *locks;
	struct hs_index_slot *lock_index;
	struct hs_edge *edges;
	struct hs_index_slot *edge_index;
	struct hs_thread *threads;
	struct hs_finding *findings;
	char *rings;
	struct hs_pyframe *pyframes;
	struct hs_index_slot *pyframe_index;
	/* writer-private state, not in shared memory */
	uint32_t *visit;              /* lock id -> DFS stamp (2 per lock: in-mode recursive-read or not) */
	uint32_t visit_stamp;
	int graph_lock;               /* [atomic] spin lock over locks/edges insertion and the cycle search */
};

/* Per-thread state: initial-exec TLS, so access is one instruction. */
struct hs_tls {
	int in_hook;                  /* reentrancy guard */
	int dead;                     /* the thread's exit destructor ran: record nothing more */
	uint32_t seg_gen;             /* hs_seg_gen when attached: a fork makes it stale */
	uint32_t no_slot_gen;         /* hs_seg_gen at which attaching failed: don't retry on every call */
	int32_t tid;
	struct hs_thread *slot;       /* NULL: not attached */
	struct hs_ring_header *ring;
	struct hs_record *recs;
	uint64_t ring_mask;
	void *altstack;               /* sigaltstack for crash handling */
	/* a crash seen but not yet fatal (see signals.c) */
	int pending_sig;
	int pending_code;
	uint64_t pending_addr;
	uint32_t pending_stack;
	/* file descriptors (fd_core.c) */
	int32_t vfork_pid;            /* set by the vfork trampoline to the parent's pid: a vfork child shares this memory */
	int32_t fd_last;              /* the number of this thread's last close, -1 = none (close-all sweeps) */
	uint64_t fd_last_site;        /* and its call site */
	uint64_t fd_call_cfa;         /* the fd hook's CFA (fd_core.h HS_FD_SITE) */
	uint64_t fd_clock_tsc;        /* fd_core.c fd_clock: the vDSO data's sequence count (else the TSC) at the last coarse reading */
	uint64_t fd_clock_ns;         /* and that reading */
	int *fd_errno;                /* the thread's errno (__errno_location), NULL until its first fd record */
	/* the per-thread area (threads.c, hs_area) */
	char *area;                   /* NULL: not mapped yet, or released at thread exit */
	int area_failed;              /* mmap failed once: the hooks go on without it */
	/* the thread's stack bounds (hs_stack_room): lo == hi == 1 when unknown */
	uintptr_t stack_lo, stack_hi;
};

extern __thread struct hs_tls hs_tls __attribute__((tls_model("initial-exec")));

/*
 * The per-thread area: the hooks' big per-thread buffers (held-lock chains,
 * stack caches, Python frame caches), mapped by heisen itself on a thread's
 * first need instead of living in static TLS.  glibc carves a thread's static
 * TLS out of the stack the program asked for (allocate_stack: a 16 KiB
 * PTHREAD_STACK_MIN thread keeps what is left), so every byte of
 * initial-exec TLS in a preloaded library is a byte less of the program's
 * stack; libheisen.so keeps only hs_tls and a few hot scalars there.
 * HS_AREA_SIZE bytes of address space (pages are backed when first
 * touched), zero-filled, mapped with mmap (async-signal-safe, no
 * malloc) and unmapped when heisen sees the thread exit (hs_thread_detach).
 * Each module owns one fixed range [HS_AREA_x, HS_AREA_x + HS_AREA_x_SIZE)
 * and checks that its state fits (_Static_assert).  hs_area() returns NULL
 * when the mmap failed or after the thread's exit: the caller then goes on
 * without (no chain recorded, the site's cached stack instead), never
 * crashes.  Async-signal-safe.
 */
#define HS_AREA_LOCKS        0u      /* locks.c: held_chains */
#define HS_AREA_LOCKS_SIZE   7680u
#define HS_AREA_STACKS       7680u   /* stacks.c: call_chain */
#define HS_AREA_STACKS_SIZE  1408u
#define HS_AREA_FDS          9088u   /* fd_core.c: stack_cache, fd_chain */
#define HS_AREA_FDS_SIZE     1920u
#define HS_AREA_PY           11008u  /* python_frames.c: py_tc */
#define HS_AREA_PY_SIZE      1280u
#define HS_AREA_FORK         12288u  /* init.c: fork_held */
#define HS_AREA_FORK_SIZE    1280u
#define HS_AREA_FDS2         13568u  /* fd_core.c: the second fd chain and which chain was used last */
#define HS_AREA_FDS2_SIZE    896u
#define HS_AREA_ORDER        14464u  /* handover.c: order_self */
#define HS_AREA_ORDER_SIZE   640u
#define HS_AREA_FDS3         15104u  /* fd_core.c: the frames above a thread's last fd call sites (fd_fast) */
#define HS_AREA_FDS3_SIZE    1280u
#define HS_AREA_FD_SCRATCH   16384u  /* fd_core.c: a finding's event buffers (touched only by a finding) */
#define HS_AREA_FD_SCRATCH_SIZE 9216u
#define HS_AREA_CHAINMEMO    25600u  /* stacks.c: chain_memo, the thread's recent lazy chains; site_tc in its last KiB */
#define HS_AREA_CHAINMEMO_SIZE 15360u
#define HS_AREA_HEAPMEMO     40960u  /* heap_core.c: the call-site memo (site_memo) */
#define HS_AREA_HEAPMEMO_SIZE 3072u
#define HS_AREA_HEAPWRAP     44032u  /* heap_core.c: operator new's callers met last (wrap_memo) */
#define HS_AREA_HEAPWRAP_SIZE 640u
#define HS_AREA_LOCKSITES    44672u  /* lockpath.h: the lock and GIL-take call sites' stacks (lock_site_stack) */
#define HS_AREA_LOCKSITES_SIZE 1024u
#define HS_AREA_SIZE         45696u  /* pages never touched are never backed */
char *hs_area_map(void);
void hs_area_release(struct hs_tls *t);
static inline char *hs_area(void)
{
	char *a = hs_tls.area;
	return __builtin_expect(a != NULL, 1) ? a : hs_area_map();
}

/*
 * Bytes of the calling thread's stack left below sp (its lowest usable
 * address from pthread_getattr_np, read once per thread); UINT64_MAX when
 * the bounds are unknown or sp is not on the thread's stack (a signal's
 * alternate stack, a coroutine's).  The unwinding paths (stacks.c) refuse to
 * unwind with less than HS_UNWIND_ROOM left and record "stack unknown"
 * instead of overflowing a small thread stack (a PTHREAD_STACK_MIN thread).
 */
uint64_t hs_stack_room(uintptr_t sp);
/* 1 when p lies in the calling thread's own stack (the same bounds). */
int hs_on_own_stack(const void *p);
#define HS_UNWIND_ROOM 10240u
extern struct hs_seg hs_seg;          /* the process's segment */
extern int hs_recording;              /* [atomic] 1 once the segment is ready */
extern uint32_t hs_seg_gen;           /* [atomic] bumped when the process gets a new segment (fork) */
extern int hs_seg_inherited;          /* the current segment started with its forking parent's strings,
					 stacks, Python frames and modules, id for id (init.c
					 inherit_tables): ids the parent handed out are valid in it */
extern int hs_quiet;
/*
 * [atomic] 1 in a fork child whose segment is not made yet (2 while it is
 * being made): hs_recording is 0 meanwhile, and the first hook that records
 * makes it (hs_fork_segment, init.c).  docs/design.md "Processes".
 */
extern int hs_fork_pending;
/*
 * Make the deferred segment of this fork child now.  heap_op: called for a
 * heap operation (hs_enter_heap), which goes on without the segment while
 * the child has made at most HS_FORK_QUIET_OPS such quiet operations (a
 * shell's child allocates and frees a block or two and closes its script's
 * fd between fork and exec; hs_fork_close): its blocks still get exact
 * stacks (heap.c pending_stack), only no ring record.  Returns 0 when the
 * process records afterwards, -1 otherwise (not a pending fork child, a
 * vfork child sharing its memory, being made by another caller, or it
 * failed).  Async-signal-safe.
 */
#define HS_FORK_QUIET_OPS 16
int hs_fork_segment(int heap_op);

/*
 * close(fd) from the close hook of a fork child whose segment is not made
 * yet: 1 and *rc (close's result) when fd was open and the child is within
 * its HS_FORK_QUIET_OPS quiet operations: closed without making the segment
 * (fd came from the parent; the segment, made later, never lists it).  0:
 * the hook goes on as usual (it makes the segment and records the close; a
 * close of a number not open is always recorded).
 */
int hs_fork_close(int fd, int *rc);

/*
 * A site's stack in a fork child's parent's segment, before the child's own
 * is made (heap.c): the parent's id, valid in the child's segment, which
 * starts as a copy of the parent's tables; 0 when the parent has none.
 */
uint32_t hs_fork_site(uint64_t site);

/*
 * Sites a fork child learnt, for its parent's next children (init.c, "the
 * fork child's segment, made when first needed"): a shell's child meets
 * sites its parent never does (the command's path search, between fork and
 * exec), and each child would make its segment for them.  The parent maps
 * a shared page at its first fork; a child posts there (at most
 * HS_LEARN_PER_CHILD sites, native stacks only) each site stack it learns
 * (stacks.c, hs_fork_learn_post), and the parent interns them under the
 * same keys at its next fork (hs_stack_site_learn), so the next children
 * find them in its site index (hs_fork_site).  hs_learn_post: the parent's
 * page in a fork child, else NULL.  Async-signal-safe.
 */
#define HS_LEARN_PER_CHILD 8
extern void *hs_learn_post;
void hs_fork_learn_post(uint64_t key, const struct hs_stack *st);
/* stacks.c: key's id in s's site index without committing any page (0: none);
 * and the parent's side, st interned into hs_seg and cached under key. */
uint32_t hs_site_peek(const struct hs_seg *s, uint64_t key);
uint32_t hs_stack_site_learn(uint64_t key, const struct hs_stack *st);
/* heap_core.c: that id into the heap checker's site cache too (its children look there first). */
void hs_heap_site_learnt(uint64_t key, uint32_t id);
static inline void hs_fork_segment_now(void)
{
	if (HS_UNLIKELY(__atomic_load_n(&hs_fork_pending, __ATOMIC_ACQUIRE) == 1))
		hs_fork_segment(0);
}

/* ---- small shared helpers ------------------------------------------------- */

/* A 64-bit mixer (murmur3's finalizer) for the open-addressed indexes. */
static inline uint64_t hs_mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	x ^= x >> 33;
	return x;
}

/*
 * The shim's only lock: a spin lock for slow paths (a new lock or edge, a
 * new module).  Never held while unwinding or calling out, and never taken
 * by a thread already inside the shim, so it cannot deadlock with itself.
 */
static inline void hs_spin_lock(int *l)
{
	/* acquire: what the previous holder wrote is visible to us */
	while (__atomic_exchange_n(l, 1, __ATOMIC_ACQUIRE))
		while (__atomic_load_n(l, __ATOMIC_RELAXED))
			__builtin_ia32_pause();
}

/* Take l if it is free; 1 on success.  For signal handlers, which never wait. */
static inline int hs_spin_trylock(int *l)
{
	return !__atomic_exchange_n(l, 1, __ATOMIC_ACQUIRE);
}

static inline void hs_spin_unlock(int *l)
{
	/* release: our writes are visible before the lock is seen free */
	__atomic_store_n(l, 0, __ATOMIC_RELEASE);
}

/*
 * A seqlock entry that any thread may refill (a cache): take it for writing
 * if no one is writing it (seq even, and we win the CAS), else skip — a
 * cache miss costs nothing.  *q receives the odd sequence to pass to
 * hs_seq_write_end.  Readers: load seq (acquire), copy, acquire fence, and
 * accept only an even seq that has not changed.
 */
static inline int hs_seq_write_try(uint32_t *seq, uint32_t *q)
{
	uint32_t v = __atomic_load_n(seq, __ATOMIC_RELAXED);
	if ((v & 1) || !__atomic_compare_exchange_n(seq, &v, v + 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
		return 0;
	/* the odd seq is visible before the fields change */
	__atomic_thread_fence(__ATOMIC_RELEASE);
	*q = v + 1;
	return 1;
}

static inline void hs_seq_write_end(uint32_t *seq, uint32_t q)
{
	/* the fields are visible before the even seq */
	__atomic_store_n(seq, q + 1, __ATOMIC_RELEASE);
}

/* ---- time ---------------------------------------------------------------- */

/* CLOCK_MONOTONIC in ns: the precise clock (20-60 ns a read under a
 * paravirtual clock source). */
static inline uint64_t hs_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The vDSO's clock_gettime, found at start (init.c), or NULL (no vDSO:
 * valgrind hides it): hs_now_coarse calls it directly, without libc's
 * wrapper and the loader data it reads (cold in a hook between two calls
 * of the program's own work). */
extern int (*hs_vdso_clock_gettime)(clockid_t, struct timespec *);

/*
 * Where the kernel keeps the coarse clocks' time (clock.c): the sequence
 * count of its vDSO data (the clock mode follows it) and basetime
 * [CLOCK_MONOTONIC_COARSE] (seconds, nanoseconds), found once per process
 * by hs_vclock_find; state [atomic] 0 not looked for yet, 1 found (seq and
 * mono set before it), -1 none (hs_now_coarse calls the vDSO).
 */
struct hs_vclock {
	const uint32_t *seq;
	const uint64_t *mono;
	int state;
};
extern struct hs_vclock hs_vclock HS_HIDDEN;
/* Look for the place once (clock.c): sets hs_vclock.state to 1 or -1; a
 * no-op once it is set.  Async-signal-safe (raw system calls, no
 * allocation, no lock); reads /proc/self/maps, 20-90 us. */
void hs_vclock_find(void) HS_HIDDEN;
#define HS_VCLOCK_MODE_TIMENS 0x7fffffffu /* the clock mode of a time namespace's page: not the time */

/* hs_now_coarse's other cases, out of line (clock.c), in ns: a tick being
 * written, a time namespace's page, the place not looked for yet (a
 * thread's first 65,536 reads) or not found: the vDSO's call, or libc's. */
uint64_t hs_now_coarse_slow(void) HS_HIDDEN;

/*
 * CLOCK_MONOTONIC_COARSE in ns: the time of the kernel's last timekeeping
 * update, read from the vDSO's data without the clock source: inline
 * where clock.c found the data's place (about 1 ns), else the vDSO's
 * clock_gettime (about 3 ns).  Never ahead of hs_now() read at the same
 * moment, but behind it by as long as the last update is ago: 0 to one tick (4 ms at HZ=250) on a machine that
 * keeps its ticks, more where ticks are skipped (a virtual CPU descheduled
 * by its host): 3 to 9 ms measured on a 2-vCPU VM, and the value stood
 * still for up to 20 ms under load (bench/README.md "Python locks within
 * the lock budget").  So it says when an event happened to within ~10 ms,
 * enough for a time judged in seconds (hang timeouts, waits) or an event
 * that did not wait; it cannot say whether a wait took less than that
 * (compare two coarse reads for "no update in between", never a coarse
 * read with a precise one; docs/design.md "Cost").
 */
/*
 * The coarse clock read from the kernel's data (hs_vclock found: state > 0),
 * the vDSO's own read inline: the two words between two equal even
 * sequence counts.  1 with *ns (CLOCK_MONOTONIC_COARSE, ns) and *seq_out
 * (the count it was read under); 0 while a tick is being written or the
 * page is a time namespace's (then hs_now_coarse_slow's call).
 */
static inline __attribute__((always_inline)) int hs_vclock_read(uint64_t *ns, uint32_t *seq_out)
{
	const uint32_t *seq = hs_vclock.seq;
	const uint64_t *mono = hs_vclock.mono;
	uint32_t s = __atomic_load_n(&seq[0], __ATOMIC_ACQUIRE);
	uint32_t mode = __atomic_load_n(&seq[1], __ATOMIC_RELAXED);
	uint64_t sec = __atomic_load_n(&mono[0], __ATOMIC_RELAXED);
	uint64_t nsec = __atomic_load_n(&mono[1], __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	if (HS_LIKELY(!(s & 1)) && HS_LIKELY(mode != HS_VCLOCK_MODE_TIMENS) &&
	    HS_LIKELY(__atomic_load_n(&seq[0], __ATOMIC_RELAXED) == s)) {
		*ns = sec * 1000000000ull + nsec;
		*seq_out = s;
		return 1;
	}
	return 0;
}

static inline __attribute__((always_inline)) uint64_t hs_now_coarse(void)
{
	uint64_t ns;
	uint32_t s;
	if (HS_LIKELY(__atomic_load_n(&hs_vclock.state, __ATOMIC_ACQUIRE) > 0) && HS_LIKELY(hs_vclock_read(&ns, &s)))
		return ns;
	return hs_now_coarse_slow();
}

/* ---- threads and the reentrancy guard (threads.c) ------------------------ */

/*
 * Attach the calling thread to a slot of hs_seg (or re-attach after fork).
 * Returns 0, or -1 when no slot is free (the thread then goes unrecorded and
 * the threads table's dropped counter grows).  Slow path; called from
 * hs_enter() with the guard held.
 */
int hs_thread_attach(struct hs_tls *t);

/* The thread-exit destructor's work: mark the slot exited.  Idempotent. */
void hs_thread_detach(struct hs_tls *t);

/* Create the thread-exit key.  Init only. */
int hs_threads_init(void);

/*
 * 1 when the calling thread is the child of a vfork() (fd_vfork.S's trampoline
 * noted the parent's pid in t->vfork_pid) that has not exec'd yet: it runs
 * in its parent's memory, on its parent's thread-local state, so it must
 * record nothing.  In the parent, once the child has gone, it clears the
 * note and returns 0.  One getpid() system call, only while a note is set.
 */
int hs_vfork_child(struct hs_tls *t);

/*
 * Enter a hook.  Returns the thread's state with the guard taken, or NULL
 * when the hook must only call through: the shim is not recording, the
 * thread is already inside the shim, it is exiting, it has no slot, or it
 * is a vfork child (hs_vfork_child).
 */
static inline struct hs_tls *hs_enter_op(int heap_op)
{
	struct hs_tls *t = &hs_tls;
	if (HS_UNLIKELY(!__atomic_load_n(&hs_recording, __ATOMIC_ACQUIRE))) {
		/* a fork child's first recorded event makes its segment (shim.h hs_fork_pending) */
		if (!__atomic_load_n(&hs_fork_pending, __ATOMIC_ACQUIRE) || t->in_hook || t->dead ||
		    hs_fork_segment(heap_op) != 0)
			return NULL;
	}
	/* two 4-byte loads, not one 8-byte load of both: the last hs_leave stored in_hook
	 * alone, and a load wider than a store still in the store buffer is not forwarded
	 * from it but waits for it to reach the cache (about 2-3 ns a mutex pair,
	 * bench/README.md "The uncontended mutex pair in registers") */
	if (__atomic_load_n(&t->in_hook, __ATOMIC_RELAXED) || __atomic_load_n(&t->dead, __ATOMIC_RELAXED))
		return NULL;
	if (HS_UNLIKELY(t->vfork_pid != 0) && hs_vfork_child(t))
		return NULL;
	t->in_hook = 1;
	if (HS_UNLIKELY(t->slot == NULL || t->seg_gen != __atomic_load_n(&hs_seg_gen, __ATOMIC_ACQUIRE))) {
		if (t->slot == NULL && t->no_slot_gen == __atomic_load_n(&hs_seg_gen, __ATOMIC_ACQUIRE)) {
			t->in_hook = 0;
			return NULL;
		}
		if (hs_thread_attach(t) != 0) {
			t->in_hook = 0;
			return NULL;
		}
	}
	return t;
}

static inline struct hs_tls *hs_enter(void)
{
	return hs_enter_op(0);
}

/* hs_enter for a heap operation: a fork child's first HS_FORK_QUIET_OPS of
 * them do not make its segment (hs_fork_segment). */
static inline struct hs_tls *hs_enter_heap(void)
{
	return hs_enter_op(1);
}

static inline void hs_leave(struct hs_tls *t)
{
	t->in_hook = 0;
}

/* ---- memory samples (proc.c) --------------------------------------------- */

#define HS_MEM_INTERVAL_NS 50000000ull   /* a recorded event samples memory when the last sample is older */
#define HS_MEM_MIN_GAP_NS 1000000ull     /* allocation-driven samples: at most one per millisecond */
#define HS_MEM_BIG (64u * 1024)          /* allocations of this size and more count toward a sample */
#define HS_FDS_INTERVAL_NS 1000000000ull /* open descriptors are counted at most once a second */

/* When the next time-driven sample is due (CLOCK_MONOTONIC ns). [atomic] */
extern uint64_t hs_mem_next_ns;

/*
 * Take a memory sample now (why: enum hs_mem_why; size: the allocation that
 * made it due, 0 if none): the resident set from /proc/self/statm and the
 * peak from getrusage into the header, the open descriptors when due, and an
 * HS_REC_MEMORY record in t's ring when t is attached (t may be NULL).  One
 * sampler at a time: a concurrent or reentrant call returns at once.
 * Async-signal-safe (raw system calls only); never allocates.
 */
void hs_mem_sample(struct hs_tls *t, uint64_t now, unsigned why, uint64_t size);

/* Count a large allocation of n bytes; 1 (with *why) when a sample is due.
 * now may come from CLOCK_MONOTONIC_COARSE; the minimum gap between
 * allocation-driven samples (HS_MEM_MIN_GAP_NS) is still judged on
 * CLOCK_MONOTONIC, the clock of the samples.  Lock-free. */
int hs_mem_due(uint64_t n, uint64_t now, unsigned *why);

/*
 * Append one record to the thread's ring (flight recorder).  Never blocks,
 * never fails; overwrites the oldest record when the ring is full.  The
 * publication protocol is the one in format.h (struct hs_record).  A record
 * also samples memory when the last sample is older than HS_MEM_INTERVAL_NS.
 */
static inline void hs_rec(struct hs_tls *t, uint64_t now, uint32_t type, uint32_t stack, uint64_t a, uint64_t b,
			  uint64_t c)
{
	struct hs_ring_header *rh = t->ring;
	uint64_t pos = __atomic_load_n(&rh->head, __ATOMIC_RELAXED);
	struct hs_record *r = &t->recs[pos & t->ring_mask];
	/* once a lap (slot 0, whose line is written below anyway): a head that went back
	   finds a newer record there; the other records pay one test of the index */
	if (HS_UNLIKELY((pos & t->ring_mask) == 0) &&
	    !HS_ASSERT(hs_ring_head_ok(__atomic_load_n(&r->seq, __ATOMIC_RELAXED), pos)))
		return;
	__atomic_store_n(&r->seq, 0, __ATOMIC_RELAXED);
	/* orders the invalidation above before the payload stores below */
	__atomic_thread_fence(__ATOMIC_RELEASE);
	r->ts_ns = now;
	r->type = type;
	r->stack = stack;
	r->a = a;
	/* b on its own, 64 bits (not merged with a into one vector store): a release folded
	 * into this record next reads a and b back (hs_rec_released), and a load of half a
	 * 16-byte store still in the store buffer is not forwarded but waits for it */
	__atomic_store_n(&r->b, b, __ATOMIC_RELAXED);
	r->c = c;
	/* publishes the payload: a reader that sees seq == pos + 1 sees it all */
	__atomic_store_n(&r->seq, pos + 1, __ATOMIC_RELEASE);
	__atomic_store_n(&rh->head, pos + 1, __ATOMIC_RELEASE);
	/* relaxed: a schedule, ordered with nothing */
	if (HS_UNLIKELY(now >= __atomic_load_n(&hs_mem_next_ns, __ATOMIC_RELAXED)))
		hs_mem_sample(t, now, HS_MEMW_TIME, 0);
}

/*
 * The ring record of a successful release of lock id at addr, at now
 * (locks.c lock_now's clock): folded into the thread's newest record when that is
 * this lock's plain acquisition (no record of this thread since, the same
 * lock, released at most HS_REC_FOLD_MAX_NS after it) -- the release time
 * stored in its b's high half by one aligned 64-bit store, its seq
 * untouched, so a concurrent reader copies either form whole (format.h
 * HS_REC_FOLD_SHIFT; docs/design.md "Rings") -- else an
 * HS_REC_LOCK_RELEASED record of its own.  Single writer (this thread);
 * never blocks; does the memory sample hs_rec would have done.
 */
static inline __attribute__((always_inline)) void hs_rec_released(struct hs_tls *t, uint64_t now, uint64_t addr,
								    uint32_t id)
{
	uint64_t pos = __atomic_load_n(&t->ring->head, __ATOMIC_RELAXED);
	struct hs_record *r = &t->recs[(pos - 1) & t->ring_mask];
	/* The record at head - 1 is the last this thread wrote (the ring's only writer), whole,
	 * or a slot never written (pos 0: type 0); no signal handler writes one between this
	 * check and the store (handlers skip their ring record when they interrupt a hook:
	 * signals.c take_snapshot, term_handler).  r->b == id: a plain acquisition of this
	 * lock (a folded one has b's high half set).  One branch for the three fields, one
	 * unsigned compare for 0 <= now - ts_ns <= HS_REC_FOLD_MAX_NS. */
	if (HS_LIKELY(((r->a ^ addr) | (r->b ^ id) | (r->type ^ HS_REC_LOCK_ACQUIRED)) == 0) &&
	    HS_LIKELY(now - r->ts_ns <= HS_REC_FOLD_MAX_NS)) {
		/* relaxed: one store, nothing else of the record changes (the seq stays pos) */
		__atomic_store_n(&r->b, (uint64_t)id | (now - r->ts_ns + 1) << HS_REC_FOLD_SHIFT, __ATOMIC_RELAXED);
		if (HS_UNLIKELY(now >= __atomic_load_n(&hs_mem_next_ns, __ATOMIC_RELAXED)))
			hs_mem_sample(t, now, HS_MEMW_TIME, 0);
		return;
	}
	hs_rec(t, now, HS_REC_LOCK_RELEASED, 0, addr, id, 0);
}

/* Seqlock over a thread slot's lock state (format.h, struct hs_thread). */
static inline void hs_lockstate_begin(struct hs_thread *th)
{
	uint64_t s = __atomic_load_n(&th->lock_seq, __ATOMIC_RELAXED);
	__atomic_store_n(&th->lock_seq, s + 1, __ATOMIC_RELAXED);
	/* the odd sequence is visible before any of the changes that follow */
	__atomic_thread_fence(__ATOMIC_RELEASE);
}

static inline void hs_lockstate_end(struct hs_thread *th)
{
	uint64_t s = __atomic_load_n(&th->lock_seq, __ATOMIC_RELAXED);
	/* the changes are visible before the even sequence */
	__atomic_store_n(&th->lock_seq, s + 1, __ATOMIC_RELEASE);
}

/* ---- system calls (sysops.c) --------------------------------------------- */

#include <signal.h>
#include <sys/types.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysinfo.h>
#include <sys/utsname.h>

/*
 * Every system call the shim makes for itself goes through this table (as
 * SQLite's os_unix.c does), for two reasons: the defaults are raw syscalls,
 * so they never re-enter the shim's own interposed symbols (open, close…),
 * and unit tests can swap an entry to drive an error path (ENOSPC).  Each
 * returns what the libc call of the same name returns, with errno set.
 */
struct hs_sysops {
	int (*open)(const char *path, int flags, int mode);
	int (*close)(int fd);
	int (*fallocate)(int fd, off_t off, off_t len);
	int (*ftruncate)(int fd, off_t len);
	ssize_t (*pwrite)(int fd, const void *buf, size_t n, off_t off);
	ssize_t (*read)(int fd, void *buf, size_t n);
	void *(*mmap)(void *addr, size_t len, int prot, int flags, int fd, off_t off);
	int (*munmap)(void *addr, size_t len);
	int (*mkdir)(const char *path, int mode);
	int (*lstat)(const char *path, struct stat *st);
	int (*unlink)(const char *path);
	ssize_t (*readlink)(const char *path, char *buf, size_t n);
	int (*linkat)(const char *from, const char *to, int flags); /* a segment's name, given last */
	/* the environment and the memory samples (proc.c) */
	ssize_t (*getdents64)(int fd, void *buf, size_t n);
	int (*getrusage)(int who, struct rusage *ru);
	int (*sched_getaffinity)(size_t size, void *mask);  /* of this process; returns the mask's bytes */
	int (*uname)(struct utsname *u);
	int (*sysinfo)(struct sysinfo *si);
	int (*statfs)(const char *path, struct statfs *st);
	int (*getrlimit)(int resource, struct rlimit *rl);  /* prlimit64 of this process */
	/* sparse segments: MADV_POPULATE_WRITE gives a range of the segment backing store, or fails */
	int (*madvise)(void *addr, size_t len, int advice);
	/* a fork child's inherited tables: file to file, no page faults (segment.c hs_seg_copy_ranges) */
	ssize_t (*copy_file_range)(int in, off_t *in_off, int out, off_t *out_off, size_t n);
	/* who we are: raw, so a vfork child or a fork child before glibc's cache is reset answers true */
	pid_t (*getpid)(void);
	pid_t (*gettid)(void);
	pid_t (*getppid)(void);
	uid_t (*getuid)(void);
	uid_t (*geteuid)(void);
	/* signals to one thread: the crash re-raise and the snapshot of other threads (signals.c) */
	int (*tgkill)(pid_t pid, pid_t tid, int sig);
	int (*tgsigqueueinfo)(pid_t pid, pid_t tid, int sig, siginfo_t *si);
	int (*nanosleep)(const struct timespec *ts);
	/* guard pages (guarded.c) and GOT patching (elf_got_surgery.c) */
	int (*mprotect)(void *addr, size_t len, int prot);
	/* reading this process's own memory without faulting (fd_hooks.c, python_frames.c) */
	ssize_t (*read_self)(void *dst, const void *src, size_t n);
	/* the session directory's access check (proc.c): faccessat2 with AT_EACCESS, else faccessat */
	int (*access_dir)(const char *path, int mode);
	/* the inherited-fd scan (fd_core.c) */
	int (*fcntl)(int fd, int cmd, long arg);
	ssize_t (*readlinkat)(int dfd, const char *path, char *buf, size_t n);
	/* sessions and segments (segment.c): the warnings file, the session
	 * directory's walk and removal, a segment's header read and its extents */
	int (*openat)(int dfd, const char *path, int flags, int mode);
	ssize_t (*write)(int fd, const void *buf, size_t n);
	ssize_t (*pread)(int fd, void *buf, size_t n, off_t off);
	off_t (*lseek)(int fd, off_t off, int whence); /* SEEK_DATA / SEEK_HOLE too */
	int (*fstatat)(int dfd, const char *path, struct stat *st, int flags);
	int (*unlinkat)(int dfd, const char *path, int flags);
	int (*rename)(const char *from, const char *to);
};
extern struct hs_sysops hs_sys;

/*
 * The shim's one directory walker (sysops.c): every entry of the directory
 * open on dfd, from its current offset, read with hs_sys.getdents64 into a
 * HS_DIR_BUF-byte buffer on the walker's stack — no opendir, no malloc, no
 * stdio, no lock: async-signal-safe, usable in a crash handler and between
 * fork and exec (glibc's readdir over getdents64, without its malloc'd DIR).
 * fn(arg, name, type) is called for each entry, "." and ".." included
 * (type is the entry's d_type, DT_UNKNOWN when the file system does not
 * say); a nonzero return from fn ends the walk.  Returns 0 at the end of
 * the directory, 1 when fn ended it, -1 with errno when getdents64 failed
 * or returned a malformed record (EIO): the entries before the failure
 * were delivered, the rest are not, and each caller says what it makes of
 * a partial walk.  dfd stays open and its offset where the walk left it.
 */
#define HS_DIR_BUF 1024
typedef int (*hs_dir_fn)(void *arg, const char *name, unsigned type);
int hs_dir_each(int dfd, hs_dir_fn fn, void *arg);

/* Read up to cap-1 bytes of a small file (procfs, sysfs, cgroupfs) into buf,
 * NUL-terminated, through hs_sys.  Returns the bytes read, or -1 when it
 * cannot be opened.  A short read below 4096 bytes is taken as the end of
 * the file (those file systems fill a read up to a page).  Async-signal-safe. */
ssize_t hs_read_small(const char *path, char *buf, size_t cap);

/* ---- segment (segment.c) ------------------------------------------------- */

/*
 * Point s's table bases into the mapping at hdr (size bytes), whose tables[]
 * are already laid out.  Allocates the writer-private visit array with mmap.
 * Returns 0 or -1 (errno from mmap).
 */
int hs_seg_bind(struct hs_seg *s, struct hs_header *hdr, size_t size);

/*
 * Create this process's segment in the session directory and make it
 * hs_seg.  `forked` is 0 for an image, 1 in a fork child, 2 in a fork child
 * hs_session_fork_child already counted in session.refs (only async-signal-safe
 * calls are made in a fork child).  Returns 0, or -1 with a warning on stderr (unless quiet)
 * after falling back as far as it could; on -1 the shim records nothing.
 */
int hs_segment_create(int forked);

/* Load the session directory from the environment, creating it (and the
 * default under /dev/shm) as needed, exporting HEISEN_DIR.  Init only. */
int hs_session_setup(void);

/*
 * The session's reference count (format.h struct hs_session_refs), for a
 * session the shim made in the default place; no-ops otherwise.
 * hs_session_fork_prepare counts the child before fork(), and
 * hs_session_fork_parent(failed) gives that back when fork failed.
 * hs_session_leave, at exit after hs_segment_end: a clean end gives this
 * image's reference back and the last one removes the session.
 * Async-signal-safe (raw system calls).
 */
void hs_session_fork_prepare(void);
void hs_session_fork_parent(int failed);
void hs_session_leave(void);

/*
 * A fork child whose segment is deferred (init.c, "the fork child's segment,
 * made when first needed"): hs_session_fork_child takes the child's share of
 * the session at the fork itself (the reference the parent counted, or one
 * of its own after a fork that did not come through our fork()) and, in a
 * session with a reference count, notes pid in its pending table so that
 * the image an exec makes of this pid gives that reference back
 * (format.h struct hs_session_refs).  Returns 0, or -1 when the table is
 * full: then the child makes its segment at once.  hs_session_pending_drop:
 * the child made its segment after all (it keeps the reference).
 * Async-signal-safe (atomics on the mapped session.refs).
 */
int hs_session_fork_child(pid_t pid);
void hs_session_pending_drop(pid_t pid);

/* Unmap a segment bound with hs_seg_bind (the fork child drops the parent's). */
void hs_seg_unbind(struct hs_seg *s);

/* Record the end of this image: state word and end time.  Idempotent: the
 * first call wins.  Also after the recorder went quiet (quiet.c), for the
 * process's own segment only.  Async-signal-safe. */
void hs_segment_end(unsigned state, int64_t value);

/*
 * Give bytes [off, off + len) of segment s backing store before their first
 * use (the segment is sparse, HS_HDR_SPARSE).  0 when they have it (a bit
 * test once a 16 KiB chunk is committed); -1 when the session directory is
 * full: the caller counts its table as full (dropped++), the header gets
 * HS_HDR_OUT_OF_SPACE and stderr one warning.  s must be the current
 * segment (hs_seg).  Async-signal-safe, lock-free.
 */
int hs_seg_commit(struct hs_seg *s, uint64_t off, uint64_t len);
/* 1 when [off, off + len) of s has backing store (never allocates). */
int hs_seg_committed(const struct hs_seg *s, uint64_t off, uint64_t len);
/* hs_seg_commit for entry i of table t. */
int hs_seg_commit_entry(struct hs_seg *s, enum hs_table_id t, uint64_t i);

/* segment.c's commit map (see hs_seg_commit): bit c set when chunk c (1 <<
 * hs_commit_shift bytes) of hs_seg has backing store (every bit of the
 * segment's words when the whole segment was allocated at creation:
 * hs_commit_lazy 0). */
extern uint64_t hs_commit_map[];
extern unsigned hs_commit_shift;
extern int hs_commit_lazy;

/*
 * Make the len bytes at p (inside s = hs_seg, within one chunk: an index
 * slot) safe to touch: 1 when they have backing store, now or already; 0
 * when the directory is full (hs_seg_commit's warning given): the caller
 * then takes the slot as not there (a lookup misses, an insert is
 * dropped).  The hash indexes of stacks, sites and Python frames get
 * their store a page at a time at the first touch of a slot (those of
 * locks and edges whole, at the first lock: lockgraph.c), readers
 * included (a read of a hole through the shared mapping would allocate the
 * page anyway, and raise SIGBUS when /dev/shm is full); a 512 KiB
 * reservation at every start was most of what a process start cost
 * (bench/README.md).  The committed case is a load and a bit test.
 */
int hs_seg_ready_slow(struct hs_seg *s, uint64_t off, size_t len) __attribute__((cold, noinline));
static inline int hs_seg_ready(struct hs_seg *s, const void *p, size_t len)
{
	uint64_t off = (uint64_t)((const char *)p - (const char *)s->hdr), c = off >> hs_commit_shift;
	if (HS_LIKELY((__atomic_load_n(&hs_commit_map[c >> 6], __ATOMIC_ACQUIRE) >> (c & 63)) & 1))
		return 1;
	return hs_seg_ready_slow(s, off, len);
}

/*
 * hs_seg_ready for slot i of an index, the probe'th of a probe sequence
 * (i, i + 1, ... wrapping to 0): only the first slot of the sequence, slot
 * 0 and each slot that begins a page are asked, the others lie on a page
 * already asked in this sequence (slots are 16 bytes in 64-byte-aligned
 * tables: none straddles a page).  A test and a branch per probe.
 */
static inline int hs_index_slot_ready(struct hs_seg *s, const struct hs_index_slot *slot, uint32_t i, uint32_t probe)
{
	if (HS_LIKELY(probe != 0 && i != 0 && ((uintptr_t)slot & 4095u) != 0))
		return 1;
	return hs_seg_ready(s, slot, sizeof *slot);
}

/* A byte range of a segment (hs_seg_copy_ranges).  sparse: only the parts
 * holding data in the source get store in the destination (a hash index,
 * committed a page at a time: hs_seg_ready); else the whole range does. */
struct hs_seg_range {
	uint64_t off, len;
	int sparse;
};

/*
 * Copy ranges r[0..n) of segment `from` (the forking parent's, still
 * mapped) to the same offsets of `to` (the fork child's fresh segment,
 * hs_seg), through their files with copy_file_range: the kernel copies page
 * cache to page cache, so neither mapping takes a page fault (a fork child
 * has none of its parent's shared-mapping page tables: every page it read
 * through the mapping would fault, and so would every page it wrote).  The
 * destination gets backing store first (fallocate: a full directory is
 * ENOSPC, never a SIGBUS).  Returns 0, or -1 with errno when a file cannot
 * be opened, is not the mapped segment, or a copy falls short; the caller
 * then copies through the mappings (what was copied is the same data).
 * Async-signal-safe (raw system calls through hs_sys).
 */
int hs_seg_copy_ranges(struct hs_seg *to, const struct hs_seg *from, const struct hs_seg_range *r, unsigned n);

/* Append s to the strings table; returns its offset, 0 when full. Lock-free. */
uint32_t hs_str_add(struct hs_seg *s, const char *str, size_t len);

/* Scan every loaded object (dl_iterate_phdr) into the module table.  Init
 * only: not async-signal-safe (takes the loader lock). */
void hs_modules_scan(void);

/* The same after the start, when the loader's count of added objects moved
 * (python.c hs_py_on_new_objects, at the program's dlsym): the objects
 * loaded since (an extension module and its libraries) are appended with
 * HS_MOD_DLOPEN, so the table lists every object the process loaded, not
 * only those a recorded stack passed through (what `heisen-dump diff`
 * compares: docs/design.md "Tables").  Not async-signal-safe. */
void hs_modules_scan_loaded(void);

/*
 * Add the object containing pc to the module table if it is new, using
 * glibc's lock-free _dl_find_object (no loader lock), so an object loaded
 * by dlopen is recorded the first time one of its PCs is in a stack, even
 * from a crash handler.  may_wait = 0 in signal handlers: give up rather
 * than wait for the module lock.  Returns 0, or -1 when pc is in no object.
 */
int hs_module_note_pc(uint64_t pc, int may_wait);

/* "<session directory>/name" into out (cap bytes); -1 when there is no
 * session directory yet or it does not fit.  Raw string work, no malloc. */
int hs_session_file(char *out, size_t cap, const char *name);

/*
 * Learnt frame distances shared by the session's processes (unwind_share.c,
 * the table <session>/.frames; docs/design.md "Stacks").  hs_frames_get: the
 * CFA - SP distance another process (or this one) learnt for return
 * address pc into *off (stacks.c's codes: 8-byte units, 0 the outermost
 * frame, 0xffff doubt); 1 when found and checked, 0 otherwise.  hs_frames_put: publish
 * a distance this process learnt from a real unwind (a different one
 * already there turns the entry to doubt).  hs_frames_mapped: 1 when the
 * table is in use (mapped at the first call).  Lock-free; raw system calls
 * only (the first call opens the file); every read of the table checked.
 */
int hs_frames_get(uint64_t pc, unsigned *off);
void hs_frames_put(uint64_t pc, unsigned off);
/* The same for pc's %rbp rule (stacks.c "frame-pointer frames": 16 bits,
 * 0xffff doubt), in an entry of its own next to the distance's. */
int hs_frames_get_rule(uint64_t pc, unsigned *rule);
void hs_frames_put_rule(uint64_t pc, unsigned rule);
int hs_frames_mapped(void);

/* The module-table entry whose load range holds pc (its index into *index
 * when index is not NULL); NULL when no known module holds it.  Lock-free:
 * entries are appended, never changed (segment.c). */
const struct hs_module *hs_module_at(uint64_t pc, uint32_t *index);

/* 1 when pc lies in a known module. Lock-free. */
static inline int hs_module_known(uint64_t pc)
{
	return hs_module_at(pc, NULL) != NULL;
}

/* The address range of libheisen.so itself, to trim hook frames. */
extern uint64_t hs_self_lo, hs_self_hi;

/* Format helpers that do not allocate (async-signal-safe). */
size_t hs_fmt_u64(char *buf, uint64_t v);
/*
 * heisen's own warnings: msg goes to stderr, or, when the process was
 * started under heisen-run (HEISEN_WARNINGS_FILE, an absolute path, read
 * once by hs_warnings_init at start-up), is appended to that file of the
 * session, which heisen-run prints when the run ends: the program's own
 * stderr stays the program's.  Async-signal-safe (raw openat/write/close);
 * when the file cannot be opened (a process that changed uid, which cannot
 * write its segment there either) the message is dropped, never written
 * into the program's stderr.
 */
void hs_warnings_init(void);
void hs_write_err(const char *msg);

/* ---- HEISEN_* settings (env.c) ------------------------------------------ */

/*
 * The one parser of HEISEN_* variables (safe in the constructor: no malloc,
 * no stdio).  Unset or empty gives dflt silently; a value that is not
 * valid as a whole gives dflt and one line "heisen: ignoring NAME=VALUE:
 * <why>; using <dflt>" (once per variable, none with HEISEN_QUIET=1).
 *   hs_getenv_num:  decimal digits only, in [lo, hi]; *given (may be NULL)
 *                   is 1 when a valid value was set.
 *   hs_getenv_bool: 1/yes/true/on or 0/no/false/off.
 *   hs_getenv_enum: one of words[0..nwords), returned as its index.
 */
uint64_t hs_getenv_num(const char *name, uint64_t dflt, uint64_t lo, uint64_t hi, int *given);
int hs_getenv_bool(const char *name, int dflt);
int hs_getenv_enum(const char *name, const char *const *words, int nwords, int dflt);

/* ---- stacks (stacks.c) --------------------------------------------------- */

/* Capture the calling thread's stack, dropping the shim's own frames, and
 * intern it.  Returns a stack id, 0 when the table is full. */
uint32_t hs_stack_here(void);
/* unw_backtrace(buf, size), without libunwind's 256 KiB per-thread trace
 * cache for a thread's first unwinds (stacks.c); signal mask as the caller has it. */
int hs_backtrace(void **buf, int size);

/* The representative stack of call site `site` (a return address): the stack
 * of the first call from there, captured once and cached. */
uint32_t hs_stack_site(uint64_t site);
/* hs_stack_site for the cache key `key` (a return address, or a composite
 * key: heap_core.c's wrapper keys), whose first stack is read from `site`,
 * the return address into the hook's caller, at `cfa`, the hook's CFA
 * (its caller's stack pointer at that return address): the frames from
 * there on through return-address distances learnt from real unwinds,
 * libunwind only for the frames not learnt yet (stacks.c site_read; the
 * same frames as hs_stack_site's whole unwind, without the shim's).  A
 * (site, cfa) that is not this thread's (the slot at cfa - 8 not holding
 * site, cfa outside what the thread's unwinds reached): hs_stack_site's
 * whole unwind. */
uint32_t hs_stack_site_at(uint64_t key, uint64_t site, uint64_t cfa);

/* This call's stack, from the return address `site` into the hook's caller
 * and `cfa`, the caller's stack pointer at that return address (the hook's
 * CFA).  Read through return-address distances learnt from real unwinds
 * (stacks.c), a real unwind on any doubt; never another call's frames.
 * Returns a stack id, 0 when the table is full. */
uint32_t hs_stack_call(uint64_t site, uint64_t cfa);

/* hs_stack_call's chain, read but not interned (hs_chain_stack interns
 * it): the thread's call chain, valid until its next hs_stack_call or
 * hs_chain_call; NULL when the thread has no area. */
struct hs_chain;
const struct hs_chain *hs_chain_call(uint64_t site, uint64_t cfa);

#define HS_CHAIN_MAX 32 /* innermost native frames of a lock stack: the buffers are thread-local (static TLS comes out of every thread's stack) */

/*
 * The Python frames of one lock chain, read while the acquisition runs (the
 * frames are the thread's own and alive only then) but not yet interleaved
 * with the native frames: Python frame k (pyframe id id[k], innermost
 * first) stands in for native frame at[k] (at[k] == the native depth: after
 * the last native frame, when the unwinding stopped before the outermost
 * evaluation loop), and bit i of `consumed` says that native frame i is an
 * evaluation-loop call its Python frames replace.  hs_chain_stack builds
 * the interleaved stack from it only when the chain is interned; the result
 * is the one hs_py_interleave would give at the acquisition (at most
 * HS_CHAIN_MAX entries).  Thread-local; sizes in entries.
 */
struct hs_pychain {
	uint32_t consumed;           /* bit i: pc[i] is replaced by its Python frames */
	uint32_t n;                  /* Python frames in id[] */
	uint32_t id[HS_CHAIN_MAX];   /* pyframe ids (format.h, hs_pyframe), innermost first */
	uint8_t at[HS_CHAIN_MAX];    /* the native frame each stands in for */
};

#define HS_PY_OUTER_MAX 12u      /* frames further out than the caller kept in a token (hs_pytoken.outer) */
#define HS_PY_OUTER_MORE 0x100u  /* hs_pytoken.outer_n: the chain goes on past outer[] */

/*
 * The innermost Python frame of a call and its caller, kept instead of the
 * call's whole chain (hs_chain_read_lazy): each frame's address, code
 * object and instruction (a pointer on 3.11+, f_lasti before), and the line
 * keys of up to HS_PY_OUTER_MAX frames further out.  They say later whether
 * the frames are still the same calls, and name them when they are not
 * (hs_py_held_frames).  Thread-local; addresses in the thread's own Python
 * frame chain, compared, never dereferenced once kept (the frames may have
 * returned).  72 + 8 * HS_PY_OUTER_MAX bytes, no more than hs_chain's
 * struct hs_pychain it shares a union with.
 */
struct hs_pytoken {
	uint64_t fp, code, instr;
	uint64_t prev, prev_instr;          /* the next frame out (0: none), whatever it is */
	uint64_t caller, caller_code, caller_instr; /* the calling Python frame (past 3.12's shim of the
					       evaluation loop; caller_code 0: none to name) */
	uint32_t entry;                     /* the frame ends its evaluation-loop call: its caller runs in
					       another, called from C (a `with` statement's __enter__) */
	uint32_t outer_n;                   /* keys in outer[], | HS_PY_OUTER_MORE when the chain went on
					       past them (more than HS_PY_OUTER_MAX frames, or a pointer
					       that is not a frame's) */
	uint64_t outer[HS_PY_OUTER_MAX];    /* the frames further out than the caller, innermost first, each
					       one's line key (3.11+: its instruction pointer, which names
					       its code object and offset; 3.8-3.10: its code object | f_lasti
					       << 47): a new call of the same helpers from another line differs
					       in one of them (docs/design.md "Lock order") */
};
_Static_assert(sizeof(struct hs_pytoken) <= sizeof(struct hs_pychain), "a token fits hs_chain's union as it was");

/*
 * One call's chain of return addresses, kept raw by a hook and interned only
 * when a finding, an edge or a wait needs it (hs_chain_stack), so a busy
 * program's thousands of call paths do not fill the stack table.  The same
 * struct, kept per thread, is the shadow the next read reuses: pc[k] is the
 * return address found at sp[k] - 8, sp[0] the hook's CFA, sp[k + 1] =
 * sp[k] + off(pc[k]) with off the learnt CFA distance of pc[k] (stacks.c).
 * Thread-local, never shared; sizes in entries.
 */
struct hs_chain {
	uint64_t site, cfa;  /* the call read: pc[0] and sp[0] */
	uint32_t depth;      /* native return addresses in pc[] (0: none) */
	uint32_t gen;        /* the learnt distances' generation it was walked under */
	uint8_t walked;      /* sp[] holds each frame's CFA: a shadow for the next read */
	uint8_t ended;       /* the walk reached the outermost frame (not cut at HS_CHAIN_MAX) */
	uint8_t python;      /* py holds this call's Python frames (at least one) */
	uint8_t unchanged;   /* hs_chain_read found the chain it read last time: the same site and
				CFA, every return-address slot as before (pc[] did not change) */
	uint8_t lazy;        /* hs_chain_read_lazy's, 1 or 2: pc[0..depth) the native frames up to the
				lazy-th evaluation-loop call (1: the one running tok's frame; 2: also its
				caller's, tok.entry), tok the Python frames; the rest is read from the
				thread's stack when the chain is interned */
	uint8_t pad2[3];
	uint64_t pc[HS_CHAIN_MAX];
	uint64_t sp[HS_CHAIN_MAX];
	union {
		struct hs_pychain py;   /* !lazy */
		struct hs_pytoken tok;  /* lazy */
	};
};

/*
 * Read this call's chain into c: `site` is the return address into the
 * hook's caller, `cfa` the hook's CFA (its caller's stack pointer at site).
 * What c held before (the thread's last chain read into it) is reused where
 * it is provably the same: the walk goes outward from this call until it
 * meets a frame at the same CFA with the same return address as one of c's,
 * then checks c's outer return-address slots one by one (a load and a
 * compare each); the first that changed is read on from there.  Each
 * distance is a function of its return address, so the chain is the one a
 * walk from scratch reads, which is the one libunwind reads (a real unwind
 * on any doubt).  When the chain passes through CPython's evaluation loop,
 * this call's Python frames are read too (c->py).  Returns the native
 * depth (0: none).
 */
unsigned hs_chain_read(struct hs_chain *c, uint64_t site, uint64_t cfa);

/* Intern c's stack (Python frames interleaved when it has them); a stack
 * id, 0 when c is empty or the table is full.  A lazy chain
 * (hs_chain_read_lazy) is completed from the calling thread's stack:
 * only by the thread that read it. */
uint32_t hs_chain_stack(const struct hs_chain *c);

/*
 * hs_chain_read for a call whose stack is seldom needed (an uncontended
 * lock acquisition that adds no edge): when the chain passes through
 * CPython's evaluation loop, only the native frames up to the innermost
 * evaluation-loop call are read (checked against c's last ones as
 * hs_chain_read does) and that call's innermost Python frame is kept as a
 * token (struct hs_pytoken), c->lazy set.  The frames further out are the
 * caller's, still on the thread's stack while that Python frame runs:
 * hs_chain_stack reads them then (docs/design.md "Lock order").  Without
 * Python frames, or when the token cannot be read, the whole chain
 * (hs_chain_read).  Returns the native depth read.
 */
unsigned hs_chain_read_lazy(struct hs_chain *c, uint64_t site, uint64_t cfa);

/*
 * Complete a lazy chain (hs_chain_read_lazy) read by the calling thread
 * into the whole chain hs_chain_read would have read at the same call: its
 * native frames on from the evaluation loop through the learnt distances,
 * and the thread's Python frames.  Only right when neither changed since
 * the read: the caller's to know (hs_locks_before_gil_take); the thread's
 * innermost Python frame must still be the token's (same address, code and
 * instruction), else, or on any doubt in the walk, c stays lazy.  Returns
 * 1 when c was completed.
 */
int hs_chain_complete(struct hs_chain *c);

/* c's frames as a stack's pc[] (Python frames interleaved; at most
 * HS_CHAIN_MAX entries into out); c not lazy.  Returns the count. */
unsigned hs_chain_pcs(const struct hs_chain *c, uint64_t *out);

/* Copy the valid part of chain src into dst (no shadow use is lost: dst
 * becomes src's). */
void hs_chain_copy(struct hs_chain *dst, const struct hs_chain *src);

/* Capture from a signal's ucontext (the faulting frame first). Async-signal-safe
 * as far as libunwind is. */
uint32_t hs_stack_from_signal(void *ucontext);

/* Intern pcs[0..depth) with flags into s's stack table. Lock-free. */
uint32_t hs_stack_intern(struct hs_seg *s, const uint64_t *pcs, unsigned depth, unsigned flags);

/* ---- lock-order graph (lockgraph.c) ------------------------------------- */

/*
 * The lock id of the lock at addr, creating it (gen = previous gen at addr
 * + 1) if needed.  kind/flags are used on creation.  Lock-free when the lock
 * is known; otherwise takes the graph lock.  Returns 0 when the lock table is
 * full (the lock is then not tracked).
 */
uint32_t hs_lock_id(struct hs_seg *s, uint64_t addr, unsigned kind, unsigned flags, uint32_t stack, int32_t tid,
		    uint64_t now);

/* Mark the lock at addr destroyed: the next use makes a new generation. */
void hs_lock_forget(struct hs_seg *s, uint64_t addr);

/* The live lock id at addr, 0 when none; never creates one.  Lock-free. */
uint32_t hs_lock_find(struct hs_seg *s, uint64_t addr);

/* Forget every live lock whose address lies in [lo, hi): freed memory.  Cheap
 * when no lock was ever created in those pages (a 64 Ki-bit page filter);
 * exact for ranges up to 4 KiB, a scan of the lock table beyond. */
void hs_lock_forget_range(struct hs_seg *s, uint64_t lo, uint64_t hi);

/*
 * The memory [p, p + size) is being freed (size 0: glibc's
 * malloc_usable_size of p, called directly, not through the exported hook):
 * locks in it are gone.  Ends the calling
 * thread's held state of those locks and forgets their identity, so that a
 * new lock in the same memory is a new lock (Helgrind's tc04_free_lock).
 * Called by the heap hook (heap_core.c) before the memory goes back; cheap when
 * no lock address was ever noted in those bytes (hs_lock_mem_seen, asked
 * first: the hook need not ask it itself).  Callable
 * inside a hook (it takes no guard); never allocates.
 */
void hs_locks_on_free(void *p, size_t size);

/* glibc's own malloc_usable_size of p (heap_hooks.c; resolved at the first
 * call with the hooks shut, aborting with a message when glibc has none):
 * for a pointer neither the guard pages nor the heap checker own. */
size_t hs_libc_usable_size(void *p);

/*
 * The filter in front of hs_locks_on_free: two bitmaps of where a lock node
 * was ever made (lockgraph.c notes a lock's address when it makes the node;
 * process-private, a fork child inherits them), each bit a fixed-size piece
 * of the address space modulo the map (the number itself, not a hash: a
 * heap's pieces are contiguous, so any 256 MiB of them fall on distinct
 * bits):
 *   - granules: 64 bytes (addr >> 6, HS_LOCK_GRANULE_BITS: 512 KiB of
 *     zero-filled bss, a page of it committed when first written for 32 MiB
 *     of address space), asked for a range up to 4 KiB: a small block freed next to a heap-allocated lock
 *     (sqlite's mutexes live in heap blocks among the connection's small
 *     ones) does not pass unless its own 64 bytes held a lock's address;
 *   - pages: 4 KiB (addr >> 12, HS_LOCK_PAGE_BITS; the page of a lock's
 *     first and last byte), asked for longer ranges; over 256 pages the
 *     answer is 1 without looking.
 * hs_lock_mem_seen answers 0 when no lock address in [lo, hi) was ever
 * noted: no lock lives there and the thread holds none there (a held entry
 * always has a node), so a free may skip hs_locks_on_free; 1 may be an alias
 * or a lock made and forgotten since.  At most two loads for a block up to
 * 4 KiB, no call: the heap hook asks it at every free.
 */
#define HS_LOCK_PAGE_BITS 65536u
#define HS_LOCK_GRANULE_SHIFT 6
#define HS_LOCK_GRANULE_BITS (1u << 22)
extern HS_HIDDEN uint64_t hs_lock_pages[HS_LOCK_PAGE_BITS / 64];
extern HS_HIDDEN uint64_t hs_lock_granules[HS_LOCK_GRANULE_BITS / 64];

static inline uint32_t hs_lock_page_bit(uint64_t addr)
{
	return (uint32_t)(addr >> 12) & (HS_LOCK_PAGE_BITS - 1);
}

static inline uint32_t hs_lock_granule_bit(uint64_t addr)
{
	return (uint32_t)(addr >> HS_LOCK_GRANULE_SHIFT) & (HS_LOCK_GRANULE_BITS - 1);
}

/* Is any bit of pieces [first, last] set in map (nbits a power of 2, a
 * piece's bit its number modulo nbits)?  Up to 64 pieces a load. */
static inline int hs_lock_bits_any(const uint64_t *map, uint32_t nbits, uint64_t first, uint64_t last)
{
	for (;;) {
		uint32_t b = (uint32_t)first & (nbits - 1), sh = b % 64;
		uint64_t span = 64 - sh < last - first + 1 ? 64 - sh : last - first + 1;
		uint64_t mask = (span == 64 ? ~0ull : (1ull << span) - 1) << sh;
		if (__atomic_load_n(&map[b / 64], __ATOMIC_RELAXED) & mask)
			return 1;
		if (last - first < span)
			return 0;
		first += span;
	}
}

/* hs_lock_mem_seen beyond two words of granules (or an empty range: lo's
 * granule); out of line, so that the common free saves no registers
 * (lockgraph.c). */
HS_HIDDEN int hs_lock_mem_seen_long(uint64_t lo, uint64_t hi);

/* hs_lock_mem_seen's answer for a range up to 4 KiB from one or two words
 * of the map: 0 none seen, 1 seen; -1 for a longer range (or hi <= lo),
 * which only hs_lock_mem_seen_long answers.  Inline in callers that keep
 * the long look out of line (locks.c hs_locks_on_free). */
static inline int hs_lock_mem_seen_short(uint64_t lo, uint64_t hi)
{
	/* k: the granules after lo's (hi <= lo: huge, the long way) */
	uint64_t g = lo >> HS_LOCK_GRANULE_SHIFT, k = ((hi - 1) >> HS_LOCK_GRANULE_SHIFT) - g;
	uint32_t sh = (uint32_t)g % 64, w = (uint32_t)(g / 64) & (HS_LOCK_GRANULE_BITS / 64 - 1);
	if (HS_LIKELY(k < 64 - sh)) /* most blocks: their granules in one word, one load */
		return ((__atomic_load_n(&hs_lock_granules[w], __ATOMIC_RELAXED) >> sh) & ((2ull << k) - 1)) !=
		       0; /* k 63: 2 << 63 is 0, the mask all ones */
	if (k <= 64) /* up to 4 KiB across a word's end: the rest of this word, the start of the next */
		return (__atomic_load_n(&hs_lock_granules[w], __ATOMIC_RELAXED) >> sh) != 0 ||
		       (__atomic_load_n(&hs_lock_granules[(w + 1) & (HS_LOCK_GRANULE_BITS / 64 - 1)],
					__ATOMIC_RELAXED) &
			((2ull << (sh + k - 64)) - 1)) != 0;
	return -1;
}

static inline int hs_lock_mem_seen(uint64_t lo, uint64_t hi)
{
	int r = hs_lock_mem_seen_short(lo, hi);
	return r >= 0 ? r : hs_lock_mem_seen_long(lo, hi);
}

/*
 * Note that the thread `tid` acquires lock `to` in mode to_mode (blocking)
 * while holding `from` in from_mode.  Adds the edge if new and searches for
 * a cycle through it; a cycle that is a deadlock under lockdep's rules
 * becomes a potential-deadlock finding (once per set of locks).
 * from_stack/to_stack are the two acquisition stacks; to_stack may be 0, in
 * which case `capture` is called to get one only if the edge is new.
 * from_site_n 0: from_stack is exact; else it is `from`'s call site's
 * stack only, `from` having been taken that many times with nothing nested
 * (the leaf path, lockpath.h): the edge is marked HS_EDGE_FROM_SITE.  An
 * edge so marked already is rewritten with from_stack when this one is
 * exact (the next time the order is seen).
 * Returns the edge id (0 when the table is full); *created is set to 1 when
 * this call added it, and *finding_out to the finding's index + 1 when it
 * closed a new cycle (else 0).
 */
uint32_t hs_graph_add(struct hs_seg *s, uint32_t from, unsigned from_mode, uint32_t from_stack, uint32_t from_site_n,
		      uint32_t to, unsigned to_mode, uint32_t to_stack, uint32_t (*capture)(void), int32_t tid,
		      uint64_t now, int *created, uint32_t *finding_out);

/*
 * Lock `id` (a native lock instance) has just been found shared: acquired
 * by thread tid after another thread with no hand-over between them
 * (handover.c).  Sets its HS_LOCKF_SHARED and reports the GIL cycles
 * through it that this makes potential deadlocks (their edges may all be
 * older: the GIL rule, lockgraph.c gil_cycle_can_deadlock); stack is the
 * acquisition's.  Returns the first new finding's index + 1, else 0.
 * Takes the graph lock.
 */
uint32_t hs_graph_lock_shared(struct hs_seg *s, uint32_t id, int32_t tid, uint64_t now, uint32_t stack);
/*
 * Lock `id` was taken by thread tid after the thread that used it before
 * had ended (outlived, handover.c): it counts as shared for the GIL
 * cycles tid made an edge of at or after `now` (when it took the lock: a
 * test runs the two sides of a deadlock one after the other; a thread that
 * only closes what ended threads used, as a pool's dispose after a join,
 * makes no such edge).  The latest such thread per lock.  Searches those
 * cycles now; returns as above.
 */
uint32_t hs_graph_lock_outlived(struct hs_seg *s, uint32_t id, int32_t tid, uint64_t now, uint32_t stack);

/*
 * Record a finding; returns its index + 1, 0 when the table is full.  f's
 * ready word is ignored; the entry is published with ready = 1.  Lock-free
 * and async-signal-safe.
 */
uint32_t hs_finding_add(struct hs_seg *s, const struct hs_finding *f);

/* The lock-free lookups the graph uses, also for unit tests. */
uint32_t hs_edge_find(struct hs_seg *s, uint64_t key);

/* ---- lock hooks shared with the semaphore hooks (locks.c, semaphores.c) -- */

/* One acquisition in progress (locks.c's hooks fill it; semaphores.c too). */
struct acq {
	uint64_t addr;
	uint64_t site;          /* return address into the caller of the hook */
	uint64_t cfa;           /* the hook's CFA: its caller's stack pointer at site (0: unwind) */
	uint64_t t0;            /* when the hook was entered */
	uint32_t id;            /* lock id, 0 = untracked; set before hs_acq_before: that lock (a class) */
	uint32_t stack;         /* the call site's stack; 0 = hs_acq_before takes the site's stack */
	uint8_t kind;           /* enum hs_lock_kind */
	uint8_t acq_mode;       /* enum hs_mode of the acquisition */
	uint8_t hold_mode;      /* enum hs_mode it will be held in */
	uint8_t trylock;        /* cannot block */
	uint8_t gil_safe;       /* never blocks with the GIL held (a Python lock drops it first): no GIL edges */
	uint8_t fresh;          /* the instance's first acquisition since it was made by this thread: no
				   other thread has waited for it, it adds no edge into it (semaphores.c) */
	int reentry;            /* index + 1 of the held entry it re-enters (recursive) */
	int holds_gil;          /* the thread holds CPython's GIL */
	int waited;             /* it had to block */
};

/*
 * The steps of one acquisition, as the pthread hooks run them: hs_acq_before
 * (lock id, relock check, edges held -> lock for a blocking acquisition),
 * hs_wait_begin/hs_wait_end around a blocking call (the slot's wait word,
 * kind enum hs_wait_kind, addr what is waited on), hs_acq_after with the
 * call's result as an errno value (0, EBUSY, ETIMEDOUT, other), hs_release when
 * the lock at addr is released (the thread's held entry, if any, dropped).
 * t is the caller's hs_enter() state.
 */
void hs_acq_before(struct hs_tls *t, struct acq *a, unsigned flags);
void hs_wait_begin(struct hs_tls *t, const struct acq *a, unsigned kind, uint64_t addr);
void hs_wait_end(struct hs_tls *t);
void hs_acq_after(struct hs_tls *t, struct acq *a, int rc);
void hs_release(struct hs_tls *t, uint64_t addr);
/* 1 when acquiring a->id (id, addr, acq_mode set) would add no lock-order
 * edge and catch no relock: every lock the thread holds (at most the
 * innermost chains' count) is ordered before it in the graph already.
 * Drops entries released by other threads first.  0: take hs_acq_before. */
int hs_acq_ordered(struct hs_tls *t, const struct acq *a);
/* 1 when the edge with this key (hs_edge_key) is in the graph: the
 * process's memo of known edges first (a load and a compare), then the
 * edge index, memoised when found.  0: not there (yet).  Lock-free; for the
 * GIL take's held -> GIL edges (python.c).  docs/design.md "Lock order". */
int hs_edge_known(uint64_t key);
/* The uncontended acquisition hs_acq_ordered cleared and the release of
 * the innermost held entry: lockpath.h (lock_acq_uncontended,
 * lock_release_top), inline in semaphores.c. */

/* ---- hand-over order (handover.c) ------------------------------------------ */

/*
 * Hand-over order between threads for the GIL rule (handover.c explains
 * it; docs/design.md "A GIL cycle needs two threads").  addr is a sync
 * object's address (a mutex, a spin lock, a semaphore; never an rwlock,
 * never the GIL's own).  hs_order_release and hs_order_acquire, the hooks'
 * fast paths, are inline in handover.h.
 * hs_order_handed_over_by: 1 when the last release of the lock at addr, by
 * another thread, was followed by a release of another object by that
 * thread that this thread acquired since (a hand-over, not sharing); call
 * before hs_order_acquire of that same acquisition.  hs_order_forget: the
 * object at addr ended (destroyed, initialised again).  The _by forms take
 * the thread slot index and its seen entries (HS_ORDER_SEEN uint64_t, zeroed
 * at first) explicitly, for unit tests.  Async-signal-safe, no lock.
 */
/*
 * Lock `id` at addr (HS_LOCKF_SHARED not set yet), acquired now by the
 * calling thread (stack: this acquisition's), was acquired last by thread
 * `last`; ordered: it is a sync object of handover.c (a mutex or a spin
 * lock).  Makes it shared (hs_graph_lock_shared) unless it was handed
 * over by a thread that is still live — then the lock waits for that
 * thread's fate: shared if it ends before it acquires anything again.
 * Call before hs_order_acquire of the same acquisition.
 */
void hs_order_acquirer_changed(struct hs_tls *t, uint32_t id, uint64_t addr, int32_t last, int ordered,
			       uint32_t stack, uint64_t now);
/* The calling thread ends (hs_thread_detach): what it handed over and never outlived is shared. */
void hs_order_thread_exit(struct hs_tls *t);
void hs_order_forget(uint64_t addr);
void hs_order_release_by(uint32_t slot, uint64_t addr);
void hs_order_acquire_by(uint32_t slot, uint64_t *seen, uint64_t addr);
int hs_order_handed_over_by(uint32_t slot, const uint64_t *seen, uint64_t addr);
#define HS_ORDER_SEEN 64u

/* ---- platform (platform_glibc.c) ---------------------------------------- */

/* HS_LOCKF_* flags of a mutex / rwlock, read from glibc's structure. */
unsigned hs_mutex_flags(const void *mutex);
unsigned hs_rwlock_flags(const void *rwlock);

/* ---- the Python bridge (python.c) ------------------------------------------ */

/*
 * Look for CPython in the process (its symbols, at run time; never
 * required) and, when it is there, hook its GIL entry points by patching
 * the GOT of every loaded object that imports them (elf_got_surgery.c).
 * Sets hs_header.python / python_version.  Idempotent: called at start-up
 * and again when new objects may have been loaded (dlsym).  Not
 * async-signal-safe.
 */
void hs_py_init(void);

/* 1 when CPython is initialized and the calling thread holds the GIL.
 * Async-signal-safe (reads thread-state memory only). */
int hs_py_holds_gil(void);

/* Called from the dlsym trampoline: objects may have been loaded since the
 * last look; find CPython / patch them.  Cheap when nothing was loaded. */
void hs_py_on_new_objects(void);

extern int hs_py_present;                   /* [atomic] CPython found and hooked */
extern uint64_t hs_py_rt_lo, hs_py_rt_size; /* _PyRuntime, where the GIL's own mutex and conds live */

/* A lock that is part of the GIL's implementation (inside _PyRuntime): not a lock of the program. */
static inline int hs_py_internal(const volatile void *lock)
{
	return (uint64_t)(uintptr_t)lock - hs_py_rt_lo < hs_py_rt_size;
}

/* The GIL's lock id (a node of the lock-order graph named "GIL"), 0 when
 * there is no Python. */
uint32_t hs_py_gil_lock(void);

/* ---- Python frames (python_frames.c) ----------------------------------------- */

/*
 * Interleave the calling thread's Python frames into a native stack: each
 * native frame of the interpreter's evaluation loop in pcs[0..n) is replaced
 * by the Python frames it was running (HS_PC_PYTHON | pyframe id), innermost
 * first, up to max entries.  Returns the new depth; *python is set when any
 * Python frame was added.  Does nothing (returns n) when frames cannot be
 * read (no CPython, or a version heisen does not know).  Async-signal-safe:
 * reads the thread's own frame chain, interns with lock-free tables.
 */
unsigned hs_py_interleave(struct hs_seg *s, uint64_t *pcs, unsigned n, unsigned max, int *python);

/*
 * The same for a lock's chain, read now and interleaved later: when
 * pcs[1..n) passes through the evaluation loop, read the calling thread's
 * Python frames that the interleaved stack of at most cap entries would
 * hold into py (struct hs_pychain: pyframe ids and the native frame each
 * stands in for) and return how many; else return 0 with py->n = 0.
 * Frames are identified through the thread's (code, instruction) cache,
 * interned on a miss.  Not from a signal handler (direct loads;
 * hs_py_interleave is the careful one).
 */
unsigned hs_py_chain_frames(struct hs_seg *s, const uint64_t *pcs, unsigned n, unsigned cap,
			    struct hs_pychain *py);

/* Read the calling thread's innermost Python frame into tk (struct
 * hs_pytoken); 0 when there is none, or it is not a shown frame (a shim,
 * incomplete, not a code object), or frames are not read.  Direct loads:
 * not from a signal handler.  tk on entry is the token this caller kept
 * last (a `with lock:` in a loop: compared, not read again) or has fp = 0
 * (nothing kept: read whole; hs_py_token_read).  Never an uninitialised
 * token: its fields could pass the comparison. */
int hs_py_token(struct hs_pytoken *tk);

/* The pyframe ids (segment s) of a token's frame and of its calling Python
 * frame (*caller 0: none named), as a chain read then would name them
 * (hs_py_chain_frames); 0 when the frame cannot be named.  The token just
 * read by this thread (its frames live).  A Python lock's class key
 * without a stack read (semaphores.c sem_init). */
uint32_t hs_py_token_frame_ids(struct hs_seg *s, const struct hs_pytoken *tk, uint32_t *caller);

/* hs_py_token for a caller that keeps no token: tk read whole. */
static inline int hs_py_token_read(struct hs_pytoken *tk)
{
	tk->fp = 0;
	return hs_py_token(tk);
}

/* 1 when two tokens (hs_py_token's) name the same frames at the same
 * instructions, the frames further out than the caller (outer[]) too:
 * the same call as far as a token can tell. */
int hs_py_token_same_call(const struct hs_pytoken *a, const struct hs_pytoken *b);

/*
 * The interleaved stack of a lazy chain (hs_chain_read_lazy) into
 * out[0..cap): inner[0..ni), the native frames before the evaluation loop,
 * then the token's frame at its kept instruction, then, when that frame is
 * still on the calling thread's Python stack as the same call (its code and
 * the next frame out, address and instruction, unchanged), its callers
 * interleaved with cur[0..n) (the thread's native stack now) from the
 * evaluation-loop call that runs it outward.  When it returned since (a
 * context manager's __enter__ took the lock), its caller at its kept
 * instruction follows instead, after mid[0..nm) (the native frames between
 * the two evaluation-loop calls when tok.entry; NULL: not kept), then what
 * is further out of the caller when the caller is still there (its address
 * and code).  *whole = 1 when the stack reaches the outermost frame, 0
 * when it ends early (the frames were gone).  Reads frames with rd()
 * (careful in a signal handler).  Returns the number of entries.
 */
unsigned hs_py_held_frames(struct hs_seg *s, const uint64_t *inner, unsigned ni, const uint64_t *mid, unsigned nm,
			   const struct hs_pytoken *tk, const uint64_t *cur, unsigned n, uint64_t *out, unsigned cap,
			   int *whole);

/* 0 when Python frames cannot be read in this process (looked for, not
 * found): callers skip hs_py_interleave_into.  One load. */
extern int hs_py_frames_none; /* [atomic] */
static inline int hs_py_frames_maybe(void)
{
	return !__atomic_load_n(&hs_py_frames_none, __ATOMIC_RELAXED);
}

/* ---- a lock chain's most common read, inline (stacks.c) ------------------ */

/*
 * hs_chain_read's most common case, inline in the lock hooks: the same call
 * as the last read into c (the same site and CFA, c walked under the
 * learnt distances of now, hs_chain_top set) with every return-address slot
 * as before, c not lazy (hs_chain_read_lazy's): returns c->depth with
 * c->unchanged set, the Python frames read again (hs_chain_python); any
 * other case is hs_chain_read's.  The result is
 * hs_chain_read's, without its call.  hs_chain_top: the highest CFA a real
 * unwind of this thread reached; hs_pcoff_gen: the learnt distances'
 * generation [atomic] (stacks.c).
 */
extern __thread uint64_t hs_chain_top __attribute__((tls_model("initial-exec"))) HS_HIDDEN;
extern uint32_t hs_pcoff_gen HS_HIDDEN;
void hs_chain_python(struct hs_chain *c) HS_HIDDEN;
static inline __attribute__((always_inline)) unsigned hs_chain_read_inline(struct hs_chain *c, uint64_t site, uint64_t cfa)
{
	unsigned sn = c->depth, m;
	/* the CFA first: what tells two call paths to one site apart */
	/* a lazy chain (hs_chain_read_lazy) stops at an evaluation loop: no shadow of the whole */
	if (HS_LIKELY(c->cfa == cfa && c->site == site && c->walked && sn && !c->lazy && hs_chain_top &&
		      c->gen == __atomic_load_n(&hs_pcoff_gen, __ATOMIC_ACQUIRE) &&
		      *(const uint64_t *)(uintptr_t)(cfa - 8) == site)) {
		for (m = 1; m < sn; m++)
			if (*(const uint64_t *)(uintptr_t)(c->sp[m] - 8) != c->pc[m])
				return hs_chain_read(c, site, cfa);
		c->unchanged = 1;
		c->python = 0;
		if (hs_py_frames_maybe())
			hs_chain_python(c);
		return sn;
	}
	return hs_chain_read(c, site, cfa);
}

/* 1 when pc (a return address) is in CPython's evaluation loop, whose
 * native frames Python frames stand for; 0 when frames are not read. */
int hs_py_eval_pc(uint64_t pc);

/* hs_py_eval_pc's range for a loop over many return addresses: pc is in
 * the evaluation loop iff pc - lo - 1 < span (span 0: frames not read). */
void hs_py_eval_range(uint64_t *lo, uint64_t *span);

/* Set while capturing in a signal handler: Python frames are then read with
 * process_vm_readv, which fails instead of faulting on a bad pointer. */
extern __thread int hs_py_careful __attribute__((tls_model("initial-exec")));

/* Prepare frame reading for the CPython found by hs_py_init (symbol
 * addresses, evaluation-loop range, version check).  Sets HS_PY_FRAMES in the
 * header on success.  Called by hs_py_init. */
void hs_py_frames_init(void);

/* ---- GOT patching (elf_got_surgery.c) ----------------------------------------- */

/* One function to reroute: calls to `name` from any patched object go to `replacement`. */
struct hs_got_hook {
	const char *name;
	void *replacement;
};

/*
 * Patch the GOT (JUMP_SLOT and GLOB_DAT relocations) of every loaded object
 * that imports one of hooks[0..n) so that it calls the replacement instead,
 * except the dynamic linker, the vDSO and libheisen.so itself.  Remembers
 * what it patched (and the original values), so calling it again patches
 * only objects loaded since.  Returns the number of slots patched.  Not
 * async-signal-safe (dl_iterate_phdr, mprotect).
 */
int hs_got_patch(const struct hs_got_hook *hooks, size_t n);

/* Put every patched slot back as it was (the symmetric undo). */
void hs_got_unpatch_all(void);

/* 0 when no loaded object defines a function `name` (their GNU hash tables
 * say so), 1 when one may: a dlsym(RTLD_DEFAULT, name) that returns 0 can
 * then be skipped, and with it the malloc of its error message.  Not
 * async-signal-safe (dl_iterate_phdr). */
int hs_elf_may_define(const char *name);

/*
 * dlsym(RTLD_NEXT, names[i]) for libheisen's hooks (init.c hs_resolve_all),
 * from the loaded objects' GNU hash tables: dl_iterate_phdr's order (the
 * load order, which is the global scope's for the objects loaded at start:
 * the program, the preloads, then their dependencies) from the object after
 * libheisen to glibc's libc.so.6.  out[i] is libc's default definition of
 * the function ("name@@VERSION", as an unversioned dlsym takes it) when no
 * object between libheisen and libc may define the name; NULL when the
 * caller must ask dlsym: an object on the way defines it (another
 * interposer, whose definition RTLD_NEXT gives), libc's symbol is an IFUNC
 * or has hidden versions only, an object has no GNU hash table, libheisen
 * or libc is not found after it, or n > HS_NEXT_FUNCS_MAX.  ~420
 * instructions a name where dlsym takes ~1,000 (bench/README.md "Process
 * start: no symbol scans, no CPUID, fewer system calls").  Takes the loader's lock
 * (dl_iterate_phdr): not async-signal-safe.
 */
#define HS_NEXT_FUNCS_MAX 256
void hs_elf_next_funcs(const char *const *names, void **out, size_t n);

/* ---- the dlsym and dlvsym trampolines (dl_trampoline.S, elf_got_surgery.c) ---- */

/*
 * libheisen exports dlsym and dlvsym as assembly trampolines: they save the
 * argument registers, call hs_dlsym_hook(handle, name) /
 * hs_dlvsym_hook(handle, name, version), restore them and either jump (not
 * call) to the real function the hook names in `jump`, so glibc still sees
 * the program's return address (dlsym(RTLD_NEXT, …) keeps its meaning), or,
 * when jump is NULL, return the hook's `value`.  The real dlsym and dlvsym
 * are found once in libc's symbol table (both names are ours, so asking
 * either would come back here); aborts loudly when they are not there.
 * Unless the thread is inside the shim (hs_tls.in_hook), exiting, or
 * already in the callback, the hook runs the callback (the one registered
 * with hs_got_on_dlsym, else hs_py_on_new_objects, python.c), then, for an
 * explicit handle (not RTLD_DEFAULT, not RTLD_NEXT), makes the lookup
 * itself and answers with heisen's hook when the result is the original
 * of a function heisen interposes (hooks.def's exported entries;
 * the address compared with what dlsym(RTLD_NEXT, name) gives libheisen):
 * a call through ctypes.CDLL("libc.so.6") is then seen like any other.
 * RTLD_NEXT and RTLD_DEFAULT lookups are never changed (a library wrapping
 * malloc that asks RTLD_NEXT for the real one gets it), and nothing heisen
 * does not interpose is ever mapped.
 */
struct hs_dl_answer {
	void *jump;    /* the real dlsym/dlvsym to jump to, or NULL: return value */
	void *value;
};
struct hs_dl_answer hs_dlsym_hook(void *handle, const char *name);
struct hs_dl_answer hs_dlvsym_hook(void *handle, const char *name, const char *version);

/* Replace the dlsym hook's callback (tests); NULL: back to the default,
 * hs_py_on_new_objects.  The callback must be cheap when nothing was loaded. */
void hs_got_on_dlsym(void (*cb)(void));

/* What GOT patching did so far: slots currently patched, objects done,
 * slots left alone (mprotect failed or table full), objects put off (not yet
 * relocated by ld.so, or table full). */
struct hs_got_counts {
	unsigned slots, objects, skipped, deferred;
};
void hs_got_counts(struct hs_got_counts *c);

/* The mprotect GOT patching uses (a raw syscall); tests swap it to fail. */
extern int (*hs_got_mprotect)(void *addr, size_t len, int prot);

/* ---- the heap (heap_core.c; heap_core.h has the hooks' entries) ------------------ */

/* Read HEISEN_HEAP & co. and, when heap checking is on, set it up (header
 * flags, stacks mode, quarantine) and register its fork handlers.  Init only;
 * call after init.c's own pthread_atfork so the child's segment exists first. */
void hs_heap_init(void);

/* The fork child's heap work (quarantine locks, counters into the new segment).
 * Idempotent: a fork handler, and again when the child's segment is made
 * (init.c hs_fork_segment). */
void hs_heap_after_fork_child(void);
/*
 * stacks.c, from init.c's fork child handler: a thread that held the
 * learnt-distance table's writer lock (pcoff_owner) at the fork does not
 * exist in the child, so the lock is let go there (the forking thread's
 * own hold, a fork from a handler that interrupted its learning, stays:
 * its learning ends it).  Without it the child's first distance learnt
 * would wait for good.  Async-signal-safe; no write when nothing is held.
 */
void hs_stacks_after_fork_child(void);

/* "0x" and v in lower-case hex, NUL-terminated, into buf (19 bytes at
 * most): for the heap checker's and the guard pages' one-line messages on
 * stderr, which are written without stdio (signal-safe). */
void hs_fmt_hex(char *buf, uint64_t v);

/* ---- sampled guard-page allocations (guarded.c) ---------------------------------- */

/*
 * GWP-ASan's technique (guarded.c's top comment): about one allocation in
 * HEISEN_GUARD_RATE of at most a page is served from a pool of pages with
 * an inaccessible page on each side, inaccessible itself once freed, so
 * use-after-free and buffer overflows on it fault and become findings.
 */
extern HS_HIDDEN __thread int32_t hs_guard_countdown __attribute__((tls_model("initial-exec")));
extern HS_HIDDEN uintptr_t hs_guard_lo, hs_guard_len; /* [atomic] the pool; 0 until the first sampled allocation; hidden: the free hook reads them directly, not through the GOT */

/* Read HEISEN_GUARD_RATE / HEISEN_GUARD_SLOTS / HEISEN_ON_HEAP_ERROR.  Init
 * only, after hs_recording is set; the pool is reserved lazily. */
void hs_guard_init(void);

/* The fork child's guard-page work: the pool's locks free, and the slots'
 * stacks forgotten when the child's tables are not its parent's
 * (hs_seg_inherited 0).  A fork handler, and again when a deferred segment
 * is made without its parent's tables (init.c hs_fork_segment). */
void hs_guard_after_fork_child(void);

/* The countdown ran out: re-arm it; 1 when this allocation of n bytes is
 * to be sampled (the guard is on, n fits a page, the thread is not inside
 * the shim). */
int hs_guard_sample_slow(size_t n);

/*
 * 1 when the allocation of n bytes about to be made is to be sampled: a
 * thread-local countdown, no atomics.  Every allocating hook asks it
 * first:  if (HS_UNLIKELY(hs_guard_sample(n))) { g = hs_guard_malloc(...);
 * if (g) return g; }
 */
static inline int hs_guard_sample(size_t n)
{
	if (HS_LIKELY(--hs_guard_countdown > 0))
		return 0;
	return hs_guard_sample_slow(n);
}

/* The hook's call site (the return address into its caller) and CFA (its
 * caller's stack pointer there; the shim keeps frame pointers): where a
 * sampled block's stacks start (guarded.c capture_call).  In the exported
 * hook itself only. */
#define HS_GUARD_SITE() ((uint64_t)(uintptr_t)__builtin_extract_return_addr(__builtin_return_address(0)))
#define HS_GUARD_CFA() ((uint64_t)(uintptr_t)__builtin_frame_address(0) + 16)

/* The allocating hooks' one line: return a sampled block when this allocation is sampled and a slot is free. */
#define HS_GUARD_ALLOC(n, align, zero)                                            \
	do {                                                                      \
		if (HS_UNLIKELY(hs_guard_sample(n))) {                            \
			void *hs_g_ = hs_guard_malloc((n), (align), (zero),       \
						      HS_GUARD_SITE(), HS_GUARD_CFA()); \
			if (hs_g_)                                                \
				return hs_g_;                                     \
		}                                                                 \
	} while (0)

/* A block of n bytes (1..page) aligned to align (0: 16) in a guarded slot,
 * zeroed when zero; NULL when it cannot be had (no free slot, not
 * recording): the caller then allocates normally.  Keeps errno.  site and
 * cfa: the hook's (HS_GUARD_SITE, HS_GUARD_CFA). */
void *hs_guard_malloc(size_t n, size_t align, int zero, uint64_t site, uint64_t cfa);

/* 1 when p lies in the guard pool (a sampled block, or a pointer into a
 * guard page): it must go to hs_guard_free/realloc/usable_size, never to
 * glibc or the heap checker.  One range check. */
static inline int hs_guard_owns(const void *p)
{
	/* relaxed: a pointer into the pool came from hs_guard_malloc, which published it */
	return (uintptr_t)p - __atomic_load_n(&hs_guard_lo, __ATOMIC_RELAXED) <
	       __atomic_load_n(&hs_guard_len, __ATOMIC_RELAXED);
}

/* Free a pointer the pool owns: the page becomes inaccessible, the slot
 * goes to the tail of the free FIFO.  A second free, or a pointer that is
 * not a block's start, is a double-free / invalid-free finding (abort
 * unless HEISEN_ON_HEAP_ERROR=continue).  Keeps errno.  site and cfa: the
 * hook's (HS_GUARD_SITE, HS_GUARD_CFA). */
void hs_guard_free(void *p, uint64_t site, uint64_t cfa);

/* realloc of a pointer the pool owns (the new block may be sampled again). */
void *hs_guard_realloc(void *p, size_t n, uint64_t site, uint64_t cfa);

/* malloc_usable_size of a pointer the pool owns: the requested size. */
size_t hs_guard_usable_size(const void *p);

/*
 * The crash handler's question for a SIGSEGV/SIGBUS: if si_addr lies in
 * the pool next to or inside a block, record a use-after-free or
 * heap-buffer-overflow finding (format.h "guard findings"; was = the
 * thread's reentrancy guard before the signal: its ring is written only
 * when clear).  Returns 1 when the program is to go on (=continue: the
 * page was made accessible), 0 to let the crash path run.  No malloc, no
 * locks.
 */
#include <signal.h>
int hs_guard_fault(int sig, siginfo_t *si, void *uc, int was);

/*
 * Read the 16 bytes at addr (16-aligned) into out[0..1]: 1, or 0 when addr
 * is not mapped readable — no crash, no system call (safe_read.S).  Needs
 * the crash handler in place (signals.c calls hs_safe_read_fixup first).
 */
int hs_safe_read16(const void *addr, uint64_t out[2]);

/*
 * Called by the SIGSEGV/SIGBUS handler with its ucontext: 1 when the fault
 * was hs_safe_read16's load (the PC now points at its failure return; the
 * handler must return at once), 0 for any other fault.
 */
int hs_safe_read_fixup(void *uc);

/* ---- processes and environment (proc.c, memhooks.c) -------------------------- */

/* Fill e with what this process sees now (format.h struct hs_env).  Raw
 * system calls through hs_sys, no malloc, no stdio.  Init only. */
void hs_env_read(struct hs_env *e);

/* The program's arguments as the constructor got them (init.c); NULL when
 * none were given: the segment's argv then comes from /proc/self/cmdline. */
extern int hs_start_argc;
extern char **hs_start_argv;

/* The same, taking the facts that cost file reads from the session's
 * environment cache at cache_path when it is fresh and of the same cgroup
 * (proc.c; the file is internal/seg_dir.h's HS_SEG_ENV_CACHE in the session
 * directory); NULL: read everything.  What it read itself is written there by
 * hs_env_cache_store (after the segment is named).  Init only. */
#define HS_ENV_CACHE_NS 100000000ull       /* facts older than 0.1 s are read anew */
void hs_env_read_cached(struct hs_env *e, const char *cache_path);
void hs_env_cache_store(const char *cache_path);

/* A fork child's record: its parent's, with the OOM-kill counter read anew.
 * Async-signal-safe. */
void hs_env_inherit(struct hs_env *e, const struct hs_env *parent);

/* Read the OOM-kill counter of e's memory cgroup into *out; 0, or -1 when
 * there is none or it cannot be read.  Async-signal-safe. */
int hs_oom_kills_read(const struct hs_env *e, uint64_t *out);

/* Page size and the high-water mark inherited through exec.  Init only. */
void hs_proc_init(void);

/* The fork child's sampler state (one thread, async-signal-safe). */
void hs_proc_after_fork(void);

/* The end of this image (why: HS_MEMW_EXIT or HS_MEMW_SIGNAL): a last memory
 * sample and descriptor count, and at exit the OOM-kill counter again
 * (hs_header.oom_kills_end).  t as for hs_mem_sample.  Async-signal-safe. */
void hs_proc_end(struct hs_tls *t, unsigned why);

/* A large allocation of n bytes (>= HS_MEM_BIG) is about to be made by the
 * program: sample memory when due.  Takes the guard itself; returns at once
 * inside the shim or before recording starts.  (memhooks.c) */
void hs_mem_big_alloc(uint64_t n);
/* ---- file descriptors (fd_core.c; the interceptors are fd_hooks.c) ---------------------------------------------------- */

/* Read HEISEN_FDS & co. and, when fd tracking is on (the default), mark the
 * header and note the fds this image inherited (/proc/self/fd).  Init only. */
void hs_fds_init(void);

/* The fork child (one thread, async-signal-safe), called by init.c's fork
 * handler once the child's segment exists and before its start sample,
 * which then counts the fds from the table instead of reading
 * /proc/self/fd a second time: a fresh table, the fds inherited from the
 * parent noted.  Nothing when fd tracking is off.  (fd_core.c) */
void hs_fds_after_fork_child(void);

/*
 * Which parts of the segment's fd table have store: one bit per block of
 * HS_FD_SEEN_BLOCK fd numbers (a block of slots spans at most two pages),
 * set once fd_core.c committed the block, at the first touch of one of its
 * slots (the table is not reserved at creation).  The table's scans
 * (hs_fds_verify_open, close_range, proc.c's start count, segment.c's
 * leak count) read only those blocks: the others hold nothing, and a
 * process with fds 0-2 and 255 gives 3 of the table's 36 pages store.  Process-private (a fork child, whose
 * table is new, clears it: hs_fd_seen_clear); the segment's readers
 * (heisen-dump) read the whole table from the file.  [atomic]
 * (proc.c)
 */
#define HS_FD_SEEN_SHIFT 4u
#define HS_FD_SEEN_BLOCK (1u << HS_FD_SEEN_SHIFT)
#define HS_FD_SEEN_WORDS (((1u << 20) >> HS_FD_SEEN_SHIFT) / 64u) /* HEISEN_FD_NUMBERS' bound */
extern uint64_t hs_fd_seen[HS_FD_SEEN_WORDS];
extern uint32_t hs_fd_seen_words; /* 1 + the highest word with a bit set; 0: none */

/* 1 when fd's block was noted. */
static inline int hs_fd_seen_has(uint32_t fd)
{
	uint32_t b = fd >> HS_FD_SEEN_SHIFT;
	return b / 64u < HS_FD_SEEN_WORDS && (__atomic_load_n(&hs_fd_seen[b / 64u], __ATOMIC_ACQUIRE) >> (b % 64u)) & 1;
}

/* Note fd's block (fd below the table's capacity): its slots have store. */
static inline void hs_fd_seen_note(uint32_t fd)
{
	uint32_t b = fd >> HS_FD_SEEN_SHIFT, w = b / 64u, hi;
	uint64_t bit = 1ull << (b % 64u);
	if (HS_LIKELY(w >= HS_FD_SEEN_WORDS || (__atomic_load_n(&hs_fd_seen[w], __ATOMIC_RELAXED) & bit)))
		return;
	__atomic_or_fetch(&hs_fd_seen[w], bit, __ATOMIC_RELEASE);
	hi = __atomic_load_n(&hs_fd_seen_words, __ATOMIC_RELAXED);
	while (w >= hi && !__atomic_compare_exchange_n(&hs_fd_seen_words, &hi, w + 1, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
}

/* The next block noted at or after fd number *fd (rounded to its block),
 * below cap: 1 with *fd its first number, 0 when none is left. */
static inline int hs_fd_seen_next(uint32_t *fd, uint32_t cap)
{
	uint32_t b = *fd >> HS_FD_SEEN_SHIFT, words = __atomic_load_n(&hs_fd_seen_words, __ATOMIC_RELAXED);
	if (words > HS_FD_SEEN_WORDS)
		words = HS_FD_SEEN_WORDS;
	for (uint32_t w = b / 64u; w < words; w++) {
		uint64_t bits = __atomic_load_n(&hs_fd_seen[w], __ATOMIC_RELAXED);
		if (w == b / 64u)
			bits &= ~0ull << (b % 64u);
		if (bits) {
			uint64_t first = ((uint64_t)w * 64u + (uint64_t)__builtin_ctzll(bits)) << HS_FD_SEEN_SHIFT;
			if (first >= cap)
				return 0;
			*fd = (uint32_t)first;
			return 1;
		}
	}
	return 0;
}

/* A fork child's new, empty table: nothing noted (only the words in use are
 * written, each a copy-on-write page of the child's). */
static inline void hs_fd_seen_clear(void)
{
	uint32_t words = __atomic_load_n(&hs_fd_seen_words, __ATOMIC_RELAXED);
	for (uint32_t w = 0; w < words && w < HS_FD_SEEN_WORDS; w++)
		if (__atomic_load_n(&hs_fd_seen[w], __ATOMIC_RELAXED))
			__atomic_store_n(&hs_fd_seen[w], 0, __ATOMIC_RELAXED);
	__atomic_store_n(&hs_fd_seen_words, 0, __ATOMIC_RELAXED);
}

/* At the end of the process (exit's handler, the _exit and _Exit hooks):
 * mark the numbers the table says are open and the kernel says are closed
 * as closed behind heisen's back (HS_FDC_GONE).  Async-signal-safe; does
 * nothing in a vfork child or inside a hook.  (fd_core.c) */
void hs_fds_verify_open(void);

/*
 * Make the held-lock stacks of the calling thread (th, its own slot) exact:
 * each held entry whose acquisition chain is still kept raw is interned now
 * (locks.c).  The snapshot handler calls it, outside any hook, so a hang
 * or deadlock report shows where each held lock was really taken, not the
 * site's cached stack (an entry taken on the leaf path keeps its site's,
 * marked HS_HELDF_SITE).  Lock-free; signal-safe as stack interning is.
 */
void hs_locks_snapshot_held(struct hs_thread *th);

/* A fork child's thread takes over held entry h (lock id already the
 * child's): appended to th's held[] under its seqlock, with this process's
 * release count for the id (locks.c).  Async-signal-safe. */
void hs_locks_adopt_held(struct hs_thread *th, const struct hs_held *h);

/* The exact acquisition stack of the calling thread's held entry i (its
 * kept chain interned now), for a new edge out of it made outside locks.c
 * (python.c's lock -> GIL); the entry's stack as it is when no chain was
 * kept.  For an entry taken on the leaf path (HS_HELDF_SITE) its call
 * site's stack, *site_n then the lock's count of acquisitions with nothing
 * nested (the edge's from_site_n), else *site_n 0.  Either way the lock is
 * no leaf from now on (lockpath.h, lock_leaf_nested).  0 when the stack
 * table is full. */
uint32_t hs_locks_held_stack(struct hs_thread *th, int i, uint32_t *site_n);

/*
 * The calling thread is about to take the GIL (th its own slot; python.c's
 * GIL hooks, and locks.c when the GIL's own mutex is locked outside them):
 * each held entry taken without the GIL whose chain was read lazily (its
 * native frames up to the evaluation loop and its Python frame as a token,
 * hs_chain_read_lazy) is completed now, while its frames are still those
 * of the acquisition: a thread without the GIL runs no Python code, so the
 * frames out from the evaluation loop and the Python frames have not
 * changed since (hs_chain_complete).  After the take they may: the Python
 * code the thread runs next may return from the function that took the
 * lock.  One load when no such entry is held (locks.c).
 */
void hs_locks_before_gil_take(struct hs_thread *th);

/* Read HEISEN_PY_LOCKS (semaphores.c: Python's locks as lock nodes, on unless 0).  Init only. */
void hs_sems_init(void);


/* ---- snapshots (signals.c) ---------------------------------------------------- */

/* Install the handler of the snapshot signal (format.h HS_SNAPSHOT_SIGNAL_OFFSET)
 * and record it in hs_header.snapshot_signal.  Init only. */
void hs_snapshot_install(void);

/* The fork child's segment records the snapshot signal too: a fork handler,
 * and again when a deferred segment is made (init.c hs_fork_segment). */
void hs_snapshot_after_fork_child(void);

/* ---- signals (signals.c) ------------------------------------------------- */

void hs_signals_install(void);

/* Put the sentinel on every terminating signal the program leaves at
 * SIG_DFL (signals.c's top comment).  Init only, after
 * hs_signals_install. */
void hs_term_signals_install(void);
int hs_altstack_setup(struct hs_tls *t);
void hs_altstack_teardown(struct hs_tls *t);

#endif

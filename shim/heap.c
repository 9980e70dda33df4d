/* SPDX-License-Identifier: MIT */
/*
 * shim/heap.c — the heap checker: malloc and friends, interposed, put a small
 * header in front of every block they hand out, so that a double free, an
 * invalid free or a broken tail canary is caught at the free that finds it,
 * with the allocation's, the first free's and the second free's stacks
 * (AddressSanitizer's report, without recompiling).  docs/design.md "Heap";
 * the contract and environment variables are docs/interfaces.md "The heap".
 *
 * A block of ours, from the real allocation's start:
 *
 *   [ padding (aligned blocks) ][ struct blk: link, offset, size, allocation, magic, state ][ user bytes ][ canary ]
 *                                                                               user pointer ^
 *
 * The last 16 bytes of struct blk are the word pair right before the user
 * pointer: magic (HEAP_MAGIC ^ the user pointer) and the state word.  Only
 * those 16 bytes are read before the magic matches, and through
 * hs_safe_read16 (safe_read.S): a pointer from malloc always has them
 * mapped (glibc's own chunk header), and a wild pointer with nothing mapped
 * in front of it is an invalid-free instead of a SIGSEGV inside free.  A
 * pointer without our magic (or with our magic but a word behind it that
 * is no state of ours: glibc's chunk size over a stale header) is foreign
 * — allocated before checking started, by the shim itself, or by
 * __libc_malloc directly — and goes to glibc untouched.
 *
 * The state word goes live -> freed by compare-and-swap, and the freed word
 * carries the first free's stack id and thread, so two racing frees of one
 * block publish and see the first free atomically: exactly one wins, the
 * other is the double free.  Freed blocks wait in a FIFO quarantine, one
 * per thread and without a lock, whose budget for all threads together is
 * HEISEN_QUARANTINE_MB when set, else a 32nd of the live heap between
 * 256 KiB and 64 MiB (quar_budget), at most 512 blocks in one thread's FIFO.
 * Then they go back to glibc "released":
 * the header stays, out of reach of glibc's own links, and blocks of 1 KiB
 * and more leave a 64-byte tombstone chunk in front of the pointer
 * (release()), so a second free long after the quarantine still finds its
 * block's state with both stacks, as long as glibc has not handed the same
 * address out again — the rule of Scudo's header check, with the stacks.
 *
 * What is detected:
 *   - double-free: a free (or realloc) of one of our blocks in state freed
 *     (in the quarantine) or released (given back, header still there);
 *   - invalid-free: a pointer not 16-byte aligned (glibc never returns one),
 *     a 16-aligned pointer with no readable memory in front of it, a
 *     pointer into the middle of one of our blocks whose header lies
 *     at most 8 KiB before the pointer's page (a bounded backward scan),
 *     and a pointer whose chunk header glibc's free would refuse;
 *   - heap-overflow: the tail canary (8 to 23 bytes after the requested size)
 *     changed, checked at free and realloc.
 * Out of scope: use after free, reads past the end, overflows that skip the
 * canary, a double free after glibc reused the address for a new block
 * (the second free then frees that block), and anything glibc hands out
 * before the shim's constructor.
 *
 * The hooks never take a lock and write no shared cache line in the common
 * case (per-thread quarantine and counters, count_flush); glibc is reached
 * through its exported __libc_* entry points, so there is no dlsym
 * bootstrap.  Inside the shim (hs_tls.in_hook) allocations are glibc's own
 * (foreign), but a free of one of our blocks still strips its header.
 */
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#define UNW_LOCAL_ONLY
#include <libunwind.h>

#include "inject.h" /* fault injection and chaos: one line per hook */
#include "shim.h"

/* glibc's allocator under its exported internal names (no dlsym needed). */
extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void *__libc_valloc(size_t);
extern void *__libc_pvalloc(size_t);

#define RET_ADDR() ((uint64_t)(uintptr_t)__builtin_extract_return_addr(__builtin_return_address(0)))

/*
 * The caller's stack pointer at its call into the hook (the hook's CFA on
 * x86-64: above the saved frame pointer and the return address; the shim is
 * built with frame pointers), kept per thread for wrapper_stack().  SITE()
 * records it and yields the return address: every allocating hook passes
 * SITE() as its call site.
 */
static __thread uint64_t heap_cfa __attribute__((tls_model("initial-exec")));
#define SITE() (heap_cfa = (uint64_t)(uintptr_t)__builtin_frame_address(0) + 16, RET_ADDR())

#define HEAP_MAGIC 0x9e3c5a48454150f1ull /* mixed with the user pointer */
#define ST_LIVE 0xa7u                  /* the whole word: no other bits */
#define ST_FREED 0xf3u                 /* | first-free stack << 8 (24 bits) | tid << 32: in the quarantine */
#define ST_RELEASED 0xf5u              /* the same, given back to glibc since */
#define ST_KIND(w) ((unsigned)((w)&0xffu))
#define ST_STACK(w) ((uint32_t)(((w) >> 8) & 0xffffffu))
#define ST_TID(w) ((int32_t)(uint32_t)((w) >> 32))

/*
 * The metadata in front of a block: 48 bytes, so user = blk + 1 stays
 * 16-aligned.  The order is chosen for after the block went back to glibc
 * ("released"): glibc's free writes its own links into the first bytes of
 * the chunk it gets back — tcache next and key, or fd and bk (bytes 0-15),
 * and in its large bins also fd_nextsize and bk_nextsize (16-31).  So the
 * fields that tell a later free what happened lie behind them: magic and
 * state (32-47) always survive until glibc hands the memory out again, size
 * and the allocation (16-31) survive in the small bins, and blocks bound
 * for the large bins are cut to a tombstone first (release()).
 */
struct blk {
	struct blk *qnext;     /* quarantine FIFO link (while freed) */
	uint32_t offset;       /* user pointer - start of the real allocation */
	uint32_t pad;
	uint64_t size;         /* as requested */
	uint32_t alloc;        /* stack id of the allocation (24 bits) | stack_epoch (low 8 bits) << 24 */
	int32_t alloc_tid;
	uint64_t magic;        /* HEAP_MAGIC ^ user pointer */
	uint64_t state;        /* [atomic] ST_LIVE, or ST_FREED / ST_RELEASED | first free */
};
_Static_assert(sizeof(struct blk) == 48, "struct blk is 48 bytes");

/*
 * Stack ids are ids into this process's segment.  A fork child's segment
 * starts with its parent's stacks, id for id (init.c inherit_tables), so a
 * block allocated before the fork keeps a valid allocation stack; when the
 * child's segment could not take them (a fallback-small segment) the epoch
 * changes, and older blocks report no allocation stack rather than a wrong
 * one.
 */
static uint32_t stack_epoch;           /* [atomic] */

static inline uint32_t alloc_stack_of(const struct blk *b)
{
	uint32_t e = __atomic_load_n(&stack_epoch, __ATOMIC_RELAXED) & 0xffu;
	return (b->alloc >> 24) == e ? b->alloc & 0xffffffu : 0;
}

/* 1 when the state word is one a free finds on a block it already freed. */
static inline int st_is_freed(uint64_t w)
{
	return ST_KIND(w) == ST_FREED || ST_KIND(w) == ST_RELEASED;
}

enum { HEAP_UNKNOWN = 0, HEAP_INIT = 1, HEAP_OFF = 2, HEAP_ON = 3 };
static int heap_mode;                  /* [atomic] HEAP_* */
static unsigned heap_stacks = HS_HEAP_STACKS_SITE;
static int heap_continue;              /* HEISEN_ON_HEAP_ERROR=continue */
static size_t page_size = 4096;

/* The quarantine: one FIFO per thread, no lock; one budget for all. */
struct tquar {
	struct blk *head, *tail;
	uint64_t bytes;        /* resident bytes of the blocks queued (quar_bytes) */
	int64_t unsynced;      /* bytes queued - bytes taken out, not yet added to quar_total */
	int keyed;             /* the thread-exit destructor is armed */
	uint32_t count;        /* blocks queued */
};
#define QUAR_SYNC ((int64_t)64 << 10)
static __thread struct tquar tquar __attribute__((tls_model("initial-exec")));
static pthread_key_t tquar_key;        /* its destructor empties an exiting thread's FIFO */
static uint64_t quar_limit;            /* the cap on all threads' FIFOs together, bytes (see quar_budget) */
static uint64_t quar_total;            /* [atomic] bytes queued in all FIFOs, as synced */

/* Canary bytes: position-dependent, so a run of one repeated byte is caught. */
static const unsigned char canary_pat[32] = {
	0xa1, 0xb2, 0xc3, 0xd4, 0xe5, 0xf6, 0x07, 0x18, 0x29, 0x3a, 0x4b, 0x5c, 0x6d, 0x7e, 0x8f, 0x90,
	0xa9, 0xba, 0xcb, 0xdc, 0xed, 0xfe, 0x0f, 0x10, 0x21, 0x32, 0x43, 0x54, 0x65, 0x76, 0x87, 0x98,
};

/*
 * Bytes of canary after a block of size n: at least 8, and ending 8 bytes
 * past a 16-byte boundary.  A request of that length (the header is a
 * multiple of 16) is what glibc serves with no slack: its chunk is the
 * request plus its 8-byte size word, rounded to 16, and the last 8 bytes of
 * an in-use chunk's memory are the next chunk's prev_size field, which glibc
 * lets the program use (malloc_usable_size counts them).  Ending on a 16-byte
 * boundary instead wasted those 8 bytes and made every chunk 16 bytes
 * larger half of the time.  8 to 23 bytes.
 */
static inline size_t canary_len(size_t n)
{
	return (((n + 8 + 8 + 15) & ~(size_t)15) - 8 - n);
}

/* Write the canary after the n bytes at u: two or three overlapping 8-byte
 * stores (the pattern is by position, so overlapping stores agree), no loop. */
static inline void canary_put(char *u, size_t n)
{
	size_t len = canary_len(n);
	memcpy(u + n, canary_pat, 8);
	if (len > 16)
		memcpy(u + n + 8, canary_pat + 8, 8);
	memcpy(u + n + len - 8, canary_pat + len - 8, 8);
}

/* 1 when the canary after the n bytes at u is intact (the same words). */
static inline int canary_ok(const char *u, size_t n)
{
	size_t len = canary_len(n);
	uint64_t a, b, c, x, y, z;
	memcpy(&a, u + n, 8);
	memcpy(&x, canary_pat, 8);
	memcpy(&c, u + n + len - 8, 8);
	memcpy(&z, canary_pat + len - 8, 8);
	if (len > 16) {
		memcpy(&b, u + n + 8, 8);
		memcpy(&y, canary_pat + 8, 8);
	} else {
		b = y = 0;
	}
	return ((a ^ x) | (b ^ y) | (c ^ z)) == 0;
}

static inline struct blk *blk_of(void *p)
{
	return (struct blk *)p - 1;
}

static inline void *real_start(struct blk *b)
{
	return (char *)(b + 1) - b->offset;
}

static inline uint64_t real_bytes(struct blk *b)
{
	return b->offset + b->size + canary_len(b->size);
}

/*
 * What lies in front of p, a pointer the program hands to free or realloc.
 * Reads the 16 bytes at p-16 only, and through hs_safe_read16, so a wild
 * pointer is reported instead of crashing here.
 */
enum owner {
	OWN_FOREIGN,   /* mapped, not ours: glibc's (or provably bad: foreign_is_invalid) */
	OWN_OURS,      /* our magic and a state word of ours (live, freed or released) */
	OWN_UNMAPPED,  /* 16-aligned, but p-16 is not readable: never from malloc */
	OWN_MISALIGNED /* not 16-aligned: glibc never returns one */
};

static inline enum owner owner_of(const void *p)
{
	uint64_t w[2];
	if (HS_UNLIKELY(((uintptr_t)p & 15) != 0))
		return OWN_MISALIGNED;
	if (HS_UNLIKELY(!hs_safe_read16((const char *)p - 16, w)))
		return OWN_UNMAPPED;
	if (w[0] != (HEAP_MAGIC ^ (uint64_t)(uintptr_t)p))
		return OWN_FOREIGN;
	/* our magic with another word behind it: a stale header of ours in
	   memory glibc has given out since (its chunk size is at p-8 now) */
	if (HS_LIKELY(w[1] == ST_LIVE) || st_is_freed(w[1]))
		return OWN_OURS;
	return OWN_FOREIGN;
}

/* 1 when p carries our magic and state (see owner_of). */
static inline int ours(const void *p)
{
	return owner_of(p) == OWN_OURS;
}

extern const char hs_safe_read16_fault[], hs_safe_read16_fault_end[], hs_safe_read16_fail[];

HS_HIDDEN int hs_safe_read_fixup(void *uc)
{
	ucontext_t *c = uc;
	uintptr_t pc = (uintptr_t)c->uc_mcontext.gregs[REG_RIP];
	if (pc < (uintptr_t)hs_safe_read16_fault || pc >= (uintptr_t)hs_safe_read16_fault_end)
		return 0;
	c->uc_mcontext.gregs[REG_RIP] = (greg_t)(uintptr_t)hs_safe_read16_fail;
	return 1;
}

/* ---- counters (hs_header.heap_*) ------------------------------------------ */

static inline struct hs_header *hdr_if_recording(void)
{
	/* acquire: pairs with the release that published hs_seg */
	return __atomic_load_n(&hs_recording, __ATOMIC_ACQUIRE) ? hs_seg.hdr : NULL;
}

/*
 * The header's heap_allocs, heap_live_bytes and heap_peak_bytes are shared
 * by every thread; updating them at each malloc and free made threads
 * bounce one cache line.  Each thread keeps its own deltas here and adds
 * them to the header every COUNT_FLUSH_OPS operations, when its live delta
 * passes COUNT_FLUSH_BYTES either way, at a finding, before a fork and at
 * exit (atexit, the exiting thread).  So the header is exact within
 * COUNT_FLUSH_OPS operations and COUNT_FLUSH_BYTES per thread, and the
 * peak is the highest flushed sum (a transient peak between flushes can
 * be missed by at most that much).  No clock, no shared write on the
 * common path.
 */
#define COUNT_FLUSH_OPS 64u
#define COUNT_FLUSH_BYTES ((int64_t)1 << 20)
struct heap_counts {
	int64_t live;      /* bytes allocated - bytes freed by this thread since its last flush */
	uint64_t allocs;
	uint32_t ops;
};
static __thread struct heap_counts hcounts __attribute__((tls_model("initial-exec")));

static void count_flush(void)
{
	struct heap_counts *c = &hcounts;
	struct hs_header *h = hdr_if_recording();
	uint64_t live, peak;
	if (h) {
		/* relaxed throughout: counters, ordered with nothing else */
		__atomic_add_fetch(&h->heap_allocs, c->allocs, __ATOMIC_RELAXED);
		live = __atomic_add_fetch(&h->heap_live_bytes, (uint64_t)c->live, __ATOMIC_RELAXED);
		peak = __atomic_load_n(&h->heap_peak_bytes, __ATOMIC_RELAXED);
		while ((int64_t)live > 0 && live > peak &&
		       !__atomic_compare_exchange_n(&h->heap_peak_bytes, &peak, live, 1, __ATOMIC_RELAXED,
						    __ATOMIC_RELAXED))
			;
	}
	c->live = 0;
	c->allocs = 0;
	c->ops = 0;
}

static inline void count_alloc(uint64_t n)
{
	struct heap_counts *c = &hcounts;
	c->live += (int64_t)n;
	c->allocs++;
	if (HS_UNLIKELY(++c->ops >= COUNT_FLUSH_OPS || c->live >= COUNT_FLUSH_BYTES))
		count_flush();
}

static inline void count_free(uint64_t n)
{
	struct heap_counts *c = &hcounts;
	c->live -= (int64_t)n;
	if (HS_UNLIKELY(++c->ops >= COUNT_FLUSH_OPS || c->live <= -COUNT_FLUSH_BYTES))
		count_flush();
}

/* The live heap as the header has it (flushed deltas), for the quarantine's budget. */
static inline uint64_t live_bytes(void)
{
	struct hs_header *h = hdr_if_recording();
	int64_t v = h ? (int64_t)__atomic_load_n(&h->heap_live_bytes, __ATOMIC_RELAXED) : 0;
	return v > 0 ? (uint64_t)v : 0;
}

static void count_failure(uint64_t n, uint32_t stack)
{
	struct hs_header *h = hdr_if_recording();
	if (!h)
		return;
	__atomic_add_fetch(&h->heap_failures, 1, __ATOMIC_RELAXED);
	__atomic_store_n(&h->heap_last_fail_size, n, __ATOMIC_RELAXED);
	__atomic_store_n(&h->heap_last_fail_stack, stack, __ATOMIC_RELAXED);
}

/* ---- stacks ---------------------------------------------------------------- */

/*
 * The stack of the call site `site` for HEISEN_HEAP_STACKS=site: a
 * process-private direct-mapped cache in front of hs_stack_site(), which
 * also remembers failures (a full stack table must not mean an unwind per
 * malloc).  One 64-bit word per entry, so a racing reader never sees a torn
 * one: tag (38 bits of the key's hash) | wrapper << 25 | exact << 24 |
 * stack id (24 bits).  Two kinds of site get other treatment, because a
 * site's first caller would misrepresent every later one:
 *   - exact: a site in libffi (ctypes calling malloc/free); its
 *     representative stack would show the Python lines of the first ctypes
 *     call ever made, so it gets a full unwind every time;
 *   - wrapper: a site in libstdc++ (operator new calls malloc; every C++
 *     allocation of the process comes through the same few sites); the key
 *     becomes (site, first caller outside libstdc++), found by a short
 *     unwind, so each C++ call site of `new` has a representative stack of
 *     its own.
 */
#define SITE_CACHE 8192u
#define SITE_EXACT (1ull << 24)
#define SITE_WRAPPER (1ull << 25)
static uint64_t site_cache[SITE_CACHE];
static uint64_t wrapper_lo, wrapper_hi; /* [atomic] libstdc++'s range, once seen */

enum site_kind { SITE_PLAIN, SITE_FFI, SITE_CXX };

/* What kind of object `site` lies in (first sight of a site only). */
static enum site_kind site_kind_of(uint64_t site)
{
	struct hs_table *t = &hs_seg.hdr->tables[HS_T_MODULES];
	uint32_t n, sbytes = hs_seg.hdr->tables[HS_T_STRINGS].capacity;
	/* libffi comes with a dlopen (ctypes): put its object in the table before asking */
	if (!hs_module_known(site))
		hs_module_note_pc(site, 1);
	n = __atomic_load_n(&t->count, __ATOMIC_ACQUIRE);
	for (uint32_t i = 0; i < n && i < t->capacity; i++) {
		const struct hs_module *m = &hs_seg.modules[i];
		const char *path = hs_seg.strings + m->path;
		if (site < m->lo || site >= m->hi)
			continue;
		if (m->path >= sbytes || m->path + (uint32_t)m->path_len >= sbytes)
			return SITE_PLAIN;
		if (memmem(path, m->path_len, "libffi", 6))
			return SITE_FFI;
		if (memmem(path, m->path_len, "libstdc++", 9)) {
			/* relaxed: a reader that sees 0 only takes the slower, still correct, way */
			__atomic_store_n(&wrapper_lo, m->lo, __ATOMIC_RELAXED);
			__atomic_store_n(&wrapper_hi, m->hi, __ATOMIC_RELAXED);
			return SITE_CXX;
		}
		return SITE_PLAIN;
	}
	return SITE_PLAIN;
}

/* The cached stack for key (a site, or a wrapper's composite key); the
 * kind of site is looked up only when first_sight and the key is new. */
static uint32_t site_stack_key(uint64_t key, uint64_t site, int first_sight);

/*
 * A wrapper site (libstdc++'s operator new calling malloc): key it by its
 * first caller outside the wrapper.  Unwinding for that caller costs some
 * 1-2 us, so it is done once per return address met in the wrapper, to
 * learn the shape of that frame: how many 8-byte words above the slot that
 * holds a return address R (R inside the wrapper) lies the slot of R's
 * function's own return address.  That distance is fixed for a given R: R
 * names one call instruction of one function, whose frame at that call has
 * one size (no alloca in libstdc++'s allocation paths).  So later calls walk
 * from the hook's own return address slot (heap_cfa - 8, which holds the
 * site) up the chain of wrapper frames, a cache lookup and a load per frame
 * — operator new called directly from inlined allocator code, or through
 * std::string's _M_create, _M_mutate or _M_construct, each path its own
 * chain — to the caller outside the wrapper.  The chain is the unwinder's
 * (libunwind's SP per frame, not a scan of the stack for a matching word).
 * A walk that meets a return address it has not learnt, or ends on a word
 * that is no code of a loaded module (a frame whose size did change after
 * all), unwinds and learns again.  The idea is a frame-size cache, as in a
 * profiler's fast unwinder (the CFA rule per PC, memoised).
 */
#define FRAME_CACHE 2048u
#define FRAME_PC_MASK ((1ull << 48) - 1)
#define WRAP_DEPTH 8
#define FRAME_WORDS_MAX 4096u /* 32 KiB: a larger frame is not learnt (unwound each time) */
static uint64_t frame_cache[FRAME_CACHE]; /* [atomic] return address (48 bits) | words to the next slot << 48 */

/* A return address's slot: one multiply (return addresses differ in their low bits already). */
static inline uint32_t frame_slot(uint64_t pc)
{
	return (uint32_t)((pc * 0x9e3779b97f4a7c15ull) >> 40) & (FRAME_CACHE - 1);
}

/* Words from the slot holding pc to its function's return address slot; 0 when not learnt. */
static inline uint64_t frame_words(uint64_t pc)
{
	uint64_t e = __atomic_load_n(&frame_cache[frame_slot(pc)], __ATOMIC_RELAXED);
	return (e & FRAME_PC_MASK) == pc ? e >> 48 : 0;
}

static inline void frame_learn(uint64_t pc, uint64_t words)
{
	if (words == 0 || words > FRAME_WORDS_MAX || (pc & ~FRAME_PC_MASK))
		return;
	/* relaxed: a self-contained word; a lost race only learns again */
	__atomic_store_n(&frame_cache[frame_slot(pc)], pc | words << 48, __ATOMIC_RELAXED);
}

/*
 * Unwind from here to the first caller outside the shim and [lo, hi),
 * learning the frame size of every wrapper return address on the way (from
 * the frame whose return address slot is cfa - 8 up); the caller, 0 when
 * none was found.
 */
static uint64_t wrapper_learn(uint64_t lo, uint64_t hi, uint64_t cfa)
{
	unw_context_t uc;
	unw_cursor_t c;
	uint64_t prev_pc = 0, prev_slot = 0;
	if (unw_getcontext(&uc) < 0 || unw_init_local(&c, &uc) < 0)
		return 0;
	for (int i = 0; i < 48 && unw_step(&c) > 0; i++) {
		unw_word_t ip = 0, sp = 0;
		uint64_t slot;
		if (unw_get_reg(&c, UNW_REG_IP, &ip) < 0 || unw_get_reg(&c, UNW_REG_SP, &sp) < 0 || ip == 0)
			return 0;
		/* ip is the return address the call from this frame's callee left
		   at the callee's CFA - 8, and the callee's CFA is this frame's SP */
		slot = (uint64_t)sp - 8;
		if (prev_slot && slot > prev_slot && ((slot - prev_slot) & 7) == 0)
			frame_learn(prev_pc, (slot - prev_slot) / 8);
		prev_slot = 0;
		if (ip >= hs_self_lo && ip < hs_self_hi)
			continue;
		if (ip < lo || ip >= hi)
			return ip;
		if (slot >= cfa - 8) /* a wrapper frame of this call (not the unwinder's own) */
			prev_pc = ip, prev_slot = slot;
	}
	return 0;
}

/* A wrapper site's composite key, already a hash; bits 63 and 62: never a user-space PC. */
static inline uint64_t wrapper_key(uint64_t site, uint64_t outer)
{
	return hs_mix64(site * 0x9e3779b97f4a7c15ull ^ outer) | (3ull << 62);
}

/* The site cache's hash of key: a wrapper key is one already. */
static inline uint64_t site_hash(uint64_t key)
{
	return (key >> 62) == 3 ? key : hs_mix64(key);
}

static uint32_t wrapper_stack(uint64_t site)
{
	uint64_t lo = __atomic_load_n(&wrapper_lo, __ATOMIC_RELAXED);
	uint64_t hi = __atomic_load_n(&wrapper_hi, __ATOMIC_RELAXED);
	uint64_t cfa = heap_cfa, slot, pc, w;
	int i;
	if (!lo || !cfa)
		return hs_stack_here();
	/* the hook's return address (the site) lies at its CFA - 8 */
	slot = cfa - 8;
	pc = site;
	for (i = 0; i < WRAP_DEPTH && pc >= lo && pc < hi; i++) {
		uint64_t two[2];
		w = frame_words(pc);
		if (!w)
			break;
		slot += 8 * w;
		/* through the probe: a frame size that was wrong after all must not
		   walk off the top of the thread's stack into a fault */
		if (!hs_safe_read16((const void *)(uintptr_t)(slot & ~(uint64_t)15), two)) {
			pc = 0;
			break;
		}
		pc = two[(slot >> 3) & 1];
	}
	/* a caller seen before is in the cache (its entry is a plain one); a new
	   one must at least be code of a loaded module (else a frame's size was
	   not what was learnt) */
	if (pc >= lo && pc < hi) {
		pc = 0;
	} else {
		uint64_t h = wrapper_key(site, pc);
		uint64_t v = __atomic_load_n(&site_cache[h & (SITE_CACHE - 1)], __ATOMIC_RELAXED);
		if (HS_LIKELY(v != 0 && (v >> 26) == (h >> 26)))
			return (uint32_t)(v & 0xffffffu);
		if (!hs_module_known(pc))
			pc = 0;
	}
	if (!pc) {
		pc = wrapper_learn(lo, hi, cfa);
		if (!pc)
			return hs_stack_here();
	}
	return site_stack_key(wrapper_key(site, pc), site, 0);
}

static uint32_t site_stack_key(uint64_t key, uint64_t site, int first_sight)
{
	uint64_t h = site_hash(key);
	uint64_t *e = &site_cache[h & (SITE_CACHE - 1)];
	uint64_t tag = h >> 26, v = __atomic_load_n(e, __ATOMIC_RELAXED);
	enum site_kind kind = SITE_PLAIN;
	uint32_t id;
	if (HS_LIKELY(v != 0 && (v >> 26) == tag)) {
		if (HS_UNLIKELY(v & SITE_EXACT))
			return hs_stack_here();
		if (HS_UNLIKELY(v & SITE_WRAPPER))
			return wrapper_stack(site);
		return (uint32_t)(v & 0xffffffu);
	}
	if (first_sight)
		kind = site_kind_of(site);
	id = 0;
	if (kind == SITE_PLAIN)
		id = hs_stack_site(key);
	/* relaxed: the word is self-contained; a lost race only costs a lookup */
	__atomic_store_n(e, tag << 26 | (kind == SITE_FFI ? SITE_EXACT : 0) | (kind == SITE_CXX ? SITE_WRAPPER : 0) |
				    (id & 0xffffffu),
			 __ATOMIC_RELAXED);
	if (kind == SITE_FFI)
		return hs_stack_here();
	if (kind == SITE_CXX)
		return wrapper_stack(site);
	return id;
}

/*
 * The calling thread's last two plain sites and their stacks, in front of
 * the site cache: a loop that allocates and frees meets the same two sites
 * again and again, and a compare is cheaper than the cache's hash and load.
 * Cleared in a fork child whose site cache is cleared.
 */
struct site_memo {
	uint64_t site[2];
	uint32_t id[2];
};
static __thread struct site_memo site_memo __attribute__((tls_model("initial-exec")));

#define MEMO_WRAPPER (1u << 31) /* in site_memo.id: a wrapper site, see wrapper_stack */

static inline uint32_t site_stack(uint64_t site)
{
	struct site_memo *m = &site_memo;
	uint64_t h, v;
	uint32_t id;
	/* no reordering on a hit: a loop's malloc and free sites alternate,
	   and swapping them at every call cost more than the second compare */
	if (HS_LIKELY(m->site[0] == site)) {
		id = m->id[0];
	} else if (HS_LIKELY(m->site[1] == site)) {
		id = m->id[1];
	} else {
		h = hs_mix64(site);
		v = __atomic_load_n(&site_cache[h & (SITE_CACHE - 1)], __ATOMIC_RELAXED);
		if (v == 0 || (v >> 26) != (h >> 26) || (v & SITE_EXACT) || !(v & (SITE_WRAPPER | 0xffffffu)))
			return site_stack_key(site, site, 1);
		id = v & SITE_WRAPPER ? MEMO_WRAPPER : (uint32_t)(v & 0xffffffu);
		m->site[1] = m->site[0], m->id[1] = m->id[0];
		m->site[0] = site, m->id[0] = id;
	}
	return HS_UNLIKELY(id & MEMO_WRAPPER) ? wrapper_stack(site) : id;
}

/*
 * A fork child before its first recorded event (init.c, shim.h
 * hs_fork_pending): the stack of a site its parent met, from the caches or
 * the parent's site index (hs_fork_site; sites an earlier child met are
 * there too) — the parent's id: the child's segment starts as a copy of the
 * parent's tables, id for id; any other site makes the child's segment
 * now, and 0 only when that fails.
 */
static __attribute__((noinline)) uint32_t pending_stack(uint64_t site)
{
	struct site_memo *m = &site_memo;
	uint64_t h = hs_mix64(site), v = __atomic_load_n(&site_cache[h & (SITE_CACHE - 1)], __ATOMIC_RELAXED);
	if (heap_stacks == HS_HEAP_STACKS_NONE)
		return 0;
	if (heap_stacks == HS_HEAP_STACKS_SITE && !(m->id[0] & MEMO_WRAPPER) && m->site[0] == site && m->id[0])
		return m->id[0];
	if (heap_stacks == HS_HEAP_STACKS_SITE && !(m->id[1] & MEMO_WRAPPER) && m->site[1] == site && m->id[1])
		return m->id[1];
	if (heap_stacks == HS_HEAP_STACKS_SITE && v != 0 && (v >> 26) == (h >> 26) && !(v & (SITE_EXACT | SITE_WRAPPER)) &&
	    (v & 0xffffffu))
		return (uint32_t)(v & 0xffffffu);
	if (heap_stacks == HS_HEAP_STACKS_SITE && (v = hs_fork_site(site)) != 0)
		return (uint32_t)v; /* learnt by the parent from an earlier child */
	if (hs_fork_segment(0) != 0)
		return 0;
	return heap_stacks == HS_HEAP_STACKS_FULL ? hs_stack_here() : site_stack(site);
}

/* The stack kept for one malloc or free at `site`; 0 when not recording. */
static inline uint32_t heap_stack(uint64_t site)
{
	if (!__atomic_load_n(&hs_recording, __ATOMIC_ACQUIRE))
		return HS_UNLIKELY(__atomic_load_n(&hs_fork_pending, __ATOMIC_ACQUIRE) == 1) ? pending_stack(site) : 0;
	switch (heap_stacks) {
	case HS_HEAP_STACKS_FULL:
		return hs_stack_here();
	case HS_HEAP_STACKS_NONE:
		return 0;
	default:
		return site_stack(site);
	}
}

/* ---- the guard ------------------------------------------------------------------ */

/*
 * Take the reentrancy guard for a checked operation.  Returns 1 when the
 * thread also has a ring (findings can be noted in it), 0 when not (not
 * recording, exiting, no slot) — the block is still managed the same way.
 * The caller has checked that hs_tls.in_hook was clear.
 */
static inline int heap_enter(struct hs_tls *t)
{
	if (hs_enter_heap())
		return 1;
	t->in_hook = 1;
	return 0;
}

/* ---- findings ------------------------------------------------------------------- */

void hs_fmt_hex(char *buf, uint64_t v)
{
	static const char d[] = "0123456789abcdef";
	char tmp[17];
	int n = 0;
	do {
		tmp[n++] = d[v & 15];
		v >>= 4;
	} while (v);
	buf[0] = '0';
	buf[1] = 'x';
	for (int i = 0; i < n; i++)
		buf[2 + i] = tmp[n - 1 - i];
	buf[2 + n] = '\0';
}

static const char *kind_name(unsigned kind)
{
	switch (kind) {
	case HS_FIND_DOUBLE_FREE:
		return "double-free";
	case HS_FIND_INVALID_FREE:
		return "invalid-free";
	default:
		return "heap-overflow";
	}
}

/*
 * Record a heap finding (duplicates — same kind and stacks, or with no
 * stacks the same address — fold into the first one's count, once reported
 * we go quiet about it), say so on stderr, and abort unless
 * HEISEN_ON_HEAP_ERROR=continue.  With the guard held; releases it before
 * abort() so that the crash handler records the SIGABRT.
 */
static void heap_finding(struct hs_tls *t, int ring, struct hs_finding *f)
{
	static int aborting; /* [atomic] a thread is on its way to abort() */
	struct hs_seg *s = &hs_seg;
	char buf[24];
	int dup = 0;
	count_flush(); /* the header's counters as of the finding (abort follows) */
	if (!heap_continue && __atomic_exchange_n(&aborting, 1, __ATOMIC_ACQ_REL)) {
		/* report once, then go quiet (ASan, lockdep): another thread found
		   the first error and is aborting the process; never do the bad
		   free, never race it to a second report — wait for the end */
		t->in_hook = 0;
		for (;;)
			pause();
	}
	if (__atomic_load_n(&hs_recording, __ATOMIC_ACQUIRE)) {
		struct hs_table *tab = &s->hdr->tables[HS_T_FINDINGS];
		uint32_t n = __atomic_load_n(&tab->count, __ATOMIC_ACQUIRE);
		if (n > tab->capacity)
			n = tab->capacity;
		for (uint32_t i = 0; i < n && !dup; i++) {
			struct hs_finding *o = &s->findings[i];
			if (__atomic_load_n(&o->ready, __ATOMIC_ACQUIRE) && o->kind == f->kind && o->stack == f->stack &&
			    o->stack2 == f->stack2 && o->stack3 == f->stack3 &&
			    (f->stack || f->stack2 || f->stack3 || o->addr == f->addr)) {
				__atomic_add_fetch(&o->count, 1, __ATOMIC_RELAXED);
				dup = 1;
			}
		}
		if (!dup) {
			uint32_t idx = hs_finding_add(s, f);
			if (idx && ring)
				hs_rec(t, f->ts_ns, HS_REC_FINDING, f->stack, idx - 1, f->addr, f->kind);
		}
	}
	if (!hs_quiet && !dup) {
		hs_write_err("heisen: ");
		hs_write_err(kind_name(f->kind));
		hs_write_err(" of ");
		hs_fmt_hex(buf, f->addr);
		hs_write_err(buf);
		hs_write_err(heap_continue ? " (skipped; heisen-dump has the stacks)\n"
					   : " (aborting; heisen-dump has the stacks)\n");
	}
	if (!heap_continue) {
		t->in_hook = 0;
		abort();
	}
}

static void finding_init(struct hs_finding *f, struct hs_tls *t, unsigned kind, void *p)
{
	hs_fork_segment_now(); /* a fork child's finding goes in its segment (init.c) */
	memset(f, 0, sizeof *f);
	f->kind = (uint16_t)kind;
	f->tid = t->tid;
	f->ts_ns = hs_now();
	f->addr = (uint64_t)(uintptr_t)p;
	f->stack = __atomic_load_n(&hs_recording, __ATOMIC_ACQUIRE) ? hs_stack_here() : 0;
}

/*
 * A free or realloc of p (ours) whose state word is `state`: freed (in the
 * quarantine) or released (given back to glibc since, the header still
 * there).  A released block's size and allocation are believed only when
 * readable and plausible: glibc's large bins write two pointers over them
 * (bytes 16-31, see struct blk), and a size of 2^40 or more is such a
 * pointer — the report then has the two frees without the allocation.
 */
static int foreign_is_invalid(struct hs_tls *t, int ring, void *p, enum owner o);
static struct blk *containing(const void *p, int *unmapped);

static void bad_state(struct hs_tls *t, int ring, void *p, uint64_t state)
{
	struct blk *b = blk_of(p), *y;
	struct hs_finding f;
	uint64_t w[2];
	int unmapped;
	/* a released header may be stale: glibc gave its memory out again, and
	   a live block of ours now covers p (the old magic and state are in its
	   user bytes, which it has not written yet): p is the middle of that
	   block, an invalid free, as it is for the program now */
	if (ST_KIND(state) == ST_RELEASED && (y = containing(p, &unmapped)) != NULL &&
	    ST_KIND(__atomic_load_n(&y->state, __ATOMIC_RELAXED)) == ST_LIVE) {
		foreign_is_invalid(t, ring, p, OWN_FOREIGN);
		return;
	}
	finding_init(&f, t, HS_FIND_DOUBLE_FREE, p);
	f.stack2 = ST_STACK(state);
	f.tid2 = ST_TID(state);
	if (ST_KIND(state) == ST_RELEASED) {
		/* bytes 16-31 may lie in the page before p-16's */
		if (hs_safe_read16(&b->size, w) && w[0] < (1ull << 40)) {
			f.size = w[0];
			f.stack3 = alloc_stack_of(b);
			f.tid3 = b->alloc_tid;
		}
	} else {
		f.stack3 = alloc_stack_of(b);
		f.tid3 = b->alloc_tid;
		f.size = b->size;
	}
	heap_finding(t, ring, &f);
}

/*
 * The block of ours (live or in the quarantine) whose user bytes (or
 * canary) contain p, found by scanning back for a header from p through
 * the page that holds p - 16 and CONTAIN_BACK bytes before it.  The
 * nearest live or quarantined header decides; a released one on the way
 * is passed over (a stale header inside memory glibc has handed out again,
 * maybe to the very block that contains p: the second free of a small
 * block a million allocations later lands there, and glibc, handed such a
 * pointer, aborts or faults reading a chunk header that is user data).
 * NULL when there is none, or the page of p - 16 is not mapped (*unmapped
 * set then; an unmapped page before it only ends the scan).  Every read
 * goes through hs_safe_read16.  Runs only for pointers without our magic.
 */
#define CONTAIN_BACK ((uintptr_t)8 << 10)
static struct blk *containing(const void *p, int *unmapped)
{
	uintptr_t u = ((uintptr_t)p - 1) & ~(uintptr_t)15;
	uintptr_t own = ((uintptr_t)p - 16) & ~(uintptr_t)(page_size - 1);
	uintptr_t lim = own > CONTAIN_BACK ? own - CONTAIN_BACK : 0;
	*unmapped = 0;
	for (; u >= lim + 16 && u > 16; u -= 16) {
		uint64_t w[2];
		if (!hs_safe_read16((const void *)(u - 16), w)) {
			*unmapped = u - 16 >= own;
			return NULL;
		}
		if (w[0] == (HEAP_MAGIC ^ (uint64_t)u)) {
			struct blk *b = blk_of((void *)u);
			uint64_t st = w[1], sz[2];
			if (ST_KIND(st) == ST_RELEASED)
				continue;
			if ((ST_KIND(st) == ST_LIVE || ST_KIND(st) == ST_FREED) && hs_safe_read16(&b->size, sz) &&
			    (uintptr_t)p < u + sz[0] + canary_len(sz[0]))
				return b;
			return NULL;
		}
	}
	return NULL;
}

/* 1 when p lies in the calling thread's own stack: never heap memory (the
 * bounds are read once per thread, threads.c hs_on_own_stack). */
static inline int on_own_stack(const void *p)
{
	return hs_on_own_stack(p);
}

/*
 * 1 when the words in front of p (w: p-16 and p-8) are no chunk header
 * glibc's free accepts: the checks free() makes before anything else
 * (malloc.c: munmap_chunk's "invalid pointer" for an mmapped chunk whose
 * start and length are not page-aligned; _int_free's "invalid pointer"
 * and "invalid size" for a size below the minimum chunk, not a multiple of
 * 16, or wrapping past the end of memory).  glibc would abort with its own
 * message and no stack; heisen reports the invalid free instead.
 */
static int glibc_would_refuse(const void *p, const uint64_t w[2])
{
	uint64_t size = w[1] & ~(uint64_t)7, c = (uint64_t)(uintptr_t)p - 16;
	if (w[1] & 2) /* IS_MMAPPED: prev_size is the offset into the mapping */
		return ((c - w[0]) | (w[0] + size)) & (page_size - 1) ? 1 : 0;
	return size < 32 || (size & 15) != 0 || c > (uint64_t)0 - size;
}

/*
 * A pointer without our magic: glibc's, unless it is provably bad (see
 * the top comment): misaligned, inside one of our blocks, on the freeing
 * thread's own stack, with no readable memory in front of it (a wild
 * pointer: glibc would fault reading its chunk header), or with a chunk
 * header glibc would refuse (glibc_would_refuse: the second free of a
 * block whose address now lies inside memory given out since, where the
 * words in front of it are user data).  Returns 1 when it was reported (do
 * not free it).
 */
static int foreign_is_invalid(struct hs_tls *t, int ring, void *p, enum owner o)
{
	int unmapped = o == OWN_UNMAPPED;
	struct blk *b = unmapped ? NULL : containing(p, &unmapped);
	struct hs_finding f;
	uint64_t w[2];
	if (!b && !unmapped && ((uintptr_t)p & 15) == 0 && !on_own_stack(p) &&
	    !(hs_safe_read16((const char *)p - 16, w) && glibc_would_refuse(p, w)))
		return 0;
	finding_init(&f, t, HS_FIND_INVALID_FREE, p);
	if (b) {
		uint64_t st = __atomic_load_n(&b->state, __ATOMIC_RELAXED);
		f.size = b->size;
		f.stack3 = alloc_stack_of(b);
		f.tid3 = b->alloc_tid;
		/* the offset of p into the block (it starts at addr - offset) */
		f.offset = (uint32_t)((uintptr_t)p - (uintptr_t)(b + 1));
		if (ST_KIND(st) == ST_FREED) {
			f.stack2 = ST_STACK(st);
			f.tid2 = ST_TID(st);
		}
	}
	heap_finding(t, ring, &f);
	return 1;
}

/* ---- allocation and release ----------------------------------------------------- */

/*
 * Give b (freed) back to glibc, keeping its header: the state becomes
 * released with the first free's stack and thread, the magic stays.  A
 * later free of the same pointer still finds both (struct blk: glibc's own
 * links do not reach them) as long as glibc has not handed that memory out
 * again: then it is a double free with its three stacks, detected without
 * any memory held back.  When glibc hands out the memory again at the same
 * user pointer (its splitting puts a new chunk's start where the old one
 * began), the new block's header replaces ours and the pointer is live —
 * the same limit as Scudo's header check.
 *
 * Tombstones: a block whose chunk is 1 KiB or more (glibc's large bins and
 * the unsorted bin, whose chunks glibc splits from their start for any
 * smaller request) is first cut down in place with __libc_realloc to the
 * 64-byte chunk that holds its header (the rest goes back to glibc at
 * once), and that small chunk is then freed.  glibc gives a 64-byte chunk
 * only to requests of 40 bytes or less made around heisen (ours are 64
 * bytes and more with the header and canary), so the header stays for long,
 * and the old pointer cannot become a chunk's start while the tombstone
 * stands (its chunk covers the bytes right before the pointer).  Blocks
 * glibc mmapped are unmapped: a later free of one finds no memory and is
 * an invalid-free.
 */
#define TOMBSTONE_MIN 1024u
static void release(struct blk *b)
{
	char *r = real_start(b);
	size_t chunk;
	/* freed -> released: the kind is the state word's low byte (x86-64 is
	   little-endian); a byte store, no read of the cold word.  No CAS: a
	   racing free of a freed block only reads the word */
	__atomic_store_n((uint8_t *)&b->state, (uint8_t)ST_RELEASED, __ATOMIC_RELAXED);
	memcpy(&chunk, r - 8, sizeof chunk); /* glibc's chunk size word: size | flags (2: mmapped) */
	if (real_bytes(b) >= TOMBSTONE_MIN && !(chunk & 2)) {
		char *k = __libc_realloc(r, b->offset);
		if (k)
			r = k;
	}
	__libc_free(r);
}

/*
 * The quarantine's budget now, in bytes: HEISEN_QUARANTINE_MB when set;
 * else live/QUAR_LIVE_SHARE of the live heap (the header's flushed count),
 * at least QUAR_FLOOR and at most quar_limit (64 MiB, or 1/32 of the
 * cgroup's memory limit).  A share of the live heap, as ASan's quarantine
 * is not, because what the quarantine costs is resident memory the program
 * did not ask for: a fixed 64 MiB made a 13.5 MiB Python service 82 MiB.
 * Detection past the quarantine comes from the released header (release()).
 */
#define QUAR_FLOOR ((uint64_t)256 << 10)
/*
 * And one thread's FIFO holds at most QUAR_THREAD_BLOCKS blocks (unless
 * HEISEN_QUARANTINE_MB was set): a block leaves the FIFO while its header
 * is still in the core's cache, so releasing it costs no miss.  A longer
 * FIFO released blocks freed long ago, each free paying a miss or two on a
 * cold header (the top of a churning C++ program's profile) for no
 * detection the released header does not give: a second free long after
 * the first is found by the header glibc leaves alone (release()).  A
 * count, not bytes: a large block (a buffer glibc mmapped, which release()
 * unmaps) still waits its turn like the others.
 */
#define QUAR_THREAD_BLOCKS 512u
static uint32_t quar_thread_max = UINT32_MAX; /* QUAR_THREAD_BLOCKS unless HEISEN_QUARANTINE_MB was set */
static uint64_t quar_floor;            /* the least quar_budget() can be: min(QUAR_FLOOR, quar_limit), or quar_limit when explicit */
#define QUAR_LIVE_SHARE 32u
static int quar_explicit;              /* HEISEN_QUARANTINE_MB was set (to a valid value) */
#define QUARANTINE_MB_MAX (1u << 20)   /* HEISEN_QUARANTINE_MB's range: 0 to 1 TiB */

static inline uint64_t quar_budget(void)
{
	uint64_t lim;
	if (quar_explicit || quar_limit == 0)
		return quar_limit;
	lim = live_bytes() / QUAR_LIVE_SHARE;
	if (lim < QUAR_FLOOR)
		lim = QUAR_FLOOR;
	return lim < quar_limit ? lim : quar_limit;
}

/*
 * A quarantined block of QUAR_DONTNEED_MIN bytes or more gives its whole
 * interior pages back to the kernel (MADV_DONTNEED; they read as zeros if
 * touched again), so it holds only its first and last pages resident while
 * it waits: the header and the canary lie outside the interior.  The
 * quarantine's budget counts what stays resident (quar_bytes).  Only from
 * 1 MiB: a block's pages given back are faulted in again when glibc hands
 * the memory out after the quarantine (~130 ns a page here), and blocks of
 * 64 KiB to 1 MiB are the per-request buffers a program frees in a loop
 * (a 256 KiB pair cost 8.9 us with 64 KiB here, against 16 ns natively);
 * at 1 MiB and more glibc's own mmap threshold makes native pairs pay the
 * same faults.
 */
#define QUAR_DONTNEED_MIN ((uint64_t)1 << 20)

static inline int interior(const struct blk *b, uintptr_t *lo, uintptr_t *hi)
{
	uintptr_t u = (uintptr_t)(b + 1);
	if (b->size < QUAR_DONTNEED_MIN)
		return 0;
	*lo = (u + page_size - 1) & ~(uintptr_t)(page_size - 1);
	*hi = (u + b->size) & ~(uintptr_t)(page_size - 1);
	return *hi > *lo;
}

static inline uint64_t quar_bytes(const struct blk *b)
{
	uintptr_t lo, hi;
	return real_bytes((struct blk *)b) - (interior(b, &lo, &hi) ? hi - lo : 0);
}

static void drop_interior(const struct blk *b)
{
	uintptr_t lo, hi;
	if (interior(b, &lo, &hi))
		madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

/*
 * Queue b (freed) in the calling thread's FIFO; while the quarantine as a
 * whole is over budget, give back that FIFO's oldest blocks.  Each thread
 * adds its bytes to the shared total only once they differ by QUAR_SYNC
 * from what it added last (so the total is exact within QUAR_SYNC per
 * thread), so a free takes no lock and writes no shared line in the common
 * case.  The real frees happen in the thread (and glibc arena and tcache)
 * that freed; a thread that stops freeing keeps its blocks, within the
 * global budget, until it exits (tquar_exit).
 */
static void quarantine_put(struct blk *b)
{
	struct tquar *q = &tquar;
	struct blk *victims = NULL;
	uint64_t bytes = quar_bytes(b), budget;
	int64_t total;
	if (quar_limit == 0) { /* quar_budget() is 0 exactly then */
		release(b);
		return;
	}
	if (HS_UNLIKELY(!q->keyed)) {
		q->keyed = 1;
		pthread_setspecific(tquar_key, q);
	}
	drop_interior(b);
	b->qnext = NULL;
	if (q->tail)
		q->tail->qnext = b;
	else
		q->head = b;
	q->tail = b;
	q->bytes += bytes;
	q->count++;
	q->unsynced += (int64_t)bytes;
	/* relaxed: a budget, ordered with nothing else */
	total = (int64_t)__atomic_load_n(&quar_total, __ATOMIC_RELAXED) + q->unsynced;
	/* below the least budget there can be (quar_floor), the live heap
	   (a line every thread's counters write) is not read */
	budget = total > (int64_t)quar_floor ? quar_budget() : quar_floor;
	if (total > (int64_t)budget || q->count > quar_thread_max) {
		while (q->head && (total > (int64_t)budget || q->count > quar_thread_max)) {
			struct blk *v = q->head;
			uint64_t vb = quar_bytes(v);
			q->head = v->qnext;
			if (!q->head)
				q->tail = NULL;
			q->bytes -= vb;
			q->count--;
			q->unsynced -= (int64_t)vb;
			total -= (int64_t)vb;
			v->qnext = victims;
			victims = v;
		}
		/* the next victim was freed long ago and is cold: fetch its header
		   and glibc's chunk header now, so the next free finds them near */
		if (q->head) {
			__builtin_prefetch(q->head);
			__builtin_prefetch((char *)q->head - 64);
		}
	}
	if (q->unsynced >= QUAR_SYNC || q->unsynced <= -QUAR_SYNC) {
		__atomic_add_fetch(&quar_total, (uint64_t)q->unsynced, __ATOMIC_RELAXED);
		q->unsynced = 0;
	}
	while (victims) {
		struct blk *n = victims->qnext;
		release(victims);
		victims = n;
	}
}

/* pthread key destructor: an exiting thread's quarantined blocks go back to glibc now. */
static void tquar_exit(void *arg)
{
	struct tquar *q = arg;
	struct hs_tls *t = &hs_tls;
	int was = t->in_hook;
	t->in_hook = 1;
	q->keyed = 0; /* a free by a later destructor arms it again (glibc runs it once more) */
	while (q->head) {
		struct blk *v = q->head;
		q->head = v->qnext;
		release(v);
	}
	__atomic_sub_fetch(&quar_total, q->bytes - (uint64_t)q->unsynced, __ATOMIC_RELAXED);
	q->tail = NULL;
	q->bytes = 0;
	q->count = 0;
	q->unsynced = 0;
	count_flush();
	t->in_hook = was;
}

/*
 * A checked allocation of n bytes aligned to align (0: malloc's 16),
 * zeroed when zero.  With the guard held.  NULL with errno ENOMEM (or what
 * glibc set) on failure, counted as a heap failure.
 */
static void *blk_alloc(struct hs_tls *t, size_t n, size_t align, int zero, uint64_t site)
{
	size_t off = align <= 16 ? sizeof(struct blk) : ((sizeof(struct blk) + align - 1) & ~(align - 1));
	size_t total;
	char *r, *u;
	struct blk *b;
	uint32_t stack;

	if (n > SIZE_MAX / 2 || __builtin_add_overflow(off + 32, n, &total)) {
		r = NULL;
		errno = ENOMEM;
	} else {
		total = off + n + canary_len(n);
		if (align <= 16)
			r = zero ? __libc_calloc(1, total) : __libc_malloc(total);
		else
			r = __libc_memalign(align, total);
	}
	stack = heap_stack(site);
	if (HS_UNLIKELY(r == NULL)) {
		int e = errno;
		count_failure(n, stack);
		errno = e;
		return NULL;
	}
	u = r + off;
	b = blk_of(u);
	b->size = n;
	b->qnext = NULL;
	b->alloc = (stack < (1u << 24) ? stack : 0) | (__atomic_load_n(&stack_epoch, __ATOMIC_RELAXED) & 0xffu) << 24;
	b->alloc_tid = t->tid;
	b->offset = (uint32_t)off;
	if (zero && align > 16)
		memset(u, 0, n);
	canary_put(u, n);
	/* relaxed: the program's own hand-over of the pointer orders these stores for other threads */
	__atomic_store_n(&b->state, ST_LIVE, __ATOMIC_RELAXED);
	__atomic_store_n(&b->magic, HEAP_MAGIC ^ (uint64_t)(uintptr_t)u, __ATOMIC_RELAXED);
	count_alloc(n);
	return u;
}

/*
 * A checked free of p, which carries our magic.  With the guard held.
 * Returns 1 when the block was freed, 0 when it was reported instead
 * (double or invalid free: nothing freed; overflow: marked freed but kept
 * out of glibc's hands, since glibc's own next chunk may be damaged).
 */
static int blk_free(struct hs_tls *t, int ring, void *p, uint64_t site)
{
	struct blk *b = blk_of(p);
	/* acquire: the first free's stores to the block happen before we read them */
	uint64_t old = __atomic_load_n(&b->state, __ATOMIC_ACQUIRE);
	if (HS_LIKELY(old == ST_LIVE)) {
		uint32_t st = heap_stack(site);
		uint64_t nw = ST_FREED | (uint64_t)(st < (1u << 24) ? st : 0) << 8 | (uint64_t)(uint32_t)t->tid << 32;
		/* acq_rel: the winner's free is published whole; a loser sees the winner's word */
		if (__atomic_compare_exchange_n(&b->state, &old, nw, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
			if (HS_UNLIKELY(!canary_ok(p, b->size))) {
				struct hs_finding f;
				finding_init(&f, t, HS_FIND_HEAP_OVERFLOW, p);
				f.stack3 = alloc_stack_of(b);
				f.tid3 = b->alloc_tid;
				f.size = b->size;
				count_free(b->size);
				heap_finding(t, ring, &f);
				return 0;
			}
			count_free(b->size);
			quarantine_put(b);
			return 1;
		}
	}
	if (HS_UNLIKELY(!st_is_freed(old))) {
		/* not a state of ours after all (owner_of saw one): glibc's block */
		__libc_free(p);
		return 1;
	}
	bad_state(t, ring, p, old);
	return 0;
}

/* A free of our block inside the shim: no findings, no quarantine lock. */
static void blk_free_quiet(void *p)
{
	struct blk *b = blk_of(p);
	uint64_t old = ST_LIVE;
	if (__atomic_compare_exchange_n(&b->state, &old, ST_FREED, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		count_free(b->size);
		release(b);
	}
}

/* ---- initialisation and fork ---------------------------------------------------- */

static uint64_t fork_live;              /* heap_live_bytes when fork was called */

static void heap_before_fork(void)
{
	struct hs_header *h;
	count_flush();
	h = hdr_if_recording();
	fork_live = h ? __atomic_load_n(&h->heap_live_bytes, __ATOMIC_RELAXED) : 0;
}

static void heap_mark_header(void)
{
	struct hs_header *h = hdr_if_recording();
	if (!h)
		return;
	h->heap_stacks = heap_stacks;
	h->heap_quarantine_bytes = quar_limit;
	__atomic_or_fetch(&h->flags, HS_HDR_HEAP, __ATOMIC_RELAXED);
}

/*
 * The fork child (one thread): the other threads' quarantine FIFOs are
 * abandoned — those blocks stay allocated in the child — and the shared
 * total restarts from the forking thread's own.  The child's new
 * segment starts with the parent's live bytes.  Must run after init.c's
 * atfork_child has made the child's segment.  Idempotent.
 */
HS_HIDDEN void hs_heap_after_fork_child(void)
{
	struct hs_header *h;
	if (__atomic_load_n(&heap_mode, __ATOMIC_ACQUIRE) != HEAP_ON)
		return;
	/* the site cache holds stack ids: valid here only when the tables were inherited */
	if (!hs_seg_inherited) {
		memset(site_cache, 0, sizeof site_cache);
		memset(&site_memo, 0, sizeof site_memo);
		__atomic_add_fetch(&stack_epoch, 1, __ATOMIC_RELAXED);
	}
	/* the other threads' FIFOs stay allocated in the child; the total is this thread's */
	__atomic_store_n(&quar_total, tquar.bytes - (uint64_t)tquar.unsynced, __ATOMIC_RELAXED);
	heap_mark_header();
	h = hdr_if_recording();
	if (h && fork_live && h->heap_live_bytes == 0 && h->heap_allocs == 0) {
		h->heap_live_bytes = fork_live;
		h->heap_peak_bytes = fork_live;
	}
}

/*
 * Read the configuration (HEISEN_HEAP, HEISEN_QUARANTINE_MB,
 * HEISEN_HEAP_STACKS, HEISEN_ON_HEAP_ERROR) and switch checking on when
 * asked and the shim records.  Called from the shim's constructor, or
 * lazily from the first hook that sees hs_recording.  Idempotent; only the
 * first call does anything.  Allocations made before it stay foreign.
 */
HS_HIDDEN void hs_heap_init(void)
{
	static const char *const on_heap_error_words[] = {"abort", "continue"};
	int expect = HEAP_UNKNOWN;
	struct hs_tls *t = &hs_tls;
	int was = t->in_hook;
	if (!__atomic_load_n(&hs_recording, __ATOMIC_ACQUIRE))
		return;
	if (!__atomic_compare_exchange_n(&heap_mode, &expect, HEAP_INIT, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
		return;
	t->in_hook = 1;
	if (!hs_getenv_bool("HEISEN_HEAP", 1)) { /* on unless HEISEN_HEAP=0 */
		__atomic_store_n(&heap_mode, HEAP_OFF, __ATOMIC_RELEASE);
		t->in_hook = was;
		return;
	}
	page_size = (size_t)sysconf(_SC_PAGESIZE);
	quar_limit = hs_getenv_num("HEISEN_QUARANTINE_MB", 64, 0, QUARANTINE_MB_MAX, &quar_explicit) << 20;
	if (!quar_explicit)
		quar_thread_max = QUAR_THREAD_BLOCKS;
	/*
	 * The quarantine is memory the program did not ask for.  In a memory-
	 * limited cgroup (a container; seed 002's pool of workers, each with a
	 * quarantine of its own) the default is capped at 1/32 of the limit,
	 * so heisen cannot be what gets the program OOM-killed.  An explicit
	 * HEISEN_QUARANTINE_MB is taken as it is.
	 */
	if (!quar_explicit && (hs_seg.hdr->flags & HS_HDR_ENV) && hs_seg.hdr->env.mem_limit &&
	    quar_limit > hs_seg.hdr->env.mem_limit / 32)
		quar_limit = hs_seg.hdr->env.mem_limit / 32;
	quar_floor = quar_explicit || quar_limit < QUAR_FLOOR ? quar_limit : QUAR_FLOOR;
	{
		static const char *const words[] = {"site", "full", "none"};
		int k = hs_getenv_enum("HEISEN_HEAP_STACKS", words, 3, 0);
		if (k == 1)
			heap_stacks = HS_HEAP_STACKS_FULL;
		else if (k == 2)
			heap_stacks = HS_HEAP_STACKS_NONE;
	}
	heap_continue = hs_getenv_enum("HEISEN_ON_HEAP_ERROR", on_heap_error_words, 2, 0) == 1;
	heap_mark_header();
	pthread_atfork(heap_before_fork, NULL, hs_heap_after_fork_child);
	if (pthread_key_create(&tquar_key, tquar_exit) != 0)
		quar_limit = 0; /* no way to empty an exiting thread's FIFO: no quarantine */
	atexit(count_flush); /* the exiting thread's counts; runs before init.c's on_exit handler */
	/* release: the settings above are visible to every hook that sees HEAP_ON */
	__atomic_store_n(&heap_mode, HEAP_ON, __ATOMIC_RELEASE);
	t->in_hook = was;
}

/* 1 when checking is on; runs the lazy initialisation. */
static inline int heap_on(void)
{
	int m = __atomic_load_n(&heap_mode, __ATOMIC_ACQUIRE);
	if (HS_LIKELY(m >= HEAP_OFF))
		return m == HEAP_ON;
	if (m == HEAP_UNKNOWN && !hs_tls.in_hook) {
		hs_heap_init();
		return __atomic_load_n(&heap_mode, __ATOMIC_ACQUIRE) == HEAP_ON;
	}
	return 0;
}

/* A large allocation is about to be made, heap checked or not: memory
 * samples are due after enough of them (proc.c). */
static inline void note_size(size_t n)
{
	if (HS_UNLIKELY(n >= HS_MEM_BIG))
		hs_mem_big_alloc(n);
}

/* ---- the hooks ------------------------------------------------------------------------ */

/* A checked allocation from a hook; the caller has checked heap_on(). */
static void *hook_alloc(size_t n, size_t align, int zero, uint64_t site)
{
	struct hs_tls *t = &hs_tls;
	int e = errno;
	void *p;
	heap_enter(t);
	p = blk_alloc(t, n, align, zero, site);
	hs_leave(t);
	if (p)
		errno = e;
	return p;
}

HS_EXPORT void *malloc(size_t n)
{
	HS_FAULT_ALLOC(n); /* faults.c, chaos.c: --fail malloc, --heap-limit, --chaos */
	note_size(n);
	HS_GUARD_ALLOC(n, 0, 0); /* guarded.c: sampled guard pages */
	if (!heap_on() || hs_tls.in_hook)
		return __libc_malloc(n);
	return hook_alloc(n, 0, 0, SITE());
}

HS_EXPORT void *calloc(size_t n, size_t m)
{
	size_t total;
	HS_FAULT_ALLOC(n * m); /* faults.c, chaos.c: --fail malloc, --heap-limit, --chaos */
	if (!__builtin_mul_overflow(n, m, &total)) {
		note_size(total);
		HS_GUARD_ALLOC(total, 0, 1); /* guarded.c: sampled guard pages */
	}
	if (!heap_on() || hs_tls.in_hook)
		return __libc_calloc(n, m);
	if (__builtin_mul_overflow(n, m, &total)) {
		errno = ENOMEM;
		return NULL;
	}
	return hook_alloc(total, 0, 1, SITE());
}

static void hook_free(void *p, uint64_t site)
{
	struct hs_tls *t = &hs_tls;
	int e = errno, ring;
	enum owner o;
	if (HS_UNLIKELY(t->in_hook)) {
		o = owner_of(p);
		if (o == OWN_OURS)
			blk_free_quiet(p);
		else if (o == OWN_FOREIGN)
			__libc_free(p);
		errno = e;
		return;
	}
	ring = heap_enter(t);
	o = owner_of(p);
	if (HS_LIKELY(o == OWN_OURS)) {
		/* ---- lock graph (locks.c): locks in the freed block are gone (the
		   page filter first: most blocks never held a lock) ---- */
		size_t n = blk_of(p)->size;
		if (HS_UNLIKELY(hs_lock_pages_seen((uintptr_t)p, (uintptr_t)p + n)))
			hs_locks_on_free(p, n);
		/* ---- */
		blk_free(t, ring, p, site);
	} else if (!foreign_is_invalid(t, ring, p, o))
		__libc_free(p);
	hs_leave(t);
	errno = e;
}

HS_EXPORT void free(void *p)
{
	if (!p)
		return;
	HS_CHAOS(HS_CHAOS_FREE); /* chaos.c: --chaos */
	if (hs_guard_owns(p)) { /* guarded.c: sampled guard pages */
		hs_guard_free(p);
		return;
	}
	if (!heap_on()) {
		/* ---- lock graph (locks.c): locks in the freed block are gone (0: glibc's usable size) ---- */
		if (!hs_tls.in_hook)
			hs_locks_on_free(p, 0);
		/* ---- */
		__libc_free(p);
		return;
	}
	hook_free(p, SITE());
}

/* realloc of a checked block or a foreign one; the caller has checked heap_on(). */
static void *hook_realloc(void *p, size_t n, uint64_t site)
{
	struct hs_tls *t = &hs_tls;
	int e = errno, ring;
	struct blk *b;
	void *q;
	uint64_t st;

	enum owner o;

	if (p == NULL)
		return hs_tls.in_hook ? __libc_malloc(n) : hook_alloc(n, 0, 0, site);
	o = owner_of(p);
	if (o != OWN_OURS) {
		if (!t->in_hook && o != OWN_FOREIGN) {
			ring = heap_enter(t);
			foreign_is_invalid(t, ring, p, o);
			hs_leave(t);
			errno = EINVAL;
			return NULL;
		}
		return __libc_realloc(p, n);
	}
	b = blk_of(p);
	if (HS_UNLIKELY(t->in_hook)) {
		/* the shim resizing a block of the program: keep it glibc's from now on */
		if (n == 0) {
			blk_free_quiet(p);
			return NULL;
		}
		q = __libc_malloc(n);
		if (q) {
			memcpy(q, p, b->size < n ? b->size : n);
			blk_free_quiet(p);
		}
		return q;
	}
	ring = heap_enter(t);
	st = __atomic_load_n(&b->state, __ATOMIC_ACQUIRE);
	if (HS_UNLIKELY(st != ST_LIVE)) {
		/* continue: a new block with what the old one held; the old one is not freed again */
		bad_state(t, ring, p, st);
		q = n ? blk_alloc(t, n, 0, 0, site) : NULL;
		if (q)
			memcpy(q, p, b->size < n ? b->size : n);
		hs_leave(t);
		errno = e;
		return q;
	}
	if (n == 0) {
		/* glibc: realloc(p, 0) frees p and returns NULL */
		blk_free(t, ring, p, site);
		hs_leave(t);
		errno = e;
		return NULL;
	}
	q = blk_alloc(t, n, 0, 0, site);
	if (q) {
		memcpy(q, p, b->size < n ? b->size : n);
		blk_free(t, ring, p, site);
		errno = e;
	}
	hs_leave(t);
	return q;
}

HS_EXPORT void *realloc(void *p, size_t n)
{
	if (n) HS_FAULT_ALLOC(n); /* faults.c, chaos.c: --fail malloc, --heap-limit, --chaos (the old block stays) */
	note_size(n);
	if (hs_guard_owns(p)) /* guarded.c: sampled guard pages */
		return hs_guard_realloc(p, n);
	if (!heap_on())
		return __libc_realloc(p, n);
	return hook_realloc(p, n, SITE());
}

HS_EXPORT void *reallocarray(void *p, size_t n, size_t m)
{
	size_t total;
	if (__builtin_mul_overflow(n, m, &total)) {
		errno = ENOMEM;
		return NULL;
	}
	note_size(total);
	if (hs_guard_owns(p)) /* guarded.c: sampled guard pages */
		return hs_guard_realloc(p, total);
	if (!heap_on())
		return __libc_realloc(p, total);
	return hook_realloc(p, total, SITE());
}

/* glibc's memalign rules: <= 16 is malloc, too large is EINVAL, others round up to a power of two. */
static void *hook_memalign(size_t align, size_t n, uint64_t site)
{
	if (align > SIZE_MAX / 2 + 1) {
		errno = EINVAL;
		return NULL;
	}
	if (align & (align - 1)) {
		size_t a = 32;
		while (a < align)
			a <<= 1;
		align = a;
	}
	if (align > UINT32_MAX / 2)
		return __libc_memalign(align, n); /* foreign: our offset field cannot hold it */
	return hook_alloc(n, align <= 16 ? 0 : align, 0, site);
}

HS_EXPORT void *memalign(size_t align, size_t n)
{
	note_size(n);
	HS_GUARD_ALLOC(n, align, 0); /* guarded.c: sampled guard pages */
	if (!heap_on() || hs_tls.in_hook)
		return __libc_memalign(align, n);
	return hook_memalign(align, n, SITE());
}

HS_EXPORT void *aligned_alloc(size_t align, size_t n)
{
	note_size(n);
	HS_GUARD_ALLOC(n, align, 0); /* guarded.c: sampled guard pages */
	/* glibc 2.36: aligned_alloc is memalign (2.38 adds EINVAL for a non-power of two) */
	if (!heap_on() || hs_tls.in_hook)
		return __libc_memalign(align, n);
	return hook_memalign(align, n, SITE());
}

HS_EXPORT int posix_memalign(void **pp, size_t align, size_t n)
{
	int e = errno;
	void *p;
	if (align % sizeof(void *) != 0 || (align & (align - 1)) != 0 || align == 0)
		return EINVAL;
	note_size(n);
	if (HS_UNLIKELY(hs_guard_sample(n)) && (p = hs_guard_malloc(n, align, 0)) != NULL) { /* guarded.c */
		*pp = p;
		return 0;
	}
	if (!heap_on() || hs_tls.in_hook)
		p = __libc_memalign(align, n);
	else
		p = hook_memalign(align, n, SITE());
	if (!p) {
		errno = e;
		return ENOMEM;
	}
	*pp = p;
	return 0;
}

HS_EXPORT void *valloc(size_t n)
{
	note_size(n);
	if (!heap_on() || hs_tls.in_hook)
		return __libc_valloc(n);
	return hook_memalign(page_size, n, SITE());
}

HS_EXPORT void *pvalloc(size_t n)
{
	size_t r;
	note_size(n);
	if (!heap_on() || hs_tls.in_hook)
		return __libc_pvalloc(n);
	if (__builtin_add_overflow(n, page_size - 1, &r)) {
		errno = ENOMEM;
		return NULL;
	}
	return hook_memalign(page_size, r & ~(page_size - 1), SITE());
}

/* glibc's malloc_usable_size, for foreign pointers: resolved once, inside the guard. */
static size_t (*real_usable)(void *);

HS_EXPORT size_t malloc_usable_size(void *p)
{
	size_t (*f)(void *);
	if (!p)
		return 0;
	if (hs_guard_owns(p)) /* guarded.c: sampled guard pages */
		return hs_guard_usable_size(p);
	if (heap_on() && ours(p))
		return blk_of(p)->size;
	f = __atomic_load_n(&real_usable, __ATOMIC_ACQUIRE);
	if (HS_UNLIKELY(!f)) {
		struct hs_tls *t = &hs_tls;
		int was = t->in_hook;
		t->in_hook = 1;
		f = (size_t(*)(void *))dlvsym(RTLD_NEXT, "malloc_usable_size", "GLIBC_2.2.5");
		if (!f)
			f = (size_t(*)(void *))dlsym(RTLD_NEXT, "malloc_usable_size");
		t->in_hook = was;
		if (!f) {
			hs_write_err("heisen: cannot resolve the real malloc_usable_size; aborting\n");
			abort();
		}
		__atomic_store_n(&real_usable, f, __ATOMIC_RELEASE);
	}
	return f(p);
}

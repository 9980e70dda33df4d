/* SPDX-License-Identifier: MIT */
/*
 * shim/heap_core.c — the heap checker's core: the blocks that malloc and
 * friends (interposed in heap_hooks.c, over the interface heap_core.h) hand
 * out get a small header in front, so that a double free, an
 * invalid free or a broken tail canary is caught at the free that finds it,
 * with the allocation's, the first free's and the second free's stacks
 * (AddressSanitizer's report, without recompiling).  docs/design.md "Heap";
 * the contract and environment variables are docs/interfaces.md "The heap".
 *
 * A block of ours (its two formats: the comment above SMALL_MAX):
 *
 *   [ padding (aligned blocks) ][ tag | state ][ user bytes ][ canary ][ tail word (large) ]
 *                                              ^ user pointer
 *
 * The 16 bytes right before the user pointer are the chunk header: the
 * tag (a 32-bit magic of the user pointer, and the allocating thread) and
 * the state word.  Only those 16 bytes are read before the magic matches,
 * and through hs_safe_read16 (safe_read.S): a pointer from malloc always
 * has them mapped (glibc's own chunk header), and a wild pointer with
 * nothing mapped in front of it is an invalid-free instead of a SIGSEGV
 * inside free.  A pointer without our magic (or with our magic but a word
 * behind it that is no state of ours) is foreign — allocated before
 * checking started, by the shim itself, or by __libc_malloc directly — and
 * goes to glibc untouched, unless it is provably bad or holds the record
 * of one of our blocks given back (below).
 *
 * The state word goes live -> freed by compare-and-swap, and the freed word
 * carries the first free's stack id and thread, so two racing frees of one
 * block publish and see the first free atomically: exactly one wins, the
 * other is the double free.  Freed blocks wait in a FIFO quarantine, two
 * per thread (small blocks, large blocks) and without a lock (rings of
 * their own, never a link inside the freed block), whose budget for all
 * threads together is HEISEN_QUARANTINE_MB when set, else a 32nd of the
 * live heap between 256 KiB and 64 MiB (quar_budget), a thread's heavier
 * kind given back first when over it, at most 512 blocks in one FIFO.
 * Then they go back to glibc "released", leaving the record of the free in
 * their first user bytes (release(), small_record), where glibc's own
 * links do not reach, and blocks of 1 KiB and more leave a 48-byte
 * tombstone chunk that holds header and record (cut at their free already:
 * the tombstone waits in the FIFO in the block's place, tomb_at_free), so
 * a second free long after the quarantine still finds both stacks, as
 * long as glibc has not
 * handed the same memory out again — the rule of Scudo's header check,
 * with the stacks.
 *
 * What is detected:
 *   - double-free: a free (or realloc) of one of our blocks in state freed
 *     (in the quarantine) or released (given back, its record still there);
 *   - invalid-free: a pointer not 16-byte aligned (glibc never returns one),
 *     a 16-aligned pointer with no readable memory in front of it, a
 *     pointer into the middle of one of our blocks whose header lies
 *     at most 8 KiB before the pointer's page (a bounded backward scan),
 *     and a pointer whose chunk header glibc's free would refuse;
 *   - heap-overflow: the tail canary (a small block's: glibc's slack, 1
 *     to 15 bytes after the requested size, 40 - n up to 24 bytes, none
 *     when the request fills glibc's chunk exactly; a large block's 8 to
 *     23 bytes) changed, checked at free and realloc; for an exact fit,
 *     the flags of glibc's size word of the next chunk, right after the
 *     user bytes (fit_ok), checked at free and realloc; or glibc's size
 *     word of the next chunk changed (an overflow past the canary),
 *     checked before that block goes back to glibc (not for a block
 *     aligned beyond 16), or found at the next block's free when the
 *     overflow went on through its header (front_overran).
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

#include "heap_core.h"
#include "shim.h"


/* The hook's CFA, for wrapper_stack() (heap_core.h, HS_HEAP_SITE). */
HS_HIDDEN __thread uint64_t hs_heap_cfa __attribute__((tls_model("initial-exec")));

#define HEAP_MAGIC 0x9e3c5a48454150f1ull /* mixed with the user pointer (magic32) */
#define SMALL_TAG 0x5a17c3e9u          /* a small block's magic is magic32 ^ SMALL_TAG */
#define ST_LIVE_S 0xa9u                /* a small block, live: | size << 8 (24 bits) | allocation << 32 */
#define ST_LIVE_L 0xa7u                /* a large block, live: | size << 8 (56 bits) */
#define ST_LIVE_LA 0xabu               /* the same, aligned beyond 16 (the offset is in the tail word) */
#define ST_FREED 0xf3u                 /* | first-free stack << 8 (24 bits) | tid << 32: in the quarantine */
#define ST_RELEASED 0xf5u              /* the same, given back to glibc since */
#define ST_KIND(w) ((unsigned)((w)&0xffu))
#define ST_STACK(w) ((uint32_t)(((w) >> 8) & 0xffffffu))
#define ST_TID(w) ((int32_t)(uint32_t)((w) >> 32))
#define ST_SSIZE(w) (((w) >> 8) & 0xffffffu)
#define ST_SALLOC(w) ((uint32_t)((w) >> 32))
#define ST_LSIZE(w) ((w) >> 8)

/*
 * Two formats.  A block of ours: glibc's chunk, then (aligned blocks only)
 * padding, then the 16-byte chunk header right before the user pointer p,
 * the user bytes, and the tail canary:
 *
 *   [ padding ][ tag | state ][ user bytes ][ canary ][ tail word (large blocks) ]
 *                              ^ p
 *
 * The tag (p-16) is a 32-bit magic of p in its high half (magic32; xor
 * SMALL_TAG for a small block) and the allocating thread in its low half;
 * the state word (p-8) goes live -> freed -> released.  One offset for
 * every block with malloc's alignment (16 from glibc's pointer), so when
 * glibc hands a chunk out again from the same start, the new block's
 * pointer is the old one: a second free then frees the new block, as
 * under Scudo, and is never mistaken for a free into the middle of it.
 *
 * Small blocks (requests under SMALL_MAX bytes, malloc's alignment): the
 * live state word holds the size and the allocation stack — the whole
 * metadata is the 16-byte header, as Scudo's packed chunk header is (a
 * churning C++ program's blocks are mostly 24 to 96 bytes; a 48-byte
 * header doubled them).  Large blocks (the rest): the live state word
 * holds the size, and the tail word after the canary the allocation stack
 * and, for an aligned block, the offset from glibc's pointer.
 *
 * A free saves the live word in the block's user bytes (p+8; every block
 * has at least 24 bytes of user bytes and canary: an exact fit without a
 * canary is 40 bytes or more) before its
 * compare-and-swap, so whoever finds the block freed can name its size and
 * allocation; the quarantine keeps its own copy (struct qent), so writes
 * into freed memory never derail the shim.  When the block goes back to
 * glibc its header lies where glibc writes its links (tcache next and key,
 * fastbin and small-bin fd and bk: the chunk's first 16 bytes), so
 * release() first leaves a record of the free in the user bytes at p+0,
 * p+8, p+16 (small_record), which those links do not reach.  Blocks of
 * 1 KiB and more are cut to a 48-byte tombstone chunk that keeps header
 * and record (release()); no block of ours asks glibc for a 48-byte chunk
 * (canary_len_s), and the freeing thread keeps its last TOMB_KEEP
 * tombstones allocated (tomb_keep), so glibc cannot merge them away.
 */
#define SMALL_MAX 960u                 /* small: 16 + n + canary stays under TOMBSTONE_MIN */
#define HDR 16u
#define SIZE56 ((uint64_t)1 << 56)     /* a large block's size field; larger requests are glibc's own */
#define OFF_MAX ((size_t)0xffffff << 4) /* the tail word's offset field */

/* The 32-bit magic of the user pointer p (one multiply). */
static inline uint32_t magic32(const void *p)
{
	return (uint32_t)((((uint64_t)(uintptr_t)p ^ HEAP_MAGIC) * 0x9e3779b97f4a7c15ull) >> 32);
}

enum fmt { FMT_NONE, FMT_LARGE, FMT_SMALL };

/* The format the tag word w0 in front of p names, FMT_NONE when no tag of ours. */
static inline enum fmt fmt_of(const void *p, uint64_t w0)
{
	uint32_t x = (uint32_t)(w0 >> 32) ^ magic32(p);
	return x == SMALL_TAG ? FMT_SMALL : x == 0 ? FMT_LARGE : FMT_NONE;
}

static inline uint64_t tag_of(const void *p, int small, int32_t tid)
{
	return (uint64_t)(magic32(p) ^ (small ? SMALL_TAG : 0u)) << 32 | (uint32_t)tid;
}

/* The header words of p: [0] the tag, [1] the state. */
static inline uint64_t *hw(const void *p)
{
	return (uint64_t *)(uintptr_t)p - 2;
}

/* A check byte of p (tail and released words). */
static inline uint64_t check8(const void *p)
{
	return (magic32(p) >> 11 ^ 0x5c) & 0xffu;
}

/*
 * Stack ids are ids into this process's segment.  A fork child's segment
 * starts with its parent's stacks, id for id (init.c inherit_tables), so a
 * block allocated before the fork keeps a valid allocation stack; when the
 * child's segment could not take them (a fallback-small segment) the epoch
 * changes, and older blocks report no allocation stack rather than a wrong
 * one.
 */
static uint32_t stack_epoch;           /* [atomic] */

static inline uint32_t alloc_stack_of(uint32_t alloc)
{
	uint32_t e = __atomic_load_n(&stack_epoch, __ATOMIC_RELAXED) & 0xffu;
	return (alloc >> 24) == e ? alloc & 0xffffffu : 0;
}

/* 1 when the state word is one a free finds on a block it already freed. */
static inline int st_is_freed(uint64_t w)
{
	return ST_KIND(w) == ST_FREED || ST_KIND(w) == ST_RELEASED;
}

/* 1 when the state word is a live block's (either format). */
static inline int st_is_live(uint64_t w)
{
	unsigned k = ST_KIND(w);
	return k == ST_LIVE_S || k == ST_LIVE_L || k == ST_LIVE_LA;
}

HS_HIDDEN int hs_heap_mode;            /* [atomic] HS_HEAP_MODE_* (heap_core.h) */

/*
 * errno's place as an offset from the thread pointer, the same in every
 * thread (glibc's errno is initial-exec TLS of libc.so, in the static TLS
 * block whose offset the dynamic linker fixes once for all threads: the
 * offset __errno_location itself adds to %fs:0).  Read once by
 * hs_heap_init (before checking is on), so the core's entries save and
 * restore errno with two instructions and no call to __errno_location
 * through the PLT.
 */
static intptr_t errno_tpoff;

/* The calling thread's errno (checking is on: errno_tpoff is set). */
static inline int *errno_at(void)
{
	return (int *)(void *)((char *)__builtin_thread_pointer() + errno_tpoff);
}
static unsigned heap_stacks = HS_HEAP_STACKS_SITE;

int hs_heap_unwinds_each_site(void)
{
	return __atomic_load_n(&hs_heap_mode, __ATOMIC_ACQUIRE) == HS_HEAP_MODE_ON &&
	       heap_stacks != HS_HEAP_STACKS_NONE;
}
static int heap_continue;              /* HEISEN_ON_HEAP_ERROR=continue */
HS_HIDDEN size_t hs_heap_page_size = 4096;

/*
 * The quarantine: two FIFOs per thread, no lock; one budget for all.  A
 * thread over it gives back its heavier kind first.  A FIFO is a ring of
 * entries (pointer and live word) in memory of its own, mapped at the
 * thread's first free: never a link inside the freed blocks, which the
 * program may still write into.  Small blocks (the small format) wait in
 * one FIFO, the others in the second (quarantine_put).
 */
struct qent {
	void *p;
	uint64_t live;         /* the block's live word */
	uint64_t bytes;        /* what it holds resident (quar_bytes) */
};
struct qfifo {
	struct qent *ring;     /* cap entries (the thread's mapping); NULL until the first free */
	uint32_t head, tail, count; /* oldest entry, next free entry, entries */
	uint64_t bytes;        /* resident bytes of the blocks queued (quar_bytes) */
};
enum { QF_SMALL = 0, QF_LARGE = 1 };
struct tquar {
	struct qfifo f[2];     /* QF_SMALL, QF_LARGE: one mapping of 2 * cap entries */
	uint32_t cap, mask;    /* a power of two, and cap - 1 */
	int64_t unsynced;      /* bytes queued - bytes taken out, not yet added to quar_total */
	int keyed;             /* the thread-exit destructor is armed */
	int exited;            /* tquar_exit ran: later frees of this thread are released at once */
	void **tomb;           /* TOMB_KEEP tombstone chunks (glibc's pointers), after the rings in their mapping */
	uint32_t tomb_head, tomb_count; /* the oldest tombstone kept, and how many are */
};
#define QUAR_SYNC ((int64_t)64 << 10)
static __thread struct tquar tquar __attribute__((tls_model("initial-exec")));
static pthread_key_t tquar_key;        /* its destructor empties an exiting thread's FIFOs */
static uint64_t quar_limit;            /* the cap on all threads' FIFOs together, bytes (see quar_budget) */
static uint64_t quar_total;            /* [atomic] bytes queued in all FIFOs, as synced */

/* Canary bytes: position-dependent, so a run of one repeated byte is
 * caught.  CANARY is the pattern's start; the 8 bytes before it are only
 * ever masked off (canary_put/canary_ok with a canary under 8 bytes). */
static const unsigned char canary_pat[8 + 48] = {
	0, 0, 0, 0, 0, 0, 0, 0,
	0xa1, 0xb2, 0xc3, 0xd4, 0xe5, 0xf6, 0x07, 0x18, 0x29, 0x3a, 0x4b, 0x5c, 0x6d, 0x7e, 0x8f, 0x90,
	0xa9, 0xba, 0xcb, 0xdc, 0xed, 0xfe, 0x0f, 0x10, 0x21, 0x32, 0x43, 0x54, 0x65, 0x76, 0x87, 0x98,
	0xb1, 0xc2, 0xd3, 0xe4, 0xf5, 0x06, 0x17, 0x28, 0x39, 0x4a, 0x5b, 0x6c, 0x7d, 0x8e, 0x9f, 0xa0,
};
#define CANARY (canary_pat + 8)

/*
 * Bytes of canary after a large block of size n: at least 8, and ending 8
 * bytes past a 16-byte boundary.  A request of that length (the header is
 * 16 bytes) is what glibc serves with no slack: its chunk is the request
 * plus its 8-byte size word, rounded to 16, and the last 8 bytes of an
 * in-use chunk's memory are the next chunk's prev_size field, which glibc
 * lets the program use (malloc_usable_size counts them).  8 to 23 bytes;
 * 16 more under 16 bytes (an aligned large block), so that the user bytes
 * and canary hold a released block's 24-byte record.
 */
static inline size_t canary_len(size_t n)
{
	return (((n + 8 + 8 + 15) & ~(size_t)15) - 8 - n) + (n < 16 ? 16 : 0);
}

/*
 * A small block's canary: the slack glibc's chunk already has after the
 * header and the n user bytes, and nothing more.  0 to 15 bytes for n >=
 * 25; below, 40 - n (the chunk is 64 bytes: never the tombstones' 48, and
 * n plus canary is 40, room for the release record).  An overflow's first
 * byte lands in the canary (caught at free) or, when the request fills its
 * chunk exactly (n + 8 a multiple of 16: 40, 56, 88 — a std::map node —
 * and so on; no canary), in glibc's size word of the next chunk, whose
 * flag bits the free checks (fit_ok); one longer than the canary reaches
 * that size word too, which release() checks before glibc sees it
 * (chunk_damaged, chunk_overrun).  Scudo's way of using glibc's rounding
 * as its check space: the 8-byte minimum it replaces cost 7 bytes a block
 * on a C++ churn, and the 16-byte canary an exact fit had since cost 16
 * more (bench/README.md "Exact-fit blocks without a canary").
 */
static inline size_t small_chunk(size_t n)
{
	return n > 24 ? (n + 24 + 15) & ~(size_t)15 : 64;
}

static inline size_t canary_len_s(size_t n)
{
	/* small_chunk(n) - 8 - HDR - n */
	return HS_LIKELY(n > 24) ? (0 - (n + 8)) & 15 : 40 - n;
}

/*
 * An exact fit (canary_len_s 0) whose chunk glibc made 16 bytes larger
 * (a free chunk too small to split, handed out whole) or mmapped has room
 * after the user bytes, which the overflow's first byte would reach
 * unseen: it gets a 16-byte canary there.  Which case a block is comes
 * from glibc's size word of its own chunk (p - 24), at its allocation and
 * again at its free: FIT_EXACT (the user bytes end at the next chunk's
 * size word), FIT_ROOM (16-byte canary), FIT_DAMAGED (neither: a write
 * from the block in front, which release() reports).
 */
enum fit { FIT_EXACT, FIT_ROOM, FIT_DAMAGED };
#define FIT_CANARY 16u

static int glibc_would_refuse(const void *p, const uint64_t w[2]);

static inline enum fit fit_of(const void *p, size_t n)
{
	const uint64_t *c = (const uint64_t *)p - 4; /* prev_size, size, then our header */
	uint64_t s = c[1] & ~(uint64_t)7;
	if (HS_LIKELY(s == n + 24 && !(c[1] & 2)))
		return FIT_EXACT;
	if (c[1] & 2) /* mmapped: a page or more, unless the word is damaged */
		return glibc_would_refuse((const char *)p - HDR, c) ? FIT_DAMAGED : FIT_ROOM;
	return s == n + 24 + 16 ? FIT_ROOM : FIT_DAMAGED;
}

/*
 * 1 when glibc's size word of the chunk after the exact-fit block p of n
 * bytes (the 8 bytes right after its user bytes) is one glibc could have
 * written while p is in use: PREV_INUSE set (p's chunk is in use), not
 * IS_MMAPPED, bit 3 clear (sizes are multiples of 16), NON_MAIN_ARENA
 * clear when p's own chunk is the main arena's (no chunk of that heap has
 * it), and a size under 2^47.  An off-by-one's NUL (strcpy into a block
 * of strlen bytes) clears PREV_INUSE: always caught; a random byte passes
 * one time in 16 (8 in a thread's arena) and is then found when the next
 * block goes back to glibc, if it is one of ours (chunk_damaged).  The
 * word's legal values change while p lives (the next chunk is split and
 * merged), its flags do not.  The next chunk always exists (the top chunk
 * at least): fit_of said p's chunk is not mmapped.
 */
static inline int fit_ok(const void *p, size_t n)
{
	uint64_t own = ((const uint64_t *)p)[-3], w;
	memcpy(&w, (const char *)p + n, sizeof w);
	return (w & (0xffff80000000000bull | (~own & 4))) == 1;
}

/* The canary's last 8-byte word: where it lies (it ends 8 past a 16-byte
 * boundary, so the word is 8-aligned) and which of its bytes are canary
 * (the high len ones under 8 bytes: the rest are user bytes). */
static inline uint64_t canary_mask(size_t len)
{
	return len >= 8 ? ~0ull : ~0ull << (64 - 8 * len);
}

/* Write the len-byte canary after the n bytes at u: the last word (masked
 * into the user bytes it shares under 8 bytes: n + len is at least 24),
 * the first word over 8 bytes, the second over 16, no loop (the pattern is
 * by position, so overlapping stores agree).  Bytes 16 to len-9 of a
 * canary over 32 bytes are padding, neither written nor checked. */
static inline void canary_put(char *u, size_t n, size_t len)
{
	uint64_t c, z, m = canary_mask(len);
	memcpy(&c, u + n + len - 8, 8);
	memcpy(&z, CANARY + len - 8, 8);
	c = (c & ~m) | (z & m);
	memcpy(u + n + len - 8, &c, 8);
	if (len > 8)
		memcpy(u + n, CANARY, 8);
	if (len > 16)
		memcpy(u + n + 8, CANARY + 8, 8);
}

/* 1 when the canary after the n bytes at u is intact (the same words). */
static inline int canary_ok(const char *u, size_t n, size_t len)
{
	uint64_t a, b, c, x, y, z;
	memcpy(&c, u + n + len - 8, 8);
	memcpy(&z, CANARY + len - 8, 8);
	c = (c ^ z) & canary_mask(len);
	a = x = b = y = 0;
	if (len > 8) {
		memcpy(&a, u + n, 8);
		memcpy(&x, CANARY, 8);
	}
	if (len > 16) {
		memcpy(&b, u + n + 8, 8);
		memcpy(&y, CANARY + 8, 8);
	}
	return (c | (a ^ x) | (b ^ y)) == 0;
}

/* An exact fit's allocation: the canary in the room glibc gave, if any. */
static __attribute__((noinline)) void exact_fit_put(char *u, size_t n)
{
	if (fit_of(u, n) == FIT_ROOM)
		canary_put(u, n, FIT_CANARY);
}

/*
 * What a block of ours is: size as requested, allocation (stack | epoch
 * << 24), allocating thread, offset of p from glibc's pointer, format.
 */
struct bview {
	uint64_t size;
	uint32_t alloc;
	int32_t alloc_tid;
	uint32_t offset;
	int small;
};

/* Bytes of canary (and tail word) after the n user bytes of a block. */
static inline size_t after_len(size_t n, int small)
{
	return small ? canary_len_s(n) : canary_len(n) + 8;
}

/* Bytes glibc was asked for: offset, user bytes, canary, tail word. */
static inline uint64_t view_real_bytes(const struct bview *v)
{
	return v->offset + v->size + after_len(v->size, v->small);
}

/*
 * The tail word of the large block p of size bytes, 1 when it reads back
 * with p's check byte.  It lies 8 past a 16-byte boundary (canary_len);
 * read through the probe: a live word copied from freed memory the
 * program wrote into may name a size that leads off the heap.  Out of
 * line: the free of a small block never needs it.
 */
static __attribute__((noinline, cold)) int tail_word(const void *p, uint64_t size, uint64_t *t)
{
	uint64_t two[2];
	if (!hs_safe_read16((const char *)p + size + canary_len(size) - 8, two) || (two[1] & 0xffu) != check8(p))
		return 0;
	*t = two[1];
	return 1;
}

/*
 * The view of p (ours) from its live word (the state word of a live
 * block, the copy of a freed one).  A large block's tail word is read for
 * its allocation and offset only when `tail` is set (a miss on a large
 * block's last line; the free path does not need them).  Returns 0 when
 * live is no live word, or an aligned block's tail word is damaged (size,
 * allocation and offset are then 0 or guesses).
 */
static inline int view_of_live(const void *p, uint64_t live, int tail, struct bview *v)
{
	unsigned k = ST_KIND(live);
	v->alloc_tid = (int32_t)(uint32_t)hw(p)[0];
	v->offset = HDR;
	v->alloc = 0;
	if (HS_LIKELY(k == ST_LIVE_S)) {
		v->small = 1;
		v->size = ST_SSIZE(live);
		v->alloc = ST_SALLOC(live);
		return 1;
	}
	v->small = 0;
	if (k != ST_LIVE_L && k != ST_LIVE_LA) {
		v->size = 0;
		return 0;
	}
	v->size = ST_LSIZE(live);
	if (tail || k == ST_LIVE_LA) {
		uint64_t t;
		if (!tail_word(p, v->size, &t))
			return k == ST_LIVE_L;
		v->alloc = (uint32_t)(t >> 32);
		if (k == ST_LIVE_LA)
			v->offset = (uint32_t)((t >> 8) & 0xffffffu) << 4;
	}
	return 1;
}

/* The view of p, a live or quarantined block of ours (the live word from
 * the state word, or from the copy at p+8 of a freed one). */
static inline int blk_view(const void *p, struct bview *v)
{
	uint64_t st = __atomic_load_n(&hw(p)[1], __ATOMIC_RELAXED);
	if (!st_is_live(st))
		st = ((const uint64_t *)p)[1];
	return view_of_live(p, st, 1, v);
}

/*
 * What lies in front of p, a pointer the program hands to free or realloc,
 * and the 16 bytes there (w: the tag and the state word as read, when p is
 * 16-aligned and they are mapped).  Reads the 16 bytes at p-16 only, and
 * through hs_safe_read16, so a wild pointer is reported instead of
 * crashing here.
 */
enum owner {
	OWN_FOREIGN,   /* mapped, not ours: glibc's (or provably bad: foreign_is_invalid) */
	OWN_OURS,      /* our magic and a state word of ours (live, freed or released) */
	OWN_UNMAPPED,  /* 16-aligned, but p-16 is not readable: never from malloc */
	OWN_MISALIGNED /* not 16-aligned: glibc never returns one */
};

static inline __attribute__((always_inline)) enum owner owner_words(const void *p, uint64_t w[2])
{
	enum fmt f;
	if (HS_UNLIKELY(((uintptr_t)p & 15) != 0))
		return OWN_MISALIGNED;
	if (HS_UNLIKELY(!hs_safe_read16((const char *)p - 16, w)))
		return OWN_UNMAPPED;
	f = fmt_of(p, w[0]);
	if (HS_LIKELY(f == FMT_SMALL))
		return ST_KIND(w[1]) == ST_LIVE_S || st_is_freed(w[1]) ? OWN_OURS : OWN_FOREIGN;
	if (f == FMT_LARGE)
		return ST_KIND(w[1]) == ST_LIVE_L || ST_KIND(w[1]) == ST_LIVE_LA || st_is_freed(w[1]) ? OWN_OURS
														      : OWN_FOREIGN;
	return OWN_FOREIGN;
}

/* What lies in front of p (owner_words without the words). */
static inline enum owner owner_of(const void *p)
{
	uint64_t w[2];
	return owner_words(p, w);
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
 * them to the header every COUNT_FLUSH_OPS operations, sooner when the
 * bytes it allocated and freed since reach COUNT_FLUSH_BYTES (one credit
 * counts both), at a finding, before a fork and at exit (atexit, the
 * exiting thread).  So the header is exact within
 * COUNT_FLUSH_OPS operations and COUNT_FLUSH_BYTES per thread, and the
 * peak is the highest flushed sum (a transient peak between flushes can
 * be missed by at most that much).  No clock, no shared write on the
 * common path.
 */
#define COUNT_FLUSH_OPS 64u
#define COUNT_FLUSH_BYTES ((int64_t)1 << 20)
#define COUNT_BYTES_PER_OP (COUNT_FLUSH_BYTES / COUNT_FLUSH_OPS) /* 16 KiB: one op's worth of credit */
struct heap_counts {
	int64_t live;      /* bytes allocated - bytes freed by this thread since its last flush */
	uint64_t allocs;
	int64_t spent;     /* credit used since the last flush: 1 per operation and 1 per 16 KiB */
	int64_t live_seen; /* the header's heap_live_bytes as this thread's last flush left it; 0: none yet */
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
		c->live_seen = (int64_t)live;
		peak = __atomic_load_n(&h->heap_peak_bytes, __ATOMIC_RELAXED);
		while ((int64_t)live > 0 && live > peak &&
		       !__atomic_compare_exchange_n(&h->heap_peak_bytes, &peak, live, 1, __ATOMIC_RELAXED,
						    __ATOMIC_RELAXED))
			;
	}
	c->live = 0;
	c->allocs = 0;
	c->spent = 0;
}

/* One compare for both bounds: COUNT_FLUSH_OPS operations, or their worth
 * in bytes moved either way (a flush comes at least that often). */
static inline void count_alloc(uint64_t n)
{
	struct heap_counts *c = &hcounts;
	c->live += (int64_t)n;
	c->allocs++;
	c->spent += 1 + (int64_t)(n / COUNT_BYTES_PER_OP);
	if (HS_UNLIKELY(c->spent >= (int64_t)COUNT_FLUSH_OPS))
		count_flush();
}

static inline void count_free(uint64_t n)
{
	struct heap_counts *c = &hcounts;
	c->live -= (int64_t)n;
	c->spent += 1 + (int64_t)(n / COUNT_BYTES_PER_OP);
	if (HS_UNLIKELY(c->spent >= (int64_t)COUNT_FLUSH_OPS))
		count_flush();
}

/*
 * The live heap as the header has it (flushed deltas), for the quarantine's
 * budget: as the calling thread's last flush read it (its at most
 * COUNT_FLUSH_OPS operations old; the header itself is exact only within
 * that many operations per thread), so that a free over the budget's floor
 * does not read the header's line, which every thread's flush writes (a
 * miss whenever another thread flushed since); the header's when the
 * thread has not flushed yet.
 */
static inline uint64_t live_bytes(void)
{
	int64_t v = hcounts.live_seen;
	if (HS_UNLIKELY(v == 0)) {
		struct hs_header *h = hdr_if_recording();
		v = h ? (int64_t)__atomic_load_n(&h->heap_live_bytes, __ATOMIC_RELAXED) : 0;
	}
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
#define SITE_CACHE 8192u     /* entries, at most */
#define SITE_CACHE_MIN 2048u /* entries at first: four pages */
#define SITE_EXACT (1ull << 24)
#define SITE_WRAPPER (1ull << 25)
static uint64_t site_cache[SITE_CACHE] __attribute__((aligned(4096)));
/*
 * The part of site_cache in use, its entries - 1, and the entries filled
 * in it.  A direct-mapped table is touched at random: a Python start's
 * ~120 sites wrote all 16 pages of the 8192 entries, a page fault each
 * (~12 us on a VM).  So the cache uses its first SITE_CACHE_MIN entries and
 * doubles its part when more than an eighth is filled (a site then meets
 * another on its entry about as often as in the whole table at a
 * thousand sites).  An entry's index is its hash's low bits: after a
 * doubling half the entries sit at their index still, the others are a
 * miss (a look-up in the segment's site index, the cache's miss path);
 * the tag, the hash's high bits, tells a stale entry from a match.
 * [atomic] both, relaxed: a racing reader uses either size.
 */
static uint32_t site_mask = SITE_CACHE_MIN - 1;
static uint32_t site_filled;

/* The site cache's entry for the hash h. */
static inline uint64_t *site_entry(uint64_t h)
{
	return &site_cache[h & __atomic_load_n(&site_mask, __ATOMIC_RELAXED)];
}

/* One more entry filled (it held 0): the part in use doubles at an eighth. */
static void site_cache_filled(void)
{
	uint32_t n = __atomic_add_fetch(&site_filled, 1, __ATOMIC_RELAXED);
	uint32_t m = __atomic_load_n(&site_mask, __ATOMIC_RELAXED);
	if (m + 1 < SITE_CACHE && n > (m + 1) / 8)
		__atomic_compare_exchange_n(&site_mask, &m, 2 * m + 1, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}
static uint64_t wrapper_lo, wrapper_hi; /* [atomic] libstdc++'s range, once seen */

enum site_kind { SITE_PLAIN, SITE_FFI, SITE_CXX };

/* The kind of each module-table entry once asked (kind + 1; 0 not yet):
 * a cc1 meets ~1,400 new sites in a few objects, and the two searches of
 * the path were ~430 instructions a site.  A fork child's table is its
 * parent's, entry for entry; a fork child whose segment was made afresh
 * (its module table scanned anew) forgets them with the site cache
 * (hs_heap_after_fork_child). */
#define KIND_MODS 512u
static uint8_t module_kind[KIND_MODS]; /* [atomic] */

/* What kind of object `site` lies in (first sight of a site only). */
static enum site_kind site_kind_of(uint64_t site)
{
	uint32_t i, sbytes = hs_seg.hdr->tables[HS_T_STRINGS].capacity;
	const struct hs_module *m = hs_module_at(site, &i);
	enum site_kind kind = SITE_PLAIN;
	const char *path;
	uint8_t known;
	/* libffi comes with a dlopen (ctypes): put its object in the table before asking */
	if (!m && hs_module_note_pc(site, 1) == 0)
		m = hs_module_at(site, &i);
	if (!m)
		return SITE_PLAIN;
	/* libstdc++'s range was stored when its kind was first found, and is never cleared */
	known = i < KIND_MODS ? __atomic_load_n(&module_kind[i], __ATOMIC_RELAXED) : 0;
	if (known)
		return (enum site_kind)(known - 1);
	if (m->path >= sbytes || m->path + (uint32_t)m->path_len >= sbytes)
		return SITE_PLAIN;
	path = hs_seg.strings + m->path;
	if (memmem(path, m->path_len, "libffi", 6)) {
		kind = SITE_FFI;
	} else if (memmem(path, m->path_len, "libstdc++", 9)) {
		/* relaxed: a reader that sees 0 only takes the slower, still correct, way */
		__atomic_store_n(&wrapper_lo, m->lo, __ATOMIC_RELAXED);
		__atomic_store_n(&wrapper_hi, m->hi, __ATOMIC_RELAXED);
		kind = SITE_CXX;
	}
	if (i < KIND_MODS)
		__atomic_store_n(&module_kind[i], (uint8_t)(kind + 1), __ATOMIC_RELAXED);
	return kind;
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
 * from the hook's own return address slot (hs_heap_cfa - 8, which holds the
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

/*
 * The calling thread's last wrapper keys (site, caller outside the wrapper)
 * and their stacks, direct-mapped by the caller, in the thread's area
 * (shim.h HS_AREA_HEAPWRAP): a C++ thread's few callers of operator new
 * are answered there, without the site cache's hash and its load from a
 * table every thread shares (bench/README.md "The heap checker's time
 * and memory, broken down").  Filled from the site cache's answer; cleared with it in a
 * fork child whose site cache is cleared.
 */
#define WRAP_MEMO_BITS 5u
#define WRAP_MEMO (1u << WRAP_MEMO_BITS)
struct wrap_memo {
	uint64_t pc[WRAP_MEMO];   /* the caller outside the wrapper; 0: empty */
	uint64_t site[WRAP_MEMO]; /* the hook's site inside the wrapper */
	uint32_t id[WRAP_MEMO];   /* the key's stack */
};
_Static_assert(sizeof(struct wrap_memo) <= HS_AREA_HEAPWRAP_SIZE, "the wrapper memo fits the area");

static inline struct wrap_memo *wrap_memo_in(char *a)
{
	return (struct wrap_memo *)(void *)(a + HS_AREA_HEAPWRAP);
}

static inline unsigned wrap_slot(uint64_t pc)
{
	return (unsigned)((pc * 0x9e3779b97f4a7c15ull) >> (64 - WRAP_MEMO_BITS));
}

/*
 * The walk up the learnt frames from the hook's return address (site) at
 * cfa - 8 to the first caller outside the wrapper [lo, hi), at most
 * WRAP_DEPTH frames: that caller's return address, or 0 when the walk
 * stopped inside the wrapper (a frame not learnt, WRAP_DEPTH frames, a
 * slot it could not or would not read).  A slot below top (the last whole
 * word of the thread's own stack when cfa lies in it, else 0) is mapped: a
 * plain load.  A slot at or past top is read through the probe when probe
 * is set (a frame size that was wrong after all must not walk off the top
 * of the stack into a fault) and given up on when not (the leaf's way,
 * wrapper_stack_memo).  A constant probe, so each caller gets its own
 * copy of the loop.
 */
static inline __attribute__((always_inline)) uint64_t wrapper_walk(uint64_t site, uint64_t lo, uint64_t hi,
								  uint64_t cfa, uint64_t top, int probe)
{
	uint64_t slot = cfa - 8, pc = site, two[2];
	for (int i = 0;; i++) {
		uint64_t w;
		if (pc < lo || pc >= hi)
			return pc;
		if (i == WRAP_DEPTH || (w = frame_words(pc)) == 0)
			return 0;
		slot += 8 * w;
		if (HS_LIKELY(slot < top)) {
			pc = *(const uint64_t *)(uintptr_t)slot;
			continue;
		}
		if (!probe || !hs_safe_read16((const void *)(uintptr_t)(slot & ~(uint64_t)15), two))
			return 0;
		pc = two[(slot >> 3) & 1];
	}
}

/* The thread's wrapper memo's stack for (pc, site) into *id; 0 when it holds none (or there is no area). */
static inline int wrap_memo_get(const char *a, uint64_t pc, uint64_t site, uint32_t *id)
{
	const struct wrap_memo *m;
	unsigned k = wrap_slot(pc);
	if (HS_UNLIKELY(a == NULL))
		return 0;
	m = wrap_memo_in((char *)(uintptr_t)a);
	if (m->pc[k] != pc || m->site[k] != site)
		return 0;
	*id = m->id[k];
	return 1;
}

static uint32_t wrapper_stack(uint64_t site)
{
	uint64_t lo = __atomic_load_n(&wrapper_lo, __ATOMIC_RELAXED);
	uint64_t hi = __atomic_load_n(&wrapper_hi, __ATOMIC_RELAXED);
	uint64_t cfa = hs_heap_cfa, pc, stack_hi;
	uint32_t id;
	if (HS_UNLIKELY(!hs_tls.stack_hi))
		(void)hs_stack_room(cfa); /* reads the bounds, once per thread */
	/* the top of the thread's own stack when cfa lies in it (8 bytes below
	   the top: the last whole word), else 0: every read through the probe */
	stack_hi = hs_tls.stack_hi > 8 && cfa >= hs_tls.stack_lo && cfa < hs_tls.stack_hi ? hs_tls.stack_hi - 8 : 0;
	if (!lo || !cfa)
		return hs_stack_here();
	pc = wrapper_walk(site, lo, hi, cfa, stack_hi, 1);
	/* a caller seen before is in the memo or the cache (its entry is a
	   plain one); a new one must at least be code of a loaded module (else
	   a frame's size was not what was learnt) */
	if (pc) {
		char *a = hs_tls.area;
		uint64_t h, v;
		if (wrap_memo_get(a, pc, site, &id))
			return id;
		h = wrapper_key(site, pc);
		v = __atomic_load_n(site_entry(h), __ATOMIC_RELAXED);
		if (HS_LIKELY(v != 0 && (v >> 26) == (h >> 26))) {
			if (a) {
				struct wrap_memo *m = wrap_memo_in(a);
				unsigned k = wrap_slot(pc);
				m->pc[k] = pc, m->site[k] = site, m->id[k] = (uint32_t)(v & 0xffffffu);
			}
			return (uint32_t)(v & 0xffffffu);
		}
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

/*
 * wrapper_stack's common case, a leaf (no call, so no register saved): the
 * walk up the learnt frames inside the thread's own stack (bounds known)
 * to a caller outside the wrapper that the thread's wrapper memo holds.
 * WRAP_UNKNOWN for anything else (a frame not learnt, a slot outside the
 * stack, no area, a memo miss): then wrapper_stack does it all.
 */
#define WRAP_UNKNOWN UINT32_MAX
static __attribute__((noinline)) uint32_t wrapper_stack_memo(uint64_t site)
{
	uint64_t lo = __atomic_load_n(&wrapper_lo, __ATOMIC_RELAXED);
	uint64_t hi = __atomic_load_n(&wrapper_hi, __ATOMIC_RELAXED);
	uint64_t cfa = hs_heap_cfa, slo = hs_tls.stack_lo, shi = hs_tls.stack_hi, pc;
	uint32_t id;
	/* cfa in the thread's own stack (unknown bounds: lo == hi), whose last
	   whole word is the walk's top */
	if (!lo || shi <= 8 || cfa - slo >= shi - slo)
		return WRAP_UNKNOWN;
	/* a walk that gave up (pc 0) finds no entry: a filled one's pc is a
	   caller's (never 0), an empty one's site is 0 (never a hook's site) */
	pc = wrapper_walk(site, lo, hi, cfa, shi - 8, 0);
	return wrap_memo_get(hs_tls.area, pc, site, &id) ? id : WRAP_UNKNOWN;
}

static uint32_t site_stack_key(uint64_t key, uint64_t site, int first_sight)
{
	uint64_t h = site_hash(key);
	uint64_t *e = site_entry(h);
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
		id = hs_stack_site_at(key, site, hs_heap_cfa); /* read from the hook's caller on */
	/* relaxed: the word is self-contained; a lost race only costs a lookup */
	__atomic_store_n(e, tag << 26 | (kind == SITE_FFI ? SITE_EXACT : 0) | (kind == SITE_CXX ? SITE_WRAPPER : 0) |
				    (id & 0xffffffu),
			 __ATOMIC_RELAXED);
	if (v == 0)
		site_cache_filled();
	if (kind == SITE_FFI)
		return hs_stack_here();
	if (kind == SITE_CXX)
		return wrapper_stack(site);
	return id;
}

/*
 * The calling thread's call sites met last and their stacks, in front of
 * the site cache: a compare and a load are cheaper than the cache's hash
 * and its load from a table every thread shares.  MEMO_SETS sets of two
 * entries, a site's set chosen by one multiply (return addresses of nearby
 * call sites differ in their low bits), the newer entry first: a site met
 * anew takes the set's first entry and moves the older one to the second,
 * whose own goes (no reordering on a hit: the stores cost more than the
 * second compare).  Why so many: a C++ `delete` reaches free() through two
 * tail calls, so the free's site is each inlined `delete` of the program;
 * and under PYTHONMALLOC=malloc CPython's allocator functions reach malloc
 * and free through indirect tail calls, so every allocating place of the
 * interpreter is a site: a threaded Python service's 80-odd busy sites
 * (bench/py_alloc_workload.py).  Why two ways: those 80 sites in 128
 * direct-mapped entries still missed 12% of the lookups, nearly all of it
 * two busy sites on one entry (the birthday problem: a set of two holds
 * such a pair; 2.8% missed then, a simulation of that run's 1.8 million
 * lookups), and a program whose malloc and free sites shared an entry
 * missed every time (bench/README.md "The heap checker's per-operation
 * cost").  It lives in the thread's area (shim.h HS_AREA_HEAPMEMO: 3 KiB
 * would not fit the static TLS a small-stack thread can spare); without
 * an area (not mapped yet, or the thread has exited) the site cache
 * answers.  Filled by site_stack; cleared in a fork child whose site cache
 * is cleared.
 */
#define MEMO_SET_BITS 7u
#define MEMO_SETS (1u << MEMO_SET_BITS)
struct site_memo {
	uint64_t site[MEMO_SETS][2]; /* the call site (a return address); 0: empty.  [k][0] the newer */
	uint32_t id[MEMO_SETS][2];   /* its stack id, or MEMO_WRAPPER */
};
_Static_assert(sizeof(struct site_memo) <= HS_AREA_HEAPMEMO_SIZE, "the memo fits the area");

/* The memo in the thread's area a (not NULL). */
static inline struct site_memo *memo_in(char *a)
{
	return (struct site_memo *)(void *)(a + HS_AREA_HEAPMEMO);
}

#define MEMO_WRAPPER (1u << 31) /* in site_memo.id: a wrapper site, see wrapper_stack */

/* site's set in the memo */
static inline unsigned memo_set(uint64_t site)
{
	return (unsigned)((site * 0x9e3779b97f4a7c15ull) >> (64 - MEMO_SET_BITS));
}

/* 1 and *id when the memo in the area a (not NULL) holds site. */
static inline __attribute__((always_inline)) int memo_find(char *a, uint64_t site, uint32_t *id)
{
	struct site_memo *m = memo_in(a);
	unsigned k = memo_set(site);
	if (m->site[k][0] == site) {
		*id = m->id[k][0];
		return 1;
	}
	if (m->site[k][1] == site) {
		*id = m->id[k][1];
		return 1;
	}
	return 0;
}

/* The stack of a plain or wrapper site from the site cache (the memo
 * missed), which fills the memo; a site the cache does not know yet (its
 * first sight, or its entry taken by another) is looked up through
 * site_stack_key. */
static inline uint32_t site_stack(uint64_t site)
{
	uint64_t h, v;
	uint32_t id;
	char *a;
	h = hs_mix64(site);
	v = __atomic_load_n(site_entry(h), __ATOMIC_RELAXED);
	if (v == 0 || (v >> 26) != (h >> 26) || (v & SITE_EXACT) || !(v & (SITE_WRAPPER | 0xffffffu)))
		return site_stack_key(site, site, 1);
	id = v & SITE_WRAPPER ? MEMO_WRAPPER : (uint32_t)(v & 0xffffffu);
	if ((a = hs_area()) != NULL) {
		struct site_memo *m = memo_in(a);
		unsigned k = memo_set(site);
		m->site[k][1] = m->site[k][0], m->id[k][1] = m->id[k][0];
		m->site[k][0] = site, m->id[k][0] = id;
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
	uint64_t h = hs_mix64(site), v = __atomic_load_n(site_entry(h), __ATOMIC_RELAXED);
	uint32_t id;
	if (heap_stacks == HS_HEAP_STACKS_NONE)
		return 0;
	if (heap_stacks == HS_HEAP_STACKS_SITE && hs_tls.area && memo_find(hs_tls.area, site, &id) &&
	    !(id & MEMO_WRAPPER) && id)
		return id;
	if (heap_stacks == HS_HEAP_STACKS_SITE && v != 0 && (v >> 26) == (h >> 26) && !(v & (SITE_EXACT | SITE_WRAPPER)) &&
	    (v & 0xffffffu))
		return (uint32_t)(v & 0xffffffu);
	if (heap_stacks == HS_HEAP_STACKS_SITE && (v = hs_fork_site(site)) != 0)
		return (uint32_t)v; /* learnt by the parent from an earlier child */
	if (hs_fork_segment(0) != 0)
		return 0;
	return heap_stacks == HS_HEAP_STACKS_FULL ? hs_stack_here() : site_stack(site);
}

/* heap_stack() past the per-thread memo's plain entries. */
static __attribute__((noinline)) uint32_t heap_stack_slow(uint64_t site)
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

/*
 * The stack kept for one malloc or free at `site`; 0 when not recording.
 * The memo's hit on a plain site (a loop's malloc and free) is answered
 * here, inline in the core's entries: no call, and no test of the mode
 * (the memo is filled only with HEISEN_HEAP_STACKS=site, and a fork child
 * whose segment cannot take its parent's stack ids clears it) nor of
 * recording (a process gone quiet keeps the ids it had; none is recorded).
 */
static inline __attribute__((always_inline)) uint32_t heap_stack(uint64_t site)
{
	char *a = hs_tls.area;
	uint32_t id;
	if (HS_UNLIKELY(a == NULL) || !memo_find(a, site, &id))
		return heap_stack_slow(site);
	if (HS_LIKELY(!(id & MEMO_WRAPPER)))
		return id;
	/* a wrapper site (operator new): its caller's stack, which may be new
	   to the stack table, so only while recording */
	if (HS_UNLIKELY(!__atomic_load_n(&hs_recording, __ATOMIC_ACQUIRE)))
		return heap_stack_slow(site);
	id = wrapper_stack_memo(site);
	return HS_LIKELY(id != WRAP_UNKNOWN) ? id : wrapper_stack(site);
}

/*
 * A site stack a fork child learnt, interned by its parent as id under key
 * (init.c learn_absorb): into the site cache too, where the parent's next
 * children look (pending_stack) before its segment's site index, which they
 * read through the shared mapping: two page faults per child.  It takes
 * the entry whatever held it: a cache, whose displaced site is looked up
 * again (its kind too) at its next use.
 */
HS_HIDDEN void hs_heap_site_learnt(uint64_t key, uint32_t id)
{
	uint64_t h = site_hash(key), *e = site_entry(h);
	/* relaxed: the word is self-contained, as site_stack_key's store */
	if (id && id < (1u << 24) && heap_stacks == HS_HEAP_STACKS_SITE &&
	    __atomic_exchange_n(e, (h >> 26) << 26 | id, __ATOMIC_RELAXED) == 0)
		site_cache_filled();
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
 * A small or large block given back to glibc loses its header to glibc's
 * links, so release() leaves the record of its free in its first 24 user
 * bytes, which glibc's tcache, fastbins and small bins do not write:
 * [0] the freed state word (first free's stack and thread), [1] a live
 * word in the small format (size, 24 bits, all ones when larger;
 * allocation), [2] the tag (magic of p, allocating thread).  1 and rec
 * filled when p holds one (read through hs_safe_read16).
 */
static int small_record(const void *p, uint64_t rec[3])
{
	uint64_t x[2], y[2];
	if (((uintptr_t)p & 15) != 0 || !hs_safe_read16(p, x) || ST_KIND(x[0]) != ST_FREED ||
	    ST_KIND(x[1]) != ST_LIVE_S || !hs_safe_read16((const char *)p + 16, y) || fmt_of(p, y[0]) == FMT_NONE)
		return 0;
	rec[0] = x[0];
	rec[1] = x[1];
	rec[2] = y[0];
	return 1;
}

/* The double free of a block given back to glibc, from its record. */
static void record_double_free(struct hs_tls *t, int ring, void *p, const uint64_t rec[3])
{
	struct hs_finding f;
	finding_init(&f, t, HS_FIND_DOUBLE_FREE, p);
	f.stack2 = ST_STACK(rec[0]);
	f.tid2 = ST_TID(rec[0]);
	if (ST_SSIZE(rec[1]) != 0xffffffu)
		f.size = ST_SSIZE(rec[1]);
	f.stack3 = alloc_stack_of(ST_SALLOC(rec[1]));
	f.tid3 = (int32_t)(uint32_t)rec[2];
	heap_finding(t, ring, &f);
}

static int foreign_is_invalid(struct hs_tls *t, int ring, void *p, enum owner o);
static void chunk_overrun(struct hs_tls *t, int ring, void *p);
static void *containing(const void *p, int *unmapped);

/*
 * A free or realloc of p (ours) whose state word is `state`: freed (in the
 * quarantine) or released (given back to glibc since, the header still
 * there: glibc merged the chunk into a free neighbour before it).  A
 * freed block's size and allocation come from the live word its free
 * saved at p+8; a released one's from its record (small_record), when it
 * is still there.
 */
static void bad_state(struct hs_tls *t, int ring, void *p, uint64_t state)
{
	struct hs_finding f;
	struct bview v;
	uint64_t rec[3], tag;
	void *y;
	int unmapped;
	/* a released header may be stale: glibc gave its memory out again, and
	   a live block of ours now covers p (the old tag and state are in its
	   user bytes, which it has not written yet): p is the middle of that
	   block, an invalid free, as it is for the program now */
	if (ST_KIND(state) == ST_RELEASED && (y = containing(p, &unmapped)) != NULL &&
	    st_is_live(__atomic_load_n(&hw(y)[1], __ATOMIC_RELAXED))) {
		foreign_is_invalid(t, ring, p, OWN_FOREIGN);
		return;
	}
	if (ST_KIND(state) == ST_RELEASED && small_record(p, rec)) {
		record_double_free(t, ring, p, rec);
		return;
	}
	tag = __atomic_load_n(&hw(p)[0], __ATOMIC_RELAXED);
	if (fmt_of(p, tag) == FMT_NONE && small_record(p, rec)) {
		/* given back to glibc since the state was read (the first free's
		   thread ended and emptied its quarantine): glibc's links are over
		   the header now, the record has it all */
		record_double_free(t, ring, p, rec);
		return;
	}
	finding_init(&f, t, HS_FIND_DOUBLE_FREE, p);
	f.stack2 = ST_STACK(state);
	f.tid2 = ST_TID(state);
	f.tid3 = fmt_of(p, tag) != FMT_NONE ? (int32_t)(uint32_t)tag : 0;
	if (ST_KIND(state) == ST_FREED && blk_view(p, &v)) {
		/* a racing first free saves the live word before its
		   compare-and-swap, so it is there */
		f.stack3 = alloc_stack_of(v.alloc);
		f.size = v.size;
		/* a large block the racing first free is cutting to its tombstone
		   right now (tomb_at_free): its tail word may be glibc's already,
		   but the record, written before the cut, has the allocation */
		if (!v.small && v.alloc == 0 && small_record(p, rec)) {
			f.stack3 = alloc_stack_of(ST_SALLOC(rec[1]));
			if (ST_SSIZE(rec[1]) != 0xffffffu)
				f.size = ST_SSIZE(rec[1]);
		}
	}
	heap_finding(t, ring, &f);
}

/*
 * The block of ours (live or in the quarantine) whose user bytes (or
 * canary) contain p, found by scanning back for a header from p through
 * the page that holds p - 16 and CONTAIN_BACK bytes before it; its user
 * pointer.  The nearest live or quarantined header decides; a released
 * one on the way is passed over (a stale header inside memory glibc has
 * handed out again, maybe to the very block that contains p).  NULL when
 * there is none, or the page of p - 16 is not mapped (*unmapped set then;
 * an unmapped page before it only ends the scan).  Every read goes through
 * hs_safe_read16.  Runs only for pointers without our magic.
 */
#define CONTAIN_BACK ((uintptr_t)8 << 10)
static void *containing(const void *p, int *unmapped)
{
	uintptr_t u = ((uintptr_t)p - 1) & ~(uintptr_t)15;
	uintptr_t own = ((uintptr_t)p - 16) & ~(uintptr_t)(hs_heap_page_size - 1);
	uintptr_t lim = own > CONTAIN_BACK ? own - CONTAIN_BACK : 0;
	*unmapped = 0;
	for (; u >= lim + 16 && u > 16; u -= 16) {
		uint64_t w[2], x[2], live;
		struct bview v;
		enum fmt f;
		if (!hs_safe_read16((const void *)(u - 16), w)) {
			*unmapped = u - 16 >= own;
			return NULL;
		}
		f = fmt_of((const void *)u, w[0]);
		if (f == FMT_NONE || ST_KIND(w[1]) == ST_RELEASED)
			continue;
		live = w[1];
		if (ST_KIND(live) == ST_FREED) {
			if (!hs_safe_read16((const void *)u, x))
				return NULL;
			live = x[1];
		}
		if (!view_of_live((const void *)u, live, 0, &v) || (v.small != (f == FMT_SMALL)))
			return NULL;
		return (uintptr_t)p < u + v.size + after_len(v.size, v.small) ? (void *)u : NULL;
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
		return ((c - w[0]) | (w[0] + size)) & (hs_heap_page_size - 1) ? 1 : 0;
	return size < 32 || (size & 15) != 0 || c > (uint64_t)0 - size;
}

/*
 * 1 when p, a pointer without our magic, is where a block of ours in
 * front of it ends (its bytes reach p's chunk: glibc's prev_size slot and
 * size word, then p's header) and that block's tail check fails: its
 * canary, or for an exact fit the size word after it (fit_ok).  An
 * overflow that ran through the size word into the next block's header
 * took its magic, so the next block's free finds no block of ours: it is
 * the overflow of the block in front (chunk_overrun), not an invalid free
 * (or glibc's free of a chunk header made of the program's bytes).  Reads
 * go through containing()'s probe, then inside that block's chunk.
 */
static int front_overran(const void *p)
{
	int unmapped;
	struct bview v;
	const char *a = containing((const char *)p - HDR - 17, &unmapped), *end;
	size_t clen;
	uint64_t c[2];
	if (!a || !blk_view(a, &v) || v.offset != HDR)
		return 0;
	clen = v.small ? canary_len_s(v.size) : canary_len(v.size);
	/* a small block's bytes end at the next chunk's size word; after a
	   large one's canary come its tail word and glibc's prev_size slot */
	end = a + v.size + clen + (v.small ? 0 : 16);
	if (end != (const char *)p - HDR - 8)
		return 0;
	/* and glibc's chunk of that block (its size word 24 bytes before it)
	   ends there too, where a chunk of ours for p would start (p - 32).
	   A chunk glibc handed out 16 bytes larger (a free chunk too small to
	   split) ends at p - 16 instead: then p is glibc's own next chunk, a
	   block from before checking started (a library's constructor), and
	   its header is glibc's, not an overrun; the bytes compared below may
	   then be no canary at all (a freed block's saved live word at a+8) */
	if (!hs_safe_read16(a - 32, c) || (c[1] & 2) || a - 32 + (c[1] & ~(uint64_t)7) != (const char *)p - 32)
		return 0;
	if (!v.small || clen)
		return !canary_ok(a, v.size, clen);
	return fit_of(a, v.size) == FIT_EXACT && !fit_ok(a, v.size);
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
	void *b = unmapped ? NULL : containing(p, &unmapped);
	struct hs_finding f;
	struct bview v;
	uint64_t w[2];
	uint64_t rec[3];
	if (!b && !unmapped && small_record(p, rec)) {
		/* a small block of ours given back to glibc, and not handed out since */
		record_double_free(t, ring, p, rec);
		return 1;
	}
	if (!b && !unmapped && ((uintptr_t)p & 15) == 0 && front_overran(p)) {
		/* p's header was written over by the block in front of it */
		chunk_overrun(t, ring, p);
		return 1;
	}
	if (!b && !unmapped && ((uintptr_t)p & 15) == 0 && !on_own_stack(p) &&
	    !(hs_safe_read16((const char *)p - 16, w) && glibc_would_refuse(p, w)))
		return 0;
	finding_init(&f, t, HS_FIND_INVALID_FREE, p);
	if (b) {
		uint64_t st = __atomic_load_n(&hw(b)[1], __ATOMIC_RELAXED);
		blk_view(b, &v);
		f.size = v.size;
		f.stack3 = alloc_stack_of(v.alloc);
		f.tid3 = v.alloc_tid;
		/* the offset of p into the block (it starts at addr - offset) */
		f.offset = (uint32_t)((uintptr_t)p - (uintptr_t)b);
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
 * Give p (freed; live: its live word) back to glibc.  The state becomes
 * released (a byte store; the first free's stack and thread stay in it)
 * and the record of the free is left at p+0..p+23 (small_record), so a
 * later free of the same pointer is a double free with its three stacks
 * as long as glibc has not handed that memory out again, without memory
 * held back.  When glibc hands the memory out again from the same chunk
 * start, the new block's pointer is p and it is live — the same limit as
 * Scudo's header check.
 *
 * Tombstones: a block of 1 KiB or more (glibc's large bins and the
 * unsorted bin, whose chunks glibc splits from their start for any
 * smaller request) is cut down in place with __libc_realloc to the 48-byte
 * chunk that holds its header and record (the rest goes back to glibc at
 * once), and that small chunk is kept allocated among the thread's last
 * TOMB_KEEP (tomb_keep), then freed.  glibc gives a 48-byte chunk only to
 * requests of 25 to 40 bytes made around heisen (no block of ours asks
 * for one: canary_len_s), so the record stays for long, and the old
 * pointer cannot become a chunk's start while the tombstone stands.
 * Blocks glibc mmapped are unmapped: a later free of one finds no memory
 * and is an invalid-free.  An aligned block whose tail word was damaged
 * (its offset unknown) is kept: never handed to glibc at a wrong address.
 */
#define TOMBSTONE_MIN 1024u

/*
 * 1 when glibc's size word of the chunk of p (a block of ours with
 * malloc's alignment: the word lies 8 bytes before its header) is not one
 * glibc gave it: malloc's chunk for the request (want: small_chunk() of a
 * small block, large_chunk() of a large one), or 16 bytes more (a free
 * chunk too small to split was handed out whole); the low three bits are
 * glibc's flags.  The block in front ran past its canary into it, or a
 * wild write did: glibc's free would trust the size (tcache poisoning, or
 * its own abort without a stack).  An mmapped chunk (a large block, or a
 * tiny request from an arena that could not grow) is checked as
 * glibc_would_refuse checks it.
 */
static inline int chunk_damaged(const void *p, uint64_t want)
{
	const uint64_t *c = (const uint64_t *)p - 4; /* prev_size, size, then our header */
	uint64_t sz = c[1];
	/* want or want + 16, PREV_INUSE (1) and NON_MAIN_ARENA (4) aside:
	   one compare (IS_MMAPPED, 2, makes it differ) */
	if (HS_LIKELY((((sz & ~(uint64_t)5) - want) & ~(uint64_t)16) == 0))
		return 0;
	return !(sz & 2) || glibc_would_refuse((const char *)p - HDR, c);
}

/* The chunk glibc gives a large block of n bytes with malloc's alignment:
 * header, user bytes, canary and tail word, plus glibc's size word, in
 * 16-byte steps. */
static inline uint64_t large_chunk(uint64_t n)
{
	return (HDR + n + canary_len(n) + 8 + 8 + 15) & ~(uint64_t)15;
}

/*
 * The block p, about to go back to glibc, has a chunk size word glibc
 * did not write (chunk_damaged): a heap-overflow of the block
 * in front of it when that is one of ours (the backward scan from the
 * damaged word: its address, size and allocation stack), else of the word
 * itself (address, size 0); the finding's offset is the distance from that
 * address to p (format.h: the block whose chunk header was overwritten;
 * 0 in a heap-overflow found at the block's own free), its stack the free
 * that gave p back.  p is kept from glibc (leaked, still freed: a later
 * free of it is a double free).  t NULL: in the shim, keep it and report
 * nothing.
 */
static __attribute__((noinline, cold)) void chunk_overrun(struct hs_tls *t, int ring, void *p)
{
	struct hs_finding f;
	struct bview v;
	int unmapped;
	char *word = (char *)p - HDR - 8;
	/* the front block's canary ends right before the word (small) or 8
	   bytes before it (large: the tail word, then glibc's prev_size slot) */
	void *a = containing(word - 9, &unmapped);
	finding_init(&f, t, HS_FIND_HEAP_OVERFLOW, a ? a : word);
	f.offset = (uint32_t)((uintptr_t)p - (uintptr_t)f.addr);
	if (a && blk_view(a, &v)) {
		f.stack3 = alloc_stack_of(v.alloc);
		f.tid3 = v.alloc_tid;
		f.size = v.size;
	}
	heap_finding(t, ring, &f);
}

/*
 * The tombstones a thread keeps allocated: its last TOMB_KEEP, in a ring
 * after its quarantine's two (quar_ring), the oldest given to glibc when
 * a new one comes.  A tombstone freed at once went to the thread's tcache
 * (7 chunks of a size), and past that to a fastbin, which glibc
 * consolidates at its next request of 1 KiB or more (malloc_consolidate)
 * or free of 64 KiB: it merged into its free neighbours, and the memory
 * went out again with the record in it.  So a thread freeing buffers in a
 * loop lost the record of all but its first seven: a second free of one
 * then became an invalid-free (the pointer in the middle of a new block),
 * glibc's own abort without stacks, or a silent free of another block.
 * Kept, a tombstone holds its record and the old address (no chunk can
 * start there) for the thread's next TOMB_KEEP releases of such blocks:
 * 48 bytes each, 6 KiB and the 1 KiB ring per thread at most.  Kept, they
 * also split glibc's free memory (a churn of 4 KiB blocks in 8 threads
 * peaked 1.2 MiB higher with 128 kept, 3.1 MiB with 512: bench/README.md
 * "Tombstones kept").  Without a ring (HEISEN_QUARANTINE_MB=0, or the
 * thread past its exit cleanup) the tombstone is freed at once, as
 * before.  ASan's quarantine keeps whole blocks for this; a tombstone is
 * the 48 bytes a record needs.
 */
#define TOMB_KEEP 128u /* a power of two */

static inline void tomb_keep(void *r)
{
	struct tquar *q = &tquar;
	if (HS_UNLIKELY(!q->keyed || !q->tomb)) {
		__libc_free(r);
		return;
	}
	if (HS_UNLIKELY(q->tomb_count == TOMB_KEEP)) {
		void *o = q->tomb[q->tomb_head];
		q->tomb[q->tomb_head] = r;
		q->tomb_head = (q->tomb_head + 1) & (TOMB_KEEP - 1);
		__libc_free(o);
		return;
	}
	q->tomb[(q->tomb_head + q->tomb_count++) & (TOMB_KEEP - 1)] = r;
}

/*
 * A large block p (freed; live: its live word) given back to glibc: the
 * record, the state released, and a chunk of 1 KiB or more cut to its
 * tombstone, which is returned (glibc's pointer: the caller keeps it,
 * tomb_keep or the quarantine's FIFO); NULL when the block went to glibc
 * whole (mmapped, a smaller chunk, a failed cut) or was kept from it
 * (damaged: chunk_overrun; an aligned block's unknown offset).
 */
static __attribute__((noinline)) void *release_large(struct hs_tls *t, int ring, void *p, uint64_t live)
{
	uint64_t *w = hw(p), *u = p;
	struct bview v;
	size_t chunk;
	char *r;
	if (!view_of_live(p, live, 1, &v) && ST_KIND(live) == ST_LIVE_LA)
		return NULL;
	/* an aligned block's chunk is what glibc's memalign split off: not checked */
	if (ST_KIND(live) == ST_LIVE_L && HS_UNLIKELY(chunk_damaged(p, large_chunk(v.size)))) {
		chunk_overrun(t, ring, p);
		return NULL;
	}
	r = (char *)p - v.offset;
	u[0] = __atomic_load_n(&w[1], __ATOMIC_RELAXED);
	u[1] = ST_LIVE_S | (v.size < 0xffffffu ? v.size : 0xffffffu) << 8 | (uint64_t)v.alloc << 32;
	u[2] = w[0];
	/* freed -> released: the kind is the state word's low byte (x86-64 is
	   little-endian); a byte store.  No CAS: a racing free of a freed
	   block only reads the word */
	__atomic_store_n((uint8_t *)&w[1], (uint8_t)ST_RELEASED, __ATOMIC_RELAXED);
	memcpy(&chunk, r - 8, sizeof chunk); /* glibc's chunk size word: size | flags (2: mmapped) */
	if ((chunk & ~(size_t)7) >= TOMBSTONE_MIN && !(chunk & 2)) {
		char *k = __libc_realloc(r, v.offset + 24);
		if (k)
			return k;
	}
	__libc_free(r);
	return NULL;
}

/* In a FIFO entry's live word: the entry is a tombstone (its p glibc's
 * pointer), cut at the block's free (quarantine_put); release() hands it
 * on to tomb_keep.  No state word of a block has this kind. */
#define ST_TOMB 0x7bu

static inline __attribute__((always_inline)) void release(struct hs_tls *t, int ring, void *p, uint64_t live)
{
	uint64_t *w = hw(p), *u = p;
	void *k;
	if (HS_LIKELY(ST_KIND(live) == ST_LIVE_S)) {
		if (HS_UNLIKELY(chunk_damaged(p, small_chunk(ST_SSIZE(live))))) {
			chunk_overrun(t, ring, p);
			return;
		}
		/* the record (its live word is the block's own), then glibc's free */
		u[0] = __atomic_load_n(&w[1], __ATOMIC_RELAXED);
		u[1] = live;
		u[2] = w[0];
		__atomic_store_n((uint8_t *)&w[1], (uint8_t)ST_RELEASED, __ATOMIC_RELAXED);
		__libc_free(w);
		return;
	}
	if (ST_KIND(live) == ST_TOMB) { /* cut at its free: already released */
		tomb_keep(p);
		return;
	}
	if ((k = release_large(t, ring, p, live)) != NULL)
		tomb_keep(k);
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
 * And each of a thread's FIFOs holds at most QUAR_THREAD_BLOCKS blocks (unless
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
/* The FIFO's victim whose header is fetched at a release (fifo_release):
 * that many releases of its FIFO ahead of its own, so a memory access's
 * latency (a few hundred ns) has passed when release() reads and writes it. */
#define QUAR_PREFETCH_AHEAD 8u
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

/* The interior pages of a quarantined block p of size bytes: past its
 * first 16 user bytes and before its canary. */
static inline int interior(const void *p, uint64_t size, uintptr_t *lo, uintptr_t *hi)
{
	uintptr_t u = (uintptr_t)p;
	if (HS_LIKELY(size < QUAR_DONTNEED_MIN))
		return 0;
	*lo = (u + 16 + hs_heap_page_size - 1) & ~(uintptr_t)(hs_heap_page_size - 1);
	*hi = (u + size) & ~(uintptr_t)(hs_heap_page_size - 1);
	return *hi > *lo;
}

/*
 * 1 when the large block p (malloc's alignment, size bytes) waits in the
 * quarantine as its tombstone: its glibc chunk is TOMBSTONE_MIN bytes or
 * more and is the chunk glibc gave (not mmapped, its size word intact:
 * chunk_damaged's test).  Such a block is given back to glibc at its free
 * (release_large: the record, the state released, the chunk cut to the
 * 48 bytes that hold header and record), and the tombstone waits in the
 * FIFO in the block's place, counted at the block's bytes, so the budget
 * and the FIFO's order are what they were for the whole block; then it
 * joins the thread's kept tombstones (tomb_keep).  A second free finds
 * the record all that time, as it found the whole block, and glibc can
 * never hand the old pointer out as a chunk's start.  What changes is
 * that the block's memory (all but 48 bytes) goes back to glibc at once:
 * held whole, a threaded Python program's freed buffers made glibc's
 * arenas grow while they waited (bench/README.md "The heap checker's
 * time and memory, broken down").  Blocks glibc mmapped still wait
 * whole (release() unmaps them; a second free then finds no memory), and
 * so does a block whose size word was damaged (its release reports it).
 * The idea is ASan's quarantine without its memory: what a double free
 * needs of a freed block is its header, not its bytes.
 */
static inline int tomb_at_free(const void *p, uint64_t size)
{
	uint64_t want = large_chunk(size), c = ((const uint64_t *)p)[-3];
	return want >= TOMBSTONE_MIN && ((((c & ~(uint64_t)5) - want) & ~(uint64_t)16) == 0);
}

/*
 * release_large for a block that tomb_at_free has just passed at its free
 * (p ours, malloc's alignment, live its live word): the record, the state
 * released, the chunk cut to its tombstone, which is returned (NULL when
 * the cut failed and the block went to glibc whole).  What release_large
 * asks again is known here: glibc's size word is the one large_chunk()
 * names (so neither damaged nor mmapped, and 1 KiB or more), the offset is
 * HDR.  The tail word (the allocation stack) is read without the probe:
 * it shares its 16 aligned bytes with the canary's last word, which the
 * free has just read (canary_ok), and lies inside the chunk whose size
 * word was checked; a tail word without p's check byte gives allocation 0,
 * as view_of_live's does.
 */
static inline __attribute__((always_inline)) void *tomb_cut(void *p, uint64_t live)
{
	uint64_t *w = hw(p), *u = p, size = ST_LSIZE(live), tw;
	char *r = (char *)p - HDR, *k;
	memcpy(&tw, (const char *)p + size + canary_len(size), sizeof tw);
	tw = (tw & 0xffu) == check8(p) ? tw >> 32 : 0;
	u[0] = __atomic_load_n(&w[1], __ATOMIC_RELAXED);
	u[1] = ST_LIVE_S | (size < 0xffffffu ? size : 0xffffffu) << 8 | tw << 32;
	u[2] = w[0];
	/* freed -> released, a byte store (release_large's) */
	__atomic_store_n((uint8_t *)&w[1], (uint8_t)ST_RELEASED, __ATOMIC_RELAXED);
	k = __libc_realloc(r, HDR + 24);
	if (HS_LIKELY(k != NULL))
		return k;
	__libc_free(r);
	return NULL;
}

/* The ring's entries, a power of two: QUAR_THREAD_BLOCKS, or 65,536 with
 * HEISEN_QUARANTINE_MB (then the per-thread bound). */
#define QUAR_RING_EXPLICIT 65536u

/* The bytes of a thread's rings: two of cap entries, then its tombstones' (tomb_keep). */
static inline size_t quar_map_bytes(uint32_t cap)
{
	return 2 * (size_t)cap * sizeof(struct qent) + TOMB_KEEP * sizeof(void *);
}

/* Map the calling thread's two rings and its tombstones'; 0 when it cannot (the block is released at once). */
static int quar_ring(struct tquar *q)
{
	uint32_t cap = quar_thread_max < QUAR_RING_EXPLICIT ? quar_thread_max : QUAR_RING_EXPLICIT;
	struct qent *m = mmap(NULL, quar_map_bytes(cap), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return 0;
	q->cap = cap;
	q->mask = cap - 1;
	q->tomb = (void **)(void *)(m + 2 * (size_t)cap);
	q->tomb_head = q->tomb_count = 0;
	q->f[QF_LARGE] = (struct qfifo){.ring = m + cap};
	q->f[QF_SMALL] = (struct qfifo){.ring = m};
	return 1;
}

/*
 * The victim QUAR_PREFETCH_AHEAD releases of FIFO f ahead (f's head has
 * just moved past the one released now) was freed long ago and is cold:
 * fetch its header and glibc's size word in front of it (chunk_damaged)
 * now, so its release finds them near.  At each release, not at the
 * queueing: the budget gives back from either FIFO (the heavier), and one
 * free may give back several.
 */
static inline __attribute__((always_inline)) void fifo_prefetch(struct tquar *q, struct qfifo *f)
{
	if (HS_LIKELY(f->count >= QUAR_PREFETCH_AHEAD)) {
		char *n = f->ring[(f->head + QUAR_PREFETCH_AHEAD - 1) & q->mask].p;
		__builtin_prefetch(n - 16, 1);
		__builtin_prefetch(n - 24, 1);
	}
}

/* Give back the oldest block of FIFO f (not empty); its bytes leave the thread's count. */
static inline __attribute__((always_inline)) uint64_t fifo_release(struct hs_tls *t, int ring, struct tquar *q,
								  struct qfifo *f)
{
	struct qent *o = &f->ring[f->head];
	void *op = o->p;
	uint64_t olive = o->live, ob = o->bytes;
	f->head = (f->head + 1) & q->mask;
	f->count--;
	fifo_prefetch(q, f);
	f->bytes -= ob;
	q->unsynced -= (int64_t)ob;
	release(t, ring, op, olive);
	return ob;
}

/*
 * Queue p (freed, with its live word and view v) in the calling thread's
 * FIFO for its kind (small or large format); when that FIFO is at its
 * count, give back its oldest block; while the quarantine as a whole is
 * over budget (quar_budget), give back the oldest blocks of this thread's
 * heavier kind (in bytes queued).  So neither kind pushes the other out:
 * a program's buffers of kilobytes freed between must not push its small
 * freed blocks out (a small block is what glibc hands out again soonest
 * once it has it: its tcache is last in, first out per size, so the
 * quarantine is most of a small block's protection; a 64-byte block's
 * second free after 1,000 mixed-size allocations was missed that way),
 * and a Python program's hundreds of small blocks must not give a 4 KiB
 * buffer back at its free.  Each thread adds its bytes to the shared
 * total only once they differ by QUAR_SYNC from what it added last (so
 * the total is exact within QUAR_SYNC per thread), so a free takes no
 * lock and writes no shared line in the common case.  The real frees
 * happen in the thread (and glibc arena and tcache) that freed; a thread
 * that stops freeing keeps its blocks, within the budget, until it exits
 * (tquar_exit).
 */
static int quarantine_tomb(struct hs_tls *t, int ring, void *p, uint64_t live, uint64_t bytes);

static inline __attribute__((always_inline)) void quarantine_put(struct hs_tls *t, int ring, void *p, uint64_t live,
								 const struct bview *v, uint64_t bytes)
{
	struct tquar *q = &tquar;
	struct qfifo *f, *o;
	struct qent *e;
	void *vp = NULL;
	uint64_t vlive = 0, vbytes = 0;
	uintptr_t lo, hi;
	int64_t total;
	if (HS_UNLIKELY(!q->keyed)) { /* keyed: the rings are there and the thread is not exiting */
		/* no ring: none wanted, or the thread has passed its exit cleanup
		   (a ring mapped now would outlive the thread with its blocks),
		   or none could be mapped */
		if (quar_limit == 0 || q->exited || (!q->f[QF_SMALL].ring && !quar_ring(q))) {
			release(t, ring, p, live);
			return;
		}
		q->keyed = 1;
		pthread_setspecific(tquar_key, q);
	}
	if (HS_UNLIKELY(ST_KIND(live) == ST_LIVE_L)) {
		/* a chunk of 1 KiB or more waits as its tombstone (out of line:
		   the small block's path keeps its registers) */
		if (quarantine_tomb(t, ring, p, live, bytes))
			return;
	}
	if (HS_UNLIKELY(interior(p, v->size, &lo, &hi))) {
		bytes -= hi - lo;
		madvise((void *)lo, hi - lo, MADV_DONTNEED);
	}
	f = &q->f[v->small ? QF_SMALL : QF_LARGE];
	e = &f->ring[f->tail];
	if (f->count == q->cap) {
		/* full (the per-thread bound): its oldest goes, and its entry
		   (the tail's, when full) takes p.  Given back last (below), so
		   that little is live across glibc's free */
		vp = e->p;
		vlive = e->live;
		vbytes = e->bytes;
		f->head = (f->head + 1) & q->mask;
		fifo_prefetch(q, f);
	} else {
		f->count++;
	}
	e->p = p;
	e->live = live;
	e->bytes = bytes;
	f->tail = (f->tail + 1) & q->mask;
	f->bytes += bytes - vbytes;
	q->unsynced += (int64_t)(bytes - vbytes);
	/* relaxed: a budget, ordered with nothing else */
	total = (int64_t)__atomic_load_n(&quar_total, __ATOMIC_RELAXED) + q->unsynced;
	/* below the least budget there can be (quar_floor), the live heap
	   (a line every thread's counters write) is not read */
	if (HS_UNLIKELY(total > (int64_t)quar_floor)) {
		int64_t budget = (int64_t)quar_budget();
		o = &q->f[QF_SMALL] == f ? &q->f[QF_LARGE] : &q->f[QF_SMALL];
		while (total > budget) {
			struct qfifo *g = f->bytes >= o->bytes ? f : o;
			if (!g->count)
				break;
			total -= (int64_t)fifo_release(t, ring, q, g);
		}
	}
	/* |unsynced| >= QUAR_SYNC, in one compare */
	if ((uint64_t)(q->unsynced + QUAR_SYNC - 1) > (uint64_t)(2 * QUAR_SYNC - 2)) {
		__atomic_add_fetch(&quar_total, (uint64_t)q->unsynced, __ATOMIC_RELAXED);
		q->unsynced = 0;
	}
	if (vp)
		release(t, ring, vp, vlive);
}

/*
 * The large block p (freed; live, bytes as quarantine_put's) when it waits
 * as its tombstone (tomb_at_free): cut now and the tombstone queued in its
 * place, counted at the block's bytes (its view's size 0: no interior to
 * give back).  1 when p was handled so (or went to glibc whole, or was
 * kept as damaged: release_large), 0 when it waits whole.
 */
static __attribute__((noinline)) int quarantine_tomb(struct hs_tls *t, int ring, void *p, uint64_t live, uint64_t bytes)
{
	struct bview tv = {.size = 0, .small = 0};
	void *k;
	if (!tomb_at_free(p, ST_LSIZE(live)))
		return 0;
	k = tomb_cut(p, live);
	if (k)
		quarantine_put(t, ring, k, ST_TOMB, &tv, bytes);
	return 1;
}

/* pthread key destructor: an exiting thread's quarantined blocks go back to glibc now. */
static void tquar_exit(void *arg)
{
	struct tquar *q = arg;
	struct hs_tls *t = &hs_tls;
	int was = t->in_hook;
	t->in_hook = 1;
	q->keyed = 0;
	q->exited = 1; /* a free by a later destructor, or by glibc's own teardown, is released at once */
	for (int k = 0; k < 2; k++) {
		struct qfifo *f = &q->f[k];
		while (f->count) {
			struct qent o = f->ring[f->head];
			f->head = (f->head + 1) & q->mask;
			f->count--;
			release(t, 0, o.p, o.live);
		}
		__atomic_sub_fetch(&quar_total, f->bytes, __ATOMIC_RELAXED);
		f->bytes = 0;
	}
	__atomic_add_fetch(&quar_total, (uint64_t)q->unsynced, __ATOMIC_RELAXED); /* the part never added */
	q->unsynced = 0;
	while (q->tomb_count) { /* the thread's tombstones: no ring keeps them now */
		__libc_free(q->tomb[q->tomb_head]);
		q->tomb_head = (q->tomb_head + 1) & (TOMB_KEEP - 1);
		q->tomb_count--;
	}
	if (q->f[QF_SMALL].ring) {
		munmap(q->f[QF_SMALL].ring, quar_map_bytes(q->cap));
		q->f[QF_SMALL].ring = q->f[QF_LARGE].ring = NULL;
		q->tomb = NULL;
	}
	count_flush();
	t->in_hook = was;
}

/*
 * A checked allocation of n bytes aligned to align (0: malloc's 16),
 * zeroed when zero.  With the guard held.  NULL with errno ENOMEM (or what
 * glibc set) on failure, counted as a heap failure.  A small block (see
 * the formats above) under SMALL_MAX bytes with malloc's alignment, else a
 * large one; a request of 2^56 bytes or more, or aligned beyond what the
 * tail word's offset field holds, is glibc's own (foreign).  *stackp:
 * the allocation's stack id when it was asked (else left as it was), so
 * that realloc's free of the old block need not ask again.
 */
/* A failed allocation of n bytes at stack: counted, errno kept; NULL. */
static __attribute__((noinline, cold)) void *alloc_failed(size_t n, uint32_t stack)
{
	int e = errno;
	count_failure(n, stack);
	errno = e;
	return NULL;
}

/* The allocation word of a live block: its stack id (0 when it does not
 * fit 24 bits) and the stack table's epoch in the top byte. */
static inline uint32_t alloc_word(uint32_t stack)
{
	return (stack < (1u << 24) ? stack : 0) | (__atomic_load_n(&stack_epoch, __ATOMIC_RELAXED) & 0xffu) << 24;
}

/* No stack id yet (blk_alloc's *stackp, blk_free's stack): heap_stack(site) is asked. */
#define STACK_UNSET UINT32_MAX

static inline __attribute__((always_inline)) void *blk_alloc(struct hs_tls *t, size_t n, size_t align, int zero, uint64_t site,
							     uint32_t *stackp)
{
	size_t off, after, total;
	char *r, *u;
	uint32_t stack, alloc;
	uint64_t tw;

	if (HS_LIKELY(align <= 16 && n < SMALL_MAX)) {
		/* the common case, straight: a small block, malloc's alignment */
		after = canary_len_s(n);
		r = zero ? __libc_calloc(1, HDR + n + after) : __libc_malloc(HDR + n + after);
		*stackp = stack = heap_stack(site);
		if (HS_UNLIKELY(r == NULL))
			return alloc_failed(n, stack);
		u = r + HDR;
		alloc = alloc_word(stack);
		if (HS_LIKELY(after))
			canary_put(u, n, after);
		else
			exact_fit_put(u, n);
		/* relaxed: the program's own hand-over of the pointer orders these stores for other threads */
		__atomic_store_n(&hw(u)[1], ST_LIVE_S | (uint64_t)n << 8 | (uint64_t)alloc << 32, __ATOMIC_RELAXED);
		__atomic_store_n(&hw(u)[0], tag_of(u, 1, t->tid), __ATOMIC_RELAXED);
		count_alloc(n);
		return u;
	}
	/* a large block, or an aligned one */
	off = align <= 16 ? HDR : align; /* align: a power of two, 32 or more */
	if (HS_UNLIKELY(n >= SIZE56 || off > OFF_MAX) && n <= SIZE_MAX / 2) {
		/* no header can describe it: glibc's own, but a refusal is counted */
		r = align <= 16 ? (zero ? __libc_calloc(1, n) : __libc_malloc(n)) : __libc_memalign(align, n);
		if (!r) {
			int e = errno;
			count_failure(n, heap_stack(site));
			errno = e;
		}
		return r;
	}
	after = n <= SIZE_MAX / 2 ? after_len(n, 0) : 0;
	if (n > SIZE_MAX / 2 || __builtin_add_overflow(off + after, n, &total)) {
		r = NULL;
		errno = ENOMEM;
	} else if (align <= 16) {
		r = zero ? __libc_calloc(1, total) : __libc_malloc(total);
	} else {
		r = __libc_memalign(align, total);
	}
	*stackp = stack = heap_stack(site);
	if (HS_UNLIKELY(r == NULL))
		return alloc_failed(n, stack);
	u = r + off;
	alloc = alloc_word(stack);
	if (zero && align > 16)
		memset(u, 0, n);
	tw = (uint64_t)alloc << 32 | (uint64_t)(off >> 4) << 8 | check8(u);
	canary_put(u, n, after - 8);
	memcpy(u + n + after - 8, &tw, sizeof tw);
	/* relaxed: the program's own hand-over of the pointer orders these stores for other threads */
	__atomic_store_n(&hw(u)[1], (off == HDR ? ST_LIVE_L : ST_LIVE_LA) | (uint64_t)n << 8, __ATOMIC_RELAXED);
	__atomic_store_n(&hw(u)[0], tag_of(u, 0, t->tid), __ATOMIC_RELAXED);
	count_alloc(n);
	return u;
}

/* An exact-fit block's check at its free: the next chunk's size word
 * (fit_ok), or the canary in the room glibc gave (FIT_ROOM); a damaged
 * size word of its own is left to release() (chunk_damaged). */
static __attribute__((noinline)) int exact_fit_intact(const void *p, size_t n)
{
	switch (fit_of(p, n)) {
	case FIT_EXACT:
		return fit_ok(p, n);
	case FIT_ROOM:
		return canary_ok(p, n, FIT_CANARY);
	default:
		return 1;
	}
}

/*
 * The lock graph (locks.c): locks in the n bytes at p, a block being
 * freed, are gone.  The lock-address filter first (shim.h
 * hs_lock_mem_seen: most blocks never held a lock).
 */
static inline __attribute__((always_inline)) void lock_mem_freed(void *p, size_t n)
{
	if (HS_UNLIKELY(hs_lock_mem_seen((uintptr_t)p, (uintptr_t)p + n)))
		hs_locks_on_free(p, n);
}

/*
 * A checked free of p, which carries our magic; old: its state word as
 * read just before (the probe's, owner_words, or an acquire load: the first
 * free's stores to the block happen before the words read after it; a
 * word that changed since only fails the compare-and-swap, which then
 * sees the new one); stack: the free's stack id when known (realloc's,
 * from its allocation), else STACK_UNSET; locks: the lock graph is told
 * (lock_mem_freed: the free's, not realloc's).  With the guard held.  Returns 1 when the block was freed, 0 when it was reported instead
 * (double or invalid free: nothing freed; overflow: marked freed but kept
 * out of glibc's hands, since glibc's own next chunk may be damaged).
 */
static inline __attribute__((always_inline)) int blk_free(struct hs_tls *t, int ring, void *p, uint64_t site,
							  uint32_t stack, uint64_t old, int locks)
{
	uint64_t *sw = &hw(p)[1];
	struct bview v;
	if (HS_LIKELY(st_is_live(old))) {
		uint32_t st;
		uint64_t nw, live = old;
		int intact;
		size_t clen;
		view_of_live(p, old, 0, &v);
		if (locks)
			lock_mem_freed(p, v.size);
		/* the canary first: the saved live word may lie over it */
		clen = v.small ? canary_len_s(v.size) : canary_len(v.size);
		if (HS_LIKELY(clen))
			intact = canary_ok(p, v.size, clen);
		else
			intact = exact_fit_intact(p, v.size);
		/* the live word, for whoever finds the block freed (blk_view);
		   before the compare-and-swap, so that a racing second free that
		   loses finds it there (both store the same value) */
		((uint64_t *)p)[1] = old;
		st = stack != STACK_UNSET ? stack : heap_stack(site);
		nw = ST_FREED | (uint64_t)(st < (1u << 24) ? st : 0) << 8 | (uint64_t)(uint32_t)t->tid << 32;
		/* acq_rel: the winner's free is published whole; a loser sees the winner's word */
		if (__atomic_compare_exchange_n(sw, &old, nw, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
			if (HS_UNLIKELY(!intact)) {
				struct hs_finding f;
				view_of_live(p, live, 1, &v);
				finding_init(&f, t, HS_FIND_HEAP_OVERFLOW, p);
				f.stack3 = alloc_stack_of(v.alloc);
				f.tid3 = v.alloc_tid;
				f.size = v.size;
				count_free(v.size);
				heap_finding(t, ring, &f);
				return 0;
			}
			count_free(v.size);
			quarantine_put(t, ring, p, live, &v, v.offset + v.size + clen + (v.small ? 0 : 8));
			return 1;
		}
	} else if (locks) {
		lock_mem_freed(p, blk_view(p, &v) ? v.size : 0);
	}
	if (HS_UNLIKELY(!st_is_freed(old))) {
		uint64_t rec[3];
		/* a block freed by a racing free and given back to glibc since we
		   looked (glibc's links over its header) */
		if (small_record(p, rec)) {
			record_double_free(t, ring, p, rec);
			return 0;
		}
		/* not a state of ours after all (owner_of saw one): glibc's block */
		__libc_free(p);
		return 1;
	}
	bad_state(t, ring, p, old);
	return 0;
}

/* A free of our block inside the shim: no findings, no quarantine. */
static void blk_free_quiet(void *p)
{
	uint64_t *sw = &hw(p)[1];
	uint64_t old = __atomic_load_n(sw, __ATOMIC_ACQUIRE), live = old;
	struct bview v;
	if (!st_is_live(old))
		return;
	view_of_live(p, old, 0, &v);
	((uint64_t *)p)[1] = old;
	if (__atomic_compare_exchange_n(sw, &old, ST_FREED, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		count_free(v.size);
		release(NULL, 0, p, live);
	}
}

/* ---- initialisation and fork ---------------------------------------------------- */

/* heap_live_bytes when fork was called; written before every fork, so on the
   page of the fork state (shim.h HS_HOT_BSS_HEAD), which a forking process
   writes anyway: not one more copy-on-write fault in the parent per fork */
HS_HOT_BSS_HEAD static uint64_t fork_live;

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
HS_FORK_TEXT HS_HIDDEN void hs_heap_after_fork_child(void)
{
	struct hs_header *h;
	/* a child without its segment yet (init.c hs_fork_pending): all of it when
	   the segment is made, which calls this again; an exec first needs none */
	if (__atomic_load_n(&hs_heap_mode, __ATOMIC_ACQUIRE) != HS_HEAP_MODE_ON ||
	    __atomic_load_n(&hs_fork_pending, __ATOMIC_ACQUIRE) == 1)
		return;
	/* the site cache holds stack ids: valid here only when the tables were inherited */
	if (!hs_seg_inherited) {
		/* the part in use only: the rest was never written */
		memset(site_cache, 0, ((size_t)__atomic_load_n(&site_mask, __ATOMIC_RELAXED) + 1) * sizeof site_cache[0]);
		__atomic_store_n(&site_filled, 0, __ATOMIC_RELAXED);
		memset(module_kind, 0, sizeof module_kind); /* indexes of the parent's module table */
		if (hs_tls.area) {
			memset(memo_in(hs_tls.area), 0, sizeof(struct site_memo));
			memset(wrap_memo_in(hs_tls.area), 0, sizeof(struct wrap_memo));
		}
		__atomic_add_fetch(&stack_epoch, 1, __ATOMIC_RELAXED);
	}
	/* the other threads' FIFOs stay allocated in the child; the total is this thread's */
	__atomic_store_n(&quar_total, tquar.f[QF_SMALL].bytes + tquar.f[QF_LARGE].bytes - (uint64_t)tquar.unsynced,
			 __ATOMIC_RELAXED);
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
	int expect = HS_HEAP_MODE_UNKNOWN;
	struct hs_tls *t = &hs_tls;
	int was = t->in_hook;
	if (!__atomic_load_n(&hs_recording, __ATOMIC_ACQUIRE))
		return;
	if (!__atomic_compare_exchange_n(&hs_heap_mode, &expect, HS_HEAP_MODE_INIT, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
		return;
	t->in_hook = 1;
	if (!hs_getenv_bool("HEISEN_HEAP", 1)) { /* on unless HEISEN_HEAP=0 */
		__atomic_store_n(&hs_heap_mode, HS_HEAP_MODE_OFF, __ATOMIC_RELEASE);
		t->in_hook = was;
		return;
	}
	hs_heap_page_size = (size_t)sysconf(_SC_PAGESIZE);
	errno_tpoff = (char *)__errno_location() - (char *)__builtin_thread_pointer();
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
		quar_limit = 0; /* no way to empty an exiting thread's FIFOs: no quarantine */
	atexit(count_flush); /* the exiting thread's counts; runs before init.c's on_exit handler */
	/* release: the settings above are visible to every hook that sees HS_HEAP_MODE_ON */
	__atomic_store_n(&hs_heap_mode, HS_HEAP_MODE_ON, __ATOMIC_RELEASE);
	t->in_hook = was;
}

/* ---- the core's entries (heap_core.h) ---------------------------------------------- */

HS_HIDDEN void *hs_heap_alloc(size_t n, size_t align, int zero, uint64_t site)
{
	struct hs_tls *t = &hs_tls;
	int *ep = errno_at(), e = *ep;
	uint32_t stack;
	void *p;
	heap_enter(t);
	p = blk_alloc(t, n, align, zero, site, &stack);
	hs_leave(t);
	if (p)
		*ep = e;
	return p;
}

HS_HIDDEN void hs_heap_free(void *p, uint64_t site)
{
	struct hs_tls *t = &hs_tls;
	int *ep = errno_at(), e = *ep, ring;
	uint64_t w[2];
	enum owner o;
	if (HS_UNLIKELY(t->in_hook)) {
		o = owner_of(p);
		if (o == OWN_OURS)
			blk_free_quiet(p);
		else if (o == OWN_FOREIGN)
			__libc_free(p);
		*ep = e;
		return;
	}
	ring = heap_enter(t);
	o = owner_words(p, w);
	/* acquire: the probe's load is the state word's read (blk_free) */
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	if (HS_LIKELY(o == OWN_OURS))
		blk_free(t, ring, p, site, STACK_UNSET, w[1], 1); /* and the lock graph (locks.c): locks in the block are gone */
	else if (!foreign_is_invalid(t, ring, p, o))
		__libc_free(p);
	hs_leave(t);
	*ep = e;
}

HS_HIDDEN void *hs_heap_realloc(void *p, size_t n, uint64_t site)
{
	struct hs_tls *t = &hs_tls;
	int *ep = errno_at(), e = *ep, ring;
	struct bview v;
	void *q;
	uint64_t st, keep, rec[3], w[2];
	uint32_t stack = STACK_UNSET;
	enum owner o;

	if (p == NULL)
		return hs_tls.in_hook ? __libc_malloc(n) : hs_heap_alloc(n, 0, 0, site);
	o = owner_words(p, w);
	/* acquire: the probe's load is the state word's read (as blk_free's) */
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	if (o == OWN_FOREIGN && !t->in_hook && small_record(p, rec)) {
		/* a block of ours given back to glibc: as a double free in realloc
		   (continue: a new block, nothing copied from freed memory) */
		ring = heap_enter(t);
		record_double_free(t, ring, p, rec);
		q = n ? blk_alloc(t, n, 0, 0, site, &stack) : NULL;
		hs_leave(t);
		*ep = e;
		return q;
	}
	if (o != OWN_OURS) {
		if (!t->in_hook && o != OWN_FOREIGN) {
			ring = heap_enter(t);
			foreign_is_invalid(t, ring, p, o);
			hs_leave(t);
			*ep = EINVAL;
			return NULL;
		}
		return __libc_realloc(p, n);
	}
	st = w[1];
	/* the bytes the old block holds: none once given back to glibc */
	if (HS_LIKELY(ST_KIND(st) == ST_LIVE_S))
		keep = ST_SSIZE(st);
	else
		keep = ST_KIND(st) == ST_RELEASED ? 0 : (blk_view(p, &v), v.size);
	if (keep > n)
		keep = n;
	if (HS_UNLIKELY(t->in_hook)) {
		/* the shim resizing a block of the program: keep it glibc's from now on */
		if (n == 0) {
			blk_free_quiet(p);
			return NULL;
		}
		q = __libc_malloc(n);
		if (q) {
			memcpy(q, p, keep);
			blk_free_quiet(p);
		}
		return q;
	}
	ring = heap_enter(t);
	st = __atomic_load_n(&hw(p)[1], __ATOMIC_ACQUIRE);
	if (HS_UNLIKELY(!st_is_live(st))) {
		/* continue: a new block with what the old one held; the old one is not freed again */
		bad_state(t, ring, p, st);
		q = n ? blk_alloc(t, n, 0, 0, site, &stack) : NULL;
		if (q)
			memcpy(q, p, keep);
		hs_leave(t);
		*ep = e;
		return q;
	}
	if (n == 0) {
		/* glibc: realloc(p, 0) frees p and returns NULL */
		blk_free(t, ring, p, site, STACK_UNSET, st, 0);
		hs_leave(t);
		*ep = e;
		return NULL;
	}
	q = blk_alloc(t, n, 0, 0, site, &stack);
	if (q) {
		memcpy(q, p, keep);
		/* the free's stack is the allocation's: one call site */
		blk_free(t, ring, p, site, stack, __atomic_load_n(&hw(p)[1], __ATOMIC_ACQUIRE), 0);
		*ep = e;
	}
	hs_leave(t);
	return q;
}

HS_HIDDEN void *hs_heap_memalign(size_t align, size_t n, uint64_t site)
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
	return hs_heap_alloc(n, align <= 16 ? 0 : align, 0, site);
}

HS_HIDDEN int hs_heap_usable(const void *p, size_t *n)
{
	struct bview v;
	if (!ours(p))
		return 0;
	blk_view(p, &v);
	*n = v.size;
	return 1;
}

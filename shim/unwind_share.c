/* SPDX-License-Identifier: MIT */
/*
 * shim/unwind_share.c — learnt frame distances shared by the session's
 * processes: the table <session>/.frames.
 *
 * A new call site's stack is read through the return-address distances
 * learnt from real unwinds (stacks.c, "learnt distances"); libunwind runs
 * only for a return address never seen before, ~9,000 instructions a new
 * site in a cc1 compile.  In a short process every return address is new,
 * and a build runs the same executables and libraries over and over (40
 * cc1s, 200 shell children, many Pythons), each learning the same
 * distances again.  So what one process learnt is written to a table in the
 * session directory, keyed by the object's identity (its NT_GNU_BUILD_ID,
 * read from the segment's module table) and the return address's offset in
 * it (pc - load bias: the same in every process, whatever ASLR did), and
 * the session's next processes take it from there instead of unwinding.
 *
 * The table (the file is 4096 + 16 * FRAMES_CAP bytes, made sparse with
 * ftruncate; created by the first process that needs it, O_NOFOLLOW, 0600,
 * the session directory being the user's own):
 *
 *   struct frames_hdr (64 bytes, then zeros to 4096): magic "HSFRAMES"
 *     (8 bytes, little-endian uint64 FRAMES_MAGIC), version
 *     (FRAMES_VERSION), capacity (entries,
 *     FRAMES_CAP), then counters [atomic, relaxed]: hits (distances taken
 *     from the table), published (entries written), doubts (entries turned
 *     to doubt), full (inserts that found no free slot), rejected (entries
 *     whose check failed).  Every writer writes the same header bytes; a
 *     header with another magic, version or capacity, or a file of another
 *     size, owner or type, means no sharing (each process then learns
 *     alone, as before).
 *   struct frames_entry[capacity], 16 bytes each:
 *     key = offset << 32 | (low 32 bits of the object's identity, | 1):
 *       never 0 (0: a free slot);
 *     val = check << 16 | off: off the frame's CFA - SP distance in
 *       8-byte units as stacks.c keeps it (pcoff_code; 0: the outermost
 *       frame, 0xffff: doubt, seen at two distances; version 1 had bytes,
 *       which left a frame of 64 KiB or more unshared); check the high 48 bits of a hash of the whole
 *       64-bit identity, the key and off (never 0; val 0: being written).
 *     A second entry of the same return address, its key's bit 31 flipped
 *     (FRAMES_RULE_TAG), holds in off its %rbp rule instead (stacks.c,
 *     "frame-pointer frames": where the frame keeps its caller's %rbp, and
 *     whether its CFA is %rbp + 16); written only for the frames of a
 *     stack that goes through a frame of doubtful distance, with the same
 *     check, and turned to doubt (0xffff) the same way.
 *   Open addressing: home slot entry_home (a page of 256 entries by the
 *   object and the 64 KiB of code, a slot in it by the key), FRAMES_PROBE
 *   slots probed linearly inside that page; a key is claimed by
 *   compare-and-swap from 0, its val stored after; a reader that sees val
 *   0 treats it as absent.
 *
 * Errors, and why a wrong stack is never taken silently:
 *   - another build of an object at the same path has another build id:
 *     its entries are other keys (an object without a build id is not
 *     shared at all);
 *   - a corrupt entry fails its check (a 48-bit hash) and is counted in
 *     rejected; a writer that learns the pc puts a checked entry in its
 *     place; a corrupt header disables the table;
 *   - a frame whose size is not a function of its return address alone
 *     (alloca) is seen at two distances by some process, which turns the
 *     entry to doubt for all (stacks.c then unwinds through it each time,
 *     as it does for doubt learnt alone);
 *   - a distance taken from the table is used exactly as one learnt here:
 *     the walk reads the next return address at the CFA it gives and goes
 *     on only while each return address read is itself a learnt one (here
 *     or in the table), within the thread's stack; any doubt is a real
 *     unwind (stacks.c site_read), so a wrong distance leads to libunwind,
 *     not to a wrong frame, unless it lands on a slot holding another
 *     learnt return address -- the risk a distance learnt alone has too.
 * Every read of the mapping goes through hs_safe_read16 (a truncated file
 * reads as absent, never a SIGBUS); a write follows a checked read of its
 * slot.
 *
 * The idea is the per-PC CFA rule cache of a profiler's fast unwinder
 * (stacks.c), made persistent across exec the way ccache shares compiler
 * work across processes: a content-addressed table in a shared directory.
 * docs/design.md "Stacks" (learnt distances shared by the session).
 * HEISEN_UNWIND_SHARE=0 turns it off.
 */
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "shim.h"
#include "internal/seg_dir.h"

#define FRAMES_MAGIC 0x53454d4152465348ull /* "HSFRAMES" */
#define FRAMES_VERSION 2u /* 2: distances in 8-byte units */
#define FRAMES_CAP 65536u  /* entries: a power of two; 1 MiB of sparse file */
#define FRAMES_PROBE 32u
#define FRAMES_OFF_MASK 0xffffu
#define FRAMES_PAGE 256u        /* entries in one 4 KiB page */
#define FRAMES_CHUNK_SHIFT 16   /* 64 KiB of an object's code share a home page */
#define FRAMES_HDR_BYTES 4096u  /* the header's page: entries start page-aligned */
#define FRAMES_RULE_TAG 0x80000000u /* in a key's low half: the entry of pc's %rbp rule, not its distance */

struct frames_hdr {
	uint64_t magic;
	uint32_t version, capacity;
	uint64_t hits, published, doubts, full, rejected;
	uint64_t pad;
};
_Static_assert(sizeof(struct frames_hdr) == 64, "the table's header is 64 bytes");

struct frames_entry {
	uint64_t key, val;
};
#define FRAMES_BYTES (FRAMES_HDR_BYTES + (size_t)FRAMES_CAP * sizeof(struct frames_entry))

#ifdef HS_CORE_ONLY /* the unit tests' core library: no crash handler for the checked reads, no sharing */
int hs_frames_get(uint64_t pc, unsigned *off)
{
	(void)pc, (void)off;
	return 0;
}
void hs_frames_put(uint64_t pc, unsigned off)
{
	(void)pc, (void)off;
}
int hs_frames_get_rule(uint64_t pc, unsigned *rule)
{
	(void)pc, (void)rule;
	return 0;
}
void hs_frames_put_rule(uint64_t pc, unsigned rule)
{
	(void)pc, (void)rule;
}
int hs_frames_mapped(void)
{
	return 0;
}
#else

enum { FR_NONE, FR_OPENING, FR_READY, FR_OFF };
static int frames_state;              /* [atomic] enum above */
static struct frames_hdr *frames_tab; /* set before FR_READY */

/*
 * The objects met so far: load range, load bias and identity (a hash of
 * the build id; 0: no build id, not shared).  Process-private, filled from
 * the segment's module table on a pc it does not hold; an entry is
 * claimed by compare-and-swap of the count and published by `ready`.
 */
#define MODS_CAP 128u
static struct frames_mod {
	uint64_t lo, hi, base, id;
	int ready; /* [atomic] */
} mods[MODS_CAP];
static unsigned mods_n; /* [atomic] entries claimed */

static uint64_t build_id_hash(const uint8_t *b, unsigned n)
{
	uint64_t h = 0x6a09e667f3bcc909ull ^ n;
	for (unsigned i = 0; i < n; i++)
		h = hs_mix64(h ^ b[i]) + i;
	return h ? h : 1;
}

/* pc's object: *base, returns its identity; 0 when unknown or not shared. */
static uint64_t mod_of(uint64_t pc, uint64_t *base)
{
	unsigned n = __atomic_load_n(&mods_n, __ATOMIC_ACQUIRE), i, k;
	const struct hs_module *sm;
	uint64_t id;
	if (n > MODS_CAP)
		n = MODS_CAP;
	for (i = 0; i < n; i++) {
		const struct frames_mod *m = &mods[i];
		if (__atomic_load_n(&m->ready, __ATOMIC_ACQUIRE) && pc >= m->lo && pc < m->hi) {
			*base = m->base;
			return m->id;
		}
	}
	if (!hs_seg.hdr || (sm = hs_module_at(pc, NULL)) == NULL)
		return 0;
	id = sm->build_id_len && sm->build_id_len <= HS_BUILD_ID_MAX ? build_id_hash(sm->build_id, sm->build_id_len) : 0;
	k = __atomic_fetch_add(&mods_n, 1, __ATOMIC_ACQ_REL);
	if (k < MODS_CAP) {
		mods[k].lo = sm->lo;
		mods[k].hi = sm->hi;
		mods[k].base = sm->base;
		mods[k].id = id;
		__atomic_store_n(&mods[k].ready, 1, __ATOMIC_RELEASE);
	}
	*base = sm->base;
	return id;
}

/* The table mapped and checked, or FR_OFF; once per process image. */
static __attribute__((noinline)) void frames_open(void)
{
	char path[PATH_MAX];
	struct frames_hdr *h;
	struct stat st;
	int expect = FR_NONE, fd;
	uint64_t zero = 0;
	if (!__atomic_compare_exchange_n(&frames_state, &expect, FR_OPENING, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
		return;
	if (!hs_getenv_bool("HEISEN_UNWIND_SHARE", 1) || hs_session_file(path, sizeof path, HS_SEG_FRAMES) != 0)
		goto off;
	fd = hs_sys.open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0600);
	if (fd < 0)
		goto off;
	if (hs_sys.fstatat(fd, "", &st, AT_EMPTY_PATH) != 0 || !S_ISREG(st.st_mode) || st.st_uid != hs_sys.geteuid() ||
	    (st.st_size != 0 && (uint64_t)st.st_size != FRAMES_BYTES) ||
	    (st.st_size == 0 && hs_sys.ftruncate(fd, (off_t)FRAMES_BYTES) != 0)) {
		hs_sys.close(fd);
		goto off;
	}
	h = hs_sys.mmap(NULL, FRAMES_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	hs_sys.close(fd);
	if (h == MAP_FAILED)
		goto off;
	/* no fault-around: a look-up's page alone becomes resident, not the 15
	   around it that other processes filled (the file is in the page cache) */
	(void)hs_sys.madvise(h, FRAMES_BYTES, MADV_RANDOM);
	{
		uint64_t w[2];
		if (!hs_safe_read16(h, w))
			goto unmap;
		if (w[0] == 0) {
			/* a new table: every process writes the same bytes */
			h->version = FRAMES_VERSION;
			h->capacity = FRAMES_CAP;
			__atomic_compare_exchange_n(&h->magic, &zero, FRAMES_MAGIC, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
		}
		if (!hs_safe_read16(h, w) || w[0] != FRAMES_MAGIC || (uint32_t)w[1] != FRAMES_VERSION ||
		    (uint32_t)(w[1] >> 32) != FRAMES_CAP)
			goto unmap;
	}
	frames_tab = h;
	__atomic_store_n(&frames_state, FR_READY, __ATOMIC_RELEASE);
	return;
unmap:
	hs_sys.munmap(h, FRAMES_BYTES);
off:
	__atomic_store_n(&frames_state, FR_OFF, __ATOMIC_RELEASE);
}

/* The table, opening it at the first call; NULL when there is none. */
static inline struct frames_hdr *frames(void)
{
	int s = __atomic_load_n(&frames_state, __ATOMIC_ACQUIRE);
	if (HS_LIKELY(s == FR_READY))
		return frames_tab;
	/* a vfork child shares its parent's memory: no mapping made from it */
	if (s != FR_NONE || hs_tls.vfork_pid || !__atomic_load_n(&hs_recording, __ATOMIC_ACQUIRE))
		return NULL;
	frames_open();
	return __atomic_load_n(&frames_state, __ATOMIC_ACQUIRE) == FR_READY ? frames_tab : NULL;
}

static inline uint64_t entry_val(uint64_t id, uint64_t key, unsigned off)
{
	uint64_t c = hs_mix64(id ^ hs_mix64(key ^ ((uint64_t)off << 48) ^ 0x243f6a8885a308d3ull)) & ~(uint64_t)FRAMES_OFF_MASK;
	return (c ? c : 1ull << 16) | off;
}

/* pc's key in the table and its identity; 0 when pc is not shared.  tag
 * 0: its distance's entry; FRAMES_RULE_TAG: its %rbp rule's entry. */
static inline uint64_t pc_key(uint64_t pc, uint64_t *id, uint32_t tag)
{
	uint64_t base = 0, rel;
	*id = mod_of(pc, &base);
	if (!*id || pc < base || ((rel = pc - base) >> 32))
		return 0;
	return rel << 32 | ((uint32_t)(*id | 1) ^ tag);
}

static inline struct frames_entry *entry_at(struct frames_hdr *h, uint32_t i)
{
	return (struct frames_entry *)(void *)((char *)h + FRAMES_HDR_BYTES) + i;
}

/*
 * A key's home slot: a page chosen by the object and the 64 KiB of its
 * code the return address lies in, a slot in the page by the key.  A
 * process's return addresses cluster in a few dozen such chunks, so its
 * look-ups touch a few dozen pages of the table (a Python start: ~40 of
 * 256, where a home anywhere touched ~230: 0.9 MiB more resident).
 */
static inline uint32_t entry_home(uint64_t id, uint64_t key)
{
	uint64_t page = hs_mix64(id ^ ((key >> (32 + FRAMES_CHUNK_SHIFT)) * 0x9e3779b97f4a7c15ull));
	return (uint32_t)(page % (FRAMES_CAP / FRAMES_PAGE)) * FRAMES_PAGE + (uint32_t)(hs_mix64(key) % FRAMES_PAGE);
}

/* The slot after i, inside i's page. */
static inline uint32_t entry_next(uint32_t i)
{
	return (i & ~(FRAMES_PAGE - 1)) | ((i + 1) & (FRAMES_PAGE - 1));
}

int hs_frames_mapped(void)
{
	return frames() != NULL;
}

static int frames_get(uint64_t pc, unsigned *off, uint32_t tag)
{
	struct frames_hdr *h = frames();
	uint64_t id, key, w[2];
	uint32_t i;
	if (!h || (key = pc_key(pc, &id, tag)) == 0)
		return 0;
	i = entry_home(id, key);
	for (unsigned p = 0; p < FRAMES_PROBE; p++, i = entry_next(i)) {
		if (!hs_safe_read16(entry_at(h, i), w) || w[0] == 0)
			return 0;
		if (w[0] != key)
			continue;
		if (w[1] == 0)
			return 0; /* being written */
		if (w[1] != entry_val(id, key, (unsigned)(w[1] & FRAMES_OFF_MASK))) {
			__atomic_add_fetch(&h->rejected, 1, __ATOMIC_RELAXED);
			return 0;
		}
		*off = (unsigned)(w[1] & FRAMES_OFF_MASK);
		__atomic_add_fetch(&h->hits, 1, __ATOMIC_RELAXED);
		return 1;
	}
	return 0;
}

static void frames_put(uint64_t pc, unsigned off, uint32_t tag)
{
	struct frames_hdr *h = frames();
	uint64_t id, key, w[2], want;
	uint32_t i;
	if (!h || off > FRAMES_OFF_MASK || (key = pc_key(pc, &id, tag)) == 0)
		return;
	want = entry_val(id, key, off);
	i = entry_home(id, key);
	for (unsigned p = 0; p < FRAMES_PROBE; p++, i = entry_next(i)) {
		struct frames_entry *e = entry_at(h, i);
		if (!hs_safe_read16(e, w))
			return;
		if (w[0] == 0) {
			uint64_t expect = 0;
			if (__atomic_compare_exchange_n(&e->key, &expect, key, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
				__atomic_store_n(&e->val, want, __ATOMIC_RELEASE);
				__atomic_add_fetch(&h->published, 1, __ATOMIC_RELAXED);
				return;
			}
			w[0] = expect;
			w[1] = __atomic_load_n(&e->val, __ATOMIC_ACQUIRE);
		}
		if (w[0] != key)
			continue;
		if (w[1] == want || w[1] == 0 || w[1] == entry_val(id, key, FRAMES_OFF_MASK))
			return; /* the same, being written, or doubt already */
		if (w[1] != entry_val(id, key, (unsigned)(w[1] & FRAMES_OFF_MASK))) {
			/* a corrupt entry: this process's distance, checked by its own unwind */
			__atomic_compare_exchange_n(&e->val, &w[1], want, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
			return;
		}
		/* another distance for the same return address: doubt, for every process */
		if (__atomic_compare_exchange_n(&e->val, &w[1], entry_val(id, key, FRAMES_OFF_MASK), 0, __ATOMIC_ACQ_REL,
						__ATOMIC_RELAXED))
			__atomic_add_fetch(&h->doubts, 1, __ATOMIC_RELAXED);
		return;
	}
	__atomic_add_fetch(&h->full, 1, __ATOMIC_RELAXED);
}

int hs_frames_get(uint64_t pc, unsigned *off)
{
	return frames_get(pc, off, 0);
}

void hs_frames_put(uint64_t pc, unsigned off)
{
	frames_put(pc, off, 0);
}

int hs_frames_get_rule(uint64_t pc, unsigned *rule)
{
	return frames_get(pc, rule, FRAMES_RULE_TAG);
}

void hs_frames_put_rule(uint64_t pc, unsigned rule)
{
	frames_put(pc, rule, FRAMES_RULE_TAG);
}
#endif

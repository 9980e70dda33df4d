/* SPDX-License-Identifier: MIT */
/*
 * shim/python_frames.c — Python frames in native stacks, CPython 3.8 to 3.13.
 *
 * A stack that heisen records for a finding shows the Python functions that
 * were running, where they ran: each native frame of CPython's evaluation
 * loop (_PyEval_EvalFrameDefault) is replaced by the Python frames that
 * C-level call was executing, innermost first — py-spy's and memray's
 * "native mode".  How many Python frames one call of the evaluation loop
 * runs depends on the version (the `chain` kind of the layout table below):
 *   - 3.8 to 3.10: exactly one (a PyFrameObject; the thread state's `frame`
 *     and each frame's f_back are the chain);
 *   - 3.11: a run of _PyInterpreterFrames linked by ->previous, up to and
 *     including the first one marked is_entry;
 *   - 3.12 and 3.13: a run up to a shim frame the loop keeps on the C stack
 *     (owner FRAME_OWNED_BY_CSTACK, entry_frame in Python/ceval.c), which
 *     is itself no Python function.
 * So walking the native PCs innermost first and, at each PC inside the loop,
 * consuming the frame chain up to the next boundary puts both in call order.
 *
 * Everything here reads memory only: the calling thread's own frame chain
 * (reached through PyGILState_GetThisThreadState, which reads a TSS slot
 * and needs no GIL, kept per thread and checked against the thread state
 * running: tstate_of_thread), code objects, their line tables and str
 * objects.  Nothing allocates, nothing calls into CPython except that
 * accessor and, 3.12+, PyThreadState_GetUnchecked,
 * and the line tables are decoded here (co_lnotab of 3.8/3.9, PEP 626's
 * co_linetable of 3.10, the location table of 3.11+: Objects/lnotab_notes.txt
 * and Objects/locations.md of those tags) rather than with PyCode_Addr2Line.
 * In a signal handler (hs_py_careful) the interrupted thread may have been
 * anywhere, so every read then goes through process_vm_readv on ourselves,
 * which fails instead of faulting.  Frames are interned in the segment's
 * pyframe table (format.h, struct hs_pyframe) lock-free, as stacks.c interns
 * stacks.
 *
 * The struct layouts are NOT taken from any CPython's headers at build time:
 * they are the hand-written table `layouts` of python_layouts.h, one row
 * per major.minor (as pystack and py-spy keep them), chosen at run time by
 * Py_GetVersion(); tests/pyframe_layouts.c checks each row against the
 * headers of the interpreters installed where the tests run.
 * A version not in the table gets native frames only (the segment's header
 * has python_version but not HS_PY_FRAMES; heisen-dump says so).  Release
 * builds only: a --with-trace-refs build has a larger object header.
 * Design: docs/design.md "Python frames"; format: format.h.
 */
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stddef.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "shim.h"

__thread int hs_py_careful __attribute__((tls_model("initial-exec")));

#define PY_CHAIN_MAX 256  /* Python frames looked at per capture (recursion beyond is cut) */
#define PY_STR_MAX 512    /* bytes kept of a name or file name (UTF-8) */
#define PY_CACHE 256      /* code objects whose interned names are cached (power of two) */
#define PY_ICACHE 512     /* (code, instruction) -> pyframe id, cached (power of two) */
#define PY_FRAME_READ 128 /* room for a frame's fields (pf.frame_read bytes are read) */
#define PY_CODE_READ 192  /* room for a code object's fields (pf.code_read bytes are read) */

/* ---- the layouts, one per CPython major.minor ------------------------------ */

#include "python_layouts.h"

/* What frame reading needs, resolved once; `ready` publishes the rest. */
static struct {
	int ready;                  /* [atomic] 1: the fields below are valid */
	int tried;                  /* [atomic] hs_py_interleave's lazy init ran once */
	const char *version;        /* Py_GetVersion(): a static string */
	const struct py_layout *L;  /* the running CPython's row of layouts[] */
	unsigned row;               /* L - layouts: the switch of the per-row loops (no division) */
	void *(*this_tstate)(void); /* PyGILState_GetThisThreadState */
	uint64_t rt_current;        /* &_PyRuntime.gilstate.tstate_current (3.8-3.11), else 0 */
	void *(*current)(void);     /* PyThreadState_GetUnchecked (3.12+), else NULL */
	int tls_kind;               /* how `current` reads _Py_tss_tstate (tls_learn): 0 unknown (call it), */
	uint64_t tls_index;         /* 1 general dynamic: __tls_get_addr(tls_index), */
	int64_t tls_tpoff;          /* 2 initial or local exec: the thread pointer + tls_tpoff */
	uint64_t eval_lo, eval_hi;  /* _PyEval_EvalFrameDefault's code [lo, hi) */
	uint64_t code_type, str_type, bytes_type;
	unsigned frame_read;        /* bytes of a frame that hold every field used: up to the last one's end */
	unsigned code_read;         /* likewise for a code object (_co_firsttraceable is read apart) */
} pf;

/* ---- reading memory -------------------------------------------------------- */

/*
 * Copy n bytes at src into dst.  Careful mode (signal handlers): through
 * process_vm_readv, so an address that is not mapped gives -1, not SIGSEGV.
 * Otherwise a plain copy: the caller is in a hook on its own thread, whose
 * frame chain is consistent and alive.  Returns 0 or -1.
 */
static inline int rd(void *dst, uint64_t src, size_t n)
{
	if (src < 4096)
		return -1;
	if (!hs_py_careful) {
		memcpy(dst, (const void *)(uintptr_t)src, n);
		return 0;
	}
	return hs_sys.read_self(dst, (const void *)(uintptr_t)src, n) == (ssize_t)n ? 0 : -1;
}

/*
 * The first n bytes at src to read fields from: src itself outside careful
 * mode (the thread's own live frames and code objects: no copy), else a
 * careful copy into buf.  NULL when they cannot be read.
 */
static inline const unsigned char *view(unsigned char *buf, uint64_t src, size_t n)
{
	if (src < 4096)
		return NULL;
	if (!hs_py_careful)
		return (const unsigned char *)(uintptr_t)src;
	return rd(buf, src, n) == 0 ? buf : NULL;
}

/* Fields of a struct copied into a local buffer, by byte offset. */
static uint64_t u64_at(const unsigned char *b, unsigned off)
{
	uint64_t v;
	memcpy(&v, b + off, sizeof v);
	return v;
}

static int32_t i32_at(const unsigned char *b, unsigned off)
{
	int32_t v;
	memcpy(&v, b + off, sizeof v);
	return v;
}

/* ---- line numbers ------------------------------------------------------------ */

/* A cursor over the bytes of a line table, read in chunks. */
struct lt {
	uint64_t addr;      /* first byte of the table */
	uint64_t len;       /* its length */
	uint64_t pos;       /* next byte */
	uint64_t buf_at;    /* table offset of buf[0] */
	unsigned buf_n;
	unsigned char buf[128];
};

/* The next byte, or -1 at the end or on a read error. */
static int lt_byte(struct lt *t)
{
	if (t->pos >= t->len)
		return -1;
	if (t->pos < t->buf_at || t->pos >= t->buf_at + t->buf_n) {
		uint64_t n = t->len - t->pos < sizeof t->buf ? t->len - t->pos : sizeof t->buf;
		if (rd(t->buf, t->addr + t->pos, n) != 0)
			return -1;
		t->buf_at = t->pos;
		t->buf_n = (unsigned)n;
	}
	return t->buf[t->pos++ - t->buf_at];
}

/* The next byte without consuming it, or -1. */
static int lt_peek(struct lt *t)
{
	int b = lt_byte(t);
	if (b >= 0)
		t->pos--;
	return b;
}

static int lt_varint(struct lt *t, unsigned *out)
{
	int b = lt_byte(t);
	unsigned val, shift = 0;
	if (b < 0)
		return -1;
	val = (unsigned)b & 63;
	while (b & 64) {
		if ((b = lt_byte(t)) < 0 || (shift += 6) > 30)
			return -1;
		val |= ((unsigned)b & 63) << shift;
	}
	*out = val;
	return 0;
}

/*
 * 3.8/3.9 co_lnotab (Objects/lnotab_notes.txt of 3.9): pairs of (bytecode
 * bytes, line delta as a signed byte); the line of byte `addr` is the first
 * line plus every delta whose pair starts at or before it
 * (PyCode_Addr2Line of 3.9).
 */
static int line_lnotab(struct lt *t, int line, long addr)
{
	long at = 0;
	for (;;) {
		int a = lt_byte(t), l = lt_byte(t);
		if (a < 0 || l < 0)
			return line;
		at += a;
		if (at > addr)
			return line;
		line += (signed char)l;
	}
}

/*
 * 3.10 co_linetable (PEP 626; Objects/lnotab_notes.txt of 3.10): pairs of
 * (bytecode bytes covered, line delta as a signed byte, -128: these bytes
 * have no line); the deltas of every pair accumulate, also of empty ones
 * (_PyCode_CheckLineNumber of 3.10).  0 when byte addr has no line.
 */
static int line_pep626(struct lt *t, int line, long addr)
{
	long end = 0;
	for (;;) {
		int sd = lt_byte(t), ld = lt_byte(t);
		if (sd < 0 || ld < 0)
			return 0;
		end += sd;
		if ((signed char)ld != -128)
			line += (signed char)ld;
		if (addr < end)
			return (signed char)ld == -128 || line < 0 ? 0 : line;
	}
}

/*
 * 3.11+ location table (Objects/locations.md): walk the entries, each
 * covering (low 3 bits + 1) code units and carrying a line delta, until the
 * one that covers code unit `unit`.  0 when the table says "no line".
 */
static int line_locations(struct lt *t, int line, long unit)
{
	long start = 0;
	for (;;) {
		int first = lt_byte(t), code, delta = 0, c;
		unsigned u;
		if (first < 0 || !(first & 128))
			return 0;
		code = (first >> 3) & 15;
		switch (code) {
		case LOC_NONE:
			break;
		case LOC_LONG:
		case LOC_NO_COLUMNS:
			if (lt_varint(t, &u) != 0)
				return 0;
			delta = (u & 1) ? -(int)(u >> 1) : (int)(u >> 1);
			break;
		case LOC_ONE_LINE0:
		case LOC_ONE_LINE1:
		case LOC_ONE_LINE2:
			delta = code - LOC_ONE_LINE0;
			break;
		default:
			break;
		}
		line += delta;
		start += (first & 7) + 1;
		if (unit < start)
			return code == LOC_NONE || line < 0 ? 0 : line;
		/* skip this entry's remaining bytes: up to the next byte with bit 7 */
		while ((c = lt_peek(t)) >= 0 && !(c & 128))
			t->pos++;
		if (c < 0)
			return 0;
	}
}

/*
 * The line of the instruction at byte offset `addr` of the bytecode of the
 * code object whose first pf.code_read bytes are `co` (PyCode_Addr2Line's
 * answer, computed without calling it).  A negative addr (a frame not yet
 * started) is the first line.  0 when the table cannot be read.
 */
static int line_of(const unsigned char *co, long addr)
{
	const struct py_layout *L = pf.L;
	unsigned char b[BYTES_SVAL];
	uint64_t table = u64_at(co, L->co_linetable);
	int first = i32_at(co, L->co_firstlineno);
	struct lt t = {0};

	if (addr < 0)
		return first;
	if (rd(b, table, sizeof b) != 0 || u64_at(b, OB_TYPE) != pf.bytes_type || (int64_t)u64_at(b, OB_SIZE) < 0)
		return 0;
	t.addr = table + BYTES_SVAL;
	t.len = u64_at(b, OB_SIZE);
	switch (L->lines) {
	case LINES_LNOTAB:
		return line_lnotab(&t, first, addr);
	case LINES_PEP626:
		return line_pep626(&t, first, addr);
	case LINES_LOCATIONS:
		return line_locations(&t, first, addr / 2);
	}
	return 0;
}

/* ---- names ----------------------------------------------------------------- */

static size_t put_utf8(char *out, size_t at, uint32_t c)
{
	if (c < 0x80) {
		if (at + 1 > PY_STR_MAX)
			return 0;
		out[at] = (char)c;
		return 1;
	}
	if (c < 0x800) {
		if (at + 2 > PY_STR_MAX)
			return 0;
		out[at] = (char)(0xc0 | (c >> 6));
		out[at + 1] = (char)(0x80 | (c & 63));
		return 2;
	}
	if (c < 0x10000) {
		if (at + 3 > PY_STR_MAX)
			return 0;
		out[at] = (char)(0xe0 | (c >> 12));
		out[at + 1] = (char)(0x80 | ((c >> 6) & 63));
		out[at + 2] = (char)(0x80 | (c & 63));
		return 3;
	}
	if (at + 4 > PY_STR_MAX || c > 0x10ffff)
		return 0;
	out[at] = (char)(0xf0 | (c >> 18));
	out[at + 1] = (char)(0x80 | ((c >> 12) & 63));
	out[at + 2] = (char)(0x80 | ((c >> 6) & 63));
	out[at + 3] = (char)(0x80 | (c & 63));
	return 4;
}

/*
 * The text of the str object at obj as UTF-8 into out (PY_STR_MAX bytes,
 * cut there), without the GIL and without allocating: compact ASCII strings
 * are copied, other compact strings are encoded from their 1-, 2- or 4-byte
 * code units.  Returns the length, or -1 when obj is not a compact str
 * (out is then "?").
 */
static long str_text(uint64_t obj, char *out)
{
	const struct py_layout *L = pf.L;
	unsigned char h[STR_STATE + 4];
	uint32_t state;
	uint64_t data;
	long len, n = 0;

	if (rd(h, obj, sizeof h) != 0 || u64_at(h, OB_TYPE) != pf.str_type)
		goto unknown;
	memcpy(&state, h + STR_STATE, sizeof state);
	len = (long)u64_at(h, STR_LENGTH);
	if (!(state & STR_COMPACT) || (L->str_ready && !(state & L->str_ready)) || len < 0)
		goto unknown;
	if (state & STR_ASCII) {
		n = len < PY_STR_MAX ? len : PY_STR_MAX;
		if (rd(out, obj + L->str_ascii_data, (size_t)n) != 0)
			goto unknown;
		return n;
	}
	data = obj + L->str_data;
	{
		/* PyUnicode_1BYTE_KIND 1, 2BYTE 2, 4BYTE 4: the kind is the width */
		unsigned w = STR_KIND(state);
		unsigned char buf[256];
		long i = 0;
		if (w != 1 && w != 2 && w != 4)
			goto unknown;
		while (i < len) {
			long chunk = (long)(sizeof buf / w);
			if (chunk > len - i)
				chunk = len - i;
			if (rd(buf, data + (uint64_t)i * w, (size_t)chunk * w) != 0)
				goto unknown;
			for (long k = 0; k < chunk; k++) {
				uint32_t c = w == 1 ? buf[k] : w == 2 ? ((const uint16_t *)buf)[k] : ((const uint32_t *)buf)[k];
				size_t m = put_utf8(out, (size_t)n, c);
				if (!m)
					return n;
				n += (long)m;
			}
			i += chunk;
		}
		return n;
	}
unknown:
	out[0] = '?';
	return -1;
}

/* ---- the code-object cache: names interned once per code object ------------- */

/*
 * Direct-mapped by code address, shared by all threads, one seqlock word per
 * entry: a writer claims the entry by moving seq from even to odd with CAS
 * (and skips caching when that fails: it never waits, so signal handlers may
 * use it), writes, and releases it at seq + 2.  `tag` ties an entry to one
 * segment (a fork child has its own strings table).
 */
struct name_cache {
	uint32_t seq;      /* [atomic] odd while written */
	uint32_t function; /* strings offsets */
	uint32_t file;
	uint64_t tag;
	uint64_t code, name_ptr, file_ptr;
};
static struct name_cache cache[PY_CACHE];

static uint64_t seg_tag(const struct hs_seg *s)
{
	return (uint64_t)(uintptr_t)s->hdr ^ ((uint64_t)(uint32_t)s->hdr->pid << 47);
}

static int cache_get(const struct hs_seg *s, uint64_t code, uint64_t name, uint64_t file, uint32_t *fn, uint32_t *fl)
{
	struct name_cache *c = &cache[hs_mix64(code) & (PY_CACHE - 1)];
	uint32_t q = __atomic_load_n(&c->seq, __ATOMIC_ACQUIRE);
	uint64_t tag = c->tag, k = c->code, np = c->name_ptr, fp = c->file_ptr;
	uint32_t a = c->function, b = c->file;
	/* the field loads above happen before the second read of seq */
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	if ((q & 1) || __atomic_load_n(&c->seq, __ATOMIC_RELAXED) != q)
		return 0;
	if (tag != seg_tag(s) || k != code || np != name || fp != file || !a || !b)
		return 0;
	*fn = a;
	*fl = b;
	return 1;
}

static void cache_put(const struct hs_seg *s, uint64_t code, uint64_t name, uint64_t file, uint32_t fn, uint32_t fl)
{
	struct name_cache *c = &cache[hs_mix64(code) & (PY_CACHE - 1)];
	uint32_t q;
	if (!hs_seq_write_try(&c->seq, &q))
		return;
	c->tag = seg_tag(s);
	c->code = code;
	c->name_ptr = name;
	c->file_ptr = file;
	c->function = fn;
	c->file = fl;
	hs_seq_write_end(&c->seq, q);
}

/*
 * The same scheme for (code object, instruction) -> pyframe id, so that a
 * frame seen before costs no line-table walk.  A hit is trusted only when
 * the code object still names the same str objects and the pyframe entry
 * it gives still describes that code object.
 */
struct instr_cache {
	uint32_t seq;      /* [atomic] odd while written */
	uint32_t id;
	uint64_t tag;
	uint64_t code, instr, name_ptr, file_ptr;
};
static struct instr_cache icache[PY_ICACHE];

static uint32_t icache_get(const struct hs_seg *s, uint64_t code, uint64_t instr, uint64_t name, uint64_t file)
{
	struct instr_cache *c = &icache[hs_mix64(code ^ (instr << 16)) & (PY_ICACHE - 1)];
	uint32_t q = __atomic_load_n(&c->seq, __ATOMIC_ACQUIRE);
	uint64_t tag = c->tag, k = c->code, in = c->instr, np = c->name_ptr, fp = c->file_ptr;
	uint32_t id = c->id;
	/* the field loads above happen before the second read of seq */
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	if ((q & 1) || __atomic_load_n(&c->seq, __ATOMIC_RELAXED) != q)
		return 0;
	if (tag != seg_tag(s) || k != code || in != instr || np != name || fp != file)
		return 0;
	return id;
}

static void icache_put(const struct hs_seg *s, uint64_t code, uint64_t instr, uint64_t name, uint64_t file,
		       uint32_t id)
{
	struct instr_cache *c = &icache[hs_mix64(code ^ (instr << 16)) & (PY_ICACHE - 1)];
	uint32_t q;
	if (!hs_seq_write_try(&c->seq, &q))
		return;
	c->tag = seg_tag(s);
	c->code = code;
	c->instr = instr;
	c->name_ptr = name;
	c->file_ptr = file;
	c->id = id;
	hs_seq_write_end(&c->seq, q);
}

/* ---- the pyframe table ----------------------------------------------------- */

/* One Python frame as read from the chain. */
struct pyf {
	uint64_t code;
	uint64_t instr;  /* the instruction pointer (3.11+) or f_lasti (3.8-3.10): a cache key */
	long addr;       /* byte offset of the current instruction in the bytecode, -1: not started */
	int entry;       /* the last frame of one evaluation-loop call */
	int skip;        /* incomplete, a shim, or unreadable: not shown, but still counts as a boundary */
};

/*
 * In front of the pyframe table and its shared cache, each thread keeps the (code, instruction) pairs it met
 * last (direct-mapped, PY_TCACHE): no seqlock, no entry to re-check (a
 * published pyframe entry never changes).  A hit needs the same code
 * object address naming the same str objects, in the same segment (its
 * generation), as the shared cache does.  Not used in careful mode (signal handlers), so a
 * handler never sees an entry half written.
 */
#define PY_TCACHE 32
_Static_assert(PY_TCACHE == 32, "tc_slot takes the top 5 bits");
struct py_tc {
	uint64_t code, instr, name_ptr, file_ptr;
	uint32_t id, gen; /* gen: hs_seg_gen it was taken in (a fork child's segment has other ids) */
};
/* py_tc[PY_TCACHE] lives in the thread's area (shim.h, hs_area), not in static TLS */
_Static_assert(PY_TCACHE * sizeof(struct py_tc) <= HS_AREA_PY_SIZE, "the frame cache fits the area");

/* The entry for (code, instr), NULL when the thread has no area. */
static inline struct py_tc *tc_slot(uint64_t code, uint64_t instr)
{
	char *a = hs_area();
	struct py_tc *py_tc = a ? (struct py_tc *)(void *)(a + HS_AREA_PY) : NULL;
	if (!py_tc)
		return NULL;
	/* instr points into the code object (3.11+): mix code apart, or the two cancel */
	return &py_tc[((code * 0x9e3779b97f4a7c15ull) ^ instr) * 0xff51afd7ed558ccdull >> 59]; /* 32 entries */
}

static inline uint32_t tc_put(const struct pyf *f, uint64_t name, uint64_t file, uint32_t id)
{
	if (!hs_py_careful) {
		struct py_tc *e = tc_slot(f->code, f->instr);
		if (!e)
			return id;
		e->code = f->code;
		e->instr = f->instr;
		e->name_ptr = name;
		e->file_ptr = file;
		e->gen = __atomic_load_n(&hs_seg_gen, __ATOMIC_RELAXED);
		e->id = id;
	}
	return id;
}

static uint32_t str_intern(struct hs_seg *s, uint64_t obj)
{
	char buf[PY_STR_MAX];
	long n = str_text(obj, buf);
	return hs_str_add(s, buf, n < 0 ? 1 : (size_t)n);
}

/*
 * The pyframe id of (code object at f->code, its current line), interning it
 * when new.  Lock-free like hs_stack_intern: claim an index slot by CAS,
 * take an entry with fetch_add, fill it, publish ready and then the slot's
 * value.  Returns 0 when the code object cannot be read or the table is full.
 */
static uint32_t pyframe_id(struct hs_seg *s, const struct pyf *f)
{
	const struct py_layout *L = pf.L;
	struct hs_table *tab = &s->hdr->tables[HS_T_PYFRAMES];
	struct hs_table *idx = &s->hdr->tables[HS_T_PYFRAME_INDEX];
	unsigned char cobuf[PY_CODE_READ];
	const unsigned char *co;
	uint64_t name, file, key;
	uint32_t mask, i;
	int line;

	if (!tab->capacity || !idx->capacity || (idx->capacity & (idx->capacity - 1)))
		return 0;
	if ((co = view(cobuf, f->code, pf.code_read)) == NULL || u64_at(co, OB_TYPE) != pf.code_type)
		return 0;
	name = L->co_qualname != PYL_NONE ? u64_at(co, L->co_qualname) : 0;
	if (!name)
		name = u64_at(co, L->co_name);
	file = u64_at(co, L->co_filename);
	if (!hs_py_careful) {
		const struct py_tc *e = tc_slot(f->code, f->instr);
		if (e && e->code == f->code && e->instr == f->instr && e->name_ptr == name && e->file_ptr == file &&
		    e->id && e->gen == __atomic_load_n(&hs_seg_gen, __ATOMIC_RELAXED))
			return e->id;
	}
	if ((i = icache_get(s, f->code, f->instr, name, file)) != 0 && i < tab->capacity) {
		const struct hs_pyframe *e = &s->pyframes[i];
		if (__atomic_load_n(&e->ready, __ATOMIC_ACQUIRE) && e->code == f->code && e->name_ptr == name &&
		    e->file_ptr == file)
			return tc_put(f, name, file, i);
	}
	line = line_of(co, f->addr);
	key = hs_pyframe_key(f->code, line);
	mask = idx->capacity - 1;
	i = (uint32_t)hs_mix64(key) & mask;
	for (uint32_t probe = 0; probe <= mask; probe++, i = (i + 1) & mask) {
		struct hs_index_slot *slot = &s->pyframe_index[i];
		uint64_t k;
		if (!hs_index_slot_ready(s, slot, i, probe))
			break; /* no room for the index's next page: as if full */
		k = __atomic_load_n(&slot->key, __ATOMIC_ACQUIRE);
		if (k == 0) {
			uint64_t expect = 0;
			if (__atomic_compare_exchange_n(&slot->key, &expect, key, 0, __ATOMIC_ACQ_REL,
							__ATOMIC_ACQUIRE)) {
				uint32_t id = __atomic_fetch_add(&tab->count, 1, __ATOMIC_RELAXED);
				struct hs_pyframe *pf_ent;
				uint32_t fn, fl;
				if (id == 0 || id >= tab->capacity || hs_seg_commit_entry(s, HS_T_PYFRAMES, id) != 0) {
					__atomic_add_fetch(&tab->dropped, 1, __ATOMIC_RELAXED);
					return 0;
				}
				if (!cache_get(s, f->code, name, file, &fn, &fl)) {
					fn = str_intern(s, name);
					fl = str_intern(s, file);
					cache_put(s, f->code, name, file, fn, fl);
				}
				pf_ent = &s->pyframes[id];
				pf_ent->code = f->code;
				pf_ent->name_ptr = name;
				pf_ent->file_ptr = file;
				pf_ent->function = fn;
				pf_ent->file = fl;
				pf_ent->line = line;
				/* the entry is complete before ready, and ready before the index points here */
				__atomic_store_n(&pf_ent->ready, 1, __ATOMIC_RELEASE);
				__atomic_store_n(&slot->value, id, __ATOMIC_RELEASE);
				icache_put(s, f->code, f->instr, name, file, id);
				return tc_put(f, name, file, id);
			}
			k = expect;
		}
		if (k == key) {
			uint32_t id = __atomic_load_n(&slot->value, __ATOMIC_ACQUIRE);
			const struct hs_pyframe *e = id && id < tab->capacity ? &s->pyframes[id] : NULL;
			/* id 0: another thread is still writing it; at worst we intern a twin */
			if (e && __atomic_load_n(&e->ready, __ATOMIC_ACQUIRE) && e->code == f->code &&
			    e->name_ptr == name && e->file_ptr == file && e->line == line) {
				icache_put(s, f->code, f->instr, name, file, id);
				return tc_put(f, name, file, id);
			}
		}
	}
	__atomic_add_fetch(&idx->dropped, 1, __ATOMIC_RELAXED);
	return 0;
}

/* ---- the frame chain ----------------------------------------------------------- */

/*
 * One frame of the chain at fp into *p; returns the next (outer) frame's
 * address, or 0 at the end or when fp cannot be read (p->skip then).
 */
static uint64_t read_frame(uint64_t fp, struct pyf *p)
{
	const struct py_layout *L = pf.L;
	unsigned char buf[PY_FRAME_READ];
	const unsigned char *f;

	p->skip = 1;
	p->entry = 0;
	p->code = p->instr = 0;
	p->addr = -1;
	if ((f = view(buf, fp, pf.frame_read)) == NULL)
		return 0;
	p->code = u64_at(f, L->f_code);
	if (L->chain == CHAIN_FRAME_OBJECT) {
		/* a frame object: one per evaluation-loop call, started (tstate->frame is set inside it) */
		int32_t lasti = i32_at(f, L->f_instr);
		p->instr = (uint64_t)(int64_t)lasti;
		p->addr = lasti < 0 ? -1 : (long)lasti * L->lasti_bytes;
		p->entry = 1;
		p->skip = 0;
	} else {
		unsigned char owner = f[L->f_owner];
		int32_t first_traceable = 0;
		uint64_t base = p->code + L->co_code, type = 0;
		p->instr = u64_at(f, L->f_instr);
		if (L->chain == CHAIN_IS_ENTRY)
			p->entry = f[L->f_is_entry] != 0;
		if (L->chain == CHAIN_CSTACK && owner == L->owner_cstack) {
			/* the evaluation loop's own entry frame: the boundary, no Python function */
			p->entry = 1;
		} else if (p->code && rd(&type, p->code + OB_TYPE, sizeof type) == 0 && type == pf.code_type &&
			   rd(&first_traceable, p->code + L->co_firsttraceable, sizeof first_traceable) == 0) {
			/* (3.13's f_executable may be another object than a code object) */
			/* _PyFrame_IsIncomplete: still before its first RESUME */
			p->skip = owner != L->owner_generator && p->instr < base + (uint64_t)first_traceable * 2;
			p->addr = p->instr >= base ? (long)(p->instr - base) : -1;
		}
	}
	return u64_at(f, L->f_back);
}

/*
 * The calling thread's thread state: what PyGILState_GetThisThreadState
 * answers (a TSS slot: two calls into CPython and pthread_getspecific,
 * about a third of a lock token's cost), found in most calls with one
 * load and a compare.  Each thread keeps the last answer it got (ts_mine)
 * and the thread state that runs now is read the cheap way of its
 * version: 3.12+ keep it per thread (_Py_tss_tstate, read through
 * PyThreadState_GetUnchecked: NULL on a thread without the GIL), 3.8-3.11
 * in one global, the GIL holder's (_PyRuntime.gilstate.tstate_current,
 * any thread's).  When it is the one kept, and (3.8-3.11) was made by
 * this thread (its thread_id is our pthread_self(); read only then: a
 * foreign thread state is never dereferenced on a guess), it is this
 * thread's and running: the answer.  Anything else asks CPython again
 * (a thread without the GIL, a thread state swapped by PyThreadState_Swap
 * or a sub-interpreter, one deleted and made anew): the cache is never
 * trusted past a mismatch, so a thread state deleted and its address
 * reused by another thread's is not taken for ours.  Where the thread
 * state running differs from the TSS slot's (a sub-interpreter), the
 * answer is the slot's, as before.  Not for signal handlers (careful
 * mode asks CPython through pf.this_tstate).
 */
struct ts_mine {
	uint64_t ts;            /* the last thread state PyGILState_GetThisThreadState gave this thread */
	uint64_t self;          /* pthread_self() of this thread, as PyThreadState.thread_id holds it */
	const uint64_t *cur_at; /* 3.12+: this thread's _Py_tss_tstate (tls_learn), NULL: call pf.current */
};
static __thread struct ts_mine ts_mine __attribute__((tls_model("initial-exec")));

#if defined(__x86_64__)
void *__tls_get_addr(void *ti); /* the dynamic loader's, as compiled code calls it (x86-64 psABI) */
#endif

/*
 * How 3.12+'s PyThreadState_GetUnchecked reads its thread-local variable,
 * from its first instructions f (n bytes), in the sequences the x86-64
 * psABI gives the compiler: general dynamic (a shared libpython:
 * `lea ti(%rip),%rdi; call __tls_get_addr; mov (%rax),%rax`, ti the
 * {module, offset} pair the loader filled), initial exec (`mov
 * off(%rip),%rax; mov %fs:(%rax),%rax`) or local exec (`mov
 * %fs:off,%rax`), the two of a python linked statically.  Anything else
 * leaves tls_kind 0: the function is called.  Each thread then finds its
 * own variable once (tstate_ask) and checks it against the function's
 * answer before it trusts it: one load instead of a call into CPython
 * and, for a shared libpython, the loader's __tls_get_addr.
 */
static void tls_learn(const unsigned char *f, size_t n)
{
#if defined(__x86_64__)
	for (size_t i = 0; i <= 8 && i + 19 <= n; i++) {
		int32_t rel;
		if (memcmp(f + i, "\x66\x48\x8d\x3d", 4) == 0 && memcmp(f + i + 8, "\x66\x66\x48\xe8", 4) == 0 &&
		    memcmp(f + i + 16, "\x48\x8b\x00", 3) == 0) {
			memcpy(&rel, f + i + 4, sizeof rel);
			pf.tls_index = (uint64_t)(uintptr_t)(f + i + 8) + (uint64_t)(int64_t)rel;
			pf.tls_kind = 1;
			return;
		}
		if (memcmp(f + i, "\x64\x48\x8b\x04\x25", 5) == 0) {
			memcpy(&rel, f + i + 5, sizeof rel);
			pf.tls_tpoff = rel;
			pf.tls_kind = 2;
			return;
		}
		if (memcmp(f + i, "\x48\x8b\x05", 3) == 0 && memcmp(f + i + 7, "\x64\x48\x8b\x00", 4) == 0) {
			int64_t off;
			memcpy(&rel, f + i + 3, sizeof rel);
			memcpy(&off, f + i + 7 + rel, sizeof off);
			pf.tls_tpoff = off;
			pf.tls_kind = 2;
			return;
		}
	}
#else
	(void)f;
	(void)n;
#endif
}

/* This thread's _Py_tss_tstate, found as tls_learn says, or NULL. */
static const uint64_t *tls_find(void)
{
#if defined(__x86_64__)
	uint64_t tp;
	switch (pf.tls_kind) {
	case 1:
		return (const uint64_t *)__tls_get_addr((void *)(uintptr_t)pf.tls_index);
	case 2:
		__asm__("mov %%fs:0, %0" : "=r"(tp)); /* the thread pointer: the TCB points to itself */
		return (const uint64_t *)(uintptr_t)(tp + (uint64_t)pf.tls_tpoff);
	}
#endif
	return NULL;
}

static __attribute__((noinline)) uint64_t tstate_ask(void)
{
	uint64_t ts = (uint64_t)(uintptr_t)pf.this_tstate();
	ts_mine.ts = ts;
	ts_mine.self = (uint64_t)pthread_self();
	if (pf.current && !ts_mine.cur_at && __atomic_load_n(&pf.tls_kind, __ATOMIC_RELAXED)) {
		/* trusted once it reads what PyThreadState_GetUnchecked answers (not NULL) */
		const uint64_t *at = tls_find();
		uint64_t cur = (uint64_t)(uintptr_t)pf.current();
		if (at && cur && *at == cur)
			ts_mine.cur_at = at;
		else if (at && cur)
			__atomic_store_n(&pf.tls_kind, 0, __ATOMIC_RELAXED); /* not what it reads: call it */
	}
	return ts;
}

/* L: pf.L, a constant row of layouts[] where the caller has one. */
static inline __attribute__((always_inline)) uint64_t tstate_of_thread(const struct py_layout *L)
{
	uint64_t cur;
	if (L->rt_tstate_current != PYL_NONE) {
		cur = __atomic_load_n((const uint64_t *)(uintptr_t)pf.rt_current, __ATOMIC_RELAXED);
		if (HS_LIKELY(cur && cur == ts_mine.ts) &&
		    HS_LIKELY(u64_at((const unsigned char *)(uintptr_t)cur, L->ts_thread_id) == ts_mine.self))
			return cur;
	} else {
		const uint64_t *at = ts_mine.cur_at;
		if (HS_LIKELY(at != NULL))
			cur = *at;
		else
			cur = pf.current ? (uint64_t)(uintptr_t)pf.current() : 0;
		if (HS_LIKELY(cur && cur == ts_mine.ts))
			return cur;
	}
	return tstate_ask();
}

/* The calling thread's innermost Python frame, 0 when none. */
static uint64_t first_frame(void)
{
	const struct py_layout *L = pf.L;
	uint64_t ts = hs_py_careful ? (uint64_t)(uintptr_t)pf.this_tstate() : tstate_of_thread(L), at = ts, fp = 0;

	if (!ts)
		return 0;
	if (L->ts_cframe != PYL_NONE && rd(&at, ts + L->ts_cframe, sizeof at) != 0)
		return 0;
	if (rd(&fp, at + L->ts_frame, sizeof fp) != 0)
		return 0;
	return fp;
}

/*
 * The interleaving itself: pcs[0..n) into out[0..cap), the thread's frame
 * chain read as it is consumed (PY_CHAIN_MAX frames at most, recursion
 * beyond is cut).  Returns the number written; *python when any Python
 * frame was.
 */
static unsigned interleave(struct hs_seg *s, const uint64_t *pcs, unsigned n, uint64_t *out, unsigned cap,
			   int *python)
{
	uint64_t fp = first_frame(), lo = pf.eval_lo, hi = pf.eval_hi;
	unsigned o = 0, budget = PY_CHAIN_MAX;
	struct pyf f;

	*python = 0;
	if (!fp)
		return 0;
	for (unsigned i = 0; i < n && o < cap; i++) {
		/* pcs[i] is a return address (or, at 0, maybe the pc itself): the call is before it */
		uint64_t pc = pcs[i];
		if (!(pc > lo && pc <= hi) || !fp || !budget) {
			out[o++] = pc;
			continue;
		}
		/* one evaluation-loop call: the frames up to its boundary */
		while (fp && budget && o < cap) {
			uint32_t id;
			budget--;
			fp = read_frame(fp, &f);
			id = f.skip ? 0 : pyframe_id(s, &f);
			if (id)
				out[o++] = HS_PC_PYTHON | id, *python = 1;
			if (f.entry)
				break;
		}
	}
	/* the native unwinding stopped before the outermost evaluation loop */
	while (fp && budget && o < cap) {
		uint32_t id;
		budget--;
		fp = read_frame(fp, &f);
		id = f.skip ? 0 : pyframe_id(s, &f);
		if (id)
			out[o++] = HS_PC_PYTHON | id, *python = 1;
	}
	return o;
}

int hs_py_frames_none;

/* 1 once frames can be read (initialising on first use outside a signal handler). */
static int frames_ready(void)
{
	if (HS_LIKELY(__atomic_load_n(&pf.ready, __ATOMIC_ACQUIRE)))
		return 1;
	/* until the Python bridge calls hs_py_frames_init: once, never from a signal handler */
	if (hs_py_careful || __atomic_load_n(&pf.tried, __ATOMIC_RELAXED) ||
	    __atomic_exchange_n(&pf.tried, 1, __ATOMIC_ACQ_REL))
		return 0;
	hs_py_frames_init();
	if (__atomic_load_n(&pf.ready, __ATOMIC_ACQUIRE))
		return 1;
	/* no CPython to read (yet): lock chains skip the question until one is found */
	__atomic_store_n(&hs_py_frames_none, 1, __ATOMIC_RELAXED);
	return 0;
}

unsigned hs_py_interleave(struct hs_seg *s, uint64_t *pcs, unsigned n, unsigned max, int *python)
{
	uint64_t out[2 * HS_STACK_DEPTH];
	unsigned o, cap = max < sizeof out / sizeof out[0] ? max : sizeof out / sizeof out[0];

	*python = 0;
	if (!frames_ready())
		return n;
	if (!s || !s->hdr || !s->pyframes || n > max)
		return n;
	o = interleave(s, pcs, n, out, cap, python);
	if (!*python)
		return n;
	memcpy(pcs, out, o * sizeof *pcs);
	return o;
}

/*
 * One frame of the calling thread's live chain at fp, read with direct loads
 * (outside careful mode: the thread's own frames, alive while its hook
 * runs), identified through the thread's (code, instruction) cache tc
 * (NULL: none) and interned by pyframe_id on a miss: read_frame and
 * pyframe_id in one, without their copies and re-reads.  L is a constant
 * row of layouts[] at each use (the loop below is built once per row, its
 * offsets become immediates).  *id is the frame's pyframe
 * id (0: not shown), *entry set at the end of an evaluation-loop call's
 * run.  Returns the next (outer) frame's address, 0 at the end.
 */
static inline __attribute__((always_inline)) uint64_t
frame_fast(struct hs_seg *s, const struct py_layout *L, uint64_t code_type, const struct py_tc *tc, uint32_t gen,
	   uint64_t fp, uint32_t *id, int *entry)
{
	const enum py_chain kind = L->chain;
	const unsigned char *p = (const unsigned char *)(uintptr_t)fp;
	const unsigned char *co;
	uint64_t next, name, file;
	struct pyf f;

	*id = 0;
	if (HS_UNLIKELY(fp < 4096)) {
		*entry = 1;
		return 0;
	}
	next = u64_at(p, L->f_back);
	f.code = u64_at(p, L->f_code);
	f.entry = 0;
	f.skip = 0;
	co = (const unsigned char *)(uintptr_t)f.code;
	if (kind == CHAIN_FRAME_OBJECT) {
		int32_t lasti = i32_at(p, L->f_instr);
		f.instr = (uint64_t)(int64_t)lasti;
		f.addr = lasti < 0 ? -1 : (long)lasti * L->lasti_bytes;
		*entry = 1;
		if (HS_UNLIKELY(f.code < 4096) || u64_at(co, OB_TYPE) != code_type)
			return next;
	} else {
		unsigned char owner = p[L->f_owner];
		uint64_t base;
		if (kind == CHAIN_IS_ENTRY) {
			*entry = p[L->f_is_entry] != 0;
		} else if (owner == L->owner_cstack) {
			*entry = 1;
			return next; /* the evaluation loop's own entry frame: the boundary, no Python function */
		} else {
			*entry = 0;
		}
		if (HS_UNLIKELY(f.code < 4096) || u64_at(co, OB_TYPE) != code_type)
			return next; /* (3.13's f_executable may be another object than a code object) */
		f.instr = u64_at(p, L->f_instr);
		base = f.code + L->co_code;
		/* _PyFrame_IsIncomplete: still before its first RESUME */
		if (owner != L->owner_generator && f.instr < base + (uint64_t)i32_at(co, L->co_firsttraceable) * 2)
			return next;
		f.addr = -1; /* set below when the cache does not know the frame */
	}
	name = L->co_qualname != PYL_NONE ? u64_at(co, L->co_qualname) : 0;
	if (!name)
		name = u64_at(co, L->co_name);
	file = u64_at(co, L->co_filename);
	if (HS_LIKELY(tc != NULL)) {
		/* tc_slot's entry, checked as pyframe_id checks it */
		const struct py_tc *e =
			&tc[((f.code * 0x9e3779b97f4a7c15ull) ^ f.instr) * 0xff51afd7ed558ccdull >> 59];
		if (HS_LIKELY(e->code == f.code && e->instr == f.instr && e->name_ptr == name &&
			      e->file_ptr == file && e->id && e->gen == gen)) {
			*id = e->id;
			return next;
		}
	}
	if (L->chain != CHAIN_FRAME_OBJECT) {
		uint64_t base = f.code + L->co_code;
		f.addr = f.instr >= base ? (long)(f.instr - base) : -1;
	}
	*id = pyframe_id(s, &f);
	return next;
}

/* One Python frame of a lock chain: frame_fast's cached read, or with
 * hs_py_careful the checked read_frame.  Returns the next (outer) frame;
 * *id the frame's id (0: not shown), *entry whether it ends one call of the
 * evaluation loop. */
static inline __attribute__((always_inline)) uint64_t
chain_frame(struct hs_seg *s, const struct py_layout *L, uint64_t code_type, const struct py_tc *tc, uint32_t gen,
	    int careful, uint64_t fp, uint32_t *id, int *entry)
{
	struct pyf f;
	if (HS_LIKELY(!careful))
		return frame_fast(s, L, code_type, tc, gen, fp, id, entry);
	fp = read_frame(fp, &f);
	*id = f.skip ? 0 : pyframe_id(s, &f);
	*entry = f.entry;
	return fp;
}

/*
 * interleave()'s walk over pcs[0..n) for a lock chain, counting the entries
 * o the interleaved stack would have (at most cap) instead of writing them,
 * and keeping each shown Python frame's id and native frame in py.  first:
 * the first native frame that may be an evaluation-loop call (every one
 * before it is one entry); fp the innermost Python frame.  Returns the
 * number of Python frames kept.  L is a constant row of layouts[] at each
 * call.
 */
static inline __attribute__((always_inline)) unsigned
chain_frames(struct hs_seg *s, const struct py_layout *L, const uint64_t *pcs, unsigned n, unsigned cap,
	     unsigned first, uint64_t fp, struct hs_pychain *py)
{
	const uint64_t lo = pf.eval_lo, span = pf.eval_hi - pf.eval_lo, code_type = pf.code_type;
	const uint32_t gen = __atomic_load_n(&hs_seg_gen, __ATOMIC_RELAXED);
	char *a = hs_area();
	const struct py_tc *tc = a ? (const struct py_tc *)(const void *)(a + HS_AREA_PY) : NULL;
	const int careful = hs_py_careful;
	unsigned i, o = first, k = 0, budget = PY_CHAIN_MAX;
	uint32_t consumed = 0, id;
	int entry;

	for (i = first; i < n && o < cap; i++) {
		/* pcs[i] is a return address (lo < pc <= hi): the call is before it */
		if (pcs[i] - lo - 1 >= span || !budget) {
			o++;
			continue;
		}
		/* one evaluation-loop call: the frames up to its boundary */
		consumed |= 1u << i;
		while (fp && budget && o < cap) {
			budget--;
			fp = chain_frame(s, L, code_type, tc, gen, careful, fp, &id, &entry);
			if (id) {
				py->id[k] = id;
				py->at[k++] = (uint8_t)i;
				o++;
			}
			if (entry)
				break;
		}
		if (!fp)
			break; /* no Python frame left: the native frames after it stay as they are */
	}
	/* the native unwinding stopped before the outermost evaluation loop */
	while (fp && budget && o < cap) {
		budget--;
		fp = chain_frame(s, L, code_type, tc, gen, careful, fp, &id, &entry);
		if (id) {
			py->id[k] = id;
			py->at[k++] = (uint8_t)n;
			o++;
		}
	}
	py->consumed = k ? consumed : 0;
	py->n = k;
	return k;
}

/*
 * BY_ROW(STMT): STMT run with `row` the running CPython's row of layouts[]
 * (pf.row) as a constant, one case per row, so the inlined reader in STMT
 * has that row's offsets as immediates where a layouts[pf.row] pointer
 * would load each one (hs_py_chain_frames's loop, the token's read and
 * its unchanged check).  Falls through when STMT does not return.
 */
#define BY_ROW_CASE(k, STMT)                                              \
	case k: {                                                         \
		const struct py_layout *const row = &layouts[k];          \
		STMT;                                                     \
	} break;
#define BY_ROW(STMT)                                                      \
	switch (pf.row) {                                                 \
		BY_ROW_CASE(0, STMT)                                      \
		BY_ROW_CASE(1, STMT)                                      \
		BY_ROW_CASE(2, STMT)                                      \
		BY_ROW_CASE(3, STMT)                                      \
		BY_ROW_CASE(4, STMT)                                      \
		BY_ROW_CASE(5, STMT)                                      \
	}
_Static_assert(sizeof layouts / sizeof layouts[0] == 6, "BY_ROW has a case per row of layouts[]");

unsigned hs_py_chain_frames(struct hs_seg *s, const uint64_t *pcs, unsigned n, unsigned cap,
			    struct hs_pychain *py)
{
	uint64_t lo, span, fp;
	unsigned i, first;

	py->n = 0;
	py->consumed = 0;
	if (!frames_ready() || !s || !s->hdr || !s->pyframes)
		return 0;
	lo = pf.eval_lo;
	span = pf.eval_hi - pf.eval_lo;
	if (n > HS_CHAIN_MAX)
		n = HS_CHAIN_MAX;
	if (cap > HS_CHAIN_MAX)
		cap = HS_CHAIN_MAX;
	for (i = 1; i < n; i++)
		if (pcs[i] - lo - 1 < span)
			break;
	if (i >= n || (fp = first_frame()) == 0)
		return 0;
	first = pcs[0] - lo - 1 < span ? 0 : i;
	/* one loop per row of layouts[], its offsets constants */
	BY_ROW(return chain_frames(s, row, pcs, n, cap, first, fp, py));
	return 0;
}

/*
 * The frames further out than a token's caller (struct hs_pytoken's outer[]).
 * A helper of two or more Python levels (contextlib's @contextmanager, f()
 * calling g() calling acquire()) runs at the same frame addresses and
 * instructions whoever calls it; a lock taken through it and still held
 * when the same helper runs again from another line has, in the thread's
 * chain, the new call's frames where its own were: only a frame further
 * out than the token's caller differs.  So each acquisition keeps the line
 * key of up to HS_PY_OUTER_MAX frames further out (outer_fill) and checks
 * them on a repeat (outer_same); a stack read later shows only the frames
 * further out that still have the keys kept (outer_verified), and ends
 * there, truncated (docs/design.md "Lock order").
 *
 * Every frame pointer walked here comes from the calling thread's live
 * chain: its thread state's current frame and the f_back/previous of each
 * frame read after it, never an address kept in a token (a token may be
 * stale: the frames it names may have returned).  On the acquisition path
 * (outer_fill, outer_same) the thread is inside a hook, called from C:
 * its chain is consistent, and the loads are direct, as token_read's;
 * each pointer is still checked before it is dereferenced (frame_ptr_ok)
 * and the walk is bounded.  The later read (outer_verified) goes through
 * rd()'s checked copies.
 */

/* A frame address fit to dereference: past the first page, below 2^47 (user space), 8-aligned:
 * (fp - 4096) & FP_BAD == 0, one test (0 and every small value wrap into the high bits). */
#define FP_BAD 0xffff800000000007ull
static inline __attribute__((always_inline)) int frame_ptr_ok(uint64_t fp)
{
	return ((fp - 4096) & FP_BAD) == 0;
}

#define OUTER_ADDR ((1ull << 47) - 1) /* a key's address bits */

/* The line key of frame p (outer[]), L a constant row of layouts[]: 3.11+ its instruction
 * pointer | unit << 47, unit the instruction's offset from its code object's instructions in
 * code units (so the key gives the code object too: outer_code); 3.8-3.10 its code object |
 * f_lasti << 47.  0 when it does not fit (an address past 47 bits, an offset of 2^17 units or
 * more: such a frame ends what a token keeps).  3.12+'s shim frame of the evaluation loop (no
 * Python function; 3.13's has no code object) gets a unit that makes its code address not
 * 8-aligned, so that it never names a code object (outer_named). */
static inline __attribute__((always_inline)) uint64_t outer_key(const struct py_layout *L, const unsigned char *p)
{
	uint64_t code = u64_at(p, L->f_code), unit, at;
	if (L->chain == CHAIN_FRAME_OBJECT) {
		unit = (uint64_t)(int64_t)i32_at(p, L->f_instr);
		at = code;
	} else {
		at = u64_at(p, L->f_instr);
		if (L->chain == CHAIN_CSTACK && p[L->f_owner] == L->owner_cstack)
			unit = (at - L->co_code - 2) & 7 ? 1 : 2;
		else
			unit = (at - code - L->co_code) >> 1;
	}
	return at < 4096 || at > OUTER_ADDR || unit >= (1u << 17) ? 0 : at | unit << 47;
}

/* The code object a key names (outer_key's; 3.12+'s shims: an address not 8-aligned) and the
 * instruction as pyframe_id takes it (3.11+ a pointer, 3.8-3.10 f_lasti). */
static inline uint64_t outer_code(const struct py_layout *L, uint64_t key, uint64_t *instr)
{
	uint64_t at = key & OUTER_ADDR, unit = key >> 47;
	if (L->chain == CHAIN_FRAME_OBJECT) {
		*instr = unit;
		return at;
	}
	*instr = at;
	return at - L->co_code - unit * 2;
}

/* 1 when frame p runs where key (outer_key's, not 0) says: on 3.11+ one load, its instruction
 * pointer against the key's address bits. */
static inline __attribute__((always_inline)) int outer_at(const struct py_layout *L, const unsigned char *p,
							  uint64_t key)
{
	if (L->chain == CHAIN_FRAME_OBJECT)
		return (u64_at(p, L->f_code) | (uint64_t)(uint32_t)i32_at(p, L->f_instr) << 47) == key;
	return u64_at(p, L->f_instr) == (key & OUTER_ADDR);
}

/* The keys of the frames further out than the live frame caller (0: none) into tk->outer[],
 * up to HS_PY_OUTER_MAX, and their count into tk->outer_n (| HS_PY_OUTER_MORE when the chain
 * goes on). */
static inline __attribute__((always_inline)) void outer_fill(const struct py_layout *L, uint64_t caller,
							     struct hs_pytoken *tk)
{
	uint64_t fp = caller ? u64_at((const unsigned char *)(uintptr_t)caller, L->f_back) : 0, key;
	uint32_t k = 0;
	while (k < HS_PY_OUTER_MAX && frame_ptr_ok(fp)) {
		const unsigned char *p = (const unsigned char *)(uintptr_t)fp;
		if ((key = outer_key(L, p)) == 0)
			break;
		tk->outer[k++] = key;
		fp = u64_at(p, L->f_back);
	}
	tk->outer_n = k | (fp >= 4096 ? HS_PY_OUTER_MORE : 0);
}

/* 1 when the frames further out than the live frame caller (0: none) run where tk's keys say,
 * as many, and go on past them exactly when tk's did. */
static inline __attribute__((always_inline)) int outer_same(const struct py_layout *L, uint64_t caller,
							    const struct hs_pytoken *tk)
{
	uint64_t fp = caller ? u64_at((const unsigned char *)(uintptr_t)caller, L->f_back) : 0;
	const uint64_t *k = tk->outer, *end = k + (tk->outer_n & 0xff);
	if (HS_UNLIKELY(end > tk->outer + HS_PY_OUTER_MAX))
		return 0;
	for (; k < end; k++) {
		const unsigned char *p = (const unsigned char *)(uintptr_t)fp;
		if (HS_UNLIKELY(!frame_ptr_ok(fp)))
			return 0;
		if (!outer_at(L, p, *k))
			return 0;
		fp = u64_at(p, L->f_back);
	}
	return (fp >= 4096) == !!(tk->outer_n & HS_PY_OUTER_MORE);
}

/*
 * How many of tk's outer[] the calling thread's chain still has, in order,
 * from the frame further out than caller (a frame found in the live chain
 * now), read with rd()'s checked copies: the frames further out a stack
 * read now may show.  *all = 1 when every one is there and the chain ends
 * where it ended (or goes on where it went on past them).
 */
static unsigned outer_verified(uint64_t caller, const struct hs_pytoken *tk, int *all)
{
	const struct py_layout *L = pf.L;
	unsigned char buf[PY_FRAME_READ];
	const unsigned char *p;
	uint32_t n = tk->outer_n & 0xff, k = 0;
	uint64_t fp = 0;
	int was = hs_py_careful;

	*all = 0;
	if (n > HS_PY_OUTER_MAX)
		return 0;
	hs_py_careful = 1; /* rd() through process_vm_readv: a bad address fails, never faults */
	if (caller && (p = view(buf, caller, pf.frame_read)) != NULL)
		fp = u64_at(p, L->f_back);
	else if (caller)
		goto out;
	for (; k < n; k++) {
		if (!frame_ptr_ok(fp) || (p = view(buf, fp, pf.frame_read)) == NULL ||
		    !outer_at(L, p, tk->outer[k]))
			goto out;
		fp = u64_at(p, L->f_back);
	}
	*all = !(tk->outer_n & HS_PY_OUTER_MORE) && fp < 4096; /* and nothing further out unchecked */
out:
	hs_py_careful = was;
	return k;
}

int hs_py_token_same_call(const struct hs_pytoken *a, const struct hs_pytoken *b)
{
	uint32_t n = a->outer_n & 0xff;
	return a->fp == b->fp && a->code == b->code && a->instr == b->instr && a->prev == b->prev &&
	       a->prev_instr == b->prev_instr && a->caller == b->caller && a->caller_instr == b->caller_instr &&
	       a->entry == b->entry && a->outer_n == b->outer_n && n <= HS_PY_OUTER_MAX &&
	       memcmp(a->outer, b->outer, n * sizeof a->outer[0]) == 0;
}

/*
 * 1 when the token tk (a whole one, the last this thread read) still names
 * the calling thread's innermost Python frame, L a constant row of
 * layouts[]: the same frame still runs at tk's instruction under tk's next
 * frame out, which holds what it held (the lock token of a `with lock:` in
 * a loop).  Nothing written; 0: read it whole (token_read).  Kept apart
 * from token_read so that this check, the common case, is a leaf with few
 * registers (no saves, no frame).  On 3.8-3.10 (CHAIN_FRAME_OBJECT) an
 * instruction is an offset (f_lasti), which does not name its code as
 * 3.11's pointer does: the caller's code object is compared too.
 */
static inline __attribute__((always_inline)) int token_same(const struct py_layout *L, const struct hs_pytoken *tk)
{
	uint64_t ts = tstate_of_thread(L), at = ts, fp, prev, prev_instr, caller;
	const unsigned char *p, *q;
	if (HS_UNLIKELY(!ts))
		return 0;
	if (L->ts_cframe != PYL_NONE && (at = u64_at((const unsigned char *)(uintptr_t)ts, L->ts_cframe)) < 4096)
		return 0;
	fp = u64_at((const unsigned char *)(uintptr_t)at, L->ts_frame);
	if (fp != tk->fp || fp < 4096)
		return 0;
	p = (const unsigned char *)(uintptr_t)fp;
	prev = u64_at(p, L->f_back);
	if (L->chain == CHAIN_FRAME_OBJECT) {
		/* a frame object: it holds its code and its f_back, which holds its own code, so
		 * the same objects at the same offsets give token_read's token (entry 1, the
		 * caller prev; a prev below 4096 is none: tk->prev 0) */
		if (HS_UNLIKELY(u64_at(p, L->f_code) != tk->code || (prev < 4096 ? 0 : prev) != tk->prev ||
				(uint64_t)(int64_t)i32_at(p, L->f_instr) != tk->instr))
			return 0;
		if (!tk->prev)
			return outer_same(L, 0, tk);
		q = (const unsigned char *)(uintptr_t)prev;
		return (uint64_t)(int64_t)i32_at(q, L->f_instr) == tk->prev_instr && tk->caller_code &&
		       u64_at(q, L->f_code) == tk->caller_code && outer_same(L, prev, tk);
	}
	if (HS_UNLIKELY(u64_at(p, L->f_code) != tk->code || prev != tk->prev || u64_at(p, L->f_instr) != tk->instr))
		return 0;
	/* it was checked then (its code a code object, a shown frame, started) and cannot have
	 * changed since, only what the next frame out holds can (a caller's instruction pointer
	 * names its code on 3.11+, so an unchanged one is the same caller, caller_code too) */
	q = (const unsigned char *)(uintptr_t)prev;
	if (L->chain == CHAIN_IS_ENTRY)
		return (uint32_t)(p[L->f_is_entry] != 0) == tk->entry &&
		       (!prev || u64_at(q, L->f_instr) == tk->prev_instr) && outer_same(L, prev, tk);
	if (!prev)
		return outer_same(L, 0, tk); /* no next frame out: no entry, no caller */
	prev_instr = u64_at(q, L->f_instr);
	if (prev_instr != tk->prev_instr)
		return 0;
	if (q[L->f_owner] != L->owner_cstack)
		return tk->entry == 0 && tk->caller == prev && outer_same(L, prev, tk); /* called from Python: the caller is prev */
	/* called from C: the caller is past the evaluation loop's shim */
	caller = u64_at(q, L->f_back);
	caller = caller < 4096 ? 0 : caller;
	return tk->entry != 0 && caller == tk->caller &&
	       (!caller || u64_at((const unsigned char *)(uintptr_t)caller, L->f_instr) == tk->caller_instr) &&
	       outer_same(L, caller, tk);
}

/*
 * The token of the innermost Python frame fp (hs_py_token), L a constant
 * row of layouts[] at each call.  Direct loads: the thread's own live
 * frames.  The frame must be one interleave() shows: a code object, not
 * the evaluation loop's shim, started.
 */
static inline __attribute__((always_inline)) int token_read(const struct py_layout *L, struct hs_pytoken *tk)
{
	/* first_frame() with direct loads and this row's offsets; every field read into a local
	 * first and tk written once at the end (tk could alias the frames for the compiler) */
	const uint64_t code_type = pf.code_type;
	uint64_t ts = tstate_of_thread(L), at = ts, fp;
	const unsigned char *p, *co, *q;
	uint64_t code, prev, instr, prev_instr = 0, caller, caller_code = 0, caller_instr = 0;
	uint32_t entry;
	if (HS_UNLIKELY(!ts))
		return 0;
	if (L->ts_cframe != PYL_NONE && (at = u64_at((const unsigned char *)(uintptr_t)ts, L->ts_cframe)) < 4096)
		return 0;
	if ((fp = u64_at((const unsigned char *)(uintptr_t)at, L->ts_frame)) < 4096)
		return 0;
	p = (const unsigned char *)(uintptr_t)fp;
	code = u64_at(p, L->f_code);
	prev = u64_at(p, L->f_back);
	if (HS_UNLIKELY(code < 4096))
		return 0;
	co = (const unsigned char *)(uintptr_t)code;
	if (u64_at(co, OB_TYPE) != code_type)
		return 0;
	prev = prev < 4096 ? 0 : prev;
	q = (const unsigned char *)(uintptr_t)prev;
	caller = prev;
	if (L->chain == CHAIN_FRAME_OBJECT) {
		instr = (uint64_t)(int64_t)i32_at(p, L->f_instr);
		if (prev)
			prev_instr = (uint64_t)(int64_t)i32_at(q, L->f_instr);
		entry = 1;
	} else {
		unsigned char owner = p[L->f_owner];
		if (L->chain == CHAIN_CSTACK && owner == L->owner_cstack)
			return 0;
		instr = u64_at(p, L->f_instr);
		if (owner != L->owner_generator &&
		    instr < code + L->co_code + (uint64_t)i32_at(co, L->co_firsttraceable) * 2)
			return 0;
		if (prev)
			prev_instr = u64_at(q, L->f_instr);
		if (L->chain == CHAIN_IS_ENTRY) {
			entry = p[L->f_is_entry] != 0;
		} else {
			/* 3.12+: a call from C has the evaluation loop's shim as the next frame out */
			entry = prev && q[L->f_owner] == L->owner_cstack;
			if (entry) {
				uint64_t c = u64_at(q, L->f_back);
				caller = c < 4096 ? 0 : c;
			}
		}
	}
	if (caller) {
		const unsigned char *r = (const unsigned char *)(uintptr_t)caller;
		uint64_t cc = u64_at(r, L->f_code);
		if (L->chain == CHAIN_FRAME_OBJECT) {
			caller_instr = prev_instr; /* the caller is prev */
		} else if (L->chain == CHAIN_IS_ENTRY || !entry) {
			caller_instr = prev_instr; /* the caller is prev, a Python frame: not the shim */
		} else {
			caller_instr = u64_at(r, L->f_instr);
			if (r[L->f_owner] == L->owner_cstack)
				cc = 0; /* a shim: no Python caller to name */
		}
		caller_code = cc >= 4096 && u64_at((const unsigned char *)(uintptr_t)cc, OB_TYPE) == code_type ? cc : 0;
	}
	tk->fp = fp;
	tk->code = code;
	tk->instr = instr;
	tk->prev = prev;
	tk->prev_instr = prev_instr;
	tk->caller = caller;
	tk->caller_code = caller_code;
	tk->caller_instr = caller_instr;
	tk->entry = entry;
	outer_fill(L, caller, tk);
	return 1;
}

/* token_read by row, out of line: the common case (token_same) stays a leaf. */
static __attribute__((noinline)) int token_read_row(struct hs_pytoken *tk)
{
	BY_ROW(return token_read(row, tk));
	return 0;
}

HS_HOT int hs_py_token(struct hs_pytoken *tk)
{
	if (HS_UNLIKELY(!__atomic_load_n(&pf.ready, __ATOMIC_ACQUIRE)) && !frames_ready())
		return 0;
	if (hs_py_careful)
		return 0;
	/* tk unchanged (a `with lock:` in a loop): every row */
	BY_ROW(if (token_same(row, tk)) return 1);
	return token_read_row(tk);
}

/* The pyframe id of (code, instr) kept in a token, read with care when the
 * frame is gone (its code object may be too). */
static uint32_t token_frame_id(struct hs_seg *s, uint64_t code, uint64_t instr, int careful)
{
	const struct py_layout *L = pf.L;
	int was = hs_py_careful;
	struct pyf g;
	uint32_t id;
	memset(&g, 0, sizeof g);
	g.code = code;
	g.instr = instr;
	if (L->chain == CHAIN_FRAME_OBJECT)
		g.addr = (int64_t)instr < 0 ? -1 : (long)instr * L->lasti_bytes;
	else
		g.addr = instr >= code + L->co_code ? (long)(instr - code - L->co_code) : -1;
	hs_py_careful = was || careful;
	id = pyframe_id(s, &g);
	hs_py_careful = was;
	return id;
}

uint32_t hs_py_token_frame_ids(struct hs_seg *s, const struct hs_pytoken *tk, uint32_t *caller)
{
	uint32_t id = token_frame_id(s, tk->code, tk->instr, 0);
	*caller = id && tk->caller_code ? token_frame_id(s, tk->caller_code, tk->caller_instr, 0) : 0;
	return id;
}

/* Frame want in the thread's chain now: its address, 0 when not there;
 * *b the evaluation-loop calls ended before it (inner to it). */
static uint64_t chain_find(uint64_t want, unsigned *b, unsigned *budget)
{
	struct pyf f;
	uint64_t fp;
	*b = 0;
	for (fp = first_frame(); fp && *budget; (*budget)--) {
		if (fp == want)
			return fp;
		fp = read_frame(fp, &f);
		if (f.entry)
			(*b)++;
	}
	return 0;
}

/*
 * The Python frames from *fp outward into out[o .. cap), one budget unit
 * each, up to and including the frame that entered its evaluation-loop
 * call when to_entry (the rest of that call), else to the chain's end.
 * *fp is left at the next frame.  Returns the new o.
 */
static unsigned frames_to_entry(struct hs_seg *s, uint64_t *fp, unsigned *budget, uint64_t *out, unsigned o,
				unsigned cap, int to_entry)
{
	struct pyf f;
	uint32_t id;
	while (*fp && *budget && o < cap) {
		(*budget)--;
		*fp = read_frame(*fp, &f);
		id = f.skip ? 0 : pyframe_id(s, &f);
		if (id)
			out[o++] = HS_PC_PYTHON | id;
		if (to_entry && f.entry)
			break;
	}
	return o;
}

/* A token's kept frames further out from outer[from] on (not 3.12+'s shims) into
 * out[o .. cap), each named from its key with care (its code object may be gone):
 * the acquisition's lines.  Returns the new o. */
static unsigned outer_named(struct hs_seg *s, const struct hs_pytoken *tk, unsigned from, uint64_t *out,
			    unsigned o, unsigned cap)
{
	const struct py_layout *L = pf.L;
	uint32_t n = tk->outer_n & 0xff, id;
	for (uint32_t k = from; k < n && k < HS_PY_OUTER_MAX && o < cap; k++) {
		uint64_t instr, code = outer_code(L, tk->outer[k], &instr);
		if (code & 7)
			continue; /* 3.12+'s shim (outer_key) */
		if ((id = token_frame_id(s, code, instr, 1)) != 0)
			out[o++] = HS_PC_PYTHON | id;
	}
	return o;
}

unsigned hs_py_held_frames(struct hs_seg *s, const uint64_t *inner, unsigned ni, const uint64_t *mid, unsigned nm,
			   const struct hs_pytoken *tk, const uint64_t *cur, unsigned n, uint64_t *out, unsigned cap,
			   int *whole)
{
	uint64_t fp, next = 0, lo, hi, caller = 0;
	unsigned o = 0, b = 0, i, k, budget = PY_CHAIN_MAX, first, verified;
	int same = 0, entry, all = 0;
	struct pyf f;
	uint32_t id;

	*whole = 0;
	for (i = 0; i < ni && o < cap; i++)
		out[o++] = inner[i];
	if (!frames_ready() || !s || !s->hdr || !s->pyframes || o >= cap)
		return o;
	lo = pf.eval_lo;
	hi = pf.eval_hi;
	/* the token's frame in the thread's chain now, b evaluation-loop calls in: the same call
	 * when its code and its caller (address and instruction) are unchanged */
	if ((fp = chain_find(tk->fp, &b, &budget)) != 0) {
		next = read_frame(fp, &f);
		same = f.code == tk->code && (next < 4096 ? 0 : next) == tk->prev;
		if (same && tk->prev) {
			struct pyf g;
			/* tk->prev is the live next frame out (next): read, then its caller past a shim */
			uint64_t c = read_frame(tk->prev, &g);
			same = g.instr == tk->prev_instr;
			caller = tk->caller == tk->prev ? tk->prev : c < 4096 ? 0 : c;
			if (same && caller != tk->caller)
				same = 0;
			if (same && caller && caller != tk->prev) {
				read_frame(caller, &g);
				same = g.instr == tk->caller_instr;
			}
		}
	}
	/* the frame at the instruction it acquired at */
	if ((id = token_frame_id(s, tk->code, tk->instr, !same)) != 0 && o < cap)
		out[o++] = HS_PC_PYTHON | id;
	if (same) {
		fp = next;
		entry = f.entry;
		first = caller && caller != tk->prev ? 2 : 1; /* frames up to the caller: the shim, the caller */
	} else {
		/* it returned (a helper such as Condition.__enter__ took the lock): the native
		 * frames between it and its caller when it was called from C (kept: mid), its
		 * caller at the instruction of that call, then, when the caller is still there,
		 * what is further out of it */
		if (!tk->caller_code || (tk->entry && !mid) || o >= cap)
			return o;
		for (i = 0; tk->entry && i < nm && o < cap; i++)
			out[o++] = mid[i];
		if (o < cap && (id = token_frame_id(s, tk->caller_code, tk->caller_instr, 1)) != 0)
			out[o++] = HS_PC_PYTHON | id;
		budget = PY_CHAIN_MAX;
		/* the caller gone too: the frames further out as they were, named from their keys */
		if ((caller = chain_find(tk->caller, &b, &budget)) == 0 || o >= cap)
			return outer_named(s, tk, 0, out, o, cap);
		fp = read_frame(caller, &f);
		if (f.code != tk->caller_code)
			return outer_named(s, tk, 0, out, o, cap);
		entry = f.entry;
		first = 0;
	}
	/* the frames further out than the caller: only as many as still have the keys kept at the
	 * acquisition (a new call of the same helpers from another line differs in one), then the
	 * stack ends, truncated; whole when all are there and the chain ended with them */
	verified = caller ? outer_verified(caller, tk, &all) : 0;
	if (!caller)
		all = (tk->outer_n & 0xff) == 0; /* no caller: nothing further out was kept */
	budget = first + verified;
	/* the callers in the same evaluation-loop call */
	if (!entry)
		o = frames_to_entry(s, &fp, &budget, out, o, cap, 1);
	/* that call among the native frames now: the (b + 1)-th evaluation-loop frame */
	for (i = 0, k = 0; i < n; i++)
		if (cur[i] > lo && cur[i] <= hi && k++ == b)
			break;
	if (i >= n)
		return o;
	/* further out, as interleave() does, as far as the frames checked go */
	for (i++; i < n && o < cap && (budget || all); i++) {
		if (!(cur[i] > lo && cur[i] <= hi) || !fp || !budget) {
			out[o++] = cur[i];
			continue;
		}
		o = frames_to_entry(s, &fp, &budget, out, o, cap, 1);
	}
	o = frames_to_entry(s, &fp, &budget, out, o, cap, 0);
	/* past the frames still there: the ones kept, named from their keys (no native frames
	 * between them), and the stack ends there */
	if (!all && !budget)
		o = outer_named(s, tk, verified, out, o, cap);
	*whole = all;
	return o;
}

int hs_py_eval_pc(uint64_t pc)
{
	/* acquire: pairs with the release of ready in hs_py_frames_init */
	return __atomic_load_n(&pf.ready, __ATOMIC_ACQUIRE) && pc > pf.eval_lo && pc <= pf.eval_hi;
}

void hs_py_eval_range(uint64_t *lo, uint64_t *span)
{
	/* acquire: pairs with the release of ready in hs_py_frames_init */
	int ready = __atomic_load_n(&pf.ready, __ATOMIC_ACQUIRE);
	*lo = ready ? pf.eval_lo : 0;
	*span = ready ? pf.eval_hi - pf.eval_lo : 0;
}

/* ---- start-up ---------------------------------------------------------------- */

/* Say in the header that frames are read, and which Python (a fork child's
 * new segment too). */
static void note_header(void)
{
	struct hs_header *h = hs_seg.hdr;
	const char *v = pf.version;
	if (!h)
		return;
	__atomic_or_fetch(&h->python, HS_PY_FRAMES, __ATOMIC_RELAXED);
	if (!h->python_version[0]) {
		size_t k = 0;
		while (v[k] && v[k] != ' ' && k < sizeof h->python_version - 1)
			k++;
		memcpy(h->python_version, v, k);
		h->python_version[k] = '\0';
	}
}

/* The larger of end and the end of a field of n bytes at off (PYL_NONE: absent). */
static unsigned field_end(unsigned end, unsigned off, unsigned n)
{
	return off != PYL_NONE && off + n > end ? off + n : end;
}

/* The row of layouts[] for version string v ("3.12.1 (main, ..."), or NULL. */
static const struct py_layout *layout_for(const char *v)
{
	unsigned minor = 0;
	const char *p;
	if (!v || strncmp(v, "3.", 2) != 0 || v[2] < '0' || v[2] > '9')
		return NULL;
	p = v + 2;
	while (*p >= '0' && *p <= '9' && minor < 1000)
		minor = minor * 10 + (unsigned)(*p++ - '0');
	if (*p != '.' && *p != '\0' && *p != ' ' && *p != '+')
		return NULL;
	for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++)
		if (layouts[i].minor == minor)
			return &layouts[i];
	return NULL;
}

void hs_py_frames_init(void)
{
	const char *(*version)(void);
	void *eval, *tstate, *code_type, *str_type, *bytes_type, *runtime;
	const ElfW(Sym) *es = NULL;
	const struct py_layout *L;
	Dl_info info;
	const char *v;

	if (__atomic_load_n(&pf.ready, __ATOMIC_ACQUIRE)) {
		note_header();
		return;
	}
	version = (const char *(*)(void))dlsym(RTLD_DEFAULT, "Py_GetVersion");
	eval = dlsym(RTLD_DEFAULT, "_PyEval_EvalFrameDefault");
	tstate = dlsym(RTLD_DEFAULT, "PyGILState_GetThisThreadState");
	code_type = dlsym(RTLD_DEFAULT, "PyCode_Type");
	str_type = dlsym(RTLD_DEFAULT, "PyUnicode_Type");
	bytes_type = dlsym(RTLD_DEFAULT, "PyBytes_Type");
	runtime = dlsym(RTLD_DEFAULT, "_PyRuntime");
	if (!version || !eval || !tstate || !code_type || !str_type || !bytes_type)
		return;
	v = version();
	/* a version not in the table: native frames only (heisen-dump says why) */
	if (!v || (L = layout_for(v)) == NULL)
		return;
	if (!dladdr1(eval, &info, (void **)&es, RTLD_DL_SYMENT) || !es || es->st_size == 0)
		return;
	pf.version = v;
	pf.L = L;
	pf.row = (unsigned)(L - layouts);
	pf.frame_read = field_end(0, L->f_back, 8);
	pf.frame_read = field_end(pf.frame_read, L->f_code, 8);
	pf.frame_read = field_end(pf.frame_read, L->f_instr, L->chain == CHAIN_FRAME_OBJECT ? 4 : 8);
	pf.frame_read = field_end(pf.frame_read, L->f_owner, 1);
	pf.frame_read = field_end(pf.frame_read, L->f_is_entry, 1);
	pf.code_read = field_end(0, OB_TYPE, 8);
	pf.code_read = field_end(pf.code_read, L->co_firstlineno, 4);
	pf.code_read = field_end(pf.code_read, L->co_filename, 8);
	pf.code_read = field_end(pf.code_read, L->co_name, 8);
	pf.code_read = field_end(pf.code_read, L->co_qualname, 8);
	pf.code_read = field_end(pf.code_read, L->co_linetable, 8);
	if (pf.frame_read > PY_FRAME_READ || pf.code_read > PY_CODE_READ)
		return;
	pf.this_tstate = (void *(*)(void))tstate;
	if (L->rt_tstate_current != PYL_NONE) {
		/* no _PyRuntime: a word that stays 0 (every lookup asks CPython) */
		static const uint64_t none;
		pf.rt_current = runtime ? (uint64_t)(uintptr_t)runtime + L->rt_tstate_current : (uint64_t)(uintptr_t)&none;
	} else {
		/* 3.13's name; 3.12's is _PyThreadState_UncheckedGet (in 3.8-3.11 that one reads the
		 * global, any thread's: never used there) */
		pf.current = (void *(*)(void))dlsym(RTLD_DEFAULT, "PyThreadState_GetUnchecked");
		if (!pf.current)
			pf.current = (void *(*)(void))dlsym(RTLD_DEFAULT, "_PyThreadState_UncheckedGet");
		{
			const ElfW(Sym) *gs = NULL;
			Dl_info gi;
			if (pf.current && dladdr1((void *)pf.current, &gi, (void **)&gs, RTLD_DL_SYMENT) && gs && gs->st_size)
				tls_learn((const unsigned char *)(void *)pf.current, gs->st_size);
		}
	}
	pf.eval_lo = (uint64_t)(uintptr_t)eval;
	pf.eval_hi = pf.eval_lo + es->st_size;
	pf.code_type = (uint64_t)(uintptr_t)code_type;
	pf.str_type = (uint64_t)(uintptr_t)str_type;
	pf.bytes_type = (uint64_t)(uintptr_t)bytes_type;
	/* the fields above are visible before anyone sees ready */
	__atomic_store_n(&pf.ready, 1, __ATOMIC_RELEASE);
	__atomic_store_n(&hs_py_frames_none, 0, __ATOMIC_RELAXED);
	note_header();
}

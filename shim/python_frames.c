/* SPDX-License-Identifier: MIT */
/*
 * shim/python_frames.c — Python frames in native stacks (issue 3).
 *
 * A stack that heisen records for a finding shows the Python functions that
 * were running, where they ran: each native frame of CPython's evaluation
 * loop (_PyEval_EvalFrameDefault) is replaced by the Python frames that
 * C-level call was executing, innermost first — py-spy's and memray's
 * "native mode".  In CPython 3.11 one call of the evaluation loop runs a run
 * of Python frames linked by ->previous, from the thread's current frame up
 * to and including the first frame marked is_entry; so walking the native
 * PCs innermost first and, at each PC inside the loop, consuming the frame
 * chain up to the next entry frame puts both in call order.
 *
 * Everything here reads memory only: the calling thread's own frame chain
 * (reached through PyGILState_GetThisThreadState, which reads a TSS slot
 * and needs no GIL), code objects, their location tables and str objects.
 * Nothing allocates, nothing calls into CPython except that one accessor,
 * and the line table is decoded here (Objects/locations.md of 3.11) rather
 * than with PyCode_Addr2Line.  In a signal handler (hs_py_careful) the
 * interrupted thread may have been anywhere, so every read then goes
 * through process_vm_readv on ourselves, which fails instead of faulting.
 * Frames are interned in the segment's pyframe table (format.h, struct
 * hs_pyframe) lock-free, as stacks.c interns stacks.
 *
 * The struct layouts come from CPython 3.11's own headers (Py_BUILD_CORE,
 * headers only, libpython is never linked); a build without them compiles
 * the stub at the end, and a running CPython other than 3.11 gets native
 * frames only.  Design: ../shared/DESIGN.md "Reports"; format: format.h.
 */
#ifdef HS_HAVE_PY311
#define Py_BUILD_CORE 1
#include <Python.h>
#include <internal/pycore_frame.h>
#endif

#include <dlfcn.h>
#include <link.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "shim.h"

__thread int hs_py_careful __attribute__((tls_model("initial-exec")));

#ifdef HS_HAVE_PY311

#if PY_VERSION_HEX < 0x030b0000 || PY_VERSION_HEX >= 0x030c0000
#error "python_frames.c reads CPython 3.11's frame layout: build with 3.11 headers"
#endif

#define PY_CHAIN_MAX 256  /* Python frames looked at per capture (recursion beyond is cut) */
#define PY_STR_MAX 512    /* bytes kept of a name or file name (UTF-8) */
#define PY_CACHE 256      /* code objects whose interned names are cached (power of two) */
#define PY_ICACHE 512     /* (code, instruction) -> pyframe id, cached (power of two) */

/* What frame reading needs, resolved once; `ready` publishes the rest. */
static struct {
	int ready;                  /* [atomic] 1: the fields below are valid */
	int tried;                  /* [atomic] hs_py_interleave's lazy init ran once */
	const char *version;        /* Py_GetVersion(): a static string */
	PyThreadState *(*this_tstate)(void);
	uint64_t eval_lo, eval_hi;  /* _PyEval_EvalFrameDefault's code [lo, hi) */
	uint64_t code_type, str_type, bytes_type;
} pf;

/* ---- reading memory -------------------------------------------------------- */

/*
 * Copy n bytes at src into dst.  Careful mode (signal handlers): through
 * process_vm_readv, so an address that is not mapped gives -1, not SIGSEGV.
 * Otherwise a plain copy: the caller is in a hook on its own thread, whose
 * frame chain is consistent and alive.  Returns 0 or -1.
 */
static int rd(void *dst, uint64_t src, size_t n)
{
	if (src < 4096)
		return -1;
	if (!hs_py_careful) {
		memcpy(dst, (const void *)(uintptr_t)src, n);
		return 0;
	}
	struct iovec l = {dst, n}, r = {(void *)(uintptr_t)src, n};
	return syscall(SYS_process_vm_readv, (long)syscall(SYS_getpid), &l, 1L, &r, 1L, 0L) == (long)n ? 0 : -1;
}

/* ---- line numbers: the 3.11 location table ----------------------------------- */

/* A cursor over the bytes of co_linetable, read in chunks. */
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
 * The line of the code unit `unit` (PyCode_Addr2Line's answer, computed
 * without calling it): walk the entries, each covering (low 3 bits + 1) code
 * units and carrying a line delta, until the one that covers unit.  0 when
 * the table says "no line" or cannot be read.
 */
static int line_of(const PyCodeObject *co, long unit)
{
	PyBytesObject b;
	struct lt t = {0};
	long start = 0;
	int line = co->co_firstlineno;

	if (unit < 0)
		return co->co_firstlineno;
	if (rd(&b, (uint64_t)(uintptr_t)co->co_linetable, offsetof(PyBytesObject, ob_sval)) != 0 ||
	    (uint64_t)(uintptr_t)Py_TYPE(&b) != pf.bytes_type || Py_SIZE(&b) < 0)
		return 0;
	t.addr = (uint64_t)(uintptr_t)co->co_linetable + offsetof(PyBytesObject, ob_sval);
	t.len = (uint64_t)Py_SIZE(&b);
	for (;;) {
		int first = lt_byte(&t), code, delta = 0, c;
		unsigned u;
		if (first < 0 || !(first & 128))
			return 0;
		code = (first >> 3) & 15;
		switch (code) {
		case PY_CODE_LOCATION_INFO_NONE:
			break;
		case PY_CODE_LOCATION_INFO_LONG:
		case PY_CODE_LOCATION_INFO_NO_COLUMNS:
			if (lt_varint(&t, &u) != 0)
				return 0;
			delta = (u & 1) ? -(int)(u >> 1) : (int)(u >> 1);
			break;
		case PY_CODE_LOCATION_INFO_ONE_LINE0:
		case PY_CODE_LOCATION_INFO_ONE_LINE1:
		case PY_CODE_LOCATION_INFO_ONE_LINE2:
			delta = code - PY_CODE_LOCATION_INFO_ONE_LINE0;
			break;
		default:
			break;
		}
		line += delta;
		start += (first & 7) + 1;
		if (unit < start)
			return code == PY_CODE_LOCATION_INFO_NONE || line < 0 ? 0 : line;
		/* skip this entry's remaining bytes: up to the next byte with bit 7 */
		while ((c = lt_peek(&t)) >= 0 && !(c & 128))
			t.pos++;
		if (c < 0)
			return 0;
	}
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
	PyCompactUnicodeObject u;
	uint64_t data;
	long len, n = 0;

	if (rd(&u, obj, sizeof u) != 0 || (uint64_t)(uintptr_t)u._base.ob_base.ob_type != pf.str_type ||
	    !u._base.state.compact || !u._base.state.ready || u._base.length < 0)
		goto unknown;
	len = u._base.length;
	if (u._base.state.ascii) {
		n = len < PY_STR_MAX ? len : PY_STR_MAX;
		if (rd(out, obj + sizeof(PyASCIIObject), (size_t)n) != 0)
			goto unknown;
		return n;
	}
	data = obj + sizeof(PyCompactUnicodeObject);
	{
		unsigned kind = u._base.state.kind, w = kind == PyUnicode_1BYTE_KIND ? 1 : kind == PyUnicode_2BYTE_KIND ? 2 : 4;
		unsigned char buf[256];
		long i = 0;
		if (kind != PyUnicode_1BYTE_KIND && kind != PyUnicode_2BYTE_KIND && kind != PyUnicode_4BYTE_KIND)
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
	uint64_t prev_instr;
	int entry;  /* is_entry: the first frame of one evaluation-loop call */
	int skip;   /* incomplete or unreadable: not shown, but still counts as a boundary */
};

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
	struct hs_table *tab = &s->hdr->tables[HS_T_PYFRAMES];
	struct hs_table *idx = &s->hdr->tables[HS_T_PYFRAME_INDEX];
	PyCodeObject co;
	uint64_t name, file, key;
	uint32_t mask, i;
	int line;

	if (!tab->capacity || !idx->capacity || (idx->capacity & (idx->capacity - 1)))
		return 0;
	if (rd(&co, f->code, offsetof(PyCodeObject, co_code_adaptive)) != 0 ||
	    (uint64_t)(uintptr_t)co.ob_base.ob_base.ob_type != pf.code_type)
		return 0;
	name = (uint64_t)(uintptr_t)(co.co_qualname ? co.co_qualname : co.co_name);
	file = (uint64_t)(uintptr_t)co.co_filename;
	if ((i = icache_get(s, f->code, f->prev_instr, name, file)) != 0 && i < tab->capacity) {
		const struct hs_pyframe *e = &s->pyframes[i];
		if (__atomic_load_n(&e->ready, __ATOMIC_ACQUIRE) && e->code == f->code && e->name_ptr == name &&
		    e->file_ptr == file)
			return i;
	}
	line = line_of(&co, (long)((int64_t)(f->prev_instr - (f->code + offsetof(PyCodeObject, co_code_adaptive))) /
				    (int64_t)sizeof(_Py_CODEUNIT)));
	key = hs_pyframe_key(f->code, line);
	mask = idx->capacity - 1;
	i = (uint32_t)hs_mix64(key) & mask;
	for (uint32_t probe = 0; probe <= mask; probe++, i = (i + 1) & mask) {
		struct hs_index_slot *slot = &s->pyframe_index[i];
		uint64_t k = __atomic_load_n(&slot->key, __ATOMIC_ACQUIRE);
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
				icache_put(s, f->code, f->prev_instr, name, file, id);
				return id;
			}
			k = expect;
		}
		if (k == key) {
			uint32_t id = __atomic_load_n(&slot->value, __ATOMIC_ACQUIRE);
			const struct hs_pyframe *e = id && id < tab->capacity ? &s->pyframes[id] : NULL;
			/* id 0: another thread is still writing it; at worst we intern a twin */
			if (e && __atomic_load_n(&e->ready, __ATOMIC_ACQUIRE) && e->code == f->code &&
			    e->name_ptr == name && e->file_ptr == file && e->line == line) {
				icache_put(s, f->code, f->prev_instr, name, file, id);
				return id;
			}
		}
	}
	__atomic_add_fetch(&idx->dropped, 1, __ATOMIC_RELAXED);
	return 0;
}

/* ---- the frame chain ----------------------------------------------------------- */

/* Read the calling thread's frame chain, innermost first, into out[max]. */
static unsigned read_chain(struct pyf *out, unsigned max)
{
	PyThreadState *ts = pf.this_tstate();
	_PyCFrame *cf = NULL;
	_PyInterpreterFrame *fp = NULL;
	unsigned n = 0;

	if (!ts || rd(&cf, (uint64_t)(uintptr_t)ts + offsetof(PyThreadState, cframe), sizeof cf) != 0 ||
	    rd(&fp, (uint64_t)(uintptr_t)cf + offsetof(_PyCFrame, current_frame), sizeof fp) != 0)
		return 0;
	while (fp && n < max) {
		/* the specials and linkage: everything up to localsplus */
		_PyInterpreterFrame f;
		struct pyf *p = &out[n];
		int first_traceable = 0;
		if (rd(&f, (uint64_t)(uintptr_t)fp, offsetof(_PyInterpreterFrame, localsplus)) != 0)
			break;
		p->code = (uint64_t)(uintptr_t)f.f_code;
		p->prev_instr = (uint64_t)(uintptr_t)f.prev_instr;
		p->entry = f.is_entry != 0;
		p->skip = 1;
		if (p->code && rd(&first_traceable, p->code + offsetof(PyCodeObject, _co_firsttraceable),
				  sizeof first_traceable) == 0) {
			uint64_t base = p->code + offsetof(PyCodeObject, co_code_adaptive);
			/* _PyFrame_IsIncomplete: still before its first RESUME */
			p->skip = f.owner != FRAME_OWNED_BY_GENERATOR &&
				  p->prev_instr < base + (uint64_t)first_traceable * sizeof(_Py_CODEUNIT);
		}
		n++;
		fp = f.previous;
	}
	return n;
}

unsigned hs_py_interleave(struct hs_seg *s, uint64_t *pcs, unsigned n, unsigned max, int *python)
{
	struct pyf chain[PY_CHAIN_MAX];
	uint64_t out[2 * HS_STACK_DEPTH];
	unsigned nchain, at = 0, o = 0, cap = max < sizeof out / sizeof out[0] ? max : sizeof out / sizeof out[0];

	*python = 0;
	if (!__atomic_load_n(&pf.ready, __ATOMIC_ACQUIRE)) {
		/* until the Python bridge calls hs_py_frames_init: once, never from a signal handler */
		if (hs_py_careful || __atomic_exchange_n(&pf.tried, 1, __ATOMIC_ACQ_REL))
			return n;
		hs_py_frames_init();
		if (!__atomic_load_n(&pf.ready, __ATOMIC_ACQUIRE))
			return n;
	}
	if (!s || !s->hdr || !s->pyframes || n > max)
		return n;
	nchain = read_chain(chain, PY_CHAIN_MAX);
	if (nchain == 0)
		return n;

	for (unsigned i = 0; i < n && o < cap; i++) {
		/* pcs[i] is a return address (or, at 0, maybe the pc itself): the call is before it */
		uint64_t pc = pcs[i];
		if (!(pc > pf.eval_lo && pc <= pf.eval_hi) || at >= nchain) {
			out[o++] = pc;
			continue;
		}
		/* one evaluation-loop call: the frames up to its entry frame */
		while (at < nchain && o < cap) {
			const struct pyf *f = &chain[at++];
			uint32_t id = f->skip ? 0 : pyframe_id(s, f);
			if (id)
				out[o++] = HS_PC_PYTHON | id, *python = 1;
			if (f->entry)
				break;
		}
	}
	/* the native unwinding stopped before the outermost evaluation loop */
	while (at < nchain && o < cap) {
		const struct pyf *f = &chain[at++];
		uint32_t id = f->skip ? 0 : pyframe_id(s, f);
		if (id)
			out[o++] = HS_PC_PYTHON | id, *python = 1;
	}
	if (!*python)
		return n;
	memcpy(pcs, out, o * sizeof *pcs);
	return o;
}

int hs_py_eval_pc(uint64_t pc)
{
	/* acquire: pairs with the release of ready in hs_py_frames_init */
	return __atomic_load_n(&pf.ready, __ATOMIC_ACQUIRE) && pc > pf.eval_lo && pc <= pf.eval_hi;
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

void hs_py_frames_init(void)
{
	const char *(*version)(void);
	void *eval, *tstate, *code_type, *str_type, *bytes_type;
	const ElfW(Sym) *es = NULL;
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
	if (!version || !eval || !tstate || !code_type || !str_type || !bytes_type)
		return;
	v = version();
	/* the layouts compiled in are 3.11's, and they hold for every 3.11.x */
	if (!v || strncmp(v, "3.11.", 5) != 0)
		return;
	if (!dladdr1(eval, &info, (void **)&es, RTLD_DL_SYMENT) || !es || es->st_size == 0)
		return;
	pf.version = v;
	pf.this_tstate = (PyThreadState * (*)(void)) tstate;
	pf.eval_lo = (uint64_t)(uintptr_t)eval;
	pf.eval_hi = pf.eval_lo + es->st_size;
	pf.code_type = (uint64_t)(uintptr_t)code_type;
	pf.str_type = (uint64_t)(uintptr_t)str_type;
	pf.bytes_type = (uint64_t)(uintptr_t)bytes_type;
	/* the fields above are visible before anyone sees ready */
	__atomic_store_n(&pf.ready, 1, __ATOMIC_RELEASE);
	note_header();
}

#else /* !HS_HAVE_PY311: built without CPython 3.11's headers */

unsigned hs_py_interleave(struct hs_seg *s, uint64_t *pcs, unsigned n, unsigned max, int *python)
{
	(void)s;
	(void)pcs;
	(void)max;
	*python = 0;
	return n;
}

void hs_py_frames_init(void)
{
}

int hs_py_eval_pc(uint64_t pc)
{
	(void)pc;
	return 0;
}

#endif

/* SPDX-License-Identifier: MIT */
/*
 * dumper/symbolize.c — PCs and lock addresses to names, offline.
 *
 * Each ELF file is opened once per run of heisen-dump, whatever the number
 * of processes that mapped it: a session-wide table of files keyed by the
 * build-id the segment recorded (by path when it recorded none) holds one
 * libdwfl session per file, the file reported at bias 0 with
 * dwfl_report_elf, so that a PC is looked up in the file's own terms
 * (pc - the process's load bias) — 256 forked workers of one interpreter
 * share one reading of libc's and python's debug info — and every file
 * address already looked up is remembered there too.  A process's own
 * symbolizer only maps its PCs to those files (its module table), and is
 * made only when something of that process is printed (hs_proc_sym).
 * Module paths come from shared memory and are only ever used as file names
 * to open read-only.  When a file is missing, not ELF, or not the one that
 * ran (build-id differs), frames fall back to "module + offset" or carry a
 * warning; symbolization never fails a report.  Design: docs/design.md "Reports".
 */
#include "symbolize.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <elfutils/libdwfl.h>
#include <gelf.h>
#include <uthash.h>

#include "snapshot.h"

#define PATH_MAX_SEG 4096

/* A symbol looked up in one file, by its address in the file's terms. */
struct file_sym {
	uint64_t addr;
	char *function;     /* NULL: none */
	char *src;          /* source file basename, NULL: none */
	int line;
	UT_hash_handle hh;
};

/* A data symbol looked up in one file ("state+0x40"), by file address. */
struct file_data {
	uint64_t addr;
	char *name;         /* NULL: none */
	UT_hash_handle hh;
};

/*
 * One ELF file of the session, opened at most once per run of heisen-dump.
 * key: 'b' + the recorded build-id, or 'p' + the path when the segment
 * recorded none.  dw is NULL when the file could not be read (said once).
 */
struct elf_file {
	UT_hash_handle hh;
	Dwfl *dwfl;
	Dwfl_Module *dw;
	struct file_sym *syms;
	struct file_data *data;
	size_t keylen;
	unsigned char key[];
};
static struct elf_file *elf_files;

struct mod {
	uint64_t base, lo, hi;
	char *path;
	bool hook;
	struct elf_file *file; /* NULL: module + offset only */
};

struct frame_key {
	uint64_t pc;
	uint64_t ret;
};

struct frame_ent {
	struct frame_key key;
	struct hs_frame f;
	bool owned;            /* function/file are this entry's (Python frames), not the file table's */
	UT_hash_handle hh;
};

struct data_ent {
	uint64_t addr;
	char *name; /* NULL: no symbol */
	UT_hash_handle hh;
};

struct hs_sym {
	struct hs_seg *seg;  /* for Python frames, read when first asked for */
	struct mod *mods;
	size_t nmods;
	bool debuginfo;
	struct frame_ent *frames;
	struct data_ent *data;
};

/* Paths already warned about, across processes: one warning per file. */
struct warned {
	UT_hash_handle hh;
	char path[];
};
static struct warned *warned_paths;

static void warn_once(const char *path, const char *what)
{
	struct warned *w;
	HASH_FIND_STR(warned_paths, path, w);
	if (w)
		return;
	w = malloc(sizeof *w + strlen(path) + 1);
	if (w) {
		strcpy(w->path, path);
		HASH_ADD_STR(warned_paths, path, w);
	}
	fprintf(stderr, "heisen-dump: warning: %s: %s\n", path, what);
}

static bool is_hook_module(const char *path)
{
	const char *b = strrchr(path, '/');
	return strncmp(b ? b + 1 : path, "libheisen", 9) == 0;
}

static const char *base_name(const char *path)
{
	const char *b = strrchr(path, '/');
	return b ? b + 1 : path;
}

static void check_build_id(const struct elf_file *f, const char *path, const struct hs_module *rec)
{
	const unsigned char *bits;
	GElf_Addr vaddr;
	unsigned len = rec->build_id_len < HS_BUILD_ID_MAX ? rec->build_id_len : HS_BUILD_ID_MAX;
	int n;

	if (!f->dw || len == 0)
		return;
	n = dwfl_module_build_id(f->dw, &bits, &vaddr);
	if (n <= 0)
		return;
	if ((unsigned)n != len || memcmp(bits, rec->build_id, len) != 0)
		warn_once(path, "build-id differs from the one that ran (file replaced since?): symbols may be wrong");
}

static const Dwfl_Callbacks offline_callbacks = {
	.find_elf = dwfl_build_id_find_elf,
	.find_debuginfo = dwfl_standard_find_debuginfo,
	.section_address = dwfl_offline_section_address,
};

static void free_elf_files(void)
{
	struct elf_file *f, *ft;
	HASH_ITER(hh, elf_files, f, ft) {
		struct file_sym *y, *yt;
		struct file_data *d, *dt;
		HASH_DEL(elf_files, f);
		HASH_ITER(hh, f->syms, y, yt) {
			HASH_DEL(f->syms, y);
			free(y->function);
			free(y->src);
			free(y);
		}
		HASH_ITER(hh, f->data, d, dt) {
			HASH_DEL(f->data, d);
			free(d->name);
			free(d);
		}
		if (f->dwfl)
			dwfl_end(f->dwfl);
		free(f);
	}
}

/*
 * The session-wide entry of the file a module record names, opened (and its
 * build-id checked against the recorded one) the first time any process
 * names it.  NULL when out of memory; an entry whose file cannot be read
 * has dw NULL, and its warning was given once.
 */
static struct elf_file *elf_file_of(const char *path, const struct hs_module *rec)
{
	unsigned idlen = rec->build_id_len < HS_BUILD_ID_MAX ? rec->build_id_len : HS_BUILD_ID_MAX;
	size_t plen = strlen(path), keylen = 1 + (idlen ? idlen : plen);
	struct elf_file *f;
	unsigned char key[1 + PATH_MAX_SEG];
	struct stat st;

	key[0] = idlen ? 'b' : 'p';
	memcpy(key + 1, idlen ? (const void *)rec->build_id : (const void *)path, keylen - 1);
	HASH_FIND(hh, elf_files, key, keylen, f);
	if (f)
		return f;
	if (!(f = calloc(1, sizeof *f + keylen)))
		return NULL;
	if (!elf_files)
		atexit(free_elf_files);
	f->keylen = keylen;
	memcpy(f->key, key, keylen);
	HASH_ADD_KEYPTR(hh, elf_files, f->key, f->keylen, f);
	/* the path comes from shared memory: never open a FIFO or a device it names */
	if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) {
		char shown[PATH_MAX_SEG];
		snprintf(shown, sizeof shown, "%s", path);
		warn_once(hs_clean(shown), "not a regular file (gone since the run?): its frames show module+offset only");
		return f;
	}
	if (!(f->dwfl = dwfl_begin(&offline_callbacks)))
		return f;
	dwfl_report_begin(f->dwfl);
	/* bias 0: addresses in the file's own terms, whichever process asks */
	f->dw = dwfl_report_elf(f->dwfl, base_name(path), path, -1, 0, false);
	dwfl_report_end(f->dwfl, NULL, NULL);
	if (!f->dw) {
		char why[300];
		snprintf(why, sizeof why, "cannot read it (%s): its frames show module+offset only", dwfl_errmsg(-1));
		warn_once(path, why);
	}
	check_build_id(f, path, rec);
	return f;
}

/* Copy the module table; with debug info, find each module's file. */
static void load_modules(struct hs_sym *s, struct hs_seg *seg, const char *exe)
{
	uint32_t n = hs_seg_count(seg, HS_T_MODULES);
	char path[PATH_MAX_SEG];

	s->mods = calloc(n ? n : 1, sizeof *s->mods);
	if (!s->mods)
		return;
	for (uint32_t i = 0; i < n; i++) {
		struct hs_module rec;
		struct mod *m = &s->mods[s->nmods];
		if (hs_read_module(seg, i, &rec) != 0 || rec.lo >= rec.hi)
			continue;
		if (hs_seg_string(seg, rec.path, path, sizeof path) != 0 || !path[0]) {
			if (!(rec.flags & HS_MOD_MAIN) || !exe[0])
				continue;
			snprintf(path, sizeof path, "%s", exe);
		}
		if (!(m->path = strdup(path)))
			continue;
		m->base = rec.base, m->lo = rec.lo, m->hi = rec.hi;
		m->hook = is_hook_module(path);
		if (s->debuginfo && !m->hook)
			m->file = elf_file_of(path, &rec);
		s->nmods++;
	}
}

struct hs_sym *hs_sym_new(struct hs_seg *seg, const char *exe, bool debuginfo)
{
	struct hs_sym *s = calloc(1, sizeof *s);
	if (!s)
		return NULL;
	s->seg = seg;
	s->debuginfo = debuginfo;
	load_modules(s, seg, exe ? exe : "");
	return s;
}

static const struct mod *find_mod(const struct hs_sym *s, uint64_t addr)
{
	/* Later entries win: a module loaded again at a reused range is newer. */
	for (size_t i = s->nmods; i-- > 0;)
		if (addr >= s->mods[i].lo && addr < s->mods[i].hi)
			return &s->mods[i];
	return NULL;
}

/*
 * name demangled when it is a C++ (Itanium ABI) symbol, as a malloc'ed
 * string; else a copy of its first n bytes.  The demangler is libstdc++'s
 * __cxa_demangle, found at run time (libstdc++.so.6 is on every system that
 * runs C++; without it names stay mangled).
 */
static char *demangle_n(const char *name, size_t n)
{
	typedef char *(*demangle_fn)(const char *, char *, size_t *, int *);
	static demangle_fn fn;
	static int tried;
	char *copy = strndup(name, n), *out;
	int status = -1;

	if (!copy || strncmp(copy, "_Z", 2) != 0)
		return copy;
	if (!tried) {
		void *h = dlopen("libstdc++.so.6", RTLD_LAZY | RTLD_LOCAL);
		tried = 1;
		if (h)
			fn = (demangle_fn)dlsym(h, "__cxa_demangle");
	}
	if (!fn)
		return copy;
	out = fn(copy, NULL, NULL, &status);
	if (status != 0 || !out) {
		free(out);
		return copy;
	}
	free(copy);
	return out;
}

/* The symbol at file address addr of f, looked up once per session. */
static const struct file_sym *file_sym(struct elf_file *f, uint64_t addr)
{
	struct file_sym *y;
	GElf_Off off;
	GElf_Sym sym;
	const char *name;
	Dwfl_Line *line;

	HASH_FIND(hh, f->syms, &addr, sizeof addr, y);
	if (y)
		return y;
	if (!(y = calloc(1, sizeof *y)))
		return NULL;
	y->addr = addr;
	name = dwfl_module_addrinfo(f->dw, addr, &off, &sym, NULL, NULL, NULL);
	/* "__libc_start_main@@GLIBC_2.34": the version says nothing in a stack */
	if (name)
		y->function = demangle_n(name, strcspn(name, "@"));
	if ((line = dwfl_module_getsrc(f->dw, addr))) {
		int lineno = 0;
		const char *src = dwfl_lineinfo(line, NULL, &lineno, NULL, NULL, NULL);
		if (src) {
			y->src = strdup(base_name(src));
			y->line = lineno;
		}
	}
	HASH_ADD(hh, f->syms, addr, sizeof y->addr, y);
	return y;
}

static void fill_debuginfo(struct hs_frame *fr, const struct mod *m, uint64_t addr)
{
	const struct file_sym *y = file_sym(m->file, addr - m->base);
	if (!y)
		return;
	fr->function = y->function;
	fr->file = y->src;
	fr->line = y->src ? y->line : 0;
}

/*
 * Fill f from the Python frame HS_PC_PYFRAME(pc): copy the entry through the
 * bounds-checking accessor, accept it only when its ready word says it is
 * complete, then copy its two strings through the strings accessor.
 */
static void fill_python(struct hs_sym *s, struct hs_frame *f, uint64_t pc)
{
	uint32_t id = HS_PC_PYFRAME(pc);
	const struct hs_pyframe *shared = id ? hs_seg_entry(s->seg, HS_T_PYFRAMES, id) : NULL;
	struct hs_pyframe e;
	char buf[PATH_MAX_SEG];

	f->python = true;
	f->offset = 0;
	if (!shared || (pc & ~(HS_PC_PYTHON | 0xffffffffull)) != 0) {
		hs_seg_complain(s->seg, "stack names Python frame %u, beyond the pyframe table", id);
		goto unknown;
	}
	if (!__atomic_load_n(&shared->ready, __ATOMIC_ACQUIRE))
		goto unknown; /* a writer killed mid-entry: not an error */
	memcpy(&e, shared, sizeof e);
	if (hs_seg_string(s->seg, e.function, buf, sizeof buf) == 0 && buf[0])
		f->function = strdup(hs_clean(buf));
	if (hs_seg_string(s->seg, e.file, buf, sizeof buf) == 0 && buf[0]) {
		f->file = strdup(hs_clean(buf));
		f->line = e.line > 0 ? e.line : 0;
	}
	if (!f->function || !f->file)
		hs_seg_complain(s->seg, "Python frame %u names a string outside the strings table", id);
unknown:
	if (!f->function)
		f->function = strdup("?");
}

const struct hs_frame *hs_sym_pc(struct hs_sym *s, uint64_t pc, bool return_address)
{
	/* a Python frame is not an address: one entry per frame, whatever its position */
	struct frame_key key = {pc, return_address && !HS_PC_IS_PYTHON(pc)};
	struct frame_ent *e;
	const struct mod *m;
	uint64_t addr = (return_address && pc > 0) ? pc - 1 : pc;

	HASH_FIND(hh, s->frames, &key, sizeof key, e);
	if (e)
		return &e->f;
	if (!(e = calloc(1, sizeof *e)))
		return NULL;
	e->key = key;
	e->f.pc = pc;
	e->f.offset = pc;
	if (HS_PC_IS_PYTHON(pc)) {
		e->owned = true;
		fill_python(s, &e->f, pc);
	} else if ((m = find_mod(s, addr))) {
		e->f.module = m->path;
		e->f.offset = pc - m->base;
		e->f.hook = m->hook;
		if (m->file && m->file->dw)
			fill_debuginfo(&e->f, m, addr);
	}
	HASH_ADD(hh, s->frames, key, sizeof key, e);
	return &e->f;
}

/* The data symbol at file address addr of f ("lock_a", "state+0x40"), or
 * NULL; looked up once per session. */
static char *file_data_name(struct elf_file *f, uint64_t addr)
{
	struct file_data *d;
	GElf_Off off;
	GElf_Sym sym;
	const char *name;
	char buf[512];

	HASH_FIND(hh, f->data, &addr, sizeof addr, d);
	if (d)
		return d->name;
	if (!(d = calloc(1, sizeof *d)))
		return NULL;
	d->addr = addr;
	HASH_ADD(hh, f->data, addr, sizeof d->addr, d);
	name = dwfl_module_addrinfo(f->dw, addr, &off, &sym, NULL, NULL, NULL);
	if (!name || GELF_ST_TYPE(sym.st_info) != STT_OBJECT)
		return NULL;
	if (off >= sym.st_size && !(off == 0 && sym.st_size == 0))
		return NULL;
	d->name = demangle_n(name, strlen(name));
	if (d->name && off != 0) {
		snprintf(buf, sizeof buf, "%s+0x%llx", d->name, (unsigned long long)off);
		free(d->name);
		d->name = strdup(buf);
	}
	return d->name;
}

const char *hs_sym_data(struct hs_sym *s, uint64_t addr)
{
	struct data_ent *e;
	const struct mod *m;
	HASH_FIND(hh, s->data, &addr, sizeof addr, e);
	if (e)
		return e->name;
	if (!(e = calloc(1, sizeof *e)))
		return NULL;
	e->addr = addr;
	m = find_mod(s, addr);
	e->name = m && m->file && m->file->dw ? file_data_name(m->file, addr - m->base) : NULL;
	HASH_ADD(hh, s->data, addr, sizeof addr, e);
	return e->name;
}

void hs_sym_free(struct hs_sym *s)
{
	struct frame_ent *f, *ft;
	struct data_ent *d, *dt;
	if (!s)
		return;
	HASH_ITER(hh, s->frames, f, ft) {
		HASH_DEL(s->frames, f);
		if (f->owned) {
			free((char *)f->f.function);
			free((char *)f->f.file);
		}
		free(f);
	}
	HASH_ITER(hh, s->data, d, dt) {
		HASH_DEL(s->data, d); /* the name is the file table's */
		free(d);
	}
	for (size_t i = 0; i < s->nmods; i++)
		free(s->mods[i].path);
	free(s->mods);
	free(s);
}

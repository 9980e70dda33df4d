/* SPDX-License-Identifier: MIT */
/*
 * dumper/symbolize.c — PCs and lock addresses to names, offline.
 *
 * Every module the segment recorded is reported to one libdwfl session per
 * process with dwfl_report_elf at its recorded load bias; from then on a PC
 * is looked up as a live debugger would, but the process need not exist.
 * Module paths come from shared memory and are only ever used as file names
 * to open read-only.  When a file is missing, not ELF, or not the one that
 * ran (build-id differs), frames fall back to "module + offset" or carry a
 * warning; symbolization never fails a report.  Design: DESIGN.md "Reports".
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

struct mod {
	uint64_t base, lo, hi;
	char *path;
	bool hook;
	Dwfl_Module *dw;
};

struct frame_key {
	uint64_t pc;
	uint64_t ret;
};

struct frame_ent {
	struct frame_key key;
	struct hs_frame f;
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
	Dwfl *dwfl;
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

static void check_build_id(struct mod *m, const struct hs_module *rec)
{
	const unsigned char *bits;
	GElf_Addr vaddr;
	unsigned len = rec->build_id_len < HS_BUILD_ID_MAX ? rec->build_id_len : HS_BUILD_ID_MAX;
	int n;

	if (!m->dw || len == 0)
		return;
	n = dwfl_module_build_id(m->dw, &bits, &vaddr);
	if (n <= 0)
		return;
	if ((unsigned)n != len || memcmp(bits, rec->build_id, len) != 0)
		warn_once(m->path, "build-id differs from the one that ran (file replaced since?): symbols may be wrong");
}

static const Dwfl_Callbacks offline_callbacks = {
	.find_elf = dwfl_build_id_find_elf,
	.find_debuginfo = dwfl_standard_find_debuginfo,
	.section_address = dwfl_offline_section_address,
};

/* Copy the module table; with dwfl, report each module at its bias. */
static void load_modules(struct hs_sym *s, struct hs_seg *seg, const char *exe)
{
	uint32_t n = hs_seg_count(seg, HS_T_MODULES);
	char path[PATH_MAX_SEG];

	s->mods = calloc(n ? n : 1, sizeof *s->mods);
	if (!s->mods)
		return;
	if (s->dwfl)
		dwfl_report_begin(s->dwfl);
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
		if (s->dwfl && !m->hook) {
			struct stat st;
			/* the path comes from shared memory: never open a FIFO or a device it names */
			if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) {
				warn_once(hs_clean(path), "not a regular file (gone since the run?): its frames show module+offset only");
				s->nmods++;
				continue;
			}
			m->dw = dwfl_report_elf(s->dwfl, base_name(path), path, -1, rec.base, false);
			if (!m->dw) {
				char why[300];
				snprintf(why, sizeof why, "cannot read it (%s): its frames show module+offset only",
					 dwfl_errmsg(-1));
				warn_once(path, why);
			}
			check_build_id(m, &rec);
		}
		s->nmods++;
	}
	if (s->dwfl)
		dwfl_report_end(s->dwfl, NULL, NULL);
}

struct hs_sym *hs_sym_new(struct hs_seg *seg, const char *exe, bool debuginfo)
{
	struct hs_sym *s = calloc(1, sizeof *s);
	if (!s)
		return NULL;
	s->seg = seg;
	if (debuginfo)
		s->dwfl = dwfl_begin(&offline_callbacks);
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

static void fill_debuginfo(struct hs_frame *f, const struct mod *m, uint64_t addr)
{
	GElf_Off off;
	GElf_Sym sym;
	const char *name = dwfl_module_addrinfo(m->dw, addr, &off, &sym, NULL, NULL, NULL);
	Dwfl_Line *line;

	/* "__libc_start_main@@GLIBC_2.34": the version says nothing in a stack */
	if (name)
		f->function = demangle_n(name, strcspn(name, "@"));
	if ((line = dwfl_module_getsrc(m->dw, addr))) {
		int lineno = 0;
		const char *src = dwfl_lineinfo(line, NULL, &lineno, NULL, NULL, NULL);
		if (src) {
			f->file = strdup(base_name(src));
			f->line = lineno;
		}
	}
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
		fill_python(s, &e->f, pc);
	} else if ((m = find_mod(s, addr))) {
		e->f.module = m->path;
		e->f.offset = pc - m->base;
		e->f.hook = m->hook;
		if (m->dw)
			fill_debuginfo(&e->f, m, addr);
	}
	HASH_ADD(hh, s->frames, key, sizeof key, e);
	return &e->f;
}

static char *data_name(const struct hs_sym *s, uint64_t addr)
{
	const struct mod *m = find_mod(s, addr);
	GElf_Off off;
	GElf_Sym sym;
	const char *name;
	char buf[512];

	if (!m || !m->dw)
		return NULL;
	name = dwfl_module_addrinfo(m->dw, addr, &off, &sym, NULL, NULL, NULL);
	if (!name || GELF_ST_TYPE(sym.st_info) != STT_OBJECT)
		return NULL;
	if (off >= sym.st_size && !(off == 0 && sym.st_size == 0))
		return NULL;
	{
		char *d = demangle_n(name, strlen(name));
		if (!d || off == 0)
			return d;
		snprintf(buf, sizeof buf, "%s+0x%llx", d, (unsigned long long)off);
		free(d);
		return strdup(buf);
	}
}

const char *hs_sym_data(struct hs_sym *s, uint64_t addr)
{
	struct data_ent *e;
	HASH_FIND(hh, s->data, &addr, sizeof addr, e);
	if (e)
		return e->name;
	if (!(e = calloc(1, sizeof *e)))
		return NULL;
	e->addr = addr;
	e->name = data_name(s, addr);
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
		free((char *)f->f.function);
		free((char *)f->f.file);
		free(f);
	}
	HASH_ITER(hh, s->data, d, dt) {
		HASH_DEL(s->data, d);
		free(d->name);
		free(d);
	}
	for (size_t i = 0; i < s->nmods; i++)
		free(s->mods[i].path);
	free(s->mods);
	if (s->dwfl)
		dwfl_end(s->dwfl);
	free(s);
}

/* SPDX-License-Identifier: MIT */
/*
 * shim/elf_got_surgery.c — GOT patching.  THIS IS THE ONE DANGEROUS FILE of
 * the shim: it rewrites other objects' function pointers in a live process.
 * Everything that writes into memory the shim does not own lives here and
 * nowhere else.  docs/design.md "Interposition"; shim.h "GOT patching".
 *
 * Why.  LD_PRELOAD interposes a symbol only where the dynamic linker binds
 * it.  Debian's and conda's python3 link libpython statically: the GIL entry
 * points (PyGILState_Ensure …) are defined in the executable, and heisen
 * must not export Py* symbols itself (a library probing dlsym(RTLD_DEFAULT,
 * "PyGILState_Ensure") would think Python is there).  So calls are rerouted
 * where they leave their caller: in the caller's GOT.
 *
 * What is patched.  In every loaded object, the slots of its R_X86_64_JUMP_SLOT
 * (DT_JMPREL, the PLT's GOT) and R_X86_64_GLOB_DAT (DT_RELA: -fno-plt calls
 * and address-taking) relocations whose symbol name is one of the hooks,
 * whether the object imports the symbol or binds to its own definition
 * through the PLT (a shared libpython built with semantic interposition).
 * A slot is written only when it can be remembered (address, original
 * value), and never when it already holds the replacement, so patching twice
 * is a no-op.  Objects are remembered by load base + PT_DYNAMIC address; a
 * later call handles only objects loaded since (a quick exit when glibc's
 * load/unload counters have not moved), and after an unload everything is
 * checked again so an object reloaded at the same address is patched anew.
 * An object that the dynamic linker has not finished relocating (another
 * thread is inside dlopen) is left for a later call: it is not yet known to
 * _dl_find_object, and writing before ld.so relocates it would be undone or,
 * for a lazy slot that ld.so adjusts by the load base, corrupted.
 *
 * What is never patched.  The dynamic linker (ld-linux*, AT_BASE), the vDSO
 * (AT_SYSINFO_EHDR) and libheisen.so itself (the object containing
 * hs_got_patch).  R_X86_64_64 data words (function pointers stored in
 * tables) are not touched: their value may already have been copied.  Calls
 * inside one object that do not go through its GOT (static libpython calling
 * PyGILState_Ensure within the executable) cannot be reached by this.
 *
 * Lazy binding.  An unresolved JUMP_SLOT points back into its PLT stub.
 * Once patched, the stub never runs for that slot (the PLT's indirect jump
 * goes straight to the replacement), so the patch sticks.  The replacement
 * must therefore find the real function elsewhere (python.c uses
 * dlsym(RTLD_DEFAULT, name)), never from the slot's old value.
 *
 * RELRO.  With -z relro (and -z now, where the whole GOT is inside it),
 * ld.so makes the pages of PT_GNU_RELRO read-only after relocating (the
 * range rounded down to pages at both ends, as ld.so does).  The protection
 * of a slot's page is known from the headers: read-only inside that range,
 * else its PT_LOAD's flags.  A non-writable page is made writable for the
 * one store and given its protection back; when mprotect fails the slot is
 * left alone and counted (hs_got_counts), never a crash.
 *
 * The undo.  hs_got_unpatch_all() puts back the original value of every
 * slot that still holds our replacement, in objects that are still loaded
 * (it walks dl_iterate_phdr again, so an unloaded object's memory is never
 * written), with the same mprotect dance; a restored lazy slot points at
 * its PLT stub again and resolves itself on its next call.
 *
 * Objects loaded later: why dlsym and not dlopen.  A dlopen wrapper would
 * call the real dlopen from inside libheisen, and glibc takes the caller's
 * return address to pick the DT_RUNPATH/$ORIGIN and the namespace of the
 * lookup: the program's dlopen would change meaning.  Every way to use a
 * newly loaded object goes through dlsym (CPython: dlopen, dlsym("PyInit_x"),
 * call; ctypes: dlopen, dlsym per function), so libheisen exports dlsym as
 * an assembly trampoline (dl_trampoline.S) that calls hs_dlsym_hook() and
 * then *jumps* to the real dlsym, leaving the caller's return address in
 * place, so dlsym(RTLD_NEXT, …) still means "after the caller".  The hook
 * runs python.c's hs_py_on_new_objects (or a test's hs_got_on_dlsym
 * callback), which patches the new objects before their first function is
 * handed out.  A dlsym made from inside the shim or the callback is not
 * hooked again.
 *
 * Locking.  Patch and unpatch run inside dl_iterate_phdr callbacks, so the
 * loader's lock is always taken first; the file's spin lock is taken inside
 * the first callback and dropped after dl_iterate_phdr returns.  A thread in
 * here has hs_tls.in_hook set, so a dlsym it makes is not hooked again.
 * Not async-signal-safe.
 */
#include <elf.h>
#include <link.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "shim.h"

/* The platform part: x86_64's relocation types and table format. */
#if defined(__x86_64__)
#define GOT_R_JUMP_SLOT R_X86_64_JUMP_SLOT
#define GOT_R_GLOB_DAT R_X86_64_GLOB_DAT
#define GOT_R_SYM ELF64_R_SYM
#define GOT_R_TYPE ELF64_R_TYPE
#else
#error "elf_got_surgery.c knows x86_64 relocations only"
#endif

#define GOT_SLOTS_MAX 8192u /* patched slots remembered (40 bytes each, touched as used) */
#define GOT_OBJS_MAX 8192u  /* objects remembered as done */

struct got_slot {
	void **addr;            /* the GOT slot */
	void *orig;             /* its value before we wrote */
	void *repl;             /* what we wrote */
	uintptr_t base, dyn;    /* the object it belongs to */
};

struct got_obj {
	uintptr_t base, dyn;    /* load base, PT_DYNAMIC address: the object's key */
	uint32_t stamp;         /* the last pass that saw it */
};

static struct {
	int lock;                       /* [atomic] spin lock over everything below */
	struct got_slot *slots;         /* mmap'd, GOT_SLOTS_MAX */
	struct got_obj *objs;           /* mmap'd, GOT_OBJS_MAX */
	unsigned nslots, nobjs;
	unsigned long long adds, subs;  /* glibc's load/unload counters at the last full pass */
	const struct hs_got_hook *hooks; /* the hook set of the last full pass */
	size_t nhooks;
	int valid;                      /* adds/subs/hooks describe a completed pass */
	int pending;                    /* the last pass left an object for later */
	uint32_t stamp;
	unsigned skipped;               /* slots left alone: mprotect failed or table full */
	unsigned deferred;              /* objects left for later (not yet relocated, table full) */
	int full_warned;
} got;

static void (*dlsym_callback)(void); /* [atomic] run by hs_dlsym_hook */
static void *real_dlsym;            /* [atomic] glibc's dlsym */

static int sys_mprotect(void *addr, size_t len, int prot)
{
	return hs_sys.mprotect(addr, len, prot);
}

int (*hs_got_mprotect)(void *addr, size_t len, int prot) = sys_mprotect;

/* ---- reading one object ------------------------------------------------------ */

/* What one object's dynamic section says, with every pointer checked to lie
 * inside the object's loaded segments. */
struct obj_view {
	const struct dl_phdr_info *info;
	const ElfW(Sym) *symtab;
	const char *strtab;
	size_t strsz;
	const ElfW(Rela) *jmprel;       /* NULL when absent or not RELA */
	size_t jmprelsz;
	const ElfW(Rela) *rela;
	size_t relasz;
	uintptr_t relro_lo, relro_hi;   /* page range ld.so made read-only; empty when none */
};

static size_t page_size(void)
{
	static size_t ps;
	if (!ps) {
		unsigned long v = getauxval(AT_PAGESZ);
		ps = v ? (size_t)v : 4096;
	}
	return ps;
}

/* The PT_LOAD of info holding [p, p + len), or NULL. */
static const ElfW(Phdr) *load_of(const struct dl_phdr_info *info, uintptr_t p, size_t len)
{
	for (unsigned i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
		if (ph->p_type == PT_LOAD && p >= lo && p - lo <= ph->p_memsz && len <= ph->p_memsz - (p - lo))
			return ph;
	}
	return NULL;
}

/*
 * A d_ptr of the dynamic section as an address.  glibc relocates DT_SYMTAB,
 * DT_STRTAB, DT_JMPREL and DT_RELA in place when the dynamic section is
 * writable (x86_64, the usual case); a read-only one (l_ld_readonly, glibc
 * 2.35+) keeps link-time values.  So: take the value if it lies in the
 * object, else the value plus the load base if that does, else NULL.  For
 * an object at base 0 (a non-PIE executable) the two are the same.
 */
static const void *dyn_addr(const struct dl_phdr_info *info, ElfW(Addr) v, size_t len)
{
	if (load_of(info, v, len))
		return (const void *)v;
	if (info->dlpi_addr && load_of(info, info->dlpi_addr + v, len))
		return (const void *)(info->dlpi_addr + v);
	return NULL;
}

/* Fill v from info's PT_DYNAMIC.  Returns 0, or -1 when the object has
 * nothing we can read (no dynamic section, no symbols). */
static int obj_read(const struct dl_phdr_info *info, const ElfW(Dyn) *dyn, struct obj_view *v)
{
	ElfW(Addr) symtab = 0, strtab = 0, jmprel = 0, rela = 0;
	ElfW(Xword) strsz = 0, pltrelsz = 0, relasz = 0, pltrel = 0;
	size_t ps = page_size();

	memset(v, 0, sizeof *v);
	v->info = info;
	for (const ElfW(Dyn) *d = dyn; d->d_tag != DT_NULL; d++) {
		switch (d->d_tag) {
		case DT_SYMTAB: symtab = d->d_un.d_ptr; break;
		case DT_STRTAB: strtab = d->d_un.d_ptr; break;
		case DT_STRSZ: strsz = d->d_un.d_val; break;
		case DT_JMPREL: jmprel = d->d_un.d_ptr; break;
		case DT_PLTRELSZ: pltrelsz = d->d_un.d_val; break;
		case DT_PLTREL: pltrel = d->d_un.d_val; break;
		case DT_RELA: rela = d->d_un.d_ptr; break;
		case DT_RELASZ: relasz = d->d_un.d_val; break;
		default: break;
		}
	}
	if (!symtab || !strtab || !strsz)
		return -1;
	v->symtab = dyn_addr(info, symtab, sizeof(ElfW(Sym)));
	v->strtab = dyn_addr(info, strtab, strsz);
	v->strsz = strsz;
	if (!v->symtab || !v->strtab)
		return -1;
	if (jmprel && pltrelsz && pltrel == DT_RELA && (v->jmprel = dyn_addr(info, jmprel, pltrelsz)) != NULL)
		v->jmprelsz = pltrelsz / sizeof(ElfW(Rela));
	if (rela && relasz && (v->rela = dyn_addr(info, rela, relasz)) != NULL)
		v->relasz = relasz / sizeof(ElfW(Rela));
	for (unsigned i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type == PT_GNU_RELRO) {
			/* as ld.so's _dl_protect_relro: both ends rounded down */
			v->relro_lo = (info->dlpi_addr + ph->p_vaddr) & ~(ps - 1);
			v->relro_hi = (info->dlpi_addr + ph->p_vaddr + ph->p_memsz) & ~(ps - 1);
		}
	}
	return 0;
}

/* The protection of the page holding slot, from the headers; -1 when the
 * slot is not in a writable or RELRO part of the object. */
static int slot_prot(const struct obj_view *v, uintptr_t slot)
{
	const ElfW(Phdr) *ph = load_of(v->info, slot, sizeof(void *));
	uintptr_t page = slot & ~(page_size() - 1);
	int in_relro = page >= v->relro_lo && page < v->relro_hi;
	if (!ph || (slot & (sizeof(void *) - 1)))
		return -1;
	if (in_relro)
		return PROT_READ;
	if (!(ph->p_flags & PF_W))
		return -1;
	return PROT_READ | PROT_WRITE | ((ph->p_flags & PF_X) ? PROT_EXEC : 0);
}

/* Store val into slot on a page of protection prot.  Returns 0, or -1 when
 * the page could not be made writable (the slot is unchanged). */
static int slot_write(void **slot, void *val, int prot)
{
	void *page = (void *)((uintptr_t)slot & ~(page_size() - 1));
	if (prot & PROT_WRITE) {
		/* an aligned word store: a concurrent call through the slot sees old or new */
		__atomic_store_n(slot, val, __ATOMIC_RELAXED);
		return 0;
	}
	if (hs_got_mprotect(page, page_size(), prot | PROT_WRITE) != 0)
		return -1;
	__atomic_store_n(slot, val, __ATOMIC_RELAXED);
	/* failing to re-protect leaves the page writable: worse hardening, same behaviour */
	(void)hs_got_mprotect(page, page_size(), prot);
	return 0;
}

/* ---- the tables ----------------------------------------------------------------- */

/* Map the tables on first use (under got.lock).  Returns 0 or -1 (nothing
 * is patched then; the next call tries again). */
static int tables_ready(void)
{
	void *s, *o;
	if (got.slots)
		return 0;
	s = hs_sys.mmap(NULL, GOT_SLOTS_MAX * sizeof(struct got_slot), PROT_READ | PROT_WRITE,
			MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (s == MAP_FAILED)
		return -1;
	o = hs_sys.mmap(NULL, GOT_OBJS_MAX * sizeof(struct got_obj), PROT_READ | PROT_WRITE,
			MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (o == MAP_FAILED) {
		hs_sys.munmap(s, GOT_SLOTS_MAX * sizeof(struct got_slot));
		return -1;
	}
	got.objs = o;
	/* the tables exist before unpatch (which reads this unlocked) sees them */
	__atomic_store_n(&got.slots, (struct got_slot *)s, __ATOMIC_RELEASE);
	return 0;
}

static struct got_obj *obj_find(uintptr_t base, uintptr_t dyn)
{
	for (unsigned i = 0; i < got.nobjs; i++)
		if (got.objs[i].base == base && got.objs[i].dyn == dyn)
			return &got.objs[i];
	return NULL;
}

static struct got_slot *slot_find(void **addr)
{
	for (unsigned i = 0; i < got.nslots; i++)
		if (got.slots[i].addr == addr)
			return &got.slots[i];
	return NULL;
}

static void warn_full(const char *what)
{
	if (got.full_warned || hs_quiet)
		return;
	got.full_warned = 1;
	hs_write_err("heisen: GOT patching: the ");
	hs_write_err(what);
	hs_write_err(" table is full; later objects are not patched\n");
}

/* Drop objects the last pass did not see (unloaded) and their slots. */
static void prune(uint32_t stamp)
{
	unsigned i, j;
	for (i = j = 0; i < got.nslots; i++) {
		struct got_obj *o = obj_find(got.slots[i].base, got.slots[i].dyn);
		if (o && o->stamp == stamp)
			got.slots[j++] = got.slots[i];
	}
	got.nslots = j;
	for (i = j = 0; i < got.nobjs; i++)
		if (got.objs[i].stamp == stamp)
			got.objs[j++] = got.objs[i];
	got.nobjs = j;
}

/* ---- one pass over the loaded objects ----------------------------------------- */

struct pass {
	const struct hs_got_hook *hooks;
	size_t n;
	int restore;        /* 1: hs_got_unpatch_all */
	int locked;         /* the first callback took got.lock */
	int full;           /* this pass visits every object (not the quick exit) */
	int rescan;         /* recheck objects already done (unload seen, hooks changed) */
	int pending;
	unsigned long long adds, subs;
	int counters;       /* adds/subs are known */
	uint32_t stamp;
	int patched;
};

/* 1 for the objects never patched: the dynamic linker, the vDSO, ourselves. */
static int never_patch(const struct dl_phdr_info *info)
{
	const char *name = info->dlpi_name ? info->dlpi_name : "";
	const char *slash = strrchr(name, '/');
	uintptr_t self = (uintptr_t)&hs_got_patch;
	uintptr_t ldso = (uintptr_t)getauxval(AT_BASE);
	uintptr_t vdso = (uintptr_t)getauxval(AT_SYSINFO_EHDR);

	if (ldso && info->dlpi_addr == ldso)
		return 1;
	if (strncmp(slash ? slash + 1 : name, "ld-linux", 8) == 0 || strstr(name, "linux-vdso") ||
	    strstr(name, "linux-gate"))
		return 1;
	/* the vDSO's program headers lie in its one-page-or-so image */
	if (vdso && (uintptr_t)info->dlpi_phdr - vdso < 0x10000)
		return 1;
	if (load_of(info, self, 1))
		return 1;
	return 0;
}

/* Patch (or, when restoring, look at) the relocations r[0..n) of v. */
static void patch_relocs(struct pass *p, const struct obj_view *v, const ElfW(Rela) *r, size_t n, uintptr_t dyn)
{
	uintptr_t base = v->info->dlpi_addr;
	for (size_t i = 0; i < n; i++) {
		unsigned type = (unsigned)GOT_R_TYPE(r[i].r_info);
		size_t sym = GOT_R_SYM(r[i].r_info);
		const ElfW(Sym) *s;
		const char *name;
		const struct hs_got_hook *h = NULL;
		void **slot;
		struct got_slot *rec;
		int prot;

		if ((type != GOT_R_JUMP_SLOT && type != GOT_R_GLOB_DAT) || sym == 0)
			continue;
		s = &v->symtab[sym];
		if (!load_of(v->info, (uintptr_t)s, sizeof *s) || s->st_name >= v->strsz)
			continue;
		name = v->strtab + s->st_name;
		for (size_t k = 0; k < p->n; k++)
			if (name[0] == p->hooks[k].name[0] && strcmp(name, p->hooks[k].name) == 0) {
				h = &p->hooks[k];
				break;
			}
		if (!h || !h->replacement)
			continue;
		slot = (void **)(base + r[i].r_offset);
		if ((prot = slot_prot(v, (uintptr_t)slot)) < 0)
			continue;
		if (__atomic_load_n(slot, __ATOMIC_RELAXED) == h->replacement)
			continue; /* done already: never remember our own value as the original */
		rec = slot_find(slot);
		if (!rec) {
			if (got.nslots >= GOT_SLOTS_MAX) {
				warn_full("slot");
				got.skipped++;
				continue; /* what cannot be undone is not done */
			}
			rec = &got.slots[got.nslots];
		}
		rec->addr = slot;
		rec->orig = __atomic_load_n(slot, __ATOMIC_RELAXED);
		rec->repl = h->replacement;
		rec->base = base;
		rec->dyn = dyn;
		if (slot_write(slot, h->replacement, prot) != 0) {
			got.skipped++;
			if (rec != &got.slots[got.nslots])
				*rec = got.slots[--got.nslots]; /* a stale record (reloaded object) goes */
			continue;
		}
		if (rec == &got.slots[got.nslots])
			got.nslots++;
		p->patched++;
	}
}

/* Put back every remembered slot of the object (base, dyn) that still holds
 * our value. */
static void restore_object(const struct obj_view *v, uintptr_t base, uintptr_t dyn)
{
	for (unsigned i = 0; i < got.nslots; i++) {
		struct got_slot *rec = &got.slots[i];
		int prot;
		if (rec->base != base || rec->dyn != dyn)
			continue;
		if (__atomic_load_n(rec->addr, __ATOMIC_RELAXED) != rec->repl)
			continue; /* someone else's since: theirs to keep */
		if ((prot = slot_prot(v, (uintptr_t)rec->addr)) < 0 || slot_write(rec->addr, rec->orig, prot) != 0)
			got.skipped++;
	}
}

/* 1 when ld.so has finished relocating the object whose dynamic section is
 * at dyn: _dl_find_object learns of a dlopen'ed object only after that. */
static int relocated(const struct dl_phdr_info *info, uintptr_t dyn)
{
	struct dl_find_object fo;
	if (_dl_find_object((void *)dyn, &fo) != 0 || !fo.dlfo_link_map)
		return 0;
	return fo.dlfo_link_map->l_addr == info->dlpi_addr;
}

static int pass_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct pass *p = arg;
	const ElfW(Dyn) *dyn = NULL;
	struct obj_view v;
	struct got_obj *o;

	if (!p->locked) {
		hs_spin_lock(&got.lock);
		p->locked = 1;
		p->stamp = got.stamp + 1;
		p->counters = size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs;
		if (p->counters) {
			p->adds = info->dlpi_adds;
			p->subs = info->dlpi_subs;
		}
		if (p->restore) {
			p->full = 1;
		} else if (tables_ready() != 0) {
			return 1; /* no memory for the undo records: patch nothing */
		} else {
			int same_hooks = got.valid && got.hooks == p->hooks && got.nhooks == p->n;
			if (same_hooks && p->counters && !got.pending && got.adds == p->adds && got.subs == p->subs)
				return 1; /* nothing loaded or unloaded since the last pass */
			p->full = 1;
			p->rescan = !same_hooks || !p->counters || got.subs != p->subs;
		}
	}

	for (unsigned i = 0; i < info->dlpi_phnum; i++)
		if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
			dyn = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
	if (!dyn || never_patch(info))
		return 0;

	o = obj_find(info->dlpi_addr, (uintptr_t)dyn);
	if (p->restore) {
		if (o && obj_read(info, dyn, &v) == 0)
			restore_object(&v, info->dlpi_addr, (uintptr_t)dyn);
		return 0;
	}
	if (o && !p->rescan) {
		o->stamp = p->stamp;
		return 0;
	}
	if (!relocated(info, (uintptr_t)dyn)) {
		p->pending = 1;
		got.deferred++;
		return 0;
	}
	if (!o) {
		if (got.nobjs >= GOT_OBJS_MAX) {
			warn_full("object");
			got.deferred++;
			return 0; /* not remembered, so not patched: the undo could not find it */
		}
		o = &got.objs[got.nobjs++];
		o->base = info->dlpi_addr;
		o->dyn = (uintptr_t)dyn;
	}
	o->stamp = p->stamp;
	if (obj_read(info, dyn, &v) != 0)
		return 0;
	if (v.jmprel)
		patch_relocs(p, &v, v.jmprel, v.jmprelsz, (uintptr_t)dyn);
	if (v.rela)
		patch_relocs(p, &v, v.rela, v.relasz, (uintptr_t)dyn);
	return 0;
}

/* ---- the API (shim.h) ---------------------------------------------------------------- */

int hs_got_patch(const struct hs_got_hook *hooks, size_t n)
{
	struct hs_tls *t = &hs_tls;
	int was = t->in_hook;
	struct pass p;

	if (!hooks || n == 0)
		return 0;
	memset(&p, 0, sizeof p);
	p.hooks = hooks;
	p.n = n;
	t->in_hook = 1;
	dl_iterate_phdr(pass_cb, &p);
	if (p.locked) {
		if (p.full) {
			if (p.rescan)
				prune(p.stamp);
			got.stamp = p.stamp;
			got.hooks = hooks;
			got.nhooks = n;
			got.adds = p.adds;
			got.subs = p.subs;
			got.pending = p.pending;
			got.valid = 1;
		}
		hs_spin_unlock(&got.lock);
	}
	t->in_hook = was;
	return p.patched;
}

void hs_got_unpatch_all(void)
{
	struct hs_tls *t = &hs_tls;
	int was = t->in_hook;
	struct pass p;

	if (!__atomic_load_n(&got.slots, __ATOMIC_ACQUIRE))
		return; /* never patched */
	memset(&p, 0, sizeof p);
	p.restore = 1;
	t->in_hook = 1;
	dl_iterate_phdr(pass_cb, &p);
	if (p.locked) {
		/* slots of objects no longer loaded are forgotten with the rest */
		got.nslots = 0;
		got.nobjs = 0;
		got.valid = 0;
		got.pending = 0;
		hs_spin_unlock(&got.lock);
	}
	t->in_hook = was;
}

void hs_got_counts(struct hs_got_counts *c)
{
	hs_spin_lock(&got.lock);
	c->slots = got.nslots;
	c->objects = got.nobjs;
	c->skipped = got.skipped;
	c->deferred = got.deferred;
	hs_spin_unlock(&got.lock);
}

/* ---- the dlsym trampoline's C half (dl_trampoline.S) ---------------------------- */

/* The shim's own callback, python.c's, when it is linked in: weak, so that
 * a test copy of this file needs none. */
extern void hs_py_on_new_objects(void) __attribute__((weak));

/* This thread is running the callback: a dlsym it makes is not hooked again. */
static __thread int in_dlsym_hook;

void hs_got_on_dlsym(void (*cb)(void))
{
	__atomic_store_n(&dlsym_callback, cb, __ATOMIC_RELEASE);
}

/* ---- glibc's dlsym and dlvsym, found without asking dlsym ------------------------ */

/*
 * libheisen exports dlsym and dlvsym itself, so any call to either, even
 * the shim's own, comes back to a trampoline; the real ones are looked up
 * once in libc's dynamic symbol table (the object that holds __libc_free),
 * read with obj_read: through its GNU hash table (gnu_hash_find), else by
 * a scan of the whole symbol table, whose length is the distance to the
 * string table (binutils lays .dynsym right before .dynstr); every version
 * of these two names is the same function in glibc 2.34+, so the first
 * defined match is taken.
 */
extern void __libc_free(void *);

struct libc_find {
	void *dlsym, *dlvsym;
};

/* A defined function named name, as libc_find_cb takes it. */
static int defined_func(const struct obj_view *v, const ElfW(Sym) *sym, const char *name)
{
	return sym->st_shndx != SHN_UNDEF && ELF64_ST_TYPE(sym->st_info) == STT_FUNC && sym->st_name < v->strsz &&
	       strcmp(v->strtab + sym->st_name, name) == 0;
}

/*
 * name's first defined function symbol in v through the object's GNU hash
 * table (DT_GNU_HASH, at gnu_hash), as ld.so looks a name up: the bloom
 * filter is skipped, the bucket of hash % nbuckets gives the first symbol
 * of the chain, a chain entry whose hash (low bit cleared) matches is
 * compared by name, the entry with the low bit set ends the chain.  The
 * layout is the GNU toolchain's (binutils' and glibc's dl-lookup.c).  NULL
 * when not found or the table does not lie in the object.
 */
static const ElfW(Sym) *gnu_hash_find(const struct dl_phdr_info *info, const struct obj_view *v, uintptr_t gnu_hash,
				      const char *name)
{
	const uint32_t *w = dyn_addr(info, gnu_hash, 16);
	uint32_t h = 5381, nbuckets, symoffset, bloom_size, sym;
	const uint32_t *buckets, *chain;
	if (!w)
		return NULL;
	for (const unsigned char *c = (const unsigned char *)name; *c; c++)
		h = h * 33 + *c;
	nbuckets = w[0];
	symoffset = w[1];
	bloom_size = w[2];
	if (!nbuckets)
		return NULL;
	buckets = (const uint32_t *)(const void *)((const char *)(w + 4) + (size_t)bloom_size * sizeof(ElfW(Addr)));
	chain = buckets + nbuckets;
	if (!load_of(info, (uintptr_t)buckets, (size_t)nbuckets * 4))
		return NULL;
	sym = buckets[h % nbuckets];
	if (sym < symoffset)
		return NULL;
	for (;; sym++) {
		uint32_t ch;
		if (!load_of(info, (uintptr_t)&chain[sym - symoffset], 4))
			return NULL;
		ch = chain[sym - symoffset];
		if ((ch | 1) == (h | 1) && defined_func(v, &v->symtab[sym], name))
			return &v->symtab[sym];
		if (ch & 1)
			return NULL;
	}
}

/* hs_elf_may_define's walk: the name looked for and the answer so far. */
struct may_define {
	const char *name;
	uint32_t hash; /* name's GNU hash (h = h * 33 + c from 5381) */
	int maybe;     /* an object defines it, or cannot be searched without a lookup */
};

static int may_define_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct may_define *m = arg;
	struct obj_view v;
	const ElfW(Dyn) *dyn = NULL;
	const uint32_t *w;
	const ElfW(Addr) *bloom;
	uintptr_t gnu_hash = 0;
	(void)size;
	for (unsigned i = 0; i < info->dlpi_phnum; i++)
		if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
			dyn = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
	if (!dyn)
		return 0; /* a static executable's own image: nothing it exports */
	for (const ElfW(Dyn) *d = dyn; d->d_tag != DT_NULL; d++)
		if (d->d_tag == DT_GNU_HASH)
			gnu_hash = d->d_un.d_ptr;
	/* the table's Bloom filter first, as ld.so's lookup does: it turns away
	   nearly every name with one word (the whole walk was ~17,000
	   instructions an image with obj_read and the chain for each object) */
	if (gnu_hash && (w = dyn_addr(info, gnu_hash, 16)) != NULL && w[2] != 0 &&
	    (bloom = dyn_addr(info, (uintptr_t)(w + 4), (size_t)w[2] * sizeof(ElfW(Addr)))) != NULL) {
		ElfW(Addr) word = bloom[(m->hash / (8 * sizeof word)) % w[2]];
		ElfW(Addr) bits = ((ElfW(Addr))1 << (m->hash % (8 * sizeof word))) |
				  ((ElfW(Addr))1 << ((m->hash >> w[3]) % (8 * sizeof word)));
		if ((word & bits) != bits)
			return 0;
	}
	/* no GNU hash table, or one we cannot read: only dlsym can say */
	if (!gnu_hash || obj_read(info, dyn, &v) != 0 || !dyn_addr(info, gnu_hash, 16) ||
	    gnu_hash_find(info, &v, gnu_hash, m->name)) {
		m->maybe = 1;
		return 1;
	}
	return 0;
}

/*
 * 0 when no loaded object defines a function `name` (each one's GNU hash
 * table, as gnu_hash_find reads it, says so), 1 when one does or an object
 * has no table we can read.  Lets a caller skip a dlsym that would fail: a
 * failed dlsym formats its error message with malloc, and in a process
 * that never allocates (most short commands) that first malloc sets up
 * glibc's heap (getrandom, two brk) and the heap checker's, ~10 page faults
 * (bench/README.md "Process start: fewer pages, fewer lookups").  Every
 * loaded object is asked, not only RTLD_DEFAULT's scope, so 1 never means
 * dlsym will succeed.  Takes the loader's lock (dl_iterate_phdr): not
 * async-signal-safe.
 */
int hs_elf_may_define(const char *name)
{
	struct may_define m = {name, 5381, 0};
	for (const unsigned char *c = (const unsigned char *)name; *c; c++)
		m.hash = m.hash * 33 + *c;
	dl_iterate_phdr(may_define_cb, &m);
	return m.maybe;
}

/* ---- RTLD_NEXT for libheisen's hooks, from the hash tables ---------------------- */

/* hs_elf_next_funcs's walk: the names, the answers, where the walk is. */
struct next_funcs {
	const char *const *names;
	void **out;
	uint32_t *hash;          /* each name's GNU hash */
	unsigned char *undecided; /* 1: an object before libc may define it, or libc's symbol is not plain */
	size_t n;
	uintptr_t self;          /* an address inside libheisen */
	int after_self;          /* the walk has passed libheisen */
};

/* One object's GNU hash table, read once for all the names (next_funcs_cb). */
struct gnu_table {
	const ElfW(Addr) *bloom;  /* NULL: no filter (every name may be there) */
	uint32_t bloom_size, shift, nbuckets, symoffset;
	const uint32_t *buckets, *chain;
	uintptr_t chain_end;      /* the end of the PT_LOAD holding the chain: no chain entry at or past it */
	uintptr_t sym_end;        /* likewise for the symbol table */
	const ElfW(Half) *versym; /* NULL: unversioned object */
};

/* t from the GNU hash table at gnu_hash of the object v reads: 0, or -1
 * when a part of it does not lie in the object. */
static int gnu_table_read(const struct dl_phdr_info *info, const struct obj_view *v, uintptr_t gnu_hash, uintptr_t vs,
			  struct gnu_table *t)
{
	const uint32_t *w = dyn_addr(info, gnu_hash, 16);
	const ElfW(Phdr) *ph;
	if (!w || !w[0])
		return -1;
	t->nbuckets = w[0];
	t->symoffset = w[1];
	t->bloom_size = w[2];
	t->shift = w[3];
	t->bloom = t->bloom_size ? dyn_addr(info, (uintptr_t)(w + 4), (size_t)t->bloom_size * sizeof(ElfW(Addr))) : NULL;
	t->buckets = (const uint32_t *)(const void *)((const char *)(w + 4) + (size_t)t->bloom_size * sizeof(ElfW(Addr)));
	t->chain = t->buckets + t->nbuckets;
	if ((t->bloom_size && !t->bloom) || !load_of(info, (uintptr_t)t->buckets, (size_t)t->nbuckets * 4) ||
	    (ph = load_of(info, (uintptr_t)t->chain, 0)) == NULL)
		return -1;
	t->chain_end = info->dlpi_addr + ph->p_vaddr + ph->p_memsz;
	if ((ph = load_of(info, (uintptr_t)v->symtab, sizeof(ElfW(Sym)))) == NULL)
		return -1;
	t->sym_end = info->dlpi_addr + ph->p_vaddr + ph->p_memsz;
	t->versym = vs ? dyn_addr(info, vs, sizeof *t->versym) : NULL;
	return 0;
}

/*
 * name's (GNU hash h) default definition in the object of v and t, as an
 * unversioned dlsym takes it: among the defined symbols of that name in
 * its hash chain, the one whose version is not hidden (VERSYM bit 15
 * clear: "name@@VERSION", or unversioned).  The table is walked as ld.so
 * walks it (glibc's dl-lookup.c, binutils' layout): the Bloom filter
 * first, the bucket of h % nbuckets gives the chain's first symbol, an
 * entry whose hash (low bit cleared) matches is compared by name, the
 * entry with the low bit set ends the chain.  *plain 0 when the answer
 * needs ld.so's own rules (an IFUNC, whose resolver must run; data; only
 * hidden versions; a chain that leaves the object): the caller asks
 * dlsym.  NULL when the object defines no such symbol.
 */
static const ElfW(Sym) *default_func(const struct obj_view *v, const struct gnu_table *t, const char *name, uint32_t h,
				     int *plain)
{
	const ElfW(Sym) *found = NULL;
	uint32_t sym;
	int named = 0;
	*plain = 1;
	if (t->bloom) {
		ElfW(Addr) word = t->bloom[(h / (8 * sizeof word)) % t->bloom_size];
		ElfW(Addr) bits = ((ElfW(Addr))1 << (h % (8 * sizeof word))) |
				  ((ElfW(Addr))1 << ((h >> t->shift) % (8 * sizeof word)));
		if ((word & bits) != bits)
			return NULL;
	}
	sym = t->buckets[h % t->nbuckets];
	if (sym < t->symoffset)
		return NULL;
	for (;; sym++) {
		const ElfW(Sym) *s = &v->symtab[sym];
		uint32_t ch;
		if ((uintptr_t)&t->chain[sym - t->symoffset] + 4 > t->chain_end || (uintptr_t)(s + 1) > t->sym_end) {
			*plain = 0;
			return NULL;
		}
		ch = t->chain[sym - t->symoffset];
		if ((ch | 1) == (h | 1) && s->st_shndx != SHN_UNDEF && s->st_name < v->strsz &&
		    strcmp(v->strtab + s->st_name, name) == 0) {
			named = 1;
			if (ELF64_ST_TYPE(s->st_info) != STT_FUNC)
				*plain = 0; /* an IFUNC or data: ld.so's answer */
			else if (!found && (!t->versym || !(t->versym[sym] & 0x8000)))
				found = s;
		}
		if (ch & 1)
			break;
	}
	if (named && !found)
		*plain = 0; /* hidden versions only: dlsym's own choice */
	return *plain ? found : NULL;
}

static int next_funcs_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct next_funcs *nf = arg;
	const ElfW(Dyn) *dyn = NULL;
	uintptr_t gnu_hash = 0, vs = 0;
	struct gnu_table t;
	struct obj_view v;
	int is_libc;
	(void)size;
	if (!nf->after_self) {
		nf->after_self = load_of(info, nf->self, 1) != NULL;
		return 0;
	}
	is_libc = load_of(info, (uintptr_t)&__libc_free, 1) != NULL;
	for (unsigned i = 0; i < info->dlpi_phnum; i++)
		if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
			dyn = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
	if (dyn)
		for (const ElfW(Dyn) *d = dyn; d->d_tag != DT_NULL; d++) {
			if (d->d_tag == DT_GNU_HASH)
				gnu_hash = d->d_un.d_ptr;
			else if (d->d_tag == DT_VERSYM)
				vs = d->d_un.d_ptr;
		}
	if (!dyn || !gnu_hash || obj_read(info, dyn, &v) != 0 || gnu_table_read(info, &v, gnu_hash, vs, &t) != 0) {
		/* an object we cannot search: every name not answered yet goes to dlsym */
		for (size_t i = 0; i < nf->n; i++)
			nf->undecided[i] = 1;
		return 1;
	}
	for (size_t i = 0; i < nf->n; i++) {
		const ElfW(Sym) *s;
		int plain;
		if (nf->out[i] || nf->undecided[i])
			continue;
		s = default_func(&v, &t, nf->names[i], nf->hash[i], &plain);
		if (is_libc && s && plain)
			nf->out[i] = (void *)(info->dlpi_addr + s->st_value);
		else if (s || !plain)
			nf->undecided[i] = 1; /* an object before libc defines it, or not plainly: dlsym decides */
	}
	return is_libc; /* past libc the answers are dlsym's (RTLD_LOCAL objects, ld.so) */
}

void hs_elf_next_funcs(const char *const *names, void **out, size_t n)
{
	uint32_t hash[HS_NEXT_FUNCS_MAX];
	unsigned char undecided[HS_NEXT_FUNCS_MAX];
	struct next_funcs nf = {names, out, hash, undecided, n, (uintptr_t)&hs_elf_next_funcs, 0};
	for (size_t i = 0; i < n; i++)
		out[i] = NULL;
	if (n > HS_NEXT_FUNCS_MAX)
		return;
	for (size_t i = 0; i < n; i++) {
		hash[i] = 5381;
		for (const unsigned char *c = (const unsigned char *)names[i]; *c; c++)
			hash[i] = hash[i] * 33 + *c;
		undecided[i] = 0;
	}
	dl_iterate_phdr(next_funcs_cb, &nf);
	if (!nf.after_self)
		for (size_t i = 0; i < n; i++)
			out[i] = NULL;
}

static int libc_find_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct libc_find *out = arg;
	struct obj_view v;
	const ElfW(Dyn) *dyn = NULL;
	uintptr_t probe = (uintptr_t)&__libc_free, gnu_hash = 0;
	size_t n;
	(void)size;
	if (!load_of(info, probe, 1))
		return 0;
	for (unsigned i = 0; i < info->dlpi_phnum; i++)
		if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
			dyn = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
	if (!dyn || obj_read(info, dyn, &v) != 0 || (uintptr_t)v.strtab <= (uintptr_t)v.symtab)
		return 1;
	/* the hash table first: a scan reads all of libc's ~3,000 symbols and
	   their names (~200,000 instructions and a dozen pages at every start) */
	for (const ElfW(Dyn) *d = dyn; d->d_tag != DT_NULL; d++)
		if (d->d_tag == DT_GNU_HASH)
			gnu_hash = d->d_un.d_ptr;
	if (gnu_hash) {
		const ElfW(Sym) *a = gnu_hash_find(info, &v, gnu_hash, "dlsym");
		const ElfW(Sym) *b = gnu_hash_find(info, &v, gnu_hash, "dlvsym");
		if (a && b) {
			out->dlsym = (void *)(info->dlpi_addr + a->st_value);
			out->dlvsym = (void *)(info->dlpi_addr + b->st_value);
			return 1;
		}
	}
	n = ((uintptr_t)v.strtab - (uintptr_t)v.symtab) / sizeof(ElfW(Sym));
	for (size_t i = 1; i < n; i++) {
		const ElfW(Sym) *sym = &v.symtab[i];
		const char *name;
		if (sym->st_shndx == SHN_UNDEF || ELF64_ST_TYPE(sym->st_info) != STT_FUNC || sym->st_name >= v.strsz)
			continue;
		name = v.strtab + sym->st_name;
		if (!out->dlsym && strcmp(name, "dlsym") == 0)
			out->dlsym = (void *)(info->dlpi_addr + sym->st_value);
		else if (!out->dlvsym && strcmp(name, "dlvsym") == 0)
			out->dlvsym = (void *)(info->dlpi_addr + sym->st_value);
	}
	return 1;
}

static void *real_dlvsym;           /* [atomic] glibc's dlvsym */

/* Resolve both once; aborts loudly when libc has neither (never on glibc 2.34+). */
static void resolve_real_dl(void)
{
	struct libc_find f = {NULL, NULL};
	if (__atomic_load_n(&real_dlsym, __ATOMIC_ACQUIRE) && __atomic_load_n(&real_dlvsym, __ATOMIC_ACQUIRE))
		return;
	dl_iterate_phdr(libc_find_cb, &f);
	if (!f.dlsym || !f.dlvsym) {
		hs_write_err("heisen: cannot find glibc's dlsym and dlvsym; aborting\n");
		abort();
	}
	/* any thread finds the same values: racing stores are harmless */
	__atomic_store_n(&real_dlsym, f.dlsym, __ATOMIC_RELEASE);
	__atomic_store_n(&real_dlvsym, f.dlvsym, __ATOMIC_RELEASE);
}

/* ---- the interposed functions, for lookups through a handle ---------------------- */

/*
 * Every function libheisen exports as a hook: hooks.def's HS_HOOK, HS_HOOK_V
 * and HS_HOOK_OWN entries (the last reach glibc without a hs_real_ pointer:
 * heap_hooks.c, memhooks.c, the dlsym wrappers).  For each, `real` is what dlsym(RTLD_NEXT, name) gives
 * libheisen — the function the hook wraps — and `hook` heisen's own
 * definition (looked up in libheisen's handle, so another preloaded
 * library's definition of the name never counts as ours).
 */
static const char *const interposed_names[] = {
#define HS_HOOK(ret, name, params) #name,
#define HS_HOOK_V(ret, name, params, version) #name,
#define HS_HOOK_OWN(ret, name, params) #name,
#include "hooks.def"
#undef HS_HOOK
#undef HS_HOOK_V
#undef HS_HOOK_OWN
};
#define N_INTERPOSED (sizeof interposed_names / sizeof interposed_names[0])

static struct {
	void *real, *hook;
} interposed[N_INTERPOSED];
static unsigned n_interposed;
static int interposed_state;        /* [atomic] 0 = not built, 1 = building, 2 = built */

/* Build the table once (the first lookup through a handle); with the thread's guard held. */
static void interposed_build(void)
{
	void *(*dls)(void *, const char *) = (void *(*)(void *, const char *))real_dlsym;
	Dl_info di;
	void *self;
	int expect = 0, was = hs_tls.in_hook;
	unsigned n = 0;
	if (!__atomic_compare_exchange_n(&interposed_state, &expect, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		return; /* built, or another thread builds it: that lookup goes unmapped */
	hs_tls.in_hook = 1; /* dlopen's own allocations are not the program's */
	if (dladdr((void *)&hs_dlsym_hook, &di) && di.dli_fname &&
	    (self = dlopen(di.dli_fname, RTLD_LAZY | RTLD_NOLOAD)) != NULL) {
		for (size_t i = 0; i < N_INTERPOSED; i++) {
			/* RTLD_NEXT from here: the definition after libheisen, the one its hook wraps */
			void *real = dls(RTLD_NEXT, interposed_names[i]);
			void *hook = dls(self, interposed_names[i]);
			if (real && hook && real != hook) {
				interposed[n].real = real;
				interposed[n].hook = hook;
				n++;
			}
		}
		dlclose(self);
	}
	hs_tls.in_hook = was;
	n_interposed = n;
	/* release: the table is complete before a reader sees state 2 */
	__atomic_store_n(&interposed_state, 2, __ATOMIC_RELEASE);
}

/* heisen's hook when p is the original of an interposed function, else p. */
static void *interposed_hook_for(void *p)
{
	if (!p || __atomic_load_n(&interposed_state, __ATOMIC_ACQUIRE) != 2)
		return p;
	for (unsigned i = 0; i < n_interposed; i++)
		if (interposed[i].real == p)
			return interposed[i].hook;
	return p;
}

/* ---- the trampolines' C half ------------------------------------------------------- */

/* The callback (objects loaded since the last look) for a dlsym or dlvsym
 * the program made; 0 when the thread is inside the shim or exiting. */
static int program_lookup(void)
{
	struct hs_tls *t = &hs_tls;
	void (*cb)(void);
	if (t->in_hook || t->dead || in_dlsym_hook)
		return 0;
	cb = __atomic_load_n(&dlsym_callback, __ATOMIC_ACQUIRE);
	if (!cb)
		cb = hs_py_on_new_objects;
	if (cb) {
		in_dlsym_hook = 1;
		cb();
		in_dlsym_hook = 0;
	}
	return 1;
}

/* A lookup through an explicit handle: made here, the result mapped to
 * heisen's hook when it is the original of an interposed function. */
static int through_handle(const void *handle)
{
	return handle != RTLD_DEFAULT && handle != RTLD_NEXT;
}

HS_HIDDEN struct hs_dl_answer hs_dlsym_hook(void *handle, const char *name)
{
	struct hs_dl_answer a = {NULL, NULL};
	void *(*dls)(void *, const char *);
	resolve_real_dl();
	dls = (void *(*)(void *, const char *))__atomic_load_n(&real_dlsym, __ATOMIC_ACQUIRE);
	a.jump = (void *)dls;
	if (!program_lookup() || !through_handle(handle))
		return a;
	in_dlsym_hook = 1;
	if (__atomic_load_n(&interposed_state, __ATOMIC_ACQUIRE) == 0)
		interposed_build();
	a.value = interposed_hook_for(dls(handle, name));
	in_dlsym_hook = 0;
	a.jump = NULL;
	return a;
}

HS_HIDDEN struct hs_dl_answer hs_dlvsym_hook(void *handle, const char *name, const char *version)
{
	struct hs_dl_answer a = {NULL, NULL};
	void *(*dlv)(void *, const char *, const char *);
	resolve_real_dl();
	dlv = (void *(*)(void *, const char *, const char *))__atomic_load_n(&real_dlvsym, __ATOMIC_ACQUIRE);
	a.jump = (void *)dlv;
	if (!program_lookup() || !through_handle(handle))
		return a;
	in_dlsym_hook = 1;
	if (__atomic_load_n(&interposed_state, __ATOMIC_ACQUIRE) == 0)
		interposed_build();
	a.value = interposed_hook_for(dlv(handle, name, version));
	in_dlsym_hook = 0;
	a.jump = NULL;
	return a;
}

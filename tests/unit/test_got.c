/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_got.c — GOT patching (shim/elf_got_surgery.c) and the
 * dlsym trampoline (shim/dl_trampoline.S), through libgotshim.so, a test
 * copy of both with their API exported.  This executable defines and
 * exports hs_test_target and hs_test_addr_target; libgotuser_now.so
 * (-z now -z relro: a read-only GOT) and libgotuser_lazy.so (lazy binding)
 * import them (got_user.c says which relocation each gets), and two more
 * copies are dlopen'ed later (argv[1], argv[2]).  It checks, reading the GOTs with
 * its own small ELF walker: calls reach the real function before patching
 * and the replacement after; JUMP_SLOT and GLOB_DAT both; a RELRO page is
 * read-only again afterwards; patching twice patches nothing; objects loaded
 * later are patched by the next call and by the dlsym hook; an object
 * unloaded and reloaded at the same address is patched again; ld.so and
 * the patcher's own object are never touched; a failing mprotect skips the
 * slot; the undo restores everything (a lazy slot to its PLT stub); and the
 * trampoline keeps dlsym(RTLD_NEXT, …) relative to the real caller.
 */
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "unit.h"

/* ---- what the program and its libraries export ------------------------------- */

int hs_test_target(int x);
int hs_test_addr_target(int x);
int gotuser_now_call(int x);
int gotuser_now_call_addr(int x);
void *gotuser_now_addr(void);
int gotuser_lazy_call(int x);
int gotuser_lazy_call_addr(int x);
void *gotuser_lazy_addr(void);
int gotshim_call(int x);
void *gotnext_lookup(void);
int gotnext_b_tag(void);

__attribute__((noinline, visibility("default"))) int hs_test_target(int x)
{
	__asm__ volatile("" ::: "memory");
	return x + 1;
}

__attribute__((noinline, visibility("default"))) int hs_test_addr_target(int x)
{
	__asm__ volatile("" ::: "memory");
	return x + 2;
}

static int repl_target(int x)
{
	return x + 1000;
}

static int repl_addr_target(int x)
{
	return x + 2000;
}

static int repl_strverscmp(const char *a, const char *b)
{
	(void)a;
	(void)b;
	return 4242;
}

/* Stands in for ld.so's _dl_catch_error should it ever be patched (it must
 * not be): forwards to the original, so a wrong patch fails the check, not
 * the process. */
typedef int (*catch_fn)(void *, void *, void *, void *, void *);
static catch_fn ldso_catch_orig;
static int repl_dl_catch_error(void *a, void *b, void *c, void *d, void *e)
{
	return ldso_catch_orig(a, b, c, d, e);
}

static struct hs_got_hook hooks[] = {
	{"hs_test_target", (void *)repl_target},
	{"hs_test_addr_target", (void *)repl_addr_target},
	{"strverscmp", (void *)repl_strverscmp},
	{"_dl_catch_error", (void *)repl_dl_catch_error},
};
#define NHOOKS (sizeof hooks / sizeof hooks[0])

/* ---- an ELF walker of our own, to read GOT slots ---------------------------- */

struct find {
	const char *obj;        /* substring of the path; "" for the executable */
	const char *sym;
	unsigned type;
	void **slot;
	uintptr_t lo, hi;       /* the object's loaded range */
	int seen_first;
};

static void obj_range(const struct dl_phdr_info *info, uintptr_t *lo, uintptr_t *hi)
{
	*lo = UINTPTR_MAX;
	*hi = 0;
	for (unsigned i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_LOAD)
			continue;
		if (info->dlpi_addr + ph->p_vaddr < *lo)
			*lo = info->dlpi_addr + ph->p_vaddr;
		if (info->dlpi_addr + ph->p_vaddr + ph->p_memsz > *hi)
			*hi = info->dlpi_addr + ph->p_vaddr + ph->p_memsz;
	}
}

static uintptr_t fix(uintptr_t v, uintptr_t base, uintptr_t lo, uintptr_t hi)
{
	return v >= lo && v < hi ? v : base + v;
}

static int find_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct find *f = arg;
	const char *name = info->dlpi_name ? info->dlpi_name : "";
	int first = !f->seen_first;
	const ElfW(Dyn) *dyn = NULL;
	uintptr_t lo, hi, symtab = 0, strtab = 0, jmprel = 0, rela = 0;
	size_t pltrelsz = 0, relasz = 0;
	(void)size;
	f->seen_first = 1;
	if (f->obj[0] ? !strstr(name, f->obj) : !first)
		return 0;
	obj_range(info, &lo, &hi);
	for (unsigned i = 0; i < info->dlpi_phnum; i++)
		if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
			dyn = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
	if (!dyn)
		return 0;
	for (; dyn->d_tag != DT_NULL; dyn++) {
		switch (dyn->d_tag) {
		case DT_SYMTAB: symtab = fix(dyn->d_un.d_ptr, info->dlpi_addr, lo, hi); break;
		case DT_STRTAB: strtab = fix(dyn->d_un.d_ptr, info->dlpi_addr, lo, hi); break;
		case DT_JMPREL: jmprel = fix(dyn->d_un.d_ptr, info->dlpi_addr, lo, hi); break;
		case DT_RELA: rela = fix(dyn->d_un.d_ptr, info->dlpi_addr, lo, hi); break;
		case DT_PLTRELSZ: pltrelsz = dyn->d_un.d_val; break;
		case DT_RELASZ: relasz = dyn->d_un.d_val; break;
		default: break;
		}
	}
	for (int t = 0; t < 2; t++) {
		const ElfW(Rela) *r = (const ElfW(Rela) *)(t ? rela : jmprel);
		size_t n = (t ? relasz : pltrelsz) / sizeof *r;
		for (size_t i = 0; r && i < n; i++) {
			const ElfW(Sym) *s = (const ElfW(Sym) *)symtab + ELF64_R_SYM(r[i].r_info);
			if (ELF64_R_TYPE(r[i].r_info) == f->type && ELF64_R_SYM(r[i].r_info) &&
			    strcmp((const char *)strtab + s->st_name, f->sym) == 0) {
				f->slot = (void **)(info->dlpi_addr + r[i].r_offset);
				f->lo = lo;
				f->hi = hi;
				return 1;
			}
		}
	}
	return 0;
}

static void **find_slot(const char *obj, const char *sym, unsigned type, uintptr_t *lo, uintptr_t *hi)
{
	struct find f = {obj, sym, type, NULL, 0, 0, 0};
	dl_iterate_phdr(find_cb, &f);
	if (lo)
		*lo = f.lo;
	if (hi)
		*hi = f.hi;
	return f.slot;
}

/* Print, per object, whether ld.so relocated DT_SYMTAB in place (the glibc
 * convention elf_got_surgery.c relies on, with a fallback). */
static int conv_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	uintptr_t lo, hi;
	(void)size;
	(void)arg;
	obj_range(info, &lo, &hi);
	for (unsigned i = 0; i < info->dlpi_phnum; i++) {
		if (info->dlpi_phdr[i].p_type != PT_DYNAMIC)
			continue;
		for (const ElfW(Dyn) *d = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
		     d->d_tag != DT_NULL; d++)
			if (d->d_tag == DT_SYMTAB)
				printf("  DT_SYMTAB %-11s base %#14lx  %s\n",
				       d->d_un.d_ptr >= lo && d->d_un.d_ptr < hi ? "absolute" : "offset",
				       (unsigned long)info->dlpi_addr,
				       info->dlpi_name && info->dlpi_name[0] ? info->dlpi_name : "(executable)");
	}
	return 0;
}

/* The permissions column of /proc/self/maps for addr ("r--p"…), "" if none. */
static const char *perms(const void *addr)
{
	static char out[8];
	char line[512];
	FILE *f = fopen("/proc/self/maps", "r");
	out[0] = '\0';
	if (!f)
		return out;
	while (fgets(line, sizeof line, f)) {
		unsigned long lo, hi;
		char p[8];
		if (sscanf(line, "%lx-%lx %7s", &lo, &hi, p) == 3 && (uintptr_t)addr >= lo && (uintptr_t)addr < hi) {
			snprintf(out, sizeof out, "%s", p);
			break;
		}
	}
	fclose(f);
	return out;
}

static int in(void *p, uintptr_t lo, uintptr_t hi)
{
	return (uintptr_t)p >= lo && (uintptr_t)p < hi;
}

/* ---- the dlsym hook's callback ---------------------------------------------- */

static int cb_calls, cb_depth, cb_max_depth, cb_patched;

static void on_dlsym(void)
{
	if (++cb_depth > cb_max_depth)
		cb_max_depth = cb_depth;
	__atomic_add_fetch(&cb_calls, 1, __ATOMIC_RELAXED);
	__atomic_add_fetch(&cb_patched, hs_got_patch(hooks, NHOOKS), __ATOMIC_RELAXED);
	/* a dlsym made by the callback is not hooked again */
	(void)dlsym(RTLD_DEFAULT, "hs_test_target");
	cb_depth--;
}

static int fail_mprotect(void *addr, size_t len, int prot)
{
	(void)addr;
	(void)len;
	(void)prot;
	errno = EACCES;
	return -1;
}

static volatile int stop;

static void *dlsym_loop(void *arg)
{
	int bad = 0;
	(void)arg;
	while (!stop) {
		int (*f)(int) = (int (*)(int))dlsym(RTLD_DEFAULT, "gotuser_now_call");
		if (!f || f(1) != 1001)
			bad++;
	}
	return (void *)(intptr_t)bad;
}

int main(int argc, char **argv)
{
	const char *late_path, *tramp_path;
	void **now_js, **now_gd, **lazy_js, **lazy_gd, **exe_sv, **shim_js, **ldso_js;
	uintptr_t lazy_lo, lazy_hi;
	struct hs_got_counts c0, c;
	int lazy = getenv("LD_BIND_NOW") == NULL || !getenv("LD_BIND_NOW")[0];
	int n;

	if (argc < 3) {
		fprintf(stderr, "usage: test_got LIBGOTUSER_LATE LIBGOTUSER_TRAMP\n");
		return 2;
	}
	late_path = argv[1];
	tramp_path = argv[2];
	printf("dynamic-section pointers as ld.so left them:\n");
	dl_iterate_phdr(conv_cb, NULL);

	/* before: every slot found, calls reach the real function */
	now_js = find_slot("libgotuser_now", "hs_test_target", R_X86_64_JUMP_SLOT, NULL, NULL);
	now_gd = find_slot("libgotuser_now", "hs_test_addr_target", R_X86_64_GLOB_DAT, NULL, NULL);
	lazy_js = find_slot("libgotuser_lazy", "hs_test_target", R_X86_64_JUMP_SLOT, &lazy_lo, &lazy_hi);
	lazy_gd = find_slot("libgotuser_lazy", "hs_test_addr_target", R_X86_64_GLOB_DAT, NULL, NULL);
	exe_sv = find_slot("", "strverscmp", R_X86_64_JUMP_SLOT, NULL, NULL);
	shim_js = find_slot("libgotshim", "hs_test_target", R_X86_64_JUMP_SLOT, NULL, NULL);
	ldso_js = find_slot("ld-linux", "_dl_catch_error", R_X86_64_JUMP_SLOT, NULL, NULL);
	CHECK(now_js && now_gd && lazy_js && lazy_gd && exe_sv && shim_js && ldso_js);
	if (!(now_js && now_gd && lazy_js && lazy_gd && exe_sv && shim_js && ldso_js))
		return unit_done("test_got");
	ldso_catch_orig = (catch_fn)*ldso_js;
	CHECK(gotuser_now_call(1) == 2);
	CHECK(gotuser_now_addr() == (void *)hs_test_addr_target);
	CHECK(gotuser_now_call_addr(1) == 3);
	CHECK(*now_js == (void *)hs_test_target);
	CHECK(strncmp(perms(now_js), "r--", 3) == 0); /* -z now -z relro: the GOT is read-only */
	if (lazy)
		CHECK(in(*lazy_js, lazy_lo, lazy_hi)); /* not called yet: still its PLT stub */
	CHECK(strverscmp("a", "b") < 0);
	CHECK(gotshim_call(1) == 2);

	/* patch: JUMP_SLOT and GLOB_DAT of both libraries and the executable's strverscmp */
	hs_got_counts(&c0);
	n = hs_got_patch(hooks, NHOOKS);
	CHECK(n == 5);
	CHECK(gotuser_now_call(1) == 1001);
	CHECK(gotuser_now_addr() == (void *)repl_addr_target);
	CHECK(gotuser_lazy_call(1) == 1001);
	CHECK(gotuser_lazy_addr() == (void *)repl_addr_target);
	CHECK(gotuser_now_call_addr(1) == 2001);
	CHECK(gotuser_lazy_call_addr(1) == 2001);
	CHECK(strverscmp("a", "b") == 4242);
	CHECK(hs_test_target(1) == 2);                 /* direct calls are not ours to change */
	CHECK(gotshim_call(1) == 2);                   /* the patcher's own object: never */
	CHECK(*ldso_js == (void *)ldso_catch_orig);    /* the dynamic linker: never */
	CHECK(strncmp(perms(now_js), "r--", 3) == 0); /* RELRO given back */
	hs_got_counts(&c);
	CHECK(c.slots == 5);
	CHECK(c.skipped == c0.skipped);

	/* twice: nothing more */
	CHECK(hs_got_patch(hooks, NHOOKS) == 0);
	hs_got_counts(&c);
	CHECK(c.slots == 5);
	CHECK(gotuser_now_call(1) == 1001);

	/* an object dlopen'ed after the first patch: the next call patches it, and only it */
	void *late = dlopen(late_path, RTLD_NOW);
	CHECK(late != NULL);
	if (!late) {
		fprintf(stderr, "%s\n", dlerror());
		return unit_done("test_got");
	}
	int (*late_call)(int) = (int (*)(int))dlsym(late, "gotuser_late_call");
	CHECK(late_call && late_call(1) == 2);
	CHECK(hs_got_patch(hooks, NHOOKS) == 2);
	CHECK(late_call(1) == 1001);
	hs_got_counts(&c);
	CHECK(c.slots == 7);

	/* the dlsym trampoline: the hook patches a new object before dlsym hands out its function */
	hs_got_on_dlsym(on_dlsym);
	void *tramp = dlopen(tramp_path, RTLD_LAZY);
	CHECK(tramp != NULL);
	cb_patched = 0;
	int (*tramp_call)(int) = tramp ? (int (*)(int))dlsym(tramp, "gotuser_tramp_call") : NULL;
	CHECK(cb_calls >= 1);
	CHECK(cb_max_depth == 1);
	CHECK(cb_patched == 2);
	CHECK(tramp_call && tramp_call(1) == 1001);

	/* dlsym(RTLD_NEXT) through the trampoline keeps the real caller */
	int calls = cb_calls;
	int (*next_a)(void) = (int (*)(void))gotnext_lookup();
	void *libb = dlopen("libgotnext_b.so", RTLD_NOW | RTLD_NOLOAD);
	CHECK(libb != NULL);
	CHECK(next_a && next_a() == 'B');              /* from A, the next one is B's */
	CHECK(libb && (void *)next_a == dlsym(libb, "hs_next_fn"));
	int (*next_x)(void) = (int (*)(void))dlsym(RTLD_NEXT, "hs_next_fn");
	CHECK(next_x && next_x() == 'A');              /* from the executable, A's */
	CHECK(gotnext_b_tag() == 'b');
	CHECK(cb_calls > calls);                       /* and they did go through the trampoline */
	CHECK(dlsym(RTLD_DEFAULT, "no_such_symbol_anywhere") == NULL);
	CHECK(dlerror() != NULL);

	/* unloaded and reloaded (likely at the same address): patched again; other threads
	 * call dlsym meanwhile */
	pthread_t th[4];
	for (int i = 0; i < 4; i++)
		pthread_create(&th[i], NULL, dlsym_loop, NULL);
	for (int round = 0; round < 20; round++) {
		CHECK(dlclose(late) == 0);
		late = dlopen(late_path, RTLD_NOW);
		CHECK(late != NULL);
		if (!late)
			break;
		late_call = (int (*)(int))dlsym(late, "gotuser_late_call");
		CHECK(late_call && late_call(1) == 1001);
	}
	stop = 1;
	for (int i = 0; i < 4; i++) {
		void *bad;
		pthread_join(th[i], &bad);
		CHECK(bad == NULL);
	}
	hs_got_counts(&c);
	CHECK(c.slots == 9);                           /* the reloaded object's stale slots were replaced */

	/* the undo */
	hs_got_on_dlsym(NULL);
	hs_got_unpatch_all();
	hs_got_counts(&c);
	CHECK(c.slots == 0);
	CHECK(gotuser_now_addr() == (void *)hs_test_addr_target);
	CHECK(*now_js == (void *)hs_test_target);
	CHECK(gotuser_now_call(1) == 2);
	CHECK(strncmp(perms(now_js), "r--", 3) == 0);
	if (lazy)
		CHECK(in(*lazy_js, lazy_lo, lazy_hi)); /* back to its PLT stub... */
	CHECK(gotuser_lazy_call(1) == 2);
	CHECK(*lazy_js == (void *)hs_test_target);     /* ...which resolved it on this call */
	CHECK(gotuser_lazy_addr() == (void *)hs_test_addr_target);
	CHECK(gotuser_now_call_addr(1) == 3);
	CHECK(gotuser_lazy_call_addr(1) == 3);
	CHECK(strverscmp("a", "b") < 0);
	CHECK(late && late_call(1) == 2);
	CHECK(tramp_call && tramp_call(1) == 2);
	CHECK(*ldso_js == (void *)ldso_catch_orig);

	/* mprotect failing: read-only slots are skipped and counted, writable ones patched */
	int (*real_mprotect)(void *, size_t, int) = hs_got_mprotect;
	hs_got_counts(&c0);
	hs_got_mprotect = fail_mprotect;
	n = hs_got_patch(hooks, NHOOKS);
	hs_got_counts(&c);
	CHECK(n > 0);
	CHECK(c.skipped >= c0.skipped + 4);            /* both slots of the now and late libraries */
	CHECK(gotuser_now_call(1) == 2);
	CHECK(late_call(1) == 2);
	if (lazy)
		CHECK(gotuser_lazy_call(1) == 1001);   /* .got.plt is outside RELRO */
	hs_got_unpatch_all();
	CHECK(gotuser_lazy_call(1) == 2);
	hs_got_mprotect = real_mprotect;

	/* after the undo, a new patch does it all again */
	CHECK(hs_got_patch(hooks, NHOOKS) == 9);
	CHECK(gotuser_now_call(1) == 1001);
	CHECK(tramp_call(1) == 1001);
	hs_got_unpatch_all();
	CHECK(gotuser_now_call(1) == 2);
	CHECK(tramp_call(1) == 2);
	return unit_done("test_got");
}

/* SPDX-License-Identifier: MIT */
/*
 * shim/unwind_mask.c — the signal mask around heisen's own unwinds.
 *
 * libunwind 1.6 (Debian's build, whose UNW_CACHE_PER_THREAD falls back to
 * the global cache) blocks every signal with sigprocmask around each
 * critical section: the register-state cache lock once per unw_step, the
 * CIE pool's lock twice per procedure-info lookup, and dl_iterate_phdr once
 * more.  A Python start under heisen made ~4,300 such pairs: two system
 * calls each, more time than the unwinds themselves.
 *
 * What the masks protect is the thread's own signal handlers: one that
 * entered libunwind while this thread holds its cache or pool lock would
 * wait on itself.  So heisen blocks the signals once for its whole unwind
 * (hs_unwind_enter .. hs_unwind_leave: two system calls per unwind instead
 * of two per lock) and libunwind's own mask calls made inside it are
 * answered here without a system call: the mask they would set is already
 * in force, except for the synchronous crash signals heisen handles
 * (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT), which stay deliverable so a
 * crash inside an unwind is still reported (libunwind's full mask made the
 * kernel kill the process without any handler).  heisen's crash handler
 * then does not enter libunwind (hs_stack_from_signal: the faulting
 * instruction alone, marked truncated).
 *
 * Both of libunwind's calls are reached through its own PLT: when
 * unwind_load.c has loaded libunwind (heisen's first unwind) its .got.plt entries for sigprocmask and dl_iterate_phdr are pointed
 * here (no symbol is exported: the program's calls, and every other
 * library's, go to glibc untouched).  Outside heisen's unwind both pass
 * straight to glibc, so libunwind used by the program itself masks as it
 * always did.  The program's handlers and masks are never changed:
 * hs_unwind_leave puts back exactly the mask hs_unwind_enter found.
 *
 * The procedure-info lookup.  For each return address new to its cache,
 * libunwind walks every loaded object with dl_iterate_phdr (its callback
 * stops at the one that holds the address).  Inside heisen's unwind the
 * object is found first with glibc's lock-free _dl_find_object (2.35+) and
 * the callback is given that object alone, its program headers read from
 * its ELF header and checked against what _dl_find_object says (the
 * PT_GNU_EH_FRAME address); when anything does not match, or the callback
 * does not find the address there, the whole walk runs as before.  The
 * address is the first word of libunwind 1.6's callback data; a wrong
 * guess only costs the whole walk, because the callback checks the
 * address itself.  (libgcc's unwinder finds its FDEs through
 * _dl_find_object the same way since glibc 2.35; docs/design.md "Stacks".)
 */
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <libunwind.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "shim.h"
#include "unwind_mask.h"

/* set once libunwind's sigprocmask calls come here (hs_unwind_mask_init) */
HS_HOT_BSS static int unw_patched;
/* every signal but the crash signals heisen handles (and SIGKILL, SIGSTOP,
 * which the kernel never blocks) */
HS_HOT_BSS static sigset_t unwind_block;
HS_HOT_BSS static uint64_t unwind_block_k; /* the same as the kernel's 64-bit mask */

/* 24 bytes of static TLS (every thread's stack pays for it): the kernel's
 * masks, not glibc's 128-byte sigset_t */
struct unwind_mask_tls {
	int active;      /* inside hs_unwind_enter */
	uint64_t saved;  /* the thread's mask before it */
	uint64_t cur;    /* the mask in force since: what a sigprocmask would report */
};
static __thread struct unwind_mask_tls um __attribute__((tls_model("initial-exec")));

/* libunwind's sigprocmask (glibc's own is pthread_sigmask with errno): its
 * SIG_SETMASK pairs inside heisen's unwind (block all, saving the old mask;
 * then put the saved one back) answered without a system call, the mask in
 * force reported as the old one. */
static int unw_sigprocmask(int how, const sigset_t *set, sigset_t *oset)
{
	int r;
	if (um.active && how == SIG_SETMASK) {
		if (oset) {
			memset(oset, 0, sizeof *oset);
			memcpy(oset, &um.cur, sizeof um.cur);
		}
		return 0;
	}
	r = pthread_sigmask(how, set, oset);
	if (r != 0) {
		errno = r;
		return -1;
	}
	return 0;
}

#if defined(DLFO_STRUCT_HAS_EH_DBASE)
/* The object that holds ip as dl_iterate_phdr would describe it; 0 when unsure. */
static int phdr_info_of(uintptr_t ip, struct dl_phdr_info *info)
{
	struct dl_find_object fo;
	const ElfW(Ehdr) *eh;
	const ElfW(Phdr) *ph;
	int eh_ok = 0, load_ok = 0;
	if (_dl_find_object((void *)ip, &fo) != 0 || fo.dlfo_link_map == NULL || fo.dlfo_map_start == NULL)
		return 0;
	eh = fo.dlfo_map_start;
	if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
	    eh->e_phentsize != sizeof(ElfW(Phdr)) || eh->e_phnum == 0 ||
	    (uintptr_t)eh + eh->e_phoff + (size_t)eh->e_phnum * sizeof(ElfW(Phdr)) > (uintptr_t)fo.dlfo_map_end)
		return 0;
	ph = (const ElfW(Phdr) *)(const void *)((const char *)eh + eh->e_phoff);
	for (unsigned i = 0; i < eh->e_phnum; i++) {
		uintptr_t va = (uintptr_t)fo.dlfo_link_map->l_addr + ph[i].p_vaddr;
		if (ph[i].p_type == PT_GNU_EH_FRAME && (void *)va == fo.dlfo_eh_frame)
			eh_ok = 1;
		if (ph[i].p_type == PT_LOAD && ip >= va && ip < va + ph[i].p_memsz)
			load_ok = 1;
	}
	if (!eh_ok || !load_ok)
		return 0;
	memset(info, 0, sizeof *info);
	info->dlpi_addr = fo.dlfo_link_map->l_addr;
	info->dlpi_name = fo.dlfo_link_map->l_name;
	info->dlpi_phdr = ph;
	info->dlpi_phnum = eh->e_phnum;
	return 1;
}
#endif

/* libunwind's dl_iterate_phdr: see the top comment */
static int unw_dl_iterate_phdr(int (*cb)(struct dl_phdr_info *, size_t, void *), void *data)
{
#if defined(DLFO_STRUCT_HAS_EH_DBASE)
	struct dl_phdr_info info;
	int r;
	if (um.active && data && phdr_info_of(*(const uintptr_t *)data, &info) &&
	    (r = cb(&info, sizeof info, data)) != 0)
		return r;
#endif
	return dl_iterate_phdr(cb, data);
}

struct unw_find {
	uintptr_t base;
	uintptr_t relro_lo, relro_hi;
	int found;
};

static int find_relro(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct unw_find *f = arg;
	(void)size;
	if ((uintptr_t)info->dlpi_addr != f->base)
		return 0;
	f->found = 1;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *p = &info->dlpi_phdr[i];
		if (p->p_type == PT_GNU_RELRO) {
			f->relro_lo = (uintptr_t)info->dlpi_addr + p->p_vaddr;
			f->relro_hi = f->relro_lo + p->p_memsz;
		}
	}
	return 1;
}

/* A d_ptr of the dynamic section: glibc relocates most in place, not all. */
static uintptr_t dyn_ptr(const struct link_map *lm, uintptr_t v)
{
	return v < (uintptr_t)lm->l_addr ? v + (uintptr_t)lm->l_addr : v;
}

/* libunwind's .got.plt entry for name; NULL when none, or read-only (full RELRO). */
static void **plt_slot(const struct link_map *lm, const struct unw_find *f, const char *name)
{
	const ElfW(Sym) *symtab = NULL;
	const char *strtab = NULL;
	const ElfW(Rela) *rel = NULL;
	size_t relsz = 0, strsz = 0;
	for (const ElfW(Dyn) *d = lm->l_ld; d->d_tag != DT_NULL; d++) {
		if (d->d_tag == DT_SYMTAB)
			symtab = (const ElfW(Sym) *)dyn_ptr(lm, d->d_un.d_ptr);
		else if (d->d_tag == DT_STRTAB)
			strtab = (const char *)dyn_ptr(lm, d->d_un.d_ptr);
		else if (d->d_tag == DT_STRSZ)
			strsz = d->d_un.d_val;
		else if (d->d_tag == DT_JMPREL)
			rel = (const ElfW(Rela) *)dyn_ptr(lm, d->d_un.d_ptr);
		else if (d->d_tag == DT_PLTRELSZ)
			relsz = d->d_un.d_val;
	}
	if (!symtab || !strtab || !rel)
		return NULL;
	for (size_t i = 0; i < relsz / sizeof *rel; i++) {
		const ElfW(Sym) *sym;
		uintptr_t slot;
		if (ELF64_R_TYPE(rel[i].r_info) != R_X86_64_JUMP_SLOT)
			continue;
		sym = &symtab[ELF64_R_SYM(rel[i].r_info)];
		if (sym->st_name >= strsz || strcmp(strtab + sym->st_name, name) != 0)
			continue;
		slot = (uintptr_t)lm->l_addr + rel[i].r_offset;
		if (slot >= f->relro_lo && slot < f->relro_hi)
			return NULL; /* read-only after relocation: libunwind stays as it is */
		return (void **)slot;
	}
	return NULL;
}

void hs_unwind_mask_init(uintptr_t unw)
{
	struct dl_find_object fo;
	void *lm = NULL, **mask_slot, **phdr_slot;
	struct unw_find f = {0, 0, 0, 0};
	static const int crash[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};

	sigfillset(&unwind_block); /* glibc leaves its internal signals out */
	for (unsigned i = 0; i < sizeof crash / sizeof crash[0]; i++)
		sigdelset(&unwind_block, crash[i]);
	sigdelset(&unwind_block, SIGKILL);
	sigdelset(&unwind_block, SIGSTOP);
	memcpy(&unwind_block_k, &unwind_block, sizeof unwind_block_k);
	/* libunwind's link map from glibc's _dl_find_object (a search of the
	   objects' ranges), not dladdr1, which also scans its symbols */
	if (_dl_find_object((void *)unw, &fo) != 0 || (lm = fo.dlfo_link_map) == NULL)
		return; /* libunwind not found: it masks for itself, as without heisen */
	f.base = (uintptr_t)((struct link_map *)lm)->l_addr; /* the load bias, dl_iterate_phdr's dlpi_addr */
	dl_iterate_phdr(find_relro, &f);
	if (!f.found)
		return;
	mask_slot = plt_slot(lm, &f, "sigprocmask");
	phdr_slot = plt_slot(lm, &f, "dl_iterate_phdr");
	if (phdr_slot)
		__atomic_store_n(phdr_slot, (void *)(uintptr_t)&unw_dl_iterate_phdr, __ATOMIC_RELEASE);
	if (mask_slot) {
		__atomic_store_n(mask_slot, (void *)(uintptr_t)&unw_sigprocmask, __ATOMIC_RELEASE);
		__atomic_store_n(&unw_patched, 1, __ATOMIC_RELEASE);
	}
}

int hs_unwind_enter(void)
{
	if (um.active)
		return 0;
	/* heisen's first unwind loads libunwind here, before the mask, so that
	   this unwind too is masked once and not per libunwind lock (a cat's
	   first unwind made ~120 more system calls when it loaded later, in
	   unw_getcontext) */
	if (!__atomic_load_n(&unw_patched, __ATOMIC_ACQUIRE) &&
	    (hs_unwind_loaded() || !hs_unwind_getcontext_load() || !__atomic_load_n(&unw_patched, __ATOMIC_ACQUIRE)))
		return 0;
	if (syscall(SYS_rt_sigprocmask, SIG_BLOCK, &unwind_block_k, &um.saved, sizeof um.saved) != 0)
		return 0;
	um.cur = um.saved | unwind_block_k;
	/* set last: a crash handler that sees it knows the mask is in force */
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	um.active = 1;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	return 1;
}

void hs_unwind_leave(int entered)
{
	if (!entered)
		return;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	um.active = 0;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	syscall(SYS_rt_sigprocmask, SIG_SETMASK, &um.saved, NULL, sizeof um.saved);
}

int hs_unwind_active(void)
{
	return um.active;
}

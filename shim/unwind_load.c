/* SPDX-License-Identifier: MIT */
/*
 * shim/unwind_load.c — libunwind loaded at heisen's first unwind, not by
 * ld.so into every image.
 *
 * libheisen.so has no DT_NEEDED on libunwind: linked as a dependency,
 * libunwind.so.8 and its own dependency liblzma.so.5 (Debian's build reads
 * MiniDebugInfo) were mapped, relocated and initialised in every process
 * image, ~85 us of CPU of a /bin/true start that never unwinds
 * (bench/README.md "Process start: libunwind loaded at the first
 * unwind").  Debian ships libunwind.a only as non-PIC objects (R_X86_64_32
 * and local-exec TLS relocations), which cannot go into a shared object.
 *
 * So the libunwind entry points heisen calls (the local-only names
 * <libunwind.h> maps unw_* to under UNW_LOCAL_ONLY) are defined here,
 * hidden, and call through pointers that the first unwind fills:
 * dlopen("libunwind.so.8"), then dlsym of each.  Call sites stay as they
 * are.  The load is made only where dlopen is safe:
 *   - from hs_unwind_enter (unwind_mask.c: before its one mask, so the
 *     first unwind is masked once too) or unw_getcontext, the start of
 *     every unwind heisen begins itself
 *     (never from a signal handler: the snapshot handler starts from the
 *     signal's context with unw_init_local2, which never loads, and
 *     hs_stack_from_signal then records the interrupted instruction alone,
 *     marked truncated, as when it interrupted heisen's own unwind), and
 *     from the crash handler where the crash's shape shows that the thread
 *     holds none of the locks dlopen takes (hs_unwind_load_for_crash);
 *   - not when the hook whose stack is wanted was called from the dynamic
 *     loader (ld.so's own mallocs during a dlopen or a thread's TLS set-up,
 *     with its loader lock held and its lists half updated): heisen's own
 *     frames are walked by their frame pointers (libheisen is built with
 *     them) up to the first return address outside libheisen, and that one
 *     must not be in ld.so;
 *   - once, by one thread: another thread's unwind meanwhile, and the
 *     loading thread's own (dlopen allocates and opens files: heisen's
 *     hooks), fail instead of waiting (no stack for that event), so no
 *     lock of the program's or ld.so's is ever waited for in a hook.
 * A libunwind the program already has (linked or dlopened) is the one
 * used, as with DT_NEEDED (dlopen finds it by its soname).  When it cannot
 * be loaded, one warning says so and native stacks stay empty: the rest of
 * the recording goes on.  docs/design.md "Call stacks".
 */
#define UNW_LOCAL_ONLY
#include <dlfcn.h>
#include <libunwind.h>
#include <link.h>
#include <gnu/libc-version.h>
#include <signal.h>
#include <stdint.h>
#include <sys/auxv.h>
#include <ucontext.h>
#include <unistd.h>

#include "heap_core.h"
#include "shim.h"
#include "unwind_mask.h"

/* libunwind 1.x's soname (stable since 1.0; Debian's libunwind8) */
#define HS_LIBUNWIND_SONAME "libunwind.so.8"

enum { UNW_NONE, UNW_LOADING, UNW_READY, UNW_FAILED };

/* [atomic] enum above; read by name by unw_getcontext's assembly below */
HS_HOT_BSS __attribute__((used)) static int unw_state;
static __thread int unw_loading_here __attribute__((tls_model("initial-exec")));

/* the real entry points, set before unw_state becomes UNW_READY */
__attribute__((used)) static int (*real_getcontext)(unw_context_t *);
static int (*real_init_local)(unw_cursor_t *, unw_context_t *);
static int (*real_init_local2)(unw_cursor_t *, unw_context_t *, int);
static int (*real_step)(unw_cursor_t *);
static int (*real_get_reg)(unw_cursor_t *, int, unw_word_t *);
static int (*real_is_signal_frame)(unw_cursor_t *);
static int (*real_backtrace)(void **, int);
/* optional: where a frame's caller-saved register lives (stacks.c learns
 * where each frame keeps its caller's %rbp from it); NULL if missing */
static int (*real_get_save_loc)(unw_cursor_t *, int, unw_save_loc_t *);

int hs_unwind_loaded(void)
{
	return __atomic_load_n(&unw_state, __ATOMIC_ACQUIRE) == UNW_READY;
}

/* dl_iterate_phdr's callback for unwind_cache_per_thread: arg[0] an
 * address inside libunwind, arg[1] set to the size of its TLS block when
 * the object holding arg[0] has one. */
static int unwind_tls_of(struct dl_phdr_info *info, size_t size, void *arg)
{
	uintptr_t *a = arg, tls = 0;
	int inside = 0;
	(void)size;
	for (unsigned i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
		if (ph->p_type == PT_LOAD && a[0] >= lo && a[0] - lo < ph->p_memsz)
			inside = 1;
		else if (ph->p_type == PT_TLS)
			tls = ph->p_memsz;
	}
	if (!inside)
		return 0;
	a[1] = tls;
	return 1;
}

/*
 * 1 when the libunwind holding address unw keeps its unwind caches per
 * thread, so that unw_set_caching_policy(UNW_CACHE_PER_THREAD) changes
 * something.  libunwind says so nowhere but in its TLS block: built with
 * per-thread caches (HAVE___THREAD) it holds a whole register-state cache
 * per thread (its 128 static buckets, tens of KiB); without, only
 * unw_backtrace's trace-cache pointer (16 bytes in Debian's 1.6.2).
 * Without them the policy call falls back to the global cache, the
 * default, and its only effect is libunwind's start-up (tdep_init).
 * Debian's 1.6.2 is built without: its global cache's mutex, which every
 * unw_step takes, can be left held in a fork child when another thread
 * was inside a real unwind (a known gap: docs/design.md "Stacks").
 */
static int unwind_cache_per_thread(uintptr_t unw)
{
	uintptr_t a[2] = {unw, 0};
	dl_iterate_phdr(unwind_tls_of, a);
	return a[1] >= 4096;
}

/* 1 when the first return address outside libheisen on this thread's stack
 * (the hook's caller) lies in ld.so; 1 too when the walk is unsure. */
/* ld.so's range: its base from the auxiliary vector (0 when ld.so was
 * run as the program: then an object of its own, _r_debug).  glibc's
 * _dl_find_object itself lives in libc, not in ld.so. */
static int ld_so_object(struct dl_find_object *fo)
{
	uintptr_t base = (uintptr_t)getauxval(AT_BASE);
	return _dl_find_object((void *)(base ? base : (uintptr_t)&_r_debug), fo);
}

static __attribute__((noinline)) int called_from_ld_so(void)
{
	struct dl_find_object self, ld;
	uintptr_t fp = (uintptr_t)__builtin_frame_address(0);
	if (_dl_find_object((void *)(uintptr_t)&called_from_ld_so, &self) != 0 || ld_so_object(&ld) != 0)
		return 1;
	for (int i = 0; i < 64; i++) {
		uintptr_t next = ((const uintptr_t *)fp)[0], ret = ((const uintptr_t *)fp)[1];
		if (ret < (uintptr_t)self.dlfo_map_start || ret >= (uintptr_t)self.dlfo_map_end)
			return ret >= (uintptr_t)ld.dlfo_map_start && ret < (uintptr_t)ld.dlfo_map_end;
		/* the caller is heisen's, built with frame pointers: its saved frame
		   pointer lies above this one, on the same stack */
		if (next <= fp || next - fp > (1u << 20) || (next & 7))
			return 1;
		fp = next;
	}
	return 1;
}

#define SYM(var, name)                                         \
	do {                                                       \
		*(void **)(&var) = dlsym(h, name);                     \
		if (!var)                                              \
			goto fail;                                         \
	} while (0)

/* Loads libunwind (see the top comment) unless another thread is loading
 * it or it failed; 1 when it is ready. */
static __attribute__((noinline)) int unwind_load_now(void)
{
	int expect = UNW_NONE, (*set_policy)(unw_addr_space_t, unw_caching_policy_t);
	unw_addr_space_t *local_as;
	void *h;
	if (!__atomic_compare_exchange_n(&unw_state, &expect, UNW_LOADING, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		return expect == UNW_READY;
	unw_loading_here = 1;
	/* lazy binding, as ld.so bound it as libheisen's dependency (RTLD_NOW
	   bound all of libunwind's and liblzma's imports: +40,000 instructions
	   at a `cat`'s first unwind); RTLD_LOCAL keeps its _Unwind_* out of
	   the program's global scope */
	h = dlopen(HS_LIBUNWIND_SONAME, RTLD_LAZY | RTLD_LOCAL);
	if (!h)
		goto fail;
	SYM(real_getcontext, "_Ux86_64_getcontext");
	SYM(real_init_local, "_ULx86_64_init_local");
	SYM(real_init_local2, "_ULx86_64_init_local2");
	SYM(real_step, "_ULx86_64_step");
	SYM(real_get_reg, "_ULx86_64_get_reg");
	SYM(real_is_signal_frame, "_ULx86_64_is_signal_frame");
	SYM(real_backtrace, "unw_backtrace");
	*(void **)(&real_get_save_loc) = dlsym(h, "_ULx86_64_get_save_loc");
	*(void **)(&set_policy) = dlsym(h, "_ULx86_64_set_caching_policy");
	local_as = dlsym(h, "_ULx86_64_local_addr_space");
	/* per-thread unwind caches where libunwind has them */
	if (set_policy && local_as && unwind_cache_per_thread((uintptr_t)real_step))
		set_policy(*local_as, UNW_CACHE_PER_THREAD);
	hs_unwind_mask_init((uintptr_t)real_backtrace); /* before any heisen unwind enters it */
	unw_loading_here = 0;
	__atomic_store_n(&unw_state, UNW_READY, __ATOMIC_RELEASE);
	return 1;
fail:
	unw_loading_here = 0;
	__atomic_store_n(&unw_state, UNW_FAILED, __ATOMIC_RELEASE);
	hs_write_err("heisen: cannot load " HS_LIBUNWIND_SONAME ": no native call stacks in this process\n");
	return 0;
}

/* 1 when pc lies in the object that holds addr (ld.so's when addr is NULL). */
static int same_object(uintptr_t pc, const void *addr)
{
	struct dl_find_object a, b;
	return _dl_find_object((void *)pc, &a) == 0 &&
	       (addr ? _dl_find_object((void *)(uintptr_t)addr, &b) : ld_so_object(&b)) == 0 &&
	       a.dlfo_link_map == b.dlfo_link_map;
}

/*
 * A crash in an image that has not unwound yet (crash_handler, signals.c,
 * before hs_stack_from_signal): libunwind is loaded from the handler only
 * when the thread cannot be inside the dynamic loader or malloc, whose
 * locks dlopen takes:
 *   - a fault the kernel raised (si_code > 0) at an instruction outside
 *     libheisen, ld.so and libc (the program's own code, or a library's
 *     other than these), or abort()'s SIGABRT raised by this process on
 *     itself while the heap checker is on (every malloc of the program's
 *     and libc's then runs inside heisen's hook, so `was` is set there);
 *   - not inside a heisen hook (was == 0), libunwind not being loaded.
 * Else the crash's stack is the faulting instruction alone, marked
 * truncated (hs_stack_from_signal).  And only while the heap checker keeps
 * a stack for every call site (hs_heap_unwinds_each_site): each program
 * allocation it saw has unwound, so an image that has not unwound has
 * none of the program's blocks in glibc's heap, and no heap the program
 * could have corrupted can make dlopen's own allocations abort (a process
 * dies of its own signal, never of a SIGABRT heisen's load caused).
 */
void hs_unwind_load_for_crash(int sig, const siginfo_t *si, const void *ucontext, int was)
{
	uintptr_t pc = (uintptr_t)((const ucontext_t *)ucontext)->uc_mcontext.gregs[REG_RIP];
	if (was || __atomic_load_n(&unw_state, __ATOMIC_ACQUIRE) != UNW_NONE)
		return;
	/* no block of the program's in glibc's heap (none has unwound), so no
	   heap it can have corrupted under dlopen's allocations */
	if (!hs_heap_unwinds_each_site())
		return;
	if (sig == SIGABRT) {
		if (si->si_code != SI_TKILL || si->si_pid != getpid())
			return;
	} else if (sig != SIGSEGV && sig != SIGBUS && sig != SIGILL && sig != SIGFPE) {
		return;
	} else if (si->si_code <= 0 || same_object(pc, (const void *)(uintptr_t)&hs_unwind_load_for_crash) ||
		   same_object(pc, NULL) ||
		   same_object(pc, (const void *)(uintptr_t)&gnu_get_libc_version)) {
		return;
	}
	unwind_load_now();
}

/* Loads libunwind from unw_getcontext (see the top comment); 1 when ready. */
static int unwind_load(void)
{
	if (unw_loading_here)
		return 0;
	if (called_from_ld_so())
		return 0; /* a later unwind loads it */
	return unwind_load_now();
}

/* The slow path of unw_getcontext below: 1 when libunwind is ready. */
HS_HIDDEN int hs_unwind_getcontext_load(void)
{
	int st = __atomic_load_n(&unw_state, __ATOMIC_ACQUIRE);
	if (st == UNW_READY)
		return 1;
	if (st != UNW_NONE)
		return 0; /* failed, or being loaded by this or another thread */
	return unwind_load();
}

/*
 * unw_getcontext (_Ux86_64_getcontext): records its caller's registers, so
 * it must reach libunwind's with the caller's stack and callee-saved
 * registers untouched: a jump when loaded; else the loader is called
 * (rdi kept, the stack realigned by the push) and then the jump, or -1.
 */
__asm__(".text\n"
	".globl _Ux86_64_getcontext\n"
	".hidden _Ux86_64_getcontext\n"
	".type _Ux86_64_getcontext, @function\n"
	"_Ux86_64_getcontext:\n"
	"	.cfi_startproc\n"
	"	cmpl $2, unw_state(%rip)\n" /* UNW_READY */
	"	jne 1f\n"
	"	jmp *real_getcontext(%rip)\n"
	"1:	pushq %rdi\n"
	"	.cfi_adjust_cfa_offset 8\n"
	"	call hs_unwind_getcontext_load\n"
	"	popq %rdi\n"
	"	.cfi_adjust_cfa_offset -8\n"
	"	testl %eax, %eax\n"
	"	je 2f\n"
	"	jmp *real_getcontext(%rip)\n"
	"2:	movl $-1, %eax\n"
	"	ret\n"
	"	.cfi_endproc\n"
	".size _Ux86_64_getcontext, .-_Ux86_64_getcontext\n");

/* The rest: the call when loaded, else libunwind's "unspecified error" (a
 * cursor is only ever initialised after unw_getcontext succeeded, or from a
 * signal's context, which hs_stack_from_signal checks first). */
int _ULx86_64_init_local(unw_cursor_t *c, unw_context_t *uc)
{
	return hs_unwind_loaded() ? real_init_local(c, uc) : -UNW_EUNSPEC;
}

int _ULx86_64_init_local2(unw_cursor_t *c, unw_context_t *uc, int flag)
{
	return hs_unwind_loaded() ? real_init_local2(c, uc, flag) : -UNW_EUNSPEC;
}

int _ULx86_64_step(unw_cursor_t *c)
{
	return hs_unwind_loaded() ? real_step(c) : -UNW_EUNSPEC;
}

int _ULx86_64_get_reg(unw_cursor_t *c, int reg, unw_word_t *val)
{
	return hs_unwind_loaded() ? real_get_reg(c, reg, val) : -UNW_EUNSPEC;
}

int _ULx86_64_get_save_loc(unw_cursor_t *c, int reg, unw_save_loc_t *loc)
{
	return hs_unwind_loaded() && real_get_save_loc ? real_get_save_loc(c, reg, loc) : -UNW_EUNSPEC;
}

int _ULx86_64_is_signal_frame(unw_cursor_t *c)
{
	return hs_unwind_loaded() ? real_is_signal_frame(c) : -UNW_EUNSPEC;
}

int unw_backtrace(void **buf, int size)
{
	return hs_unwind_loaded() ? real_backtrace(buf, size) : 0;
}

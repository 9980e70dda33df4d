/* SPDX-License-Identifier: MIT */
/*
 * shim/dl_trampoline.S — libheisen's exported dlsym and dlvsym: trampolines that run
 * hs_dlsym_hook() (elf_got_surgery.c: patch the GOT of objects loaded since,
 * and resolve glibc's dlsym) and then jumps to the real dlsym with the
 * caller's arguments and, above all, the caller's return address still on
 * the stack.  glibc reads that address to decide who "the caller" is
 * (dlsym(RTLD_NEXT, …) searches the objects after it), so this must be a
 * jump, never a call: a C wrapper would make libheisen the caller.  Why
 * dlsym and not dlopen: see the top comment of elf_got_surgery.c.
 *
 * Stack: on entry %rsp is 8 mod 16 (the call pushed the return address);
 * six pushes and 8 bytes of padding make it 0 mod 16 at the call, as the
 * SysV ABI requires.  Only the integer argument registers need saving
 * (dlsym takes two pointers; all six are kept for good measure); the hook's
 * result, the real dlsym, comes back in %rax and is not an argument register.
 *
 * Lookups through a handle: dlsym(handle, "free") on a handle of libc
 * (ctypes.CDLL("libc.so.6"), cffi's ffi.dlopen("c"), dlopen + dlsym in C)
 * would hand out glibc's own free and bypass every hook.  For an explicit
 * handle (not RTLD_DEFAULT, not RTLD_NEXT) the hook makes the lookup
 * itself — its result does not depend on who the caller is — and answers
 * with heisen's hook when the result is the original of an interposed
 * function; RTLD_NEXT and RTLD_DEFAULT lookups still jump.
 */
#if defined(__x86_64__)

/*
 * TRAMPOLINE(sym, hook): the hook is called with the caller's arguments
 * still in their registers (the pushes do not change them) and answers in
 * %rax:%rdx (struct hs_dl_answer): %rax != 0 is the real function to jump
 * to with the arguments restored; %rax == 0 means the lookup is done and
 * %rdx is its result (a lookup through a handle that found the original of
 * an interposed function answers with heisen's hook: elf_got_surgery.c).
 * %r11 (scratch, never an argument) carries %rdx across the pops.
 */
	.macro TRAMPOLINE sym, hook
	.text
	.globl	\sym
	.type	\sym, @function
	.p2align 4
\sym:
	.cfi_startproc
#if defined(__CET__)
	endbr64
#endif
	pushq	%rdi
	.cfi_adjust_cfa_offset 8
	pushq	%rsi
	.cfi_adjust_cfa_offset 8
	pushq	%rdx
	.cfi_adjust_cfa_offset 8
	pushq	%rcx
	.cfi_adjust_cfa_offset 8
	pushq	%r8
	.cfi_adjust_cfa_offset 8
	pushq	%r9
	.cfi_adjust_cfa_offset 8
	subq	$8, %rsp
	.cfi_adjust_cfa_offset 8
	call	\hook@PLT		/* hidden: the linker makes this a direct call */
	movq	%rdx, %r11
	addq	$8, %rsp
	.cfi_adjust_cfa_offset -8
	popq	%r9
	.cfi_adjust_cfa_offset -8
	popq	%r8
	.cfi_adjust_cfa_offset -8
	popq	%rcx
	.cfi_adjust_cfa_offset -8
	popq	%rdx
	.cfi_adjust_cfa_offset -8
	popq	%rsi
	.cfi_adjust_cfa_offset -8
	popq	%rdi
	.cfi_adjust_cfa_offset -8
	testq	%rax, %rax
	jz	1f
	jmp	*%rax			/* tail jump: the caller's return address is on top */
1:
	movq	%r11, %rax		/* answered: the hook's result */
	ret
	.cfi_endproc
	.size	\sym, .-\sym
	.endm

	TRAMPOLINE dlsym, hs_dlsym_hook
	TRAMPOLINE dlvsym, hs_dlvsym_hook

#else
#error "dl_trampoline.S is written for x86_64"
#endif

	.section .note.GNU-stack,"",@progbits

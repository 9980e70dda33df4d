/* SPDX-License-Identifier: MIT */
/*
 * shim/dl_trampoline.S — libheisen's exported dlsym: a trampoline that runs
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
 */
#if defined(__x86_64__)

	.text
	.globl	dlsym
	.type	dlsym, @function
	.p2align 4
dlsym:
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
	call	hs_dlsym_hook@PLT	/* hidden: the linker makes this a direct call */
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
	jmp	*%rax			/* tail jump: the caller's return address is on top */
	.cfi_endproc
	.size	dlsym, .-dlsym

#else
#error "dl_trampoline.S is written for x86_64"
#endif

	.section .note.GNU-stack,"",@progbits

/* SPDX-License-Identifier: MIT */
/*
 * shim/fd_vfork.S — libheisen's exported vfork.  A vfork child
 * runs in its parent's memory, on the parent thread's stack and
 * thread-local state, until it calls exec or _exit: whatever the shim's
 * hooks record in it would land in the parent's segment (CPython's
 * subprocess vforks, then closes and dup2s in the child).  So before glibc's
 * vfork runs, hs_vfork_prepare() (fd_hooks.c) notes the parent's pid in the
 * thread's state, and hs_enter() records nothing where getpid() differs
 * from it.  The real vfork must be reached by a jump, never a call: a C
 * wrapper's frame would be reused by the child and the parent would return
 * through a clobbered frame.  The same trampoline shape as dl_trampoline.S.
 *
 * Stack: on entry %rsp is 8 mod 16; 8 bytes of padding make it 0 mod 16 at
 * the call.  vfork takes no arguments; the hook's result, the real vfork,
 * comes back in %rax.
 */
#if defined(__x86_64__)

	.text
	.globl	vfork
	.type	vfork, @function
	.p2align 4
vfork:
	.cfi_startproc
#if defined(__CET__)
	endbr64
#endif
	subq	$8, %rsp
	.cfi_adjust_cfa_offset 8
	call	hs_vfork_prepare@PLT	/* hidden: the linker makes this a direct call */
	addq	$8, %rsp
	.cfi_adjust_cfa_offset -8
	jmp	*%rax			/* tail jump: the caller's return address is on top */
	.cfi_endproc
	.size	vfork, .-vfork

#else
#error "fd_vfork.S: only x86_64 is written"
#endif

	.section .note.GNU-stack,"",@progbits

/* SPDX-License-Identifier: MIT */
/*
 * shim/safe_read.S — hs_safe_read16(addr, out): read the 16 bytes at addr
 * (16-aligned, so both words lie in one page) into out[0..1] and return 1;
 * when addr is not mapped or not readable, return 0 instead of crashing.
 *
 * The loads are the only instructions between hs_safe_read16_fault and
 * hs_safe_read16_fault_end.  A SIGSEGV or SIGBUS whose faulting PC lies
 * there is not a crash: the shim's crash handler (signals.c) calls
 * hs_safe_read_fixup(), which moves the PC to hs_safe_read16_fail and
 * returns from the signal.  The idea is HotSpot's SafeFetch and the Linux
 * kernel's exception tables (a fixup address for one faulting instruction).
 * The heap checker reads a pointer's header through it before it knows
 * the pointer came from malloc (a wild free must be reported, not crash).
 * Cost: one call, two loads, two stores — no system call.
 */
#if defined(__x86_64__)

	/* with the fork child's code (shim.h HS_FORK_TEXT): every free reads through it */
	.section .text.hot.hs_fork,"ax",@progbits
	.globl	hs_safe_read16
	.hidden	hs_safe_read16
	.globl	hs_safe_read16_fault
	.hidden	hs_safe_read16_fault
	.globl	hs_safe_read16_fault_end
	.hidden	hs_safe_read16_fault_end
	.globl	hs_safe_read16_fail
	.hidden	hs_safe_read16_fail
	.type	hs_safe_read16, @function
	.p2align 4
hs_safe_read16:
	.cfi_startproc
#if defined(__CET__)
	endbr64
#endif
hs_safe_read16_fault:
	movq	(%rdi), %rax
	movq	8(%rdi), %rdx
hs_safe_read16_fault_end:
	movq	%rax, (%rsi)
	movq	%rdx, 8(%rsi)
	movl	$1, %eax
	ret
hs_safe_read16_fail:
	xorl	%eax, %eax
	ret
	.cfi_endproc
	.size	hs_safe_read16, .-hs_safe_read16

#else
#error "safe_read.S: only x86_64 is written"
#endif

	.section .note.GNU-stack,"",@progbits

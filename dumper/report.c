/* SPDX-License-Identifier: MIT */
/*
 * dumper/report.c — the presentation model the reports share: how a lock is
 * named (heisen_name_lock name, else the global it is, else its address),
 * how a stack reads (symbolized, innermost first, hook frames dropped), and
 * the names of modes, kinds and events used by both text and JSON so the two
 * never disagree.  Design: docs/interfaces.md "JSON schema".
 */
#include "report.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>

void hs_appendf(char *buf, size_t len, size_t *used, const char *fmt, ...)
{
	va_list ap;
	int n;
	if (len == 0 || *used >= len - 1)
		return;
	va_start(ap, fmt);
	n = vsnprintf(buf + *used, len - *used, fmt, ap);
	va_end(ap);
	if (n > 0)
		*used = *used + (size_t)n < len - 1 ? *used + (size_t)n : len - 1;
}

/*
 * A Python lock (a semaphore used as a lock) is named where it was created,
 * as lockdep names a lock class by its init site: the innermost Python frame
 * of its sem_init stack, "app.py:12 in Cache.__init__" (the file's base
 * name); unnamed (its address) when the stack has no Python frame.
 */
static void semaphore_name(struct hs_proc *p, uint32_t id, struct hs_lockref *out)
{
	static struct hs_frames fr; /* large; heisen-dump is single-threaded */
	struct hs_lock l;
	const struct hs_frame *pick = NULL;
	if (hs_read_lock(&p->seg, id, &l) != 0 || !l.first_stack)
		return;
	hs_frames_of(p, l.first_stack, &fr);
	for (unsigned i = 0; i < fr.n && !pick; i++)
		if (fr.f[i]->python && fr.f[i]->file)
			pick = fr.f[i];
	if (pick) {
		const char *base = strrchr(pick->file, '/');
		snprintf(out->name, sizeof out->name, "%s:%d in %s", base ? base + 1 : pick->file, pick->line,
			 pick->function ? pick->function : "?");
	}
}

void hs_lockref(struct hs_proc *p, uint32_t id, uint64_t addr, struct hs_lockref *out)
{
	struct hs_lock l;
	memset(out, 0, sizeof *out);
	out->addr = addr;
	if (hs_read_lock(&p->seg, id, &l) == 0) {
		if (!addr)
			out->addr = l.addr;
		out->gen = l.gen;
		out->kind = hs_lock_kind_name(l.kind);
		if (l.name)
			hs_seg_string(&p->seg, l.name, out->name, sizeof out->name);
	}
	if (!out->name[0] && p->symbols && out->addr) {
		struct hs_sym *sym = hs_proc_sym(p);
		const char *n = sym ? hs_sym_data(sym, out->addr) : NULL;
		if (n)
			snprintf(out->name, sizeof out->name, "%s", n);
	}
	if (!out->name[0] && out->kind && strcmp(out->kind, "gil") == 0)
		snprintf(out->name, sizeof out->name, "GIL");
	if (!out->name[0] && out->kind && strcmp(out->kind, "semaphore") == 0 && out->gen)
		semaphore_name(p, id, out);
	if (out->name[0])
		snprintf(out->label, sizeof out->label, "%s", out->name);
	else
		snprintf(out->label, sizeof out->label, "0x%llx", (unsigned long long)out->addr);
}

void hs_frames_of(struct hs_proc *p, uint32_t id, struct hs_frames *out)
{
	struct hs_stack st;
	struct hs_sym *sym;

	memset(out, 0, sizeof *out);
	if (hs_read_stack(&p->seg, id, &st) != 0 || !(sym = hs_proc_sym(p)))
		return;
	out->valid = true;
	out->truncated = st.flags & HS_STACK_TRUNCATED;
	for (uint32_t i = 0; i < st.depth; i++) {
		bool ret = i > 0 || !(st.flags & HS_STACK_EXACT_TOP);
		const struct hs_frame *f = hs_sym_pc(sym, st.pc[i], ret);
		if (f && !f->hook)
			out->f[out->n++] = f;
	}
}

const char *hs_mode_name(unsigned mode)
{
	return mode == HS_MODE_WRITE ? "write" : "read";
}

const char *hs_lock_kind_name(unsigned kind)
{
	switch (kind) {
	case HS_LOCK_MUTEX: return "mutex";
	case HS_LOCK_RWLOCK: return "rwlock";
	case HS_LOCK_SPIN: return "spin";
	case HS_LOCK_GIL: return "gil";
	case HS_LOCK_SEMAPHORE: return "semaphore";
	default: return NULL;
	}
}

const char *hs_wait_kind_name(unsigned kind)
{
	switch (kind) {
	case HS_WAIT_LOCK: return "lock";
	case HS_WAIT_COND: return "cond";
	case HS_WAIT_GIL: return "gil";
	default: return NULL;
	}
}

const char *hs_event_name(unsigned type)
{
	static const char *const names[] = {
		[HS_REC_NONE] = "none",
		[HS_REC_THREAD_START] = "thread-start",
		[HS_REC_THREAD_EXIT] = "thread-exit",
		[HS_REC_LOCK_ACQUIRED] = "lock-acquired",
		[HS_REC_LOCK_BUSY] = "lock-busy",
		[HS_REC_LOCK_RELEASED] = "lock-released",
		[HS_REC_LOCK_DESTROYED] = "lock-destroyed",
		[HS_REC_COND_WAIT] = "cond-wait",
		[HS_REC_COND_WOKE] = "cond-woke",
		[HS_REC_NEW_EDGE] = "new-edge",
		[HS_REC_FINDING] = "finding",
		[HS_REC_FORK] = "fork",
		[HS_REC_DLOPEN] = "dlopen",
		[HS_REC_SIGNAL] = "signal",
		[HS_REC_EXIT] = "exit",
		[HS_REC_LOCK_ERROR] = "lock-error",
		[HS_REC_GIL_WAIT] = "gil-wait",
		[HS_REC_GIL_ACQUIRED] = "gil-acquired",
		[HS_REC_GIL_RELEASED] = "gil-released",
		[HS_REC_SNAPSHOT] = "snapshot",
		[HS_REC_MEMORY] = "memory",
		[HS_REC_TERM_SIGNAL] = "term-signal",
		[HS_REC_UID_CHANGED] = "uid-changed",
		[HS_REC_FD_CREATED] = "fd-created",
		[HS_REC_FD_CLOSED] = "fd-closed",
		[HS_REC_FD_CLOSE_FAILED] = "fd-close-failed",
		[HS_REC_FAULT_INJECTED] = "fault-injected",
		[HS_REC_CHAOS] = "chaos",
	};
	return type < sizeof names / sizeof names[0] && names[type] ? names[type] : "unknown";
}

const struct hs_held *hs_relevant_hold(const struct hs_fnd *f, const struct hs_tsnap *t)
{
	for (uint32_t i = t->t.held_count; i-- > 0;) {
		const struct hs_held *h = &t->t.held[i];
		for (uint32_t j = 0; j < f->nthreads; j++) {
			const struct hs_tsnap *w = f->threads[j];
			if (w != t && w->t.wait_kind != HS_WAIT_NONE &&
			    ((w->t.wait_addr && w->t.wait_addr == h->addr) ||
			     (!w->t.wait_addr && w->t.wait_lock && w->t.wait_lock == h->lock)))
				return h;
		}
	}
	return t->t.held_count ? &t->t.held[t->t.held_count - 1] : NULL;
}

const struct hs_held *hs_held_for(const struct hs_tsnap *holder, const struct hs_tsnap *waiter)
{
	const struct hs_thread *w = &waiter->t;
	for (uint32_t i = 0; i < holder->t.held_count; i++) {
		const struct hs_held *h = &holder->t.held[i];
		if ((w->wait_addr && h->addr == w->wait_addr) || (!w->wait_addr && w->wait_lock && h->lock == w->wait_lock))
			return h;
	}
	return NULL;
}

const char *hs_mem_why_name(unsigned why)
{
	switch (why) {
	case HS_MEMW_START: return "start";
	case HS_MEMW_TIME: return "interval";
	case HS_MEMW_ALLOC: return "allocation";
	case HS_MEMW_EXIT: return "exit";
	case HS_MEMW_SIGNAL: return "signal";
	default: return "unknown";
	}
}

const char *hs_heap_stacks_name(unsigned v)
{
	switch (v) {
	case HS_HEAP_STACKS_SITE: return "site";
	case HS_HEAP_STACKS_FULL: return "full";
	case HS_HEAP_STACKS_NONE: return "none";
	default: return NULL;
	}
}

const char *hs_heap_stacks_note(unsigned v)
{
	switch (v) {
	case HS_HEAP_STACKS_SITE:
		return "stacks per call site (HEISEN_HEAP_STACKS=site): the innermost caller is exact, "
		       "the frames above it are those of the site's first call; HEISEN_HEAP_STACKS=full for exact stacks";
	case HS_HEAP_STACKS_FULL: return "full stacks at every malloc and free (HEISEN_HEAP_STACKS=full)";
	case HS_HEAP_STACKS_NONE: return "no allocation or free stacks recorded (HEISEN_HEAP_STACKS=none)";
	default: return "unknown stack mode";
	}
}

void hs_heap_message(const struct hs_fnd *f, char *msg, size_t len)
{
	const struct hs_finding *r = &f->rec;
	size_t used = 0;
	msg[0] = '\0';
	switch (f->kind) {
	case HS_F_DOUBLE_FREE:
		hs_appendf(msg, len, &used, "double free of 0x%llx (%llu bytes) in thread %d", (unsigned long long)r->addr,
			   (unsigned long long)r->size, r->tid);
		if (r->tid2)
			hs_appendf(msg, len, &used, ": first freed by thread %d", r->tid2);
		if (r->tid3)
			hs_appendf(msg, len, &used, "%s allocated by thread %d", r->tid2 ? "," : ":", r->tid3);
		break;
	case HS_F_HEAP_OVERFLOW:
		if (r->offset && r->size) /* found at the free or release of the block after it (format.h) */
			hs_appendf(msg, len, &used,
				   "heap overflow: the %llu-byte block at 0x%llx ran past its end into the chunk header of "
				   "the block at 0x%llx, found in thread %d when that block was freed or went back to glibc",
				   (unsigned long long)r->size, (unsigned long long)r->addr,
				   (unsigned long long)(r->addr + r->offset), r->tid);
		else if (r->offset)
			hs_appendf(msg, len, &used,
				   "heap overflow: the chunk header of the block at 0x%llx was overwritten (by memory "
				   "heisen does not check), found in thread %d when that block went back to glibc",
				   (unsigned long long)(r->addr + r->offset), r->tid);
		else
			hs_appendf(msg, len, &used,
				   "heap overflow: the bytes after the %llu-byte block at 0x%llx were overwritten, "
				   "found at its free in thread %d",
				   (unsigned long long)r->size, (unsigned long long)r->addr, r->tid);
		if (r->tid3)
			hs_appendf(msg, len, &used, "; allocated by thread %d", r->tid3);
		break;
	case HS_F_INVALID_FREE:
		hs_appendf(msg, len, &used, "invalid free of 0x%llx in thread %d: ", (unsigned long long)r->addr, r->tid);
		if (f->in_block)
			hs_appendf(msg, len, &used, "middle of a %llu-byte block at 0x%llx (offset %u)",
				   (unsigned long long)r->size, (unsigned long long)f->block, r->offset);
		else if (r->size)
			hs_appendf(msg, len, &used, "a %llu-byte block whose heisen header is in an unknown state "
				   "(overwritten?)", (unsigned long long)r->size);
		else
			hs_appendf(msg, len, &used, "unknown pointer: not the start of any block malloc handed out");
		if (r->size && r->tid3)
			hs_appendf(msg, len, &used, ", allocated by thread %d", r->tid3);
		if (r->size && r->tid2)
			hs_appendf(msg, len, &used, ", already freed by thread %d", r->tid2);
		break;
	case HS_F_USE_AFTER_FREE:
	case HS_F_HEAP_BUFFER_OVERFLOW: {
		/* AddressSanitizer's words: "READ of size ? at ..." (the size of the access is not known) */
		int64_t off = (int32_t)r->offset;
		const char *acc = r->access == HS_ACCESS_WRITE ? "WRITE" : r->access == HS_ACCESS_READ ? "READ" : "access";
		hs_appendf(msg, len, &used, "%s %s of size ? at 0x%llx in thread %d: ", hs_fkind_name(f->kind), acc,
			   (unsigned long long)r->addr, r->tid);
		if (off < 0)
			hs_appendf(msg, len, &used, "%lld bytes before", (long long)-off);
		else if ((uint64_t)off >= r->size)
			hs_appendf(msg, len, &used, "%llu bytes after", (unsigned long long)((uint64_t)off - r->size));
		else
			hs_appendf(msg, len, &used, "%lld bytes inside", (long long)off);
		hs_appendf(msg, len, &used, " a %llu-byte block at 0x%llx", (unsigned long long)r->size,
			   (unsigned long long)f->block);
		if (r->tid2)
			hs_appendf(msg, len, &used, ", freed by thread %d", r->tid2);
		if (r->tid3)
			hs_appendf(msg, len, &used, ", allocated by thread %d", r->tid3);
		break;
	}
	default:
		break;
	}
}

/* ---- file descriptors ---------------------------------------------------- */

const char *hs_fd_kind_name(unsigned kind)
{
	static const char *const names[HS_FDK_COUNT] = {
		[HS_FDK_UNKNOWN] = "unknown", [HS_FDK_FILE] = "file",         [HS_FDK_DIR] = "dir",
		[HS_FDK_SOCKET] = "socket",   [HS_FDK_PIPE] = "pipe",         [HS_FDK_EVENTFD] = "eventfd",
		[HS_FDK_TIMERFD] = "timerfd", [HS_FDK_SIGNALFD] = "signalfd", [HS_FDK_EPOLL] = "epoll",
		[HS_FDK_INOTIFY] = "inotify", [HS_FDK_MEMFD] = "memfd",       [HS_FDK_RECEIVED] = "received",
	};
	return kind < HS_FDK_COUNT ? names[kind] : "unknown";
}

const char *hs_fd_call_name(unsigned call)
{
	static const char *const names[HS_FDC_COUNT] = {
		[HS_FDC_NONE] = "none",
		[HS_FDC_OPEN] = "open",
		[HS_FDC_OPENAT] = "openat",
		[HS_FDC_CREAT] = "creat",
		[HS_FDC_SOCKET] = "socket",
		[HS_FDC_SOCKETPAIR] = "socketpair",
		[HS_FDC_ACCEPT] = "accept",
		[HS_FDC_PIPE] = "pipe",
		[HS_FDC_DUP] = "dup",
		[HS_FDC_DUP2] = "dup2",
		[HS_FDC_DUP3] = "dup3",
		[HS_FDC_FCNTL_DUPFD] = "fcntl-dupfd",
		[HS_FDC_EVENTFD] = "eventfd",
		[HS_FDC_TIMERFD] = "timerfd_create",
		[HS_FDC_SIGNALFD] = "signalfd",
		[HS_FDC_EPOLL] = "epoll_create",
		[HS_FDC_INOTIFY] = "inotify_init",
		[HS_FDC_MEMFD] = "memfd_create",
		[HS_FDC_FOPEN] = "fopen",
		[HS_FDC_FDOPEN] = "fdopen",
		[HS_FDC_FREOPEN] = "freopen",
		[HS_FDC_OPENDIR] = "opendir",
		[HS_FDC_FDOPENDIR] = "fdopendir",
		[HS_FDC_RECVMSG] = "recvmsg",
		[HS_FDC_INHERITED] = "inherited",
		[HS_FDC_UNSEEN] = "unseen",
		[HS_FDC_CLOSE] = "close",
		[HS_FDC_CLOSE_RANGE] = "close_range",
		[HS_FDC_FCLOSE] = "fclose",
		[HS_FDC_CLOSEDIR] = "closedir",
		[HS_FDC_CLOSE_OWNED] = "heisen_fd_close_owned",
		[HS_FDC_SET_OWNER] = "heisen_fd_set_owner",
		[HS_FDC_GONE] = "gone",
	};
	return call < HS_FDC_COUNT && names[call] ? names[call] : "unknown";
}

const char *hs_fd_op_name(unsigned op)
{
	switch (op) {
	case HS_FDE_CREATE: return "open";
	case HS_FDE_CLOSE: return "close";
	case HS_FDE_CLOSE_FAILED: return "close-failed";
	case HS_FDE_OWNER: return "owner";
	default: return "unknown";
	}
}

const char *hs_fd_rule_name(unsigned rule)
{
	switch (rule) {
	case HS_FD_RULE_EBADF: return "ebadf";
	case HS_FD_RULE_FILE: return "file";
	case HS_FD_RULE_DIR: return "dir";
	case HS_FD_RULE_OWNER: return "owner";
	case HS_FD_RULE_CONFIRMED: return "confirmed";
	case HS_FD_RULE_FILENO: return "fileno";
	case HS_FD_RULE_DIRFD: return "dirfd";
	case HS_FD_RULE_SAME_SITES: return "same-sites";
	default: return "unknown";
	}
}

const struct hs_fd_event *hs_fd_creation(const struct hs_fnd *f, uint32_t gen)
{
	for (uint32_t i = 0; i < f->nhist; i++)
		if (f->hist[i].op == HS_FDE_CREATE && f->hist[i].gen == gen)
			return &f->hist[i];
	return NULL;
}

void hs_fd_message(const struct hs_fnd *f, char *msg, size_t len)
{
	const struct hs_finding *r = &f->rec;
	const struct hs_fd_event *c = hs_fd_creation(f, (uint32_t)r->size);
	size_t used = 0;
	msg[0] = '\0';
	switch (f->kind) {
	case HS_F_DOUBLE_CLOSE:
		hs_appendf(msg, len, &used, "double close of fd %llu (generation %llu", (unsigned long long)r->addr,
			   (unsigned long long)r->size);
		if (c)
			hs_appendf(msg, len, &used, ", %s %s", hs_fd_kind_name(c->kind), c->path[0] ? c->path : "");
		hs_appendf(msg, len, &used, ") in thread %d: it was already closed", r->tid);
		if (r->tid2)
			hs_appendf(msg, len, &used, " by thread %d", r->tid2);
		if (r->signo)
			hs_appendf(msg, len, &used, "; the close failed with %s", r->signo == EBADF ? "EBADF" : "an error");
		break;
	case HS_F_STALE_CLOSE:
		hs_appendf(msg, len, &used, "stale close of fd %llu by thread %d: generation %llu", (unsigned long long)r->addr,
			   r->tid, (unsigned long long)r->size);
		if (c)
			hs_appendf(msg, len, &used, " (%s %s)", hs_fd_kind_name(c->kind), c->path[0] ? c->path : "");
		if (r->tid3)
			hs_appendf(msg, len, &used, " belonged to thread %d", r->tid3);
		else
			hs_appendf(msg, len, &used, " belonged to someone else");
		switch (r->offset) {
		case HS_FD_RULE_FILE:
			hs_appendf(msg, len, &used, "; the closing FILE's own generation was closed behind its back");
			break;
		case HS_FD_RULE_DIR:
			hs_appendf(msg, len, &used, "; the closing DIR's own generation was closed behind its back");
			break;
		case HS_FD_RULE_OWNER:
			hs_appendf(msg, len, &used, "; the owner declared with heisen_fd_set_owner did not close it");
			break;
		case HS_FD_RULE_FILENO:
		case HS_FD_RULE_DIRFD:
			hs_appendf(msg, len, &used, "; a plain close() of the number a %s owns: the %s's own close will "
				   "close whatever the number is then", r->offset == HS_FD_RULE_FILENO ? "FILE" : "DIR",
				   r->offset == HS_FD_RULE_FILENO ? "FILE" : "DIR");
			break;
		case HS_FD_RULE_SAME_SITES:
			hs_appendf(msg, len, &used, "; an object created and closed at the same call sites as the owner's "
				   "had the number from generation %llu, closed behind its back, and closed it again; the "
				   "rightful owner's own close then failed with EBADF", (unsigned long long)r->size - 1);
			break;
		case HS_FD_RULE_CONFIRMED:
			hs_appendf(msg, len, &used, "; thread %d had the number from generation %llu, and the rightful "
				   "owner's own close then failed with EBADF", r->tid, (unsigned long long)r->size - 1);
			break;
		default:
			break;
		}
		break;
	case HS_F_FD_LEAK:
		hs_appendf(msg, len, &used, "%u fd%s still open %s, created at %u site%s", f->nleaked,
			   f->nleaked == 1 ? "" : "s", f->at_hang ? "at the hang" : "at the end of the process", f->ngroups,
			   f->ngroups == 1 ? "" : "s");
		if (f->ngroups && f->groups[0].nfds) {
			const struct hs_fdsnap *d = f->groups[0].fds[0];
			hs_appendf(msg, len, &used, "; the most: %u x %s (%s%s)", f->groups[0].nfds, hs_fd_kind_name(d->f.kind),
				   hs_fd_call_name(d->f.call), d->f.path[0] ? ", " : "");
			if (d->f.path[0]) {
				used = used ? used - 1 : 0; /* before the ")" */
				hs_appendf(msg, len, &used, "%s)", d->f.path);
			}
		}
		break;
	default:
		break;
	}
}

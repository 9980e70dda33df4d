/* SPDX-License-Identifier: MIT */
/*
 * shim/threads.c — thread slots and their rings.  A thread gets a slot (and
 * the ring of the same index) the first time it enters a hook; its exit
 * destructor marks the slot exited, and an exited slot is reused only when
 * no free one is left, so the dumper still sees recently ended threads.
 * docs/design.md "Rings"; format.h struct hs_thread and struct hs_ring_header.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "inject.h" /* fault injection and chaos: one line per hook */
#include "shim.h"

static pthread_key_t exit_key;
static int exit_key_ok;

static void on_thread_exit(void *arg)
{
	struct hs_tls *t = arg;
	if (t != &hs_tls)
		return;
	t->in_hook = 1;
	hs_thread_detach(t);
	t->in_hook = 0;
}

int hs_threads_init(void)
{
	if (pthread_key_create(&exit_key, on_thread_exit) != 0)
		return -1;
	exit_key_ok = 1;
	return 0;
}

/* Take a free slot, else the exited slot that ended longest ago. */
static int claim_slot(struct hs_seg *s)
{
	uint32_t cap = s->hdr->tables[HS_T_THREADS].capacity;
	for (int attempt = 0; attempt < 4; attempt++) {
		uint32_t oldest = UINT32_MAX;
		uint64_t oldest_ns = UINT64_MAX;
		for (uint32_t i = 0; i < cap; i++) {
			uint32_t st;
			/* slots are backed in order, each with its ring, before first use */
			if (hs_seg_commit_entry(s, HS_T_THREADS, i) != 0 || hs_seg_commit_entry(s, HS_T_RINGS, i) != 0)
				break;
			st = __atomic_load_n(&s->threads[i].state, __ATOMIC_ACQUIRE);
			uint32_t expect = HS_THREAD_FREE;
			if (st == HS_THREAD_FREE &&
			    __atomic_compare_exchange_n(&s->threads[i].state, &expect, HS_THREAD_LIVE, 0,
							__ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
				return (int)i;
			if (st == HS_THREAD_EXITED && s->threads[i].end_ns < oldest_ns) {
				oldest = i;
				oldest_ns = s->threads[i].end_ns;
			}
		}
		if (oldest != UINT32_MAX) {
			uint32_t expect = HS_THREAD_EXITED;
			if (__atomic_compare_exchange_n(&s->threads[oldest].state, &expect, HS_THREAD_LIVE, 0,
							__ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
				return (int)oldest;
		}
	}
	return -1;
}

int hs_thread_attach(struct hs_tls *t)
{
	struct hs_seg *s = &hs_seg;
	uint32_t gen = __atomic_load_n(&hs_seg_gen, __ATOMIC_ACQUIRE);
	struct hs_thread *th;
	struct hs_ring_header *rh;
	uint64_t now = hs_now();
	int i;

	t->slot = NULL;
	t->tid = (int32_t)hs_sys.gettid();
	/* a header written over (its magic, its ABI version): nothing more goes into it */
	if (!HS_ASSERT(hs_header_intact(s->hdr))) {
		t->no_slot_gen = gen;
		return -1;
	}
	i = claim_slot(s);
	if (i < 0) {
		__atomic_add_fetch(&s->hdr->tables[HS_T_THREADS].dropped, 1, __ATOMIC_RELAXED);
		t->no_slot_gen = gen;
		return -1;
	}
	th = &s->threads[i];
	hs_lockstate_begin(th);
	th->held_count = 0;
	th->wait_kind = HS_WAIT_NONE;
	th->wait_addr = 0;
	th->wait_lock = 0;
	hs_lockstate_end(th);
	th->tid = t->tid;
	memset(th->name, 0, sizeof th->name);
	prctl(PR_GET_NAME, th->name, 0, 0, 0);
	th->name[HS_THREAD_NAME_MAX - 1] = '\0';
	th->start_ns = now;
	th->end_ns = 0;
	th->held_overflow = 0;
	th->generation++;

	rh = (struct hs_ring_header *)(s->rings + (uint64_t)i * s->hdr->tables[HS_T_RINGS].entry_size);
	rh->tid = t->tid;
	rh->slot = (uint32_t)i;
	t->ring = rh;
	t->recs = (struct hs_record *)(rh + 1);
	t->ring_mask = s->hdr->ring_records - 1;
	t->slot = th;
	t->seg_gen = gen;
	if (exit_key_ok)
		pthread_setspecific(exit_key, t);
	if (!t->altstack)
		hs_altstack_setup(t);
	hs_rec(t, now, HS_REC_THREAD_START, 0, (uint64_t)t->tid, th->generation, 0);
	HS_CHAOS(HS_CHAOS_THREAD); /* chaos.c: --chaos */
	return 0;
}

void hs_thread_detach(struct hs_tls *t)
{
	struct hs_thread *th = t->slot;
	if (t->dead)
		return;
	t->dead = 1;
	if (th && t->seg_gen == __atomic_load_n(&hs_seg_gen, __ATOMIC_ACQUIRE)) {
		uint64_t now = hs_now();
		hs_order_thread_exit(t); /* handover.c: before the slot can be reused */
		hs_rec(t, now, HS_REC_THREAD_EXIT, 0, (uint64_t)t->tid, 0, 0);
		th->end_ns = now;
		/* end_ns is visible before the slot can be seen as reusable */
		__atomic_store_n(&th->state, HS_THREAD_EXITED, __ATOMIC_RELEASE);
	}
	t->slot = NULL;
	hs_altstack_teardown(t);
	hs_area_release(t);
}

/* SPDX-License-Identifier: MIT */
/*
 * dumper/faults.h — the failures heisen injected (heisen-run --fail,
 * --fail-after, --heap-limit; shim/faults.c) and its chaos decisions
 * (--chaos; shim/chaos.c), read from the threads' rings for the reports.
 */
#ifndef HEISEN_DUMPER_FAULTS_H
#define HEISEN_DUMPER_FAULTS_H

#include <stddef.h>
#include <stdint.h>

#include "session.h"

/* One HS_REC_FAULT_INJECTED (or HS_REC_CHAOS) record and the thread that made it. */
struct hs_fault_ev {
	int32_t tid;
	struct hs_record r;
};

/*
 * The injected failures still in p's rings, oldest first: all of them when
 * they fit in max, else the oldest one (the cause of a cascade: a limit
 * refuses every later call too) and the newest max - 1; *total = how many
 * the rings hold (more than max when some were left out).  The rings are a flight recorder: older injections may
 * have been overwritten, so *total is a floor.  Returns the number copied.
 */
size_t hs_faults_read(struct hs_proc *p, struct hs_fault_ev *out, size_t max, size_t *total);

/* The same for the records of another type (HS_REC_CHAOS: the chaos
 * decisions that did something). */
size_t hs_ring_type_read(struct hs_proc *p, uint32_t type, struct hs_fault_ev *out, size_t max, size_t *total);

/* "malloc", "open", "close", "heap-limit" (enum hs_fault_call). */
const char *hs_fault_call_name(unsigned call);

/* "lock", "unlock", "gil-take", ... (enum hs_chaos_point) and "yield",
 * "sleep", "migrate" (enum hs_chaos_action). */
const char *hs_chaos_point_name(unsigned point);
const char *hs_chaos_action_name(unsigned action);

#endif

/* SPDX-License-Identifier: MIT */
/*
 * dumper/segment.h — read-only access to one segment file, validated.
 *
 * A segment is shared memory written by a process that may still run, may
 * have died mid-write, or may never have been heisen's at all.  This module
 * maps it read-only, checks the header in the order format.h prescribes, and
 * then hands out entries only through one bounds-checking accessor
 * (hs_seg_entry) and one string accessor (hs_seg_string); everything else in
 * the dumper goes through them and checks for NULL (docs/design.md
 * "Rules of the code", 8).
 * Values read from the mapping are copied before they are validated, so a
 * writer changing them underneath cannot turn a checked value into an
 * unchecked one.  What is found wrong is collected per segment
 * (hs_seg_complain) and reported once, naming the file.
 */
#ifndef HEISEN_DUMPER_SEGMENT_H
#define HEISEN_DUMPER_SEGMENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <heisen/format.h>

#define HS_SEG_COMPLAINTS 8   /* distinct complaints kept per segment */
#define HS_MSG_MAX 200

struct hs_seg {
	char *path;                 /* as opened (owned) */
	const char *name;           /* basename of path, for messages */
	const unsigned char *base;  /* PROT_READ, MAP_SHARED mapping of the whole file */
	uint64_t map_size;          /* file size when opened */
	bool mapped;                /* base is our mmap (tests may validate their own buffers) */
	uint32_t owner_uid;         /* uid owning the file when opened (who could have written it) */
	struct hs_header hdr;       /* private copy of the header, validated; its counts are stale */
	unsigned ncomplaints;
	unsigned complaints_lost;   /* beyond HS_SEG_COMPLAINTS */
	char complaints[HS_SEG_COMPLAINTS][HS_MSG_MAX];
};

/* hs_seg_open results. */
enum hs_seg_result {
	HS_SEG_OK = 0,
	HS_SEG_BAD = -1,       /* not a usable segment; err says why */
};

/*
 * Open and validate the segment at path.  On HS_SEG_OK, seg is mapped and
 * must be released with hs_seg_close.  On any other result nothing is left
 * open, seg is zeroed, and err holds one line saying what is wrong without
 * the file name (e.g. "truncated: 4096 of 3411968 bytes").  The shim names
 * a segment only once it is fully formed (shim/segment.c, open_unnamed), so
 * an empty file, a zero magic or a state word still INIT is damage, never
 * "still being created": HS_SEG_BAD like any other.  Never reads outside
 * the file.
 */
enum hs_seg_result hs_seg_open(struct hs_seg *seg, const char *path, char *err, size_t errlen);

/* Validate an already mapped image of `size` bytes (tests and hs_seg_open).
 * Same results as hs_seg_open; seg->base and map_size must be set. */
enum hs_seg_result hs_seg_validate(struct hs_seg *seg, char *err, size_t errlen);

/* Unmap and free.  Safe on a zeroed or already closed seg. */
void hs_seg_close(struct hs_seg *seg);

/*
 * Entry `index` of table t, or NULL when index >= the table's capacity.
 * The pointer is into shared memory: copy the entry before validating its
 * fields.  Never returns a pointer whose entry extends past segment_size.
 */
const void *hs_seg_entry(const struct hs_seg *seg, enum hs_table_id t, uint64_t index);

/* The table's count word (acquire), clamped to its capacity. */
uint32_t hs_seg_count(const struct hs_seg *seg, enum hs_table_id t);

/* The table's dropped counter (relaxed). */
uint32_t hs_seg_dropped(const struct hs_seg *seg, enum hs_table_id t);

/*
 * Copy the NUL-terminated string at byte offset off of the strings table
 * into out (at most outlen - 1 bytes, always terminated).  Returns 0, or -1
 * when off is outside the reserved part of the table or the string has no
 * NUL before its end (out is then "").  Strings longer than out are cut.
 */
int hs_seg_string(const struct hs_seg *seg, uint64_t off, char *out, size_t outlen);

/* Replace control characters in s (a string from the segment) by '?', so
 * that printing it cannot drive the terminal.  Returns s. */
char *hs_clean(char *s);

/* Live [atomic] header words, loaded with acquire from the mapping. */
uint64_t hs_seg_state(const struct hs_seg *seg);
uint64_t hs_seg_end_ns(const struct hs_seg *seg);
uint32_t hs_seg_flags(const struct hs_seg *seg);
/* Records ever written to the segment's rings (the sum of their heads). */
uint64_t hs_seg_events(const struct hs_seg *seg);
uint64_t hs_seg_findings_dropped(const struct hs_seg *seg);

/*
 * An [atomic] header field the writer keeps changing (the memory
 * samples, the OOM-kill counter at exit), loaded from the mapping with
 * acquire: off is its offsetof() in struct hs_header, 8- (or 4-) byte
 * aligned.  Returns 0 for an offset that is not inside this reader's header.
 */
uint64_t hs_seg_load64(const struct hs_seg *seg, size_t off);
uint32_t hs_seg_load32(const struct hs_seg *seg, size_t off);

/*
 * Record that something read from seg is wrong (printf format).  The same
 * message twice is kept once; beyond HS_SEG_COMPLAINTS they are counted.
 */
void hs_seg_complain(struct hs_seg *seg, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif

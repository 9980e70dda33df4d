/* SPDX-License-Identifier: MIT */
/*
 * internal/seg_header.h — the checks every reader makes on a segment's
 * header before it uses anything else.  Shared by heisen-dump
 * (dumper/segment.c hs_seg_validate) and heisen-run's end-of-run verdict
 * (internal/seg_verdict.h), so that the two never disagree on what a
 * damaged segment is; not part of the installed API.
 *
 * The checks follow the order written in format.h (struct hs_header):
 * size, magic, endian tag, ABI version, word size, header size, state
 * word, segment size, then every table.  A table is accepted only if it
 * lies inside segment_size, its entries are at least as large as this
 * reader's structures, and entries that hold atomic words are 8-byte
 * aligned.  Design: docs/design.md "The flight recorder" and "What it
 * must not do".
 */
#ifndef HEISEN_INTERNAL_SEG_HEADER_H
#define HEISEN_INTERNAL_SEG_HEADER_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <heisen/format.h>

/* The name of table t in messages ("threads", "fd events" ...). */
static inline const char *hs_table_name(int t)
{
	static const char *const names[HS_T_COUNT] = {
		"modules", "strings", "stacks", "stack index", "site index", "locks",
		"lock index", "edges", "edge index", "threads", "findings", "rings",
		"python frames", "python frame index", "fds", "fd events", "fd history", "cycle edges",
	};
	return t >= 0 && t < HS_T_COUNT ? names[t] : "?";
}

/* The smallest entry of table t this reader accepts: its own structure's size. */
static inline uint32_t hs_table_reader_size(int t)
{
	static const uint32_t sizes[HS_T_COUNT] = {
		sizeof(struct hs_module), 1, sizeof(struct hs_stack), sizeof(struct hs_index_slot),
		sizeof(struct hs_index_slot), sizeof(struct hs_lock), sizeof(struct hs_index_slot),
		sizeof(struct hs_edge), sizeof(struct hs_index_slot), sizeof(struct hs_thread),
		sizeof(struct hs_finding), sizeof(struct hs_ring_header), sizeof(struct hs_pyframe),
		sizeof(struct hs_index_slot), sizeof(struct hs_fd), sizeof(struct hs_fd_event), sizeof(struct hs_fd_event),
		sizeof(uint64_t),
	};
	return t >= 0 && t < HS_T_COUNT ? sizes[t] : 0;
}

/* printf into err; returns -1 (the checks' failure). */
static inline int hs_hdr_fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static inline int hs_hdr_fail(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return -1;
}

/* Table t of header h lies inside the segment with entries this reader can
 * read.  0, or -1 with err. */
static inline int hs_hdr_check_table(const struct hs_header *h, int t, char *err, size_t errlen)
{
	const struct hs_table *tb = &h->tables[t];
	uint64_t need = hs_table_reader_size(t);
	if (t == HS_T_RINGS)
		need += (uint64_t)h->ring_records * sizeof(struct hs_record);
	if (tb->capacity == 0)
		return 0;
	if (tb->entry_size < need)
		return hs_hdr_fail(err, errlen, "table %s: entry size %u, need at least %llu", hs_table_name(t),
				   tb->entry_size, (unsigned long long)need);
	if (t == HS_T_STRINGS && tb->entry_size != 1)
		return hs_hdr_fail(err, errlen, "table strings: entry size %u, must be 1", tb->entry_size);
	if (t != HS_T_STRINGS && (tb->offset % 8 || tb->entry_size % 8))
		return hs_hdr_fail(err, errlen, "table %s: offset %llu or entry size %u not 8-byte aligned",
				   hs_table_name(t), (unsigned long long)tb->offset, tb->entry_size);
	if (tb->offset < h->header_size || tb->offset > h->segment_size)
		return hs_hdr_fail(err, errlen, "table %s: offset %llu outside [%u, %llu]", hs_table_name(t),
				   (unsigned long long)tb->offset, h->header_size, (unsigned long long)h->segment_size);
	/* uint32 * uint32 cannot overflow 64 bits; the subtraction cannot wrap. */
	if ((uint64_t)tb->capacity * tb->entry_size > h->segment_size - tb->offset)
		return hs_hdr_fail(err, errlen,
				   "table %s: %u entries of %u bytes at offset %llu overrun the segment (%llu bytes)",
				   hs_table_name(t), tb->capacity, tb->entry_size, (unsigned long long)tb->offset,
				   (unsigned long long)h->segment_size);
	return 0;
}

/*
 * Check the header of a segment file of file_size bytes, whose first
 * min(file_size, sizeof(struct hs_header)) bytes are at p (a mapping of
 * the file, or a copy read from it; 8-byte aligned; NULL when the file is
 * empty).  On success copies the header into *out (the state word there
 * is as loaded once, with acquire, from p) and returns 0; otherwise returns
 * -1 with one line in err saying what is wrong, without the file name
 * ("truncated: 4096 of 3411968 bytes").  The shim names a segment only once
 * it is fully formed (shim/segment.c), so an empty file, a zero magic or a
 * state word still INIT is damage, never "still being created".
 */
static inline int hs_header_check(const unsigned char *p, uint64_t file_size, struct hs_header *out, char *err,
				  size_t errlen)
{
	struct hs_header *h = out;
	uint64_t state;
	bool zero = true;

	if (file_size == 0 || !p)
		return hs_hdr_fail(err, errlen,
				   "empty: no header (its process died before writing one, or the file was emptied)");
	for (size_t i = 0; i < HS_MAGIC_LEN && i < file_size; i++)
		zero &= p[i] == 0;
	if (file_size >= HS_MAGIC_LEN && zero)
		return hs_hdr_fail(err, errlen, "zero magic: the header was never written or was wiped");
	if (file_size < HS_MAGIC_LEN || memcmp(p, HS_MAGIC, HS_MAGIC_LEN) != 0)
		return hs_hdr_fail(err, errlen, "bad magic: not a heisen segment");
	if (file_size < sizeof(struct hs_header)) {
		/* the segment size a truncated file promises, when it is long enough to say */
		uint64_t promised = sizeof(struct hs_header), seg_size;
		if (file_size >= offsetof(struct hs_header, segment_size) + sizeof(uint64_t)) {
			memcpy(&seg_size, p + offsetof(struct hs_header, segment_size), sizeof seg_size);
			if (seg_size > promised)
				promised = seg_size;
		}
		return hs_hdr_fail(err, errlen, "truncated: %llu of %llu bytes", (unsigned long long)file_size,
				   (unsigned long long)promised);
	}
	memcpy(h, p, sizeof *h);
	if (h->endian_tag != HS_ENDIAN_TAG) {
		if (h->endian_tag == __builtin_bswap32(HS_ENDIAN_TAG))
			return hs_hdr_fail(err, errlen, "written with the other byte order");
		return hs_hdr_fail(err, errlen, "bad endian tag 0x%08x", h->endian_tag);
	}
	if (h->abi_version != HS_ABI_VERSION)
		return hs_hdr_fail(err, errlen, "ABI version %u, this heisen-dump reads %u", h->abi_version,
				   HS_ABI_VERSION);
	if (h->word_size != sizeof(void *))
		return hs_hdr_fail(err, errlen, "word size %u, this heisen-dump reads %zu", h->word_size,
				   sizeof(void *));
	if (h->header_size < sizeof(struct hs_header))
		return hs_hdr_fail(err, errlen, "header size %u is smaller than %zu", h->header_size,
				   sizeof(struct hs_header));
	/* INIT: the tables were never laid out (a named segment is always past it) */
	state = __atomic_load_n(&((const struct hs_header *)(const void *)p)->state, __ATOMIC_ACQUIRE);
	h->state = state;
	if (HS_STATE_OF(state) == HS_STATE_INIT)
		return hs_hdr_fail(err, errlen, "state word INIT: the header was never finished, or was damaged");
	if (HS_STATE_OF(state) > HS_STATE_SIGNALED)
		return hs_hdr_fail(err, errlen, "state word %#llx: not a known state (damaged)",
				   (unsigned long long)state);
	if (h->segment_size < h->header_size)
		return hs_hdr_fail(err, errlen, "segment size %llu is smaller than its header (%u)",
				   (unsigned long long)h->segment_size, h->header_size);
	if (h->segment_size > file_size)
		return hs_hdr_fail(err, errlen, "truncated: %llu of %llu bytes", (unsigned long long)file_size,
				   (unsigned long long)h->segment_size);
	if (h->tables[HS_T_RINGS].capacity && (h->ring_records == 0 || (h->ring_records & (h->ring_records - 1))))
		return hs_hdr_fail(err, errlen, "ring records %u is not a power of two", h->ring_records);
	if (h->tables[HS_T_FD_EVENTS].capacity & (h->tables[HS_T_FD_EVENTS].capacity - 1))
		return hs_hdr_fail(err, errlen, "table fd events: capacity %u is not a power of two",
				   h->tables[HS_T_FD_EVENTS].capacity);
	for (int t = 0; t < HS_T_COUNT; t++)
		if (hs_hdr_check_table(h, t, err, errlen) != 0)
			return -1;
	return 0;
}

#endif

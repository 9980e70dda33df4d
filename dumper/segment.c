/* SPDX-License-Identifier: MIT */
/*
 * dumper/segment.c — map a segment read-only and validate it before use.
 *
 * The checks follow the order written in format.h (struct hs_header): size,
 * magic, endian tag, ABI version, word size, header size, segment size, then
 * every table (internal/seg_header.h, shared with heisen-run).  A table is
 * accepted only if it lies inside segment_size, its entries are at least as
 * large as this reader's structures, and entries that hold atomic words are
 * 8-byte aligned.  After that, hs_seg_entry and
 * hs_seg_string are the only ways into the mapping.  Design: docs/design.md "The
 * flight recorder" and "What it must not do".
 */
#include "segment.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal/seg_dir.h"
#include "internal/seg_header.h"
#include "internal/seg_holes.h"
#include "internal/seg_rings.h"

enum hs_seg_result hs_seg_validate(struct hs_seg *seg, char *err, size_t errlen)
{
	/* the checks heisen-run's end-of-run verdict makes too (internal/seg_header.h) */
	return hs_header_check(seg->base, seg->map_size, &seg->hdr, err, errlen) == 0 ? HS_SEG_OK : HS_SEG_BAD;
}

static const char *base_name(const char *path)
{
	const char *s = strrchr(path, '/');
	return s ? s + 1 : path;
}

enum hs_seg_result hs_seg_open(struct hs_seg *seg, const char *path, char *err, size_t errlen)
{
	struct stat st;
	enum hs_seg_result r;
	void *map = NULL;
	int fd;

	memset(seg, 0, sizeof *seg);
	/* the one way a segment is opened (internal/seg_dir.h): a FIFO or a
	 * device named *.seg neither blocks nor is read */
	fd = hs_seg_openat(AT_FDCWD, path, O_RDONLY, &st, err, errlen);
	if (fd < 0)
		return HS_SEG_BAD;
	if (st.st_size > 0) {
		map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
		if (map == MAP_FAILED) {
			hs_hdr_fail(err, errlen, "cannot map: %s", strerror(errno));
			r = HS_SEG_BAD;
			close(fd);
			return r;
		}
	}
	if (map)
		hs_cover_holes(fd, map, (uint64_t)st.st_size);
	close(fd); /* the mapping keeps the file */
	seg->base = map;
	seg->map_size = (uint64_t)st.st_size;
	r = hs_seg_validate(seg, err, errlen);
	if (r != HS_SEG_OK) {
		if (map)
			munmap(map, (size_t)st.st_size);
		memset(seg, 0, sizeof *seg);
		return r;
	}
	seg->mapped = map != NULL;
	seg->owner_uid = (uint32_t)st.st_uid;
	seg->path = strdup(path);
	seg->name = seg->path ? base_name(seg->path) : "?";
	return HS_SEG_OK;
}

void hs_seg_close(struct hs_seg *seg)
{
	if (seg->mapped)
		munmap((void *)seg->base, (size_t)seg->map_size);
	free(seg->path);
	memset(seg, 0, sizeof *seg);
}

const void *hs_seg_entry(const struct hs_seg *seg, enum hs_table_id t, uint64_t index)
{
	const struct hs_table *tb;
	if (!seg->base || (unsigned)t >= HS_T_COUNT)
		return NULL;
	tb = &seg->hdr.tables[t];
	if (index >= tb->capacity)
		return NULL;
	/* validated: offset + capacity * entry_size <= segment_size <= map_size */
	return seg->base + tb->offset + index * tb->entry_size;
}

static const struct hs_table *live_table(const struct hs_seg *seg, enum hs_table_id t)
{
	return &((const struct hs_header *)(const void *)seg->base)->tables[t];
}

uint32_t hs_seg_count(const struct hs_seg *seg, enum hs_table_id t)
{
	uint32_t n;
	if (!seg->base || (unsigned)t >= HS_T_COUNT)
		return 0;
	/* acquire: pairs with the writer's release of count, entries below are complete */
	n = __atomic_load_n(&live_table(seg, t)->count, __ATOMIC_ACQUIRE);
	return n < seg->hdr.tables[t].capacity ? n : seg->hdr.tables[t].capacity;
}

uint32_t hs_seg_dropped(const struct hs_seg *seg, enum hs_table_id t)
{
	if (!seg->base || (unsigned)t >= HS_T_COUNT)
		return 0;
	return __atomic_load_n(&live_table(seg, t)->dropped, __ATOMIC_RELAXED);
}

int hs_seg_string(const struct hs_seg *seg, uint64_t off, char *out, size_t outlen)
{
	const char *s = hs_seg_entry(seg, HS_T_STRINGS, 0);
	uint64_t limit = hs_seg_count(seg, HS_T_STRINGS);
	size_t i;

	if (outlen == 0)
		return -1;
	out[0] = '\0';
	if (!s || off >= limit)
		return -1;
	/* Copy byte by byte: the writer may still be filling reserved bytes, so
	 * a NUL seen by a first scan could be gone by a second one. */
	for (i = 0; off + i < limit; i++) {
		char c = __atomic_load_n(&s[off + i], __ATOMIC_RELAXED);
		if (c == '\0') {
			out[i < outlen ? i : outlen - 1] = '\0';
			hs_clean(out);
			return 0;
		}
		if (i < outlen - 1)
			out[i] = c;
	}
	out[0] = '\0';
	return -1;
}

char *hs_clean(char *s)
{
	for (char *p = s; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			*p = '?';
	return s;
}

#define LIVE_HDR(seg) ((const struct hs_header *)(const void *)(seg)->base)

uint64_t hs_seg_state(const struct hs_seg *seg)
{
	return __atomic_load_n(&LIVE_HDR(seg)->state, __ATOMIC_ACQUIRE);
}

uint64_t hs_seg_end_ns(const struct hs_seg *seg)
{
	return __atomic_load_n(&LIVE_HDR(seg)->end_mono_ns, __ATOMIC_ACQUIRE);
}

uint32_t hs_seg_flags(const struct hs_seg *seg)
{
	return __atomic_load_n(&LIVE_HDR(seg)->flags, __ATOMIC_RELAXED);
}

uint64_t hs_seg_events(const struct hs_seg *seg)
{
	/* the one sum of ring heads (internal/seg_rings.h), heisen-run's too */
	uint64_t sum = 0;
	hs_rings_events(seg->base, seg->map_size, &seg->hdr, &sum);
	return sum;
}

uint64_t hs_seg_findings_dropped(const struct hs_seg *seg)
{
	return __atomic_load_n(&LIVE_HDR(seg)->findings_dropped, __ATOMIC_RELAXED);
}

uint64_t hs_seg_load64(const struct hs_seg *seg, size_t off)
{
	if (!seg->base || off % 8 || off + 8 > sizeof(struct hs_header))
		return 0;
	/* validated at open: the mapping holds at least sizeof(struct hs_header) */
	return __atomic_load_n((const uint64_t *)(const void *)(seg->base + off), __ATOMIC_ACQUIRE);
}

uint32_t hs_seg_load32(const struct hs_seg *seg, size_t off)
{
	if (!seg->base || off % 4 || off + 4 > sizeof(struct hs_header))
		return 0;
	return __atomic_load_n((const uint32_t *)(const void *)(seg->base + off), __ATOMIC_ACQUIRE);
}

void hs_seg_complain(struct hs_seg *seg, const char *fmt, ...)
{
	char msg[HS_MSG_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	for (unsigned i = 0; i < seg->ncomplaints; i++)
		if (strcmp(seg->complaints[i], msg) == 0)
			return;
	if (seg->ncomplaints == HS_SEG_COMPLAINTS) {
		seg->complaints_lost++;
		return;
	}
	memcpy(seg->complaints[seg->ncomplaints++], msg, sizeof msg);
}

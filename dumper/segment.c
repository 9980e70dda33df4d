/* SPDX-License-Identifier: MIT */
/*
 * dumper/segment.c — map a segment read-only and validate it before use.
 *
 * The checks follow the order written in format.h (struct hs_header): size,
 * magic, endian tag, ABI version, word size, header size, segment size, then
 * every table.  A table is accepted only if it lies inside segment_size, its
 * entries are at least as large as this reader's structures, and entries
 * that hold atomic words are 8-byte aligned.  After that, hs_seg_entry and
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

#include "internal/seg_holes.h"

static const char *const table_names[HS_T_COUNT] = {
	"modules", "strings", "stacks", "stack index", "site index", "locks",
	"lock index", "edges", "edge index", "threads", "findings", "rings",
	"python frames", "python frame index", "fds", "fd events", "fd history", "cycle edges",
};

static const uint32_t reader_sizes[HS_T_COUNT] = {
	sizeof(struct hs_module), 1, sizeof(struct hs_stack), sizeof(struct hs_index_slot),
	sizeof(struct hs_index_slot), sizeof(struct hs_lock), sizeof(struct hs_index_slot),
	sizeof(struct hs_edge), sizeof(struct hs_index_slot), sizeof(struct hs_thread),
	sizeof(struct hs_finding), sizeof(struct hs_ring_header), sizeof(struct hs_pyframe),
	sizeof(struct hs_index_slot), sizeof(struct hs_fd), sizeof(struct hs_fd_event), sizeof(struct hs_fd_event),
	sizeof(uint64_t),
};

static enum hs_seg_result fail(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static enum hs_seg_result fail(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return HS_SEG_BAD;
}

/* The segment size a truncated file promises, or the header size when the
 * file is too short to say. */
static uint64_t promised_size(const unsigned char *p, uint64_t size)
{
	uint64_t seg_size;
	if (size < offsetof(struct hs_header, segment_size) + sizeof(uint64_t))
		return sizeof(struct hs_header);
	memcpy(&seg_size, p + offsetof(struct hs_header, segment_size), sizeof seg_size);
	return seg_size > sizeof(struct hs_header) ? seg_size : sizeof(struct hs_header);
}

static bool all_zero(const unsigned char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return false;
	return true;
}

/* Checks that need only the fixed identification fields. */
static enum hs_seg_result check_ident(const struct hs_header *h, char *err, size_t errlen)
{
	if (h->endian_tag != HS_ENDIAN_TAG) {
		if (h->endian_tag == __builtin_bswap32(HS_ENDIAN_TAG))
			return fail(err, errlen, "written with the other byte order");
		return fail(err, errlen, "bad endian tag 0x%08x", h->endian_tag);
	}
	if (h->abi_version != HS_ABI_VERSION)
		return fail(err, errlen, "ABI version %u, this heisen-dump reads %u", h->abi_version,
			    HS_ABI_VERSION);
	if (h->word_size != sizeof(void *))
		return fail(err, errlen, "word size %u, this heisen-dump reads %zu", h->word_size,
			    sizeof(void *));
	if (h->header_size < sizeof(struct hs_header))
		return fail(err, errlen, "header size %u is smaller than %zu", h->header_size,
			    sizeof(struct hs_header));
	return HS_SEG_OK;
}

static enum hs_seg_result check_table(const struct hs_header *h, int t, char *err, size_t errlen)
{
	const struct hs_table *tb = &h->tables[t];
	uint64_t need = reader_sizes[t];
	if (t == HS_T_RINGS)
		need += (uint64_t)h->ring_records * sizeof(struct hs_record);
	if (tb->capacity == 0)
		return HS_SEG_OK;
	if (tb->entry_size < need)
		return fail(err, errlen, "table %s: entry size %u, need at least %llu", table_names[t],
			    tb->entry_size, (unsigned long long)need);
	if (t == HS_T_STRINGS && tb->entry_size != 1)
		return fail(err, errlen, "table strings: entry size %u, must be 1", tb->entry_size);
	if (t != HS_T_STRINGS && (tb->offset % 8 || tb->entry_size % 8))
		return fail(err, errlen, "table %s: offset %llu or entry size %u not 8-byte aligned",
			    table_names[t], (unsigned long long)tb->offset, tb->entry_size);
	if (tb->offset < h->header_size || tb->offset > h->segment_size)
		return fail(err, errlen, "table %s: offset %llu outside [%u, %llu]", table_names[t],
			    (unsigned long long)tb->offset, h->header_size,
			    (unsigned long long)h->segment_size);
	/* uint32 * uint32 cannot overflow 64 bits; the subtraction cannot wrap. */
	if ((uint64_t)tb->capacity * tb->entry_size > h->segment_size - tb->offset)
		return fail(err, errlen, "table %s: %u entries of %u bytes at offset %llu overrun the segment (%llu bytes)",
			    table_names[t], tb->capacity, tb->entry_size, (unsigned long long)tb->offset,
			    (unsigned long long)h->segment_size);
	return HS_SEG_OK;
}

static enum hs_seg_result check_geometry(const struct hs_header *h, uint64_t file_size, char *err,
					 size_t errlen)
{
	if (h->segment_size < h->header_size)
		return fail(err, errlen, "segment size %llu is smaller than its header (%u)",
			    (unsigned long long)h->segment_size, h->header_size);
	if (h->segment_size > file_size)
		return fail(err, errlen, "truncated: %llu of %llu bytes", (unsigned long long)file_size,
			    (unsigned long long)h->segment_size);
	if (h->tables[HS_T_RINGS].capacity &&
	    (h->ring_records == 0 || (h->ring_records & (h->ring_records - 1))))
		return fail(err, errlen, "ring records %u is not a power of two", h->ring_records);
	if (h->tables[HS_T_FD_EVENTS].capacity & (h->tables[HS_T_FD_EVENTS].capacity - 1))
		return fail(err, errlen, "table fd events: capacity %u is not a power of two",
			    h->tables[HS_T_FD_EVENTS].capacity);
	for (int t = 0; t < HS_T_COUNT; t++)
		if (check_table(h, t, err, errlen) != HS_SEG_OK)
			return HS_SEG_BAD;
	return HS_SEG_OK;
}

enum hs_seg_result hs_seg_validate(struct hs_seg *seg, char *err, size_t errlen)
{
	const unsigned char *p = seg->base;
	uint64_t size = seg->map_size;
	uint64_t state;

	/* a segment is named only once fully formed: none of these is "being created" */
	if (size == 0 || !p)
		return fail(err, errlen, "empty: no header (its process died before writing one, or the file was emptied)");
	if (size >= HS_MAGIC_LEN && all_zero(p, HS_MAGIC_LEN))
		return fail(err, errlen, "zero magic: the header was never written or was wiped");
	if (size < HS_MAGIC_LEN || memcmp(p, HS_MAGIC, HS_MAGIC_LEN) != 0)
		return fail(err, errlen, "bad magic: not a heisen segment");
	if (size < sizeof(struct hs_header))
		return fail(err, errlen, "truncated: %llu of %llu bytes", (unsigned long long)size,
			    (unsigned long long)promised_size(p, size));
	memcpy(&seg->hdr, p, sizeof seg->hdr);
	if (check_ident(&seg->hdr, err, errlen) != HS_SEG_OK)
		return HS_SEG_BAD;
	/* INIT: the tables were never laid out (a named segment is always past it) */
	state = __atomic_load_n(&((const struct hs_header *)(const void *)p)->state, __ATOMIC_ACQUIRE);
	if (HS_STATE_OF(state) == HS_STATE_INIT)
		return fail(err, errlen, "state word INIT: the header was never finished, or was damaged");
	if (HS_STATE_OF(state) > HS_STATE_SIGNALED)
		return fail(err, errlen, "state word %#llx: not a known state (damaged)", (unsigned long long)state);
	return check_geometry(&seg->hdr, size, err, errlen);
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
	/* O_NONBLOCK: a FIFO (or a device) named *.seg must not block the open;
	 * anything but a regular file is then refused on the descriptor */
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0)
		return fail(err, errlen, "cannot open: %s", strerror(errno));
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return fail(err, errlen, "not a regular file");
	}
	if (st.st_size > 0) {
		map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
		if (map == MAP_FAILED) {
			r = fail(err, errlen, "cannot map: %s", strerror(errno));
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
	/* the format keeps no shared ring counter (format.h): each ring's head counts its records */
	uint64_t sum = 0;
	for (uint32_t i = 0; i < seg->hdr.tables[HS_T_RINGS].capacity; i++) {
		const struct hs_ring_header *rh = hs_seg_entry(seg, HS_T_RINGS, i);
		if (rh)
			sum += __atomic_load_n(&rh->head, __ATOMIC_ACQUIRE);
	}
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

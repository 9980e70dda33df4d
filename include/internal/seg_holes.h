/* SPDX-License-Identifier: MIT */
/*
 * internal/seg_holes.h — how a reader maps a sparse segment without
 * touching its holes.  Shared by heisen-dump (dumper/segment.c) and
 * heisen-run's watchdog (launcher/segment.c); not part of the installed API.
 *
 * A sparse segment (HS_HDR_SPARSE, format.h) has holes where the writer
 * never committed a table's chunk (the rings of thread slots never used).
 * Touching a hole through a shared mapping would make tmpfs allocate it
 * (the RAM the writer saved) and raise SIGBUS in the reader when /dev/shm
 * is full.  So each hole found at open (lseek SEEK_HOLE / SEEK_DATA) is
 * mapped over with private zero pages, which every table reads as empty.
 * A chunk the writer commits later reads as zeros in this mapping until the
 * reader maps the segment again: the reader sees the tables' storage as it
 * was at open, their counts live.
 */
#ifndef HEISEN_INTERNAL_SEG_HOLES_H
#define HEISEN_INTERNAL_SEG_HOLES_H

#include <stdint.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

/*
 * Cover the holes of the file fd (size bytes, mapped read-only at map) with
 * private zero pages, page by page (4 KiB; a hole's partial pages stay as
 * they are, since they hold data).  Errors are not reported: an lseek that
 * fails ends the scan (the kernel or file system does not know holes: the
 * file is then dense), and an mmap that fails leaves the shared page there.
 */
static inline void hs_cover_holes(int fd, void *map, uint64_t size)
{
	off_t pos = 0;
	while ((uint64_t)pos < size) {
		off_t hole = lseek(fd, pos, SEEK_HOLE), data;
		uint64_t lo, hi;
		if (hole < 0 || (uint64_t)hole >= size)
			return;
		data = lseek(fd, hole, SEEK_DATA);
		if (data < 0 || (uint64_t)data > size)
			data = (off_t)size;
		lo = ((uint64_t)hole + 4095) & ~(uint64_t)4095;
		hi = (uint64_t)data & ~(uint64_t)4095;
		if ((uint64_t)data == size)
			hi = (size + 4095) & ~(uint64_t)4095;
		if (hi > lo)
			mmap((char *)map + lo, hi - lo, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
		pos = data;
	}
}

#endif

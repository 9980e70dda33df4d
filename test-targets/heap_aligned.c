/* SPDX-License-Identifier: MIT */
/*
 * heap_aligned — a correct program: posix_memalign, aligned_alloc and
 * memalign with every power-of-two alignment up to 4096, for a few sizes
 * (including 0 and sizes that are not multiples of the alignment), each
 * block written whole, its alignment checked by the program itself, then
 * freed; realloc of an aligned block and malloc_usable_size agree.  heisen
 * must report nothing.  Exits 1 with "misaligned ..." on stderr when an
 * alignment is wrong; prints "pid P", "blocks N" and "done ok".
 */
#include <malloc.h>
#include <stdint.h>

#include "tt.h"

static int bad;

static void check(const char *what, void *p, size_t align, size_t size)
{
	if (!p) {
		if (size == 0)
			return;
		fprintf(stderr, "%s(%zu, %zu) returned NULL\n", what, align, size);
		bad = 1;
		return;
	}
	if ((uintptr_t)p % align) {
		fprintf(stderr, "misaligned %s(%zu, %zu) = %p\n", what, align, size, p);
		bad = 1;
	}
	if (malloc_usable_size(p) < size) {
		fprintf(stderr, "%s(%zu, %zu): malloc_usable_size %zu < size\n", what, align, size,
			malloc_usable_size(p));
		bad = 1;
	}
	memset(p, 0xab, size);
}

int main(void)
{
	static const size_t sizes[] = {0, 1, 7, 100, 4096, 5000};
	unsigned long blocks = 0;
	printf("pid %d\n", (int)getpid());
	for (size_t align = 1; align <= 4096; align <<= 1) {
		for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
			size_t size = sizes[k];
			void *p = NULL;
			if (align >= sizeof(void *)) {
				int rc = posix_memalign(&p, align, size);
				if (rc != 0) {
					fprintf(stderr, "posix_memalign(%zu, %zu): %s\n", align, size, strerror(rc));
					bad = 1;
				}
				check("posix_memalign", p, align, size);
				free(p), blocks++;
			}
			p = aligned_alloc(align, size);
			check("aligned_alloc", p, align, size);
			if (p && size) {
				/* growing keeps the contents; the new block need not stay aligned */
				char *q = realloc(p, size * 2);
				if (!q || (unsigned char)q[size - 1] != 0xab) {
					fprintf(stderr, "realloc of aligned_alloc(%zu, %zu) lost the contents\n", align, size);
					bad = 1;
				}
				if (q)
					memset(q, 0xcd, size * 2);
				p = q;
			}
			free(p), blocks++;
			p = memalign(align, size);
			check("memalign", p, align, size);
			free(p), blocks++;
		}
	}
	printf("blocks %lu\n", blocks);
	if (bad)
		return 1;
	printf("done ok\n");
	return 0;
}

/* SPDX-License-Identifier: MIT */
/*
 * heap_thread_exit_free — a thread per request, each logging an error code
 * the C library has no text for: strerror() formats "Unknown error N" into
 * a buffer of the thread's own, which glibc frees when the thread ends,
 * after the threads' key destructors have run (its own thread-exit
 * cleanup).  THREADS threads, one after the other, after WARM warm-up ones.
 * Prints "vm_warm KIB" (VmSize after the warm-up threads), "vm_end KIB"
 * (after all), then "done ok".
 *
 * Usage: heap_thread_exit_free [THREADS [WARM]]   (default 400, 20)
 */
#include "tt.h"

static long vm_size_kib(void)
{
	char line[256];
	long kib = -1;
	FILE *f = fopen("/proc/self/status", "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof line, f))
		if (sscanf(line, "VmSize: %ld kB", &kib) == 1)
			break;
	fclose(f);
	return kib;
}

static void *request(void *arg)
{
	int code = 10000 + (int)(long)arg;
	char *volatile msg = strerror(code);
	if (strncmp(msg, "Unknown error", 13) != 0) {
		fprintf(stderr, "unexpected text for %d: %s\n", code, msg);
		abort();
	}
	return NULL;
}

int main(int argc, char **argv)
{
	long threads = argc > 1 ? atol(argv[1]) : 400, warm = argc > 2 ? atol(argv[2]) : 20;
	for (long i = 0; i < warm; i++)
		tt_run_thread(request, (void *)i);
	printf("vm_warm %ld\n", vm_size_kib());
	for (long i = 0; i < threads; i++)
		tt_run_thread(request, (void *)(warm + i));
	printf("vm_end %ld\n", vm_size_kib());
	printf("done ok\n");
	return 0;
}

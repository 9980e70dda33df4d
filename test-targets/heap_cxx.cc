// SPDX-License-Identifier: MIT
//
// heap_cxx — C++ new and delete reach the heap checker through libstdc++
// (operator new calls malloc, operator delete calls free).  Seed 004 in its
// original language: a file handle whose reopen() deletes its buffer without
// clearing the pointer, and whose destructor deletes it again.
//
//   heap_cxx double-delete   Handle::Handle allocates (new char[]),
//                            Handle::reopen deletes, Handle::~Handle deletes
//                            again: a double free, with those three stacks.
//                            Many other allocations through operator new come
//                            first, from another function, so a stack cached
//                            per malloc call site (inside libstdc++) would
//                            name the wrong allocator.
//   heap_cxx bad-alloc       new of an impossible size throws std::bad_alloc
//                            (caught); the refused allocation is counted with
//                            its size and the stack of big_table().
//   heap_cxx correct         containers, strings, shared_ptr, new/delete and
//                            new[]/delete[] in four threads: no finding.
//   heap_cxx index N         an index of N keys, each a 25-character key to a
//                            vector of one 30-character value (a std::map
//                            node of 88 bytes, blocks of 26, 32 and 31: four
//                            blocks a key, none freed); prints "blocks B" and
//                            "bytes U", glibc's own count of the bytes its
//                            chunks hold in use (mallinfo2) grown by it.
//
// Prints "pid P", "tid_main T" and "done ok" when it gets to the end.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <malloc.h>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include <sys/syscall.h>
#include <unistd.h>

namespace {

struct Handle {
	char *buf;
	size_t len;

	__attribute__((noinline)) explicit Handle(size_t n) : buf(new char[n]), len(n)
	{
		std::memset(buf, 'x', n);
	}
	// The file was replaced under us: drop the buffer; the new open fails
	// and the pointer stays (the bug).
	__attribute__((noinline)) int reopen(bool new_open_fails)
	{
		delete[] buf;
		if (new_open_fails)
			return -1;
		buf = new char[len];
		return 0;
	}
	__attribute__((noinline)) ~Handle() { delete[] buf; }
};

__attribute__((noinline)) std::vector<std::string> *warm_up()
{
	auto *v = new std::vector<std::string>;
	for (int i = 0; i < 200; i++)
		v->push_back(std::string(40 + i % 7, 'a'));
	return v;
}

__attribute__((noinline)) void big_table()
{
	try {
		size_t n = (size_t)1 << 46; // 64 TiB: more than the address space allows
		char *p = new char[n];
		p[0] = 1;
		delete[] p;
		std::printf("allocated the impossible\n");
	} catch (const std::bad_alloc &) {
		std::printf("bad_alloc %zu\n", (size_t)1 << 46);
	}
}

void worker(int id)
{
	std::map<int, std::string> m;
	for (int i = 0; i < 2000; i++) {
		m[i % 97] = std::string(16 + (i + id) % 64, 'y');
		auto sp = std::make_shared<std::vector<int>>(i % 50 + 1, id);
		int *one = new int(i);
		int *many = new int[i % 31 + 1];
		many[0] = *one + (*sp)[0];
		delete one;
		delete[] many;
	}
}

// An index of n keys (see the top); the growth of glibc's in-use bytes.
__attribute__((noinline)) size_t build_index(std::map<std::string, std::vector<std::string>> &index, long n)
{
	size_t before = mallinfo2().uordblks;
	char key[32];
	for (long i = 0; i < n; i++) {
		std::snprintf(key, sizeof key, "request/%05ld/payload-key", i % 100000);
		std::vector<std::string> vals;
		vals.reserve(1);
		vals.emplace_back(30, (char)('a' + i % 26));
		index.emplace(std::string(key, 25), std::move(vals));
	}
	return mallinfo2().uordblks - before;
}

} // namespace

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "correct";
	std::printf("pid %d\n", (int)getpid());
	std::printf("tid_main %d\n", (int)syscall(SYS_gettid));
	std::fflush(stdout);
	if (std::strcmp(mode, "double-delete") == 0) {
		std::vector<std::string> *v = warm_up();
		auto *h = new Handle(300);
		if (h->reopen(true) != 0)
			std::fprintf(stderr, "reopen failed (the file is being renamed)\n");
		delete v;
		delete h; // ~Handle deletes buf a second time
	} else if (std::strcmp(mode, "bad-alloc") == 0) {
		big_table();
	} else if (std::strcmp(mode, "correct") == 0) {
		std::vector<std::thread> ts;
		for (int i = 0; i < 4; i++)
			ts.emplace_back(worker, i);
		for (auto &t : ts)
			t.join();
		delete warm_up();
	} else if (std::strcmp(mode, "index") == 0 && argc > 2) {
		long n = std::atol(argv[2]);
		std::map<std::string, std::vector<std::string>> index;
		size_t bytes = build_index(index, n);
		std::printf("blocks %ld\nbytes %zu\n", 4 * (long)index.size(), bytes);
	} else {
		std::fprintf(stderr, "usage: heap_cxx double-delete|bad-alloc|correct|index N\n");
		return 2;
	}
	std::printf("done ok\n");
	return 0;
}

// SPDX-License-Identifier: MIT
// bench/alloc_workload.cc — an allocation-heavy C++ program, for end-to-end cost.
//
// What a C++ service's heap traffic looks like: THREADS threads (default 4),
// each churning its own std::map<std::string, std::vector<std::string>> (an
// index of keys to short lists of values): every step inserts a key built
// with std::to_string (a std::string past the small-string buffer), appends
// to its vector (reallocations as it grows), and, once the map holds WINDOW
// keys, erases the oldest one (map node, key and every value freed).  Every
// 64 steps a thread copies one whole vector (a burst of same-sized blocks)
// and joins it into one std::string (a growing block).  Blocks are 24 bytes
// to a few KiB, freed by the thread that allocated them; peak heap is a few
// MiB per thread.  The same STEPS gives the same work and the same checksum.
//
// Prints "ok THREADS STEPS CHECKSUM SECONDS" (SECONDS: the work alone) and
// exits 0; there is nothing of heisen in it.
//
// Usage: alloc_workload [STEPS [THREADS]]   (default 100000 steps per thread, 4 threads)
// bench/compare.py runs it natively, under heisen and under the peer tools.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <vector>

namespace {

const long WINDOW = 16384;  // keys held per thread at once

unsigned long churn(long steps, unsigned seed)
{
    std::map<std::string, std::vector<std::string>> index;
    unsigned long sum = 0;
    unsigned x = seed;
    long oldest = 0;
    for (long i = 0; i < steps; i++) {
        x = x * 1103515245u + 12345u;
        long k = i - (long)((x >> 16) % 64);  // revisit recent keys now and then
        if (k < oldest)
            k = i;
        std::string key = "request/" + std::to_string(k) + "/payload-key";
        std::vector<std::string> &vals = index[key];
        vals.push_back(std::string(16 + (x >> 8) % 48, (char)('a' + i % 26)));
        sum += vals.size() + key.size();
        if ((i & 63) == 0) {
            std::vector<std::string> copy = vals;
            std::string joined;
            for (const std::string &v : copy)
                joined += v;
            sum += joined.size();
        }
        while ((long)index.size() > WINDOW) {
            auto it = index.find("request/" + std::to_string(oldest) + "/payload-key");
            if (it != index.end()) {
                sum += it->second.size();
                index.erase(it);
            }
            oldest++;
        }
    }
    return sum + index.size();
}

}  // namespace

int main(int argc, char **argv)
{
    long steps = argc > 1 ? atol(argv[1]) : 100000;
    int nthreads = argc > 2 ? atoi(argv[2]) : 4;
    if (steps <= 0 || nthreads <= 0 || nthreads > 256) {
        fprintf(stderr, "usage: alloc_workload [STEPS [THREADS]]\n");
        return 2;
    }
    auto t0 = std::chrono::steady_clock::now();
    std::vector<unsigned long> sums(nthreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < nthreads; t++)
        threads.emplace_back([&sums, t, steps] { sums[t] = churn(steps, 7919u * (t + 1)); });
    for (std::thread &th : threads)
        th.join();
    unsigned long total = 0;
    for (unsigned long s : sums)
        total += s;
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    printf("ok %d %ld %lu %.6f\n", nthreads, steps, total, secs);
    return 0;
}

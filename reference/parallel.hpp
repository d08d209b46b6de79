#pragma once
// A minimal parallel-for for the CPU reference and the host quantizers.
//
// Work is split into contiguous chunks of indices; each index is processed by exactly one thread and
// its result must not depend on which thread ran it, so results are identical for any thread count
// (the reference and make_random_layer are deterministic by contract).
#include <algorithm>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace moejit::detail {

// Threads worth using for `items` units of `cost` each: spawning is only worth it for a few
// milliseconds of work, and never more threads than cores.
inline int worker_count(int64_t items, double cost_per_item) {
  const double total = static_cast<double>(items) * cost_per_item;
  const int hw = std::max(1u, std::thread::hardware_concurrency());
  const int useful = static_cast<int>(std::min<double>(static_cast<double>(items), total / 2.0e5));
  return std::max(1, std::min(hw, useful));
}

// Calls fn(begin, end) on disjoint ranges covering [0, n). Exceptions thrown by fn are rethrown
// (the first one) after every thread has joined.
template <typename Fn>
void parallel_for(int64_t n, int threads, Fn&& fn) {
  if (n <= 0) return;
  threads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, n)));
  if (threads == 1) {
    fn(int64_t{0}, n);
    return;
  }
  std::exception_ptr error;
  std::mutex error_mutex;
  std::vector<std::thread> pool;
  pool.reserve(threads);
  for (int t = 0; t < threads; ++t) {
    const int64_t begin = n * t / threads, end = n * (t + 1) / threads;
    pool.emplace_back([&, begin, end] {
      try {
        fn(begin, end);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
      }
    });
  }
  for (auto& th : pool) th.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace moejit::detail

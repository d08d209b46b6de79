// `moejit bench`'s second ceiling: the time of a kernel that does nothing but read the same number of
// bytes as the layer's routed weights, contiguously, timed exactly like the forward (inside a graph,
// between event nodes, after the same L2 flush). Copy bandwidth is a steady-state rate; a decode
// layer reads 20-200 MB, and a read that short never reaches it (ramp-up and drain of the memory
// pipeline, CTA dispatch): this says how far the layer is from what any kernel could do with its bytes.
#include <fmt/format.h>

#include "moejit/error.hpp"
#include "moejit/generator.hpp"
#include "runtime/driver_api.hpp"
#include "tools/cli_bench_read_floor.hpp"

namespace moejit::cli {

using detail::check;
using detail::driver;

ReadFloor::ReadFloor(Arch arch, int sm_count, size_t max_bytes)
    : kernel_(read_floor_source(), arch), data_(max_bytes), sink_(4), sm_count_(sm_count) {
  // 0x01 bytes: every thread folds an even number of equal words per step, so acc stays 0 and the
  // kernel's sink test never fires.
  data_.fill_bytes(1);
}

void ReadFloor::enqueue(size_t bytes, CUstream s) {
  if (bytes > data_.size())
    throw Error(fmt::format("read floor: {} bytes asked, {} allocated", bytes, data_.size()));
  enqueue_read(data_.ptr(), bytes, s);
}

void ReadFloor::enqueue_read(CUdeviceptr p, size_t bytes, CUstream s) {
  unsigned long long n16 = bytes / 16;
  CUdeviceptr sink = sink_.ptr();
  void* args[] = {&p, &n16, &sink};
  // Four CTAs of 512 threads per SM: every SM at full thread occupancy, 64 bytes in flight per thread.
  check(driver().cuLaunchKernel(kernel_.function(), static_cast<unsigned>(4 * sm_count_), 1, 1, 512, 1, 1, 0, s, args, nullptr),
        "cuLaunchKernel(read floor)");
}

}  // namespace moejit::cli

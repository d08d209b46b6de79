#pragma once
// The bench's read floor: a kernel that only streams a given number of contiguous bytes, enqueued
// where the forward would be (tools/cli_bench_read_floor.cpp says why it is a ceiling of its own).
#include <cuda.h>

#include <cstddef>

#include "moejit/runtime.hpp"
#include "moejit/types.hpp"
#include "runtime/standalone_kernel.hpp"

namespace moejit::cli {

class ReadFloor {
 public:
  // Compiles the read kernel for arch (NVRTC) and allocates max_bytes of data to read.
  ReadFloor(Arch arch, int sm_count, size_t max_bytes);

  size_t capacity() const { return data_.size(); }
  // Enqueues one read of the first `bytes` (<= capacity, rounded down to 16) on s; capturable.
  void enqueue(size_t bytes, CUstream s);
  // The same read over any buffer whose bytes are all equal (so the kernel's sink never fires): the
  // bench's read flush.
  void enqueue_read(CUdeviceptr p, size_t bytes, CUstream s);

 private:
  detail::StandaloneKernel kernel_;
  DeviceBuffer data_, sink_;
  int sm_count_ = 0;
};

}  // namespace moejit::cli

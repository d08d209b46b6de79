#pragma once
// RAII for what the bench and the GPU tests build around forward: a non-blocking stream, and a CUDA
// graph captured from a stream and instantiated. A capture whose recording throws is ended and its
// partial graph destroyed, so the stream leaves capture mode before the error propagates.
#include <cuda.h>

#include "runtime/driver_api.hpp"

namespace moejit::detail {

class OwnedStream {
 public:
  OwnedStream();
  ~OwnedStream();
  OwnedStream(const OwnedStream&) = delete;
  OwnedStream& operator=(const OwnedStream&) = delete;
  CUstream get() const { return stream_; }

 private:
  CUstream stream_ = nullptr;
};

class CapturedGraph {
 public:
  // Captures what `record` enqueues on s (in the given capture mode) and instantiates it.
  template <class Record>
  CapturedGraph(CUstream s, CUstreamCaptureMode mode, Record&& record) {
    check(driver().cuStreamBeginCapture(s, mode), "cuStreamBeginCapture");
    try {
      record();
    } catch (...) {
      abandon_capture(s);
      throw;
    }
    end_and_instantiate(s);
  }
  ~CapturedGraph();
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;

  void launch(CUstream s) const;

 private:
  static void abandon_capture(CUstream s) noexcept;
  void end_and_instantiate(CUstream s);  // destroys the graph again if instantiation fails

  CUgraph graph_ = nullptr;
  CUgraphExec exec_ = nullptr;
};

}  // namespace moejit::detail

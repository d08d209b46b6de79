#include "runtime/graph_capture.hpp"

namespace moejit::detail {


OwnedStream::OwnedStream() { check(driver().cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate"); }

OwnedStream::~OwnedStream() {
  if (stream_) report_cleanup(driver().cuStreamDestroy(stream_), "cuStreamDestroy");
}

void CapturedGraph::abandon_capture(CUstream s) noexcept {
  CUgraph broken = nullptr;
  const CUresult r = driver().cuStreamEndCapture(s, &broken);
  // An invalidated capture is the expected consequence of what the recording did wrong; the error
  // being propagated already says what that was.
  if (r != CUDA_ERROR_STREAM_CAPTURE_INVALIDATED) report_cleanup(r, "cuStreamEndCapture");
  if (broken) report_cleanup(driver().cuGraphDestroy(broken), "cuGraphDestroy");
}

void CapturedGraph::end_and_instantiate(CUstream s) {
  check(driver().cuStreamEndCapture(s, &graph_), "cuStreamEndCapture");
  const CUresult r = driver().cuGraphInstantiateWithFlags(&exec_, graph_, 0);
  if (r != CUDA_SUCCESS) {
    report_cleanup(driver().cuGraphDestroy(graph_), "cuGraphDestroy");
    graph_ = nullptr;
    check(r, "cuGraphInstantiateWithFlags");
  }
}

CapturedGraph::~CapturedGraph() {
  if (exec_) report_cleanup(driver().cuGraphExecDestroy(exec_), "cuGraphExecDestroy");
  if (graph_) report_cleanup(driver().cuGraphDestroy(graph_), "cuGraphDestroy");
}

void CapturedGraph::launch(CUstream s) const { check(driver().cuGraphLaunch(exec_, s), "cuGraphLaunch"); }

}  // namespace moejit::detail

#include "runtime/graph_capture.hpp"

namespace moejit::detail {

OwnedStream::OwnedStream() { check(driver().cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate"); }

OwnedStream::~OwnedStream() {
  if (stream_) driver().cuStreamDestroy(stream_);
}

void CapturedGraph::abandon_capture(CUstream s) {
  CUgraph broken = nullptr;
  driver().cuStreamEndCapture(s, &broken);
  if (broken) driver().cuGraphDestroy(broken);
}

void CapturedGraph::end_and_instantiate(CUstream s) {
  check(driver().cuStreamEndCapture(s, &graph_), "cuStreamEndCapture");
  const CUresult r = driver().cuGraphInstantiateWithFlags(&exec_, graph_, 0);
  if (r != CUDA_SUCCESS) {
    driver().cuGraphDestroy(graph_);
    graph_ = nullptr;
    check(r, "cuGraphInstantiateWithFlags");
  }
}

CapturedGraph::~CapturedGraph() {
  if (exec_) driver().cuGraphExecDestroy(exec_);
  if (graph_) driver().cuGraphDestroy(graph_);
}

void CapturedGraph::launch(CUstream s) const { check(driver().cuGraphLaunch(exec_, s), "cuGraphLaunch"); }

}  // namespace moejit::detail

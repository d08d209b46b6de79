// `moejit bench`: forward timed inside CUDA graphs with a cold L2, next to the device copy bandwidth
// measured in the same run.
//
// Method, per token count M:
//   1. random inputs (make_random_inputs, ids uniform over the local experts); one eager forward;
//   2. the forward is captured into a CUDA graph and instantiated; one replay is checked to equal the
//      eager output bit for bit;
//   3. `replays` timed replays of a second graph: an L2 flush over a scratch buffer of 2x the L2 size
//      (evicts the weights from L2; read by default, see L2Flush), an event-record node, the forward's nodes, an event-record node.
//      The time between the two event nodes is what the layer costs inside a model's graph (the
//      graph's own launch is paid once per graph, not per layer); the median is reported (and the
//      minimum in --json);
//   4. the same number of replays timed the old way, events recorded on the stream around
//      cuGraphLaunch of the forward-only graph (after a flush outside it): the layer as a graph
//      of its own, launch latency included ("replay" column).
//   5. the layer among other kernels ("chain" column): a graph of 8 (flush, forward) pairs between two
//      event nodes, less the same graph with the flushes only, divided by 8: what one more layer adds to
//      a model's graph, its kernel nodes' launch gaps included, with no event node beside it.
// Bytes: distinct local experts in topk_ids x the prepared FP4 + scale bytes of one expert (FC1 and
// FC2 planes of runtime/prepared_layout.hpp, including their padding; biases and activations not
// counted). Copy bandwidth: cuMemcpyDtoDAsync of a 1 GiB buffer, (bytes read + bytes written) / time,
// median of 10. Dense bf16 rate: the vendor's GEMM at 8192^3 (tools/cli_bench_dense.cpp). Read floor:
// per M, a kernel that only reads that many contiguous bytes, timed like the
// forward in step 3 (tools/cli_bench_read_floor.cpp), for M whose weight bytes fit in 1 GiB.
//
// --scales csf: the layer's block scales are made the way real ones are (make_realistic_layer's
// quantized Gaussian weights, on two experts, their scale planes repeated over every expert: CSF works
// per row, so the ratio is the same), the layer is prepared twice, with plain scale reads and compressed
// as `moejit compress` writes it with prepare's default (the decode family reads CSF, batch and prefill
// the plain planes; docs/CSF.md §8), and both are timed, in the same run, next to each other; the scale
// bytes per expert count what each M's family reads. --scales csf-compact: the compressed layer prepared
// with ScaleReads::compact (every family reads CSF). --scales csf-random does the same with the random scales, read as
// CSF although they do not compress (prepare's automatic choice keeps such planes plain): the cost of
// the exception records at their worst.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <set>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "moejit/csf_layer.hpp"
#include "moejit/error.hpp"
#include "moejit/host_layer.hpp"
#include "moejit/reference.hpp"
#include "moejit/runtime.hpp"
#include "runtime/driver_api.hpp"
#include "runtime/graph_capture.hpp"
#include "runtime/prepared_layout.hpp"
#include "tools/cli_bench_dense.hpp"
#include "tools/cli_bench_read_floor.hpp"
#include "tools/cli_common.hpp"

namespace moejit::cli {

using detail::CapturedGraph;
using detail::check;
using detail::driver;
using detail::OwnedStream;

namespace {

double median(std::vector<float> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (static_cast<double>(v[n / 2 - 1]) + v[n / 2]);
}

struct Event {
  CUevent e = nullptr;
  Event() { check(driver().cuEventCreate(&e, CU_EVENT_DEFAULT), "cuEventCreate"); }
  ~Event() {
    if (e) detail::report_cleanup(driver().cuEventDestroy(e), "cuEventDestroy");
  }
};

// The bench's graphs are captured from its own stream only.
constexpr CUstreamCaptureMode kCaptureMode = CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;

// What evicts the weights from L2 before every timed forward: a pass over a scratch buffer of 2x the
// L2 size, either written (memset: leaves the L2 full of dirty lines, whose write-back then shares the
// HBM with the forward's reads) or read (the read floor's kernel: leaves clean lines, as the weight and
// KV-cache reads before a MoE layer in a decode step do).
class L2Flush {
 public:
  L2Flush(BenchFlush mode, size_t bytes, ReadFloor& reader) : mode_(mode), scratch_(bytes), reader_(reader) {
    if (mode_ == BenchFlush::read) scratch_.fill_bytes(1);  // equal bytes: the read kernel's sink never fires
  }
  // pattern varies the memset's value between replays outside a graph (a write flush).
  void enqueue(CUstream s, unsigned char pattern = 0x5A) const {
    if (mode_ == BenchFlush::write)
      check(driver().cuMemsetD8Async(scratch_.ptr(), pattern, scratch_.size(), s), "cuMemsetD8Async(L2 flush)");
    else
      reader_.enqueue_read(scratch_.ptr(), scratch_.size(), s);
  }

 private:
  BenchFlush mode_;
  DeviceBuffer scratch_;
  ReadFloor& reader_;
};

// The timed graph: an L2 flush, the start event, what `body` enqueues, the stop event: all nodes of
// one graph, so the events bracket exactly the body.
template <class Body>
CapturedGraph timed_graph(CUstream s, const L2Flush& flush, const Event& start, const Event& stop, Body&& body) {
  return CapturedGraph(s, kCaptureMode, [&] {
    flush.enqueue(s);
    check(driver().cuEventRecordWithFlags(start.e, s, CU_EVENT_RECORD_EXTERNAL), "cuEventRecordWithFlags");
    body();
    check(driver().cuEventRecordWithFlags(stop.e, s, CU_EVENT_RECORD_EXTERNAL), "cuEventRecordWithFlags");
  });
}

// The chain graphs of step 5: `layers` times (flush, body) between the start and stop events; body may
// be empty (the flushes alone).
template <class Body>
CapturedGraph chain_graph(CUstream s, const L2Flush& flush, const Event& start, const Event& stop, int layers,
                          Body&& body) {
  return CapturedGraph(s, kCaptureMode, [&] {
    check(driver().cuEventRecordWithFlags(start.e, s, CU_EVENT_RECORD_EXTERNAL), "cuEventRecordWithFlags");
    for (int i = 0; i < layers; ++i) {
      flush.enqueue(s);
      body();
    }
    check(driver().cuEventRecordWithFlags(stop.e, s, CU_EVENT_RECORD_EXTERNAL), "cuEventRecordWithFlags");
  });
}
constexpr int kChainLayers = 8;

// Replays g (which records start and stop around what it times) replays + 1 times; the first replay
// uploads the graph and is not counted. Returns the times in ms.
std::vector<float> time_between_events(const CapturedGraph& g, CUstream s, const Event& start, const Event& stop,
                                       int replays) {
  std::vector<float> ms;
  ms.reserve(static_cast<size_t>(replays));
  for (int r = 0; r < replays + 1; ++r) {
    g.launch(s);
    check(driver().cuStreamSynchronize(s), "cuStreamSynchronize(timed replay)");
    float t = 0;
    check(driver().cuEventElapsedTime(&t, start.e, stop.e), "cuEventElapsedTime");
    if (r > 0) ms.push_back(t);
  }
  return ms;
}

double copy_bandwidth(CUstream s, size_t bytes) {
  DeviceBuffer src(bytes), dst(bytes);
  check(driver().cuMemsetD8Async(src.ptr(), 1, bytes, s), "cuMemsetD8Async");
  Event a, b;
  std::vector<float> ms;
  for (int i = 0; i < 11; ++i) {
    check(driver().cuEventRecord(a.e, s), "cuEventRecord");
    check(driver().cuMemcpyDtoDAsync(dst.ptr(), src.ptr(), bytes, s), "cuMemcpyDtoDAsync");
    check(driver().cuEventRecord(b.e, s), "cuEventRecord");
    check(driver().cuEventSynchronize(b.e), "cuEventSynchronize");
    float t = 0;
    check(driver().cuEventElapsedTime(&t, a.e, b.e), "cuEventElapsedTime");
    if (i > 0) ms.push_back(t);  // the first copy warms up
  }
  return 2.0 * static_cast<double>(bytes) / (median(ms) * 1e-3);
}

}  // namespace

BenchFlush parse_bench_flush(const std::string& s) {
  if (s == "read") return BenchFlush::read;
  if (s == "write") return BenchFlush::write;
  throw UsageError(fmt::format("--flush must be read or write, got '{}'", s));
}

BenchReport run_bench(Runtime& rt, const PreparedLayer& layer, const std::string& config_name,
                      const std::vector<int>& tokens, int replays, uint64_t seed, BenchFlush flush_mode,
                      Family force, bool measure_dense) {
  const LayerSpec& spec = layer.spec();
  BenchReport rep;
  rep.flush = flush_mode;
  rep.device = rt.device_name();
  rep.config = config_name;
  rep.arch = std::string(to_string(rt.arch()));
  rep.replays = replays;
  if (tokens.empty()) return rep;
  const int max_m = *std::max_element(tokens.begin(), tokens.end());

  CUdevice dev = 0;
  check(driver().cuDeviceGet(&dev, rt.device()), "cuDeviceGet");
  int l2 = 0;
  check(driver().cuDeviceGetAttribute(&l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, dev), "cuDeviceGetAttribute(L2)");
  rep.l2_bytes = l2;
  OwnedStream stream;
  const CUstream s = stream.get();

  // Ceiling measured in this run: device copy bandwidth (1 GiB, or less when memory is short).
  size_t free_b = 0, total_b = 0;
  check(driver().cuMemGetInfo(&free_b, &total_b), "cuMemGetInfo");
  size_t copy_bytes = size_t{1} << 30;
  while (copy_bytes > (size_t{64} << 20) && 2 * copy_bytes + (size_t{256} << 20) > free_b) copy_bytes /= 2;
  rep.copy_tbps = copy_bandwidth(s, copy_bytes) / 1e12;

  const size_t H = static_cast<size_t>(spec.hidden), K = static_cast<size_t>(spec.top_k);
  DeviceBuffer x(static_cast<size_t>(max_m) * H * 2), ids(static_cast<size_t>(max_m) * K * 4),
      wts(static_cast<size_t>(max_m) * K * 4), out(static_cast<size_t>(max_m) * H * 2);
  const size_t ws_bytes = rt.workspace_size(layer, max_m);
  DeviceBuffer ws(ws_bytes);
  rt.prewarm(layer, max_m, force);  // module loads (and compiles, if anything is missing) outside capture

  const auto g1 = detail::fc1_geometry(spec), g2 = detail::fc2_geometry(spec);
  // Bytes per expert as a plan's kernels read them: the prepared CSF planes of the mask (the planes its keys
  // read as CSF), else the plain planes.
  const PreparedScaleBytes sb = layer.scale_bytes();
  auto bytes_per_expert = [&](int csf_mask) {
    const size_t fc1_scales = (csf_mask & 1) ? sb.fc1_csf : g1.scale_bytes();
    const size_t fc2_scales = (csf_mask & 2) ? sb.fc2_csf : g2.scale_bytes();
    return static_cast<double>(g1.weight_bytes() + fc1_scales + g2.weight_bytes() + fc2_scales) / spec.experts;
  };
  const double per_expert = std::max(bytes_per_expert(layer.csf_scales()), bytes_per_expert(layer.batched_csf_scales()));
  const double macs_per_pair =
      static_cast<double>(spec.fc1_rows()) * spec.hidden + static_cast<double>(spec.hidden) * spec.intermediate;

  // The read floor's data: the largest M's weight bytes, at most 1 GiB (larger M print no floor).
  int max_experts = 0;
  for (int m : tokens)
    max_experts = std::max(max_experts, static_cast<int>(std::min<long long>(static_cast<long long>(m) * spec.top_k,
                                                                              spec.experts)));
  ReadFloor read_floor(rt.arch(), rt.sm_count(),
                       std::min(static_cast<size_t>(per_expert * max_experts) + 16, size_t{1} << 30));
  const L2Flush flush(flush_mode, std::max<size_t>(2 * static_cast<size_t>(l2), size_t{8} << 20), read_floor);

  Event start, stop;
  for (int m : tokens) {
    const HostInputs in = make_random_inputs(spec, m, seed + static_cast<uint64_t>(m));
    x.upload(in.x.data(), in.x.size() * 2);
    ids.upload(in.topk_ids.data(), in.topk_ids.size() * 4);
    wts.upload(in.topk_weights.data(), in.topk_weights.size() * 4);
    ForwardArgs a;
    a.x = x.ptr();
    a.topk_ids = ids.ptr();
    a.topk_weights = wts.ptr();
    a.out = out.ptr();
    a.tokens = m;
    a.workspace = ws.ptr();
    a.workspace_bytes = ws_bytes;
    a.stream = s;
    a.force = force;
    const size_t out_bytes = static_cast<size_t>(m) * H * 2;

    rt.forward(layer, a);
    check(driver().cuStreamSynchronize(s), "cuStreamSynchronize(eager forward)");
    std::vector<uint8_t> eager(out_bytes), replayed(out_bytes);
    out.download(eager.data(), out_bytes);

    const CapturedGraph graph(s, kCaptureMode, [&] { rt.forward(layer, a); });

    check(driver().cuMemsetD8Async(out.ptr(), 0xFF, out_bytes, s), "cuMemsetD8Async(poison out)");
    graph.launch(s);
    check(driver().cuStreamSynchronize(s), "cuStreamSynchronize(graph replay)");
    out.download(replayed.data(), out_bytes);

    const CapturedGraph timed = timed_graph(s, flush, start, stop, [&] { rt.forward(layer, a); });
    const std::vector<float> ms = time_between_events(timed, s, start, stop, replays);

    std::vector<float> ms_launch;
    ms_launch.reserve(static_cast<size_t>(replays));
    for (int r = 0; r < replays; ++r) {
      flush.enqueue(s, static_cast<unsigned char>(r));
      check(driver().cuEventRecord(start.e, s), "cuEventRecord");
      graph.launch(s);
      check(driver().cuEventRecord(stop.e, s), "cuEventRecord");
      check(driver().cuEventSynchronize(stop.e), "cuEventSynchronize");
      float t = 0;
      check(driver().cuEventElapsedTime(&t, start.e, stop.e), "cuEventElapsedTime");
      ms_launch.push_back(t);
    }

    const CapturedGraph chain =
        chain_graph(s, flush, start, stop, kChainLayers, [&] { rt.forward(layer, a); });
    const CapturedGraph flushes_only = chain_graph(s, flush, start, stop, kChainLayers, [] {});
    const double chain_ms = median(time_between_events(chain, s, start, stop, replays)) -
                            median(time_between_events(flushes_only, s, start, stop, replays));

    std::set<int> touched;
    int64_t pairs = 0;
    for (int32_t id : in.topk_ids) {
      const int e = id - spec.expert_begin;
      if (e >= 0 && e < spec.experts) {
        touched.insert(e);
        ++pairs;
      }
    }
    BenchRow row;
    int csf_read = 0;  // the planes this M's kernels read as CSF (their keys' csf_scales)
    for (const KernelKey& k : rt.plan(layer, m, force).kernels) csf_read |= k.csf_scales;
    const double weight_bytes = bytes_per_expert(csf_read) * static_cast<double>(touched.size());
    if (weight_bytes <= static_cast<double>(read_floor.capacity())) {
      const CapturedGraph floor_graph =
          timed_graph(s, flush, start, stop, [&] { read_floor.enqueue(static_cast<size_t>(weight_bytes), s); });
      row.us_read_floor = median(time_between_events(floor_graph, s, start, stop, replays)) * 1e3;
    }
    row.tokens = m;
    row.us = median(ms) * 1e3;
    row.us_min = *std::min_element(ms.begin(), ms.end()) * 1e3;
    row.us_replay = median(ms_launch) * 1e3;
    row.us_chain = chain_ms / kChainLayers * 1e3;
    row.experts_touched = static_cast<int>(touched.size());
    row.weight_bytes = weight_bytes;
    row.tbps = row.weight_bytes / (row.us * 1e-6) / 1e12;
    row.copy_fraction = rep.copy_tbps > 0 ? row.tbps / rep.copy_tbps : 0;
    row.tflops = 2.0 * macs_per_pair * static_cast<double>(pairs) / (row.us * 1e-6) / 1e12;
    row.graph_matches_eager = eager == replayed;
    rep.rows.push_back(row);
  }
  // The second ceiling, the dense bf16 tensor-core rate (tools/cli_bench_dense.cpp), after the layers: a
  // few hundred ms of full-power GEMMs slow what runs next on the GPU (DeepSeek-V3 at M = 1: 58.6 us
  // before them, 65-68 us after), so the rows must not follow them.
  const DenseCeiling dense = measure_dense ? measure_dense_bf16(s) : DenseCeiling{0, "--dense off"};
  rep.dense_tflops = dense.tflops;
  rep.dense_what = dense.what;
  if (rep.dense_tflops > 0 && rep.copy_tbps > 0)
    for (BenchRow& row : rep.rows) {
      row.dense_fraction = row.tflops / rep.dense_tflops;
      // The roofline's time: the larger of the weights at copy bandwidth and the FLOPs at the dense rate.
      const double us_at_copy = row.weight_bytes / (rep.copy_tbps * 1e12) * 1e6;
      const double us_at_dense = row.tflops * row.us / rep.dense_tflops;  // the same FLOPs at the dense rate
      row.roofline_fraction = std::max(us_at_copy, us_at_dense) / row.us;
    }
  return rep;
}

void print_bench_table(const BenchReport& r) {
  fmt::print("bench {} on {} ({}): copy bandwidth {:.2f} TB/s (1 GiB device copy, read+write), L2 {} flushed ({} of "
             "2x L2) before each of {} graph replays (median)\n",
             r.config, r.device, r.arch, r.copy_tbps, human_bytes(r.l2_bytes), to_string(r.flush), r.replays);
  if (r.dense_tflops > 0)
    fmt::print("dense bf16 {:.0f} TFLOP/s ({})\n", r.dense_tflops, r.dense_what);
  else
    fmt::print("dense bf16: not measured ({}); no 'of dense' or 'roofline' column\n", r.dense_what);
  fmt::print("time: between event nodes around the forward inside the graph; replay: events around the launch of a\n"
             "graph holding only the forward (its launch latency included); chain: per layer in a graph of {} (flush,\n"
             "forward) pairs less its flushes (the layer among other kernels, no event node beside it). TB/s, % and\n"
             "TFLOP/s use time; chain % = weights / chain / copy bandwidth. read: a kernel that only reads the same\n"
             "number of contiguous bytes, timed like time; of read = read / time. of dense = TFLOP/s / dense bf16;\n"
             "roofline = max(weights / copy bandwidth, FLOPs / dense bf16) / time.\n",
             kChainLayers);
  fmt::print("{:>5} {:>10} {:>11} {:>10} {:>8} {:>8} {:>12} {:>8} {:>8} {:>10} {:>8} {:>8} {:>8} {:>8}\n", "M",
             "time (us)", "replay (us)", "chain (us)", "chain %", "experts", "weights", "TB/s", "of copy", "read (us)",
             "of read", "TFLOP/s", "of dense", "roofline");
  bool mismatch = false;
  for (const auto& row : r.rows) {
    const std::string floor = row.us_read_floor > 0 ? fmt::format("{:.1f}", row.us_read_floor) : "-";
    const std::string of_read = row.us_read_floor > 0 ? fmt::format("{:.0f}%", 100.0 * row.us_read_floor / row.us) : "-";
    const std::string of_dense = r.dense_tflops > 0 ? fmt::format("{:.1f}%", 100.0 * row.dense_fraction) : "-";
    const std::string roofline = r.dense_tflops > 0 ? fmt::format("{:.0f}%", 100.0 * row.roofline_fraction) : "-";
    const double chain_fraction =
        row.us_chain > 0 && r.copy_tbps > 0 ? row.weight_bytes / (row.us_chain * 1e-6) / 1e12 / r.copy_tbps : 0;
    fmt::print("{:>5} {:>10.1f} {:>11.1f} {:>10.1f} {:>7.0f}% {:>8} {:>12} {:>8.2f} {:>7.0f}% {:>10} {:>8} {:>8.2f} {:>8} {:>8}{}\n",
               row.tokens, row.us, row.us_replay, row.us_chain, 100.0 * chain_fraction, row.experts_touched,
               human_bytes(row.weight_bytes), row.tbps, 100.0 * row.copy_fraction, floor, of_read, row.tflops, of_dense,
               roofline, row.graph_matches_eager ? "" : "  graph != eager!");
    mismatch = mismatch || !row.graph_matches_eager;
  }
  if (mismatch) fmt::print("warning: a graph replay differed from the eager forward (outputs must be deterministic)\n");
  std::fflush(stdout);
}

// The layer bench times: random FP4 codes, and block scales random (--scales plain, csf-random) or made
// the way real ones are (--scales csf: make_realistic_layer on two experts, scale planes repeated).
HostLayer bench_layer(const LayerSpec& local, uint64_t seed, bool realistic_scales) {
  HostLayer layer = make_random_code_layer(local, seed);
  if (!realistic_scales) return layer;
  LayerSpec few = local;
  few.experts = std::min(2, local.experts);
  few.expert_begin = 0;
  const HostLayer real = make_realistic_layer(few, seed);
  auto tile = [&](std::vector<uint8_t>& dst, const std::vector<uint8_t>& src) {
    for (size_t i = 0; i < dst.size(); ++i) dst[i] = src[i % src.size()];
  };
  tile(layer.w13_scale, real.w13_scale);
  tile(layer.w2_scale, real.w2_scale);
  return layer;
}

// Prepared scale bytes per layer, plain and CSF, and what a decode step reads per expert.
void print_scale_report(const PreparedLayer& csf) {
  const LayerSpec& spec = csf.spec();
  const PreparedScaleBytes b = csf.scale_bytes();
  const auto g1 = detail::fc1_geometry(spec), g2 = detail::fc2_geometry(spec);
  const double weights = static_cast<double>(g1.weight_bytes() + g2.weight_bytes());
  const double plain = static_cast<double>(b.fc1_plain + b.fc2_plain);
  const double read = static_cast<double>(((csf.csf_scales() & 1) ? b.fc1_csf : b.fc1_plain) +
                                          ((csf.csf_scales() & 2) ? b.fc2_csf : b.fc2_plain));
  fmt::print("prepared scales per layer: plain {} (FC1 {}, FC2 {}), CSF {} (FC1 {}, FC2 {}): {:.2f}x smaller; the\n"
             "decode kernels' bytes per expert (FP4 + scales) drop by {:.2f}%. {};\n"
             "the layer's device memory {}.\n",
             human_bytes(plain), human_bytes(static_cast<double>(b.fc1_plain)),
             human_bytes(static_cast<double>(b.fc2_plain)), human_bytes(read),
             human_bytes(static_cast<double>((csf.csf_scales() & 1) ? b.fc1_csf : b.fc1_plain)),
             human_bytes(static_cast<double>((csf.csf_scales() & 2) ? b.fc2_csf : b.fc2_plain)),
             read > 0 ? plain / read : 0.0, 100.0 * (plain - read) / (weights + plain),
             csf.csf_scales() == 0 ? "No plane shrinks as CSF: every family reads the plain planes"
             : csf.batched_csf_scales() == csf.csf_scales()
                 ? "Every family reads the CSF planes (decode rebuilds a slab's scales in shared memory, batch and\n"
                   "prefill each chunk's in registers) and the layer keeps no plain copy of them"
                 : "The decode family reads the CSF planes; the batch and prefill families read the plain planes,\n"
                   "which the layer keeps beside them",
             human_bytes(static_cast<double>(csf.device_bytes())));
}

// Plain and CSF rows of the same layer, side by side.
void print_scales_comparison(const BenchReport& plain, const BenchReport& csf) {
  fmt::print("scales: plain vs CSF on the same layer (time: median between event nodes, as above)\n");
  fmt::print("{:>5} {:>12} {:>12} {:>9} {:>12} {:>12} {:>11}\n", "M", "plain (us)", "CSF (us)", "time", "plain bytes",
             "CSF bytes", "bytes");
  for (size_t i = 0; i < plain.rows.size() && i < csf.rows.size(); ++i) {
    const BenchRow& a = plain.rows[i];
    const BenchRow& b = csf.rows[i];
    fmt::print("{:>5} {:>12.1f} {:>12.1f} {:>+8.2f}% {:>12} {:>12} {:>+10.2f}%{}\n", a.tokens, a.us, b.us,
               100.0 * (b.us - a.us) / a.us, human_bytes(a.weight_bytes), human_bytes(b.weight_bytes),
               100.0 * (b.weight_bytes - a.weight_bytes) / a.weight_bytes,
               a.graph_matches_eager && b.graph_matches_eager ? "" : "  graph != eager!");
  }
  std::fflush(stdout);
}

void write_bench_json(const BenchReport& r, const std::string& path) {
  nlohmann::json j;
  j["device"] = r.device;
  j["config"] = r.config;
  j["arch"] = r.arch;
  j["replays"] = r.replays;
  j["l2_bytes"] = r.l2_bytes;
  j["copy_tbps"] = r.copy_tbps;
  j["dense_bf16_tflops"] = r.dense_tflops > 0 ? nlohmann::json(r.dense_tflops) : nlohmann::json();
  j["dense_bf16_method"] = r.dense_what;
  j["flush"] = to_string(r.flush);
  j["rows"] = nlohmann::json::array();
  for (const auto& row : r.rows)
    j["rows"].push_back({{"tokens", row.tokens},
                         {"us_median", row.us},
                         {"us_min", row.us_min},
                         {"us_replay_median", row.us_replay},
                         {"us_chain", row.us_chain},
                         {"us_read_floor_median", row.us_read_floor > 0 ? nlohmann::json(row.us_read_floor) : nlohmann::json()},
                         {"experts_touched", row.experts_touched},
                         {"weight_bytes", row.weight_bytes},
                         {"tbps", row.tbps},
                         {"copy_fraction", row.copy_fraction},
                         {"tflops", row.tflops},
                         {"dense_fraction", r.dense_tflops > 0 ? nlohmann::json(row.dense_fraction) : nlohmann::json()},
                         {"roofline_fraction", r.dense_tflops > 0 ? nlohmann::json(row.roofline_fraction) : nlohmann::json()},
                         {"graph_matches_eager", row.graph_matches_eager}});
  std::ofstream f(path);
  if (!f) throw Error(fmt::format("--json {}: cannot open the file for writing", path));
  f << j.dump(2) << "\n";
  if (!f) throw Error(fmt::format("--json {}: write failed", path));
}

namespace {
// "a16,a8" -> {"a16", "a8"} (empty items kept, so that parse_act_precision names them).
std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t comma; (comma = s.find(',', start)) != std::string::npos; start = comma + 1) out.push_back(s.substr(start, comma - start));
  out.push_back(s.substr(start));
  return out;
}
}  // namespace

int cmd_bench(int argc, char** argv) {
  static const CommandSpec spec{
      "bench",
      "--config NAME|PATH [--tokens LIST] [--replays N] [--flush read|write] [--family auto|decode|batch|prefill]\n"
      "      [--json PATH] [--dense on|off] [--seed N] [--jobs N] [--scales plain|csf|csf-random] [--precision LIST]\n"
      "      [--a4-scales shared|per-expert]",
      "time layers in CUDA graphs",
      "Times forward for each M inside a CUDA graph with a cold L2 (a scratch buffer of 2x the L2 size is read, or\n"
      "written with --flush write, before every replay, outside the timed events) and prints the median next to the\n"
      "device copy bandwidth measured in the same run: M, time, distinct experts touched, weight bytes read (distinct experts x\n"
      "prepared FP4 + scale bytes per expert), achieved TB/s, fraction of copy bandwidth, the time of a kernel that\n"
      "only reads the same number of bytes (timed the same way) and its fraction of the forward, useful TFLOP/s, their\n"
      "fraction of the dense bf16 rate measured in the same run (cuBLASLt, when installed) and of the roofline.\n"
      "The layer is random (FP4 codes uniform random bytes, valid block scales; see docs) and the inputs are\n"
      "random with ids uniform over the local experts; in a4 its global input scales are calibrated as checkpoints\n"
      "calibrate them (448 x 6 / amax of x and of the intermediate over a random batch, on the CPU reference).\n"
      "Missing kernels are compiled first by parallel prewarm.\n"
      "Needs a GPU.",
      {{"config", "NAME|PATH", "bundled config name or JSON file (default: " + default_config_name() + ")"},
       {"tokens", "LIST", "token counts M (default 1,2,4,8,16,32,64)"},
       {"replays", "N", "timed graph replays per M (default 100)"},
       {"flush", "read|write", "how the L2 is emptied before each replay: read (default) or write 2x the L2 size"},
       {"dense", "on|off", "measure the dense bf16 ceiling (default on; off skips its GEMMs)"},
       {"family", "F", "auto (default), decode, batch or prefill: force a kernel family (fails if it cannot serve M)"},
       {"json", "PATH", "also write the rows as JSON"},
       {"seed", "N", "random seed (default 1)"},
       {"jobs", "N", "prewarm worker processes (default: number of CPUs)"},
       {"scales", "S", "plain (default); csf: scales made as real ones are, the layer compressed and prepared as by "
                       "default (the decode family reads CSF, batch and prefill the plain planes kept beside), timed "
                       "with plain scales side by side (docs/CSF.md), with the prepared bytes; csf-compact: the same "
                       "with every family reading CSF and no plain copy (ScaleReads::compact); csf-random: the random "
                       "scales read as CSF by every family (a16)"},
       {"precision", "LIST", "activation precisions timed in this run, e.g. a16,a8,a4 (default: the config's, else a16)"},
       {"a4-scales", "S", "a4's global input scales: shared (default; one a1_gs and a2_gs, x quantized once per token) or "
                          "per-expert (one per expert, as ModelOpt checkpoints give them: x quantized once per routed "
                          "pair; experts the calibration batch does not reach take its overall scale)"}},
      {}};
  Args args(spec, argc, argv, 2);
  if (args.help()) {
    std::fputs(help_text(spec).c_str(), stdout);
    return kExitOk;
  }
  const ModelConfig cfg = config_from_args(args);
  const std::vector<int> tokens = args.int_list("tokens", {1, 2, 4, 8, 16, 32, 64}, 1, kMaxTokens);
  const int replays = args.integer("replays", 100, 1, 1000000);
  const int seed = args.integer("seed", 1, 0);
  const BenchFlush flush = parse_bench_flush(args.str("flush", "read"));
  const std::string dense = args.str("dense", "on");
  if (dense != "on" && dense != "off") throw UsageError(fmt::format("--dense must be on or off, got '{}'", dense));
  const int jobs = args.integer("jobs", static_cast<int>(std::max(1u, std::thread::hardware_concurrency())), 1, 1024);
  Family force = Family::automatic;
  try {
    force = parse_family(args.str("family", "auto"));
  } catch (const Error& e) {
    throw UsageError(fmt::format("--family: {}", e.what()));
  }
  const std::string scales = args.str("scales", "plain");
  if (scales != "plain" && scales != "csf" && scales != "csf-compact" && scales != "csf-random")
    throw UsageError(fmt::format("--scales must be plain, csf, csf-compact or csf-random, got '{}'", scales));
  const LayerSpec config_local = cfg.local();
  std::vector<ActPrecision> precisions;
  for (const std::string& name : split_list(args.str("precision", std::string(to_string(config_local.precision))))) {
    try {
      precisions.push_back(parse_act_precision(name));
    } catch (const Error& e) {
      throw UsageError(fmt::format("--precision: {}", e.what()));
    }
  }
  const std::string a4_scales = args.str("a4-scales", "shared");
  if (a4_scales != "shared" && a4_scales != "per-expert")
    throw UsageError(fmt::format("--a4-scales must be shared or per-expert, got '{}'", a4_scales));
  if (args.has("a4-scales") && std::find(precisions.begin(), precisions.end(), ActPrecision::a4) == precisions.end())
    throw UsageError("--a4-scales sets the a4 precision's input scales; --precision does not time a4");
  if (scales != "plain" && (precisions.size() != 1 || precisions[0] != ActPrecision::a16))
    throw UsageError("--scales csf, csf-compact and csf-random time a16 layers (the decode kernels read CSF scales in a16 only); "
                     "leave --precision out or give a16");
  const GpuProbe& gpu = gpu_probe();  // in a child: the workers below are forked before this process inits CUDA
  if (!gpu.usable())
    throw Error(fmt::format("no usable GPU ({}); bench times kernels and needs a CUDA device moejit builds for", gpu.why));
  const int max_m = *std::max_element(tokens.begin(), tokens.end());
  const Arch arch = *gpu.info.arch;
  const int sms = gpu.info.sm_count;
  const TuningOverrides tuning = TuningOverrides::from_environment();  // read once for every plan below
  std::vector<KernelKey> keys;
  for (ActPrecision p : precisions) {
    LayerSpec local = config_local;
    local.precision = p;
    for (const KernelKey& k : prewarm_keys(local, arch, max_m, sms, force, tuning))
      if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
  }
  const PrewarmSummary pw = parallel_prewarm(keys, jobs);
  print_prewarm_summary(pw, fmt::format("{} {}", cfg.name, to_string(arch)));
  if (pw.failed) return kExitFailed;

  RuntimeOptions options;
  options.tuning = tuning;  // the plans prewarmed above
  Runtime rt(options);
  if (scales != "plain") {
    // Plain and CSF scale reads of one a16 layer side by side.
    const LayerSpec& local = config_local;
    std::shared_ptr<PreparedLayer> prepared, prepared_csf;
    {
      HostLayer layer = bench_layer(local, static_cast<uint64_t>(seed), scales != "csf-random");
      prepared = rt.prepare(layer, PrepareOptions{ScaleReads::plain});
      if (scales == "csf-random") {
        prepared_csf = rt.prepare(layer, PrepareOptions{ScaleReads::csf});
      } else {
        // The layer as `moejit compress` writes it (planes in CSF where that is smaller), prepared as a
        // server would: prepare's default (--scales csf), or every family reading CSF (csf-compact).
        compress_scales(layer);
        prepared_csf =
            rt.prepare(layer, PrepareOptions{scales == "csf" ? ScaleReads::automatic : ScaleReads::compact});
      }
    }
    // The dense ceiling once, after both (its GEMMs slow what follows them).
    const BenchReport rep = run_bench(rt, *prepared, cfg.name + " (plain scales)", tokens, replays,
                                      static_cast<uint64_t>(seed), flush, force, false);
    const BenchReport rep_csf = run_bench(rt, *prepared_csf, cfg.name + " (CSF scales)", tokens, replays,
                                          static_cast<uint64_t>(seed), flush, force, dense == "on");
    print_bench_table(rep);
    print_bench_table(rep_csf);
    print_scale_report(*prepared_csf);
    print_scales_comparison(rep, rep_csf);
    if (args.has("json")) {
      write_bench_json(rep, args.str("json"));
      write_bench_json(rep_csf, args.str("json") + ".csf.json");
    }
    return kExitOk;
  }
  // One random layer (the same weights) in each precision, timed one after the other in this process.
  const HostLayer base = [&] {
    LayerSpec s = config_local;
    s.precision = ActPrecision::a16;
    return make_random_code_layer(s, static_cast<uint64_t>(seed));
  }();
  std::vector<BenchReport> reports;
  for (ActPrecision p : precisions) {
    std::shared_ptr<PreparedLayer> prepared;
    {
      HostLayer layer = base;
      if (p == ActPrecision::a4) {
        const bool per_expert = a4_scales == "per-expert";
        const ActivationScales s =
            calibrate_a4_scales(base, make_random_inputs(base.spec, 16, static_cast<uint64_t>(seed) + 1), per_expert);
        layer.a1_gs = per_expert ? s.a1_gs_per_expert : std::vector<float>{s.a1_gs};
        layer.a2_gs = per_expert ? s.a2_gs_per_expert : std::vector<float>{s.a2_gs};
      }
      layer.spec.precision = p;
      prepared = rt.prepare(layer);
    }
    std::string name = precisions.size() > 1 || p != ActPrecision::a16 ? fmt::format("{} {}", cfg.name, to_string(p)) : cfg.name;
    if (p == ActPrecision::a4 && a4_scales == "per-expert") name += " (a1_gs, a2_gs per expert)";
    reports.push_back(run_bench(rt, *prepared, name, tokens, replays, static_cast<uint64_t>(seed), flush, force,
                                dense == "on"));
    print_bench_table(reports.back());
  }
  if (args.has("json")) {
    if (reports.size() == 1) {
      write_bench_json(reports.front(), args.str("json"));
    } else {
      // One file per precision beside the path given: PATH with .<precision> before its extension.
      const std::string path = args.str("json");
      const size_t dot = path.rfind('.');
      for (size_t i = 0; i < reports.size(); ++i) {
        const std::string tag = std::string(to_string(precisions[i]));
        write_bench_json(reports[i], dot == std::string::npos || dot < path.rfind('/') + 1
                                         ? path + "." + tag
                                         : path.substr(0, dot) + "." + tag + path.substr(dot));
      }
    }
  }
  return kExitOk;
}

}  // namespace moejit::cli

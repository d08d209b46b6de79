#pragma once
// Host side of each kernel family: builds parameters and launches (one file per family).
#include <cuda.h>

#include <memory>

#include "moejit/runtime.hpp"
#include "runtime/kernel_params.hpp"
#include "runtime/module_registry.hpp"
#include "runtime/prepared_layer.hpp"
#include "runtime/workspace.hpp"

namespace moejit::detail {

std::shared_ptr<PreparedLayerImpl> prepare_layer(ModuleRegistry& modules, Arch arch, const DeviceLayerView& v,
                                                 CUstream stream);

// Everything one forward launch sequence needs.
struct ForwardContext {
  const PreparedLayerImpl& layer;
  const ForwardArgs& args;
  const WorkspaceLayout& ws;
  const Plan& plan;
  ModuleRegistry& modules;
  CUstream stream;
  float alpha, beta, limit;
  int sm_count;
};

// FC1's and FC2's parameters (weights, workspace regions, routing), shared by the decode and batch families.
DecodeFc1Params fc1_params(const ForwardContext& ctx);
DecodeFc2Params fc2_params(const ForwardContext& ctx);

// Routing kernel: counts, offsets and the stable permutation into the workspace.
void launch_route(const ForwardContext& ctx, const KernelKey& key);
// Decode family FC1 and FC2 (+ top-k combine).
// FC2 is a programmatic dependent of FC1 unless the plan says plain.
void launch_decode(const ForwardContext& ctx, const KernelKey& fc1, const KernelKey& fc2);
// Both in one cooperative launch (decode_fused), grid clamped to what is co-resident.
void launch_decode_fused(const ForwardContext& ctx, const KernelKey& fused);
// Batch family FC1, FC2 and the top-k combine, each a programmatic dependent of the kernel before it
// (the route kernel first).
void launch_batch(const ForwardContext& ctx, const KernelKey& fc1, const KernelKey& fc2);
// Both in one co-resident launch pipelined by expert slot (decode_pipe), after its clear kernel.
void launch_decode_pipe(const ForwardContext& ctx, const KernelKey& pipe);

}  // namespace moejit::detail

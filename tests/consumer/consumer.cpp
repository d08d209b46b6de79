// A program that uses moejit only through the installed package (find_package(moejit), public headers).
// No GPU needed: it plans the bundled default model's layer, generates and NVRTC-compiles the first
// kernel of the plan for sm_90a, and runs the fp64 CPU reference on a small random layer after a trip
// through a layer file. Exits 0 and prints "consumer ok" when every step worked.
#include <moejit/compiler.hpp>
#include <moejit/error.hpp>
#include <moejit/generator.hpp>
#include <moejit/host_layer.hpp>
#include <moejit/model_config.hpp>
#include <moejit/planner.hpp>
#include <moejit/reference.hpp>
#include <moejit/runtime.hpp>
#include <moejit/safetensors.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>

int main() {
  try {
    const moejit::ModelConfig config = moejit::load_model_config(moejit::default_config_name());
    const moejit::Plan plan = moejit::make_plan(config.local(), moejit::Arch::sm_90a, 4, 132);
    std::printf("plan: %s\n", plan.describe().c_str());
    if (plan.kernels.empty()) throw moejit::Error("the plan has no kernels");

    const moejit::GeneratedSource src = moejit::generate_source(plan.kernels.front());
    const moejit::CompileOutput out = moejit::compile_source(src, moejit::Arch::sm_90a);
    std::printf("compiled %s: %zu bytes of cubin, %d registers, NVRTC %s\n", src.entry.c_str(), out.binary.size(),
                out.registers, moejit::nvrtc_version().c_str());
    if (out.binary.empty()) throw moejit::Error("NVRTC returned an empty cubin");

    moejit::LayerSpec spec;
    spec.format = moejit::ScaleFormat::nvfp4;
    spec.activation = moejit::Activation::silu;
    spec.experts = 4;
    spec.hidden = 64;
    spec.intermediate = 32;
    spec.top_k = 2;
    const moejit::HostLayer layer = moejit::make_random_layer(spec, 7);
    const std::string path = (std::filesystem::temp_directory_path() / "moejit_consumer_layer.safetensors").string();
    moejit::write_layer_file(path, layer);
    const moejit::HostLayer back = moejit::read_layer_file(path);
    std::filesystem::remove(path);
    const moejit::HostInputs in = moejit::make_random_inputs(spec, 3, 11);
    const moejit::ReferenceOutput ref = moejit::reference_forward(back, in);
    double norm = 0;
    for (double v : ref.out_f64) norm += v * v;
    std::printf("reference: %zu outputs, norm %.4f\n", ref.out.size(), std::sqrt(norm));
    if (!(norm > 0)) throw moejit::Error("the reference output is zero");

    std::string why;
    std::printf("GPU: %s\n", moejit::gpu_available(&why) ? "available" : ("none (" + why + ")").c_str());
    std::printf("consumer ok\n");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consumer failed: %s\n", e.what());
    return 1;
  }
}

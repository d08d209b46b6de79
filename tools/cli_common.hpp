#pragma once
// Shared pieces of the `moejit` command-line tool: argument parsing, config/arch resolution, the
// parallel prewarm, plan printing, the fast random layer used by bench/demo, and the benchmark.
//
// Exit status of every subcommand: 0 success; 1 the work ran but its result is bad (a --check
// outside tolerance, a kernel that failed to compile, a damaged cache entry); 2 an error (bad
// arguments, unknown config, no GPU where one is needed, unreadable files).
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "moejit/checkpoint.hpp"
#include "moejit/host_layer.hpp"
#include "moejit/key.hpp"
#include "moejit/model_config.hpp"
#include "moejit/planner.hpp"
#include "moejit/runtime.hpp"
#include "moejit/types.hpp"

namespace moejit {
class Runtime;
class KernelCache;
class PreparedLayer;
}  // namespace moejit

namespace moejit::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;
inline constexpr int kExitError = 2;

// An error in how the command was called (exit 2). The message names the argument.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// ---- argument parsing ---------------------------------------------------------------------------

struct OptionSpec {
  std::string name;        // without leading dashes, e.g. "max-tokens"
  std::string metavar;     // empty: a flag without a value
  std::string help;        // one line; include the default
};

struct CommandSpec {
  std::string name;                     // e.g. "prewarm"
  std::string synopsis;                 // e.g. "--config NAME|PATH [--arch ARCH] ..."
  std::string summary;                  // one line for `moejit --help`
  std::string description;              // paragraphs printed by --help
  std::vector<OptionSpec> options;
  std::vector<std::string> positionals; // names of required positional arguments
  int max_positionals = -1;             // -1: exactly positionals.size()
};

std::string help_text(const CommandSpec& spec);

class Args {
 public:
  // Parses argv[first..argc). --help/-h sets help() (other problems are then ignored). Throws
  // UsageError for unknown options, missing values and wrong positional counts.
  Args(const CommandSpec& spec, int argc, char** argv, int first);

  bool help() const { return help_; }
  bool has(const std::string& name) const;
  std::string str(const std::string& name, const std::string& fallback = {}) const;
  int integer(const std::string& name, int fallback, int min_value = 1, int max_value = 1 << 30) const;
  // Comma-separated integers ("1,2,4") or ranges ("1-8,16"); each within [min_value, max_value].
  std::vector<int> int_list(const std::string& name, const std::vector<int>& fallback, int min_value = 1,
                            int max_value = 1 << 30) const;
  const std::vector<std::string>& positionals() const { return positionals_; }
  const CommandSpec& spec() const { return spec_; }

 private:
  const CommandSpec& spec_;
  bool help_ = false;
  std::vector<std::pair<std::string, std::string>> values_;  // last one wins
  std::vector<std::string> positionals_;
};

// ---- resolution helpers -------------------------------------------------------------------------

// Loads --checkpoint's geometry when given (checkpoint_config_from_args), else --config (default: the
// bundled default config); a UsageError on failure.
ModelConfig config_from_args(const Args& args, const std::string& option = "config");

// ---- checkpoints (tools/cli_checkpoint.cpp) -----------------------------------------------------

// The spec with --checkpoint, --tp, [--tp-rank,] --ep and --ep-rank added (help text too), and a second
// synopsis line "--checkpoint DIR <checkpoint_form> [slicing options]".
CommandSpec with_checkpoint_options(CommandSpec spec, bool with_tp_rank, const std::string& checkpoint_form = "");
// The rank slice --tp/--tp-rank/--ep/--ep-rank name (UsageError naming the option when out of range).
CheckpointSlice slice_from_args(const Args& args);
// The model config of --checkpoint DIR sliced by the options above; nullopt without --checkpoint.
// UsageError for --config with --checkpoint, slicing options without it, or an unreadable checkpoint.
std::optional<ModelConfig> checkpoint_config_from_args(const Args& args);
// The architecture named by --arch; without it the GPU's (a UsageError naming --arch when there is
// none and fallback is empty, else *fallback with a note in *why_fallback).
Arch arch_from_args(const Args& args, std::optional<Arch> fallback = std::nullopt, std::string* note = nullptr);
// --precision a16|a8|a4, else `fallback` (the config's or layer's); a UsageError for another name.
ActPrecision precision_from_args(const Args& args, ActPrecision fallback);
// --sm-count, else the SM count of this machine's GPU when it is of `arch`, else 132 (H100/H200) with a
// note in *note saying so.
int sm_count_from_args(const Args& args, Arch arch, std::string* note = nullptr);

// This machine's GPU as a child process saw it (asked once per process; see cli_gpu_probe.cpp).
// present: a device answered; info.arch is empty (and why says so) when moejit does not build for it.
struct GpuProbe {
  bool present = false;
  std::string why;  // no device, or an unsupported one
  DeviceInfo info;
  bool usable() const { return present && info.arch.has_value(); }
};
const GpuProbe& gpu_probe();
std::string describe_spec(const LayerSpec& spec);
// "1.23 MB" style sizes.
std::string human_bytes(double bytes);

// ---- prewarm ------------------------------------------------------------------------------------

struct PrewarmSummary {
  int total = 0;
  int compiled = 0;
  int cached = 0;
  int failed = 0;
  int workers = 0;
  double seconds = 0;
  bool degraded = false;  // the cache could not be written: nothing was persisted
  std::vector<std::string> failures;  // "<key>: <first line of the error>"
};

// Every key a layer needs for 1..max_tokens on arch (keys_for_range plus the architecture's prepare
// kernel, which Runtime::prepare launches).
std::vector<KernelKey> prewarm_keys(const LayerSpec& spec, Arch arch, int max_tokens, int sm_count, Family force,
                                    const TuningOverrides& tuning);
// Compiles keys into the on-disk cache in `jobs` forked worker processes (NVRTC serializes compiles
// inside one process, so processes are what scales). Keys are handed out one at a time, so a slow
// kernel never stalls a worker's share. Draws a progress line on stderr. Must be called before this
// process starts other threads.
PrewarmSummary parallel_prewarm(const std::vector<KernelKey>& keys, int jobs, bool progress = true);
void print_prewarm_summary(const PrewarmSummary& s, const std::string& what);

// ---- plan ---------------------------------------------------------------------------------------

// Prints M -> family and kernels, with consecutive M of identical plans merged into ranges.
void print_plan_table(const LayerSpec& spec, Arch arch, int sm_count, const std::vector<int>& tokens, Family force,
                      const TuningOverrides& tuning);

// ---- cache --------------------------------------------------------------------------------------

// One line per architecture (entries, bytes) and the cache root.
void print_cache_summary(KernelCache& cache);

// ---- run and validate: layer, input and output files ----------------------------------------------

struct RunFiles {
  HostLayer layer;
  std::optional<HostInputs> inputs;  // when an input path was given
};
// Reads the files of `moejit run` with run's rules (`validate` calls the same function): the layer file,
// the input file when input_path is not empty (its H and top_k must match the layer's), and when
// output_path is not empty, that the output is not one of those files (same device and inode) and is a
// regular file if it exists. Throws moejit::Error naming the option and the rule.
RunFiles read_run_files(const std::string& layer_path, const std::string& input_path, const std::string& output_path);
// Throws moejit::Error when the input's H or top_k is not the layer's.
void check_inputs_match(const LayerSpec& spec, const HostInputs& in, const std::string& layer_path,
                        const std::string& input_path);
// Throws moejit::Error when the output exists and is not a regular file, or is one of the files read
// ((option, path) pairs; compared by device and inode).
void check_run_output(const std::string& output, const std::vector<std::pair<std::string, std::string>>& inputs);
// Throws moejit::Error listing every field where the layer differs from the config's local slice.
void check_layer_matches_config(const LayerSpec& layer, const ModelConfig& cfg, const std::string& layer_path);

// ---- layers and benchmark -----------------------------------------------------------------------


struct BenchRow {
  int tokens = 0;
  double us = 0;                  // median, cold L2: between event nodes around the forward in a graph
  double us_min = 0;
  double us_replay = 0;           // median, cold L2: events around cuGraphLaunch of the forward alone
  double us_chain = 0;            // cold L2, per layer: 8 (flush, forward) pairs in one graph less the flushes alone
  double us_read_floor = 0;       // median, cold L2, timed like us: a kernel reading weight_bytes only (0: not run)
  int experts_touched = 0;        // distinct local experts in topk_ids
  double weight_bytes = 0;        // experts_touched x per-expert FP4 + scale bytes
  double tbps = 0;                // weight_bytes / time
  double copy_fraction = 0;       // tbps / measured device copy bandwidth
  double tflops = 0;              // useful FLOPs (2 per MAC over routed pairs) / time
  double dense_fraction = 0;      // tflops / measured dense bf16 rate (0: no dense ceiling measured)
  double roofline_fraction = 0;   // max(weights / copy bandwidth, FLOPs / dense rate) / time (0: no dense ceiling)
  bool graph_matches_eager = true;
};

// How the bench evicts the weights from L2 before each timed forward (tools/cli_bench.cpp).
enum class BenchFlush { read, write };
inline const char* to_string(BenchFlush f) { return f == BenchFlush::read ? "read" : "write"; }
BenchFlush parse_bench_flush(const std::string& s);  // "read" | "write"; UsageError otherwise

struct BenchReport {
  std::string device;
  std::string config;
  std::string arch;
  int replays = 0;
  double l2_bytes = 0;
  double copy_tbps = 0;  // device copy bandwidth: (read + write bytes) / time of a 1 GiB copy
  double dense_tflops = 0;  // dense bf16 GEMM rate measured in the same run (0: not measured, see dense_what)
  std::string dense_what;   // how the dense rate was measured, or why it was not
  BenchFlush flush = BenchFlush::read;
  std::vector<BenchRow> rows;
};

// Times runtime.forward inside a CUDA graph for every M of tokens (cold L2 before each replay).
BenchReport run_bench(Runtime& rt, const PreparedLayer& layer, const std::string& config_name,
                      const std::vector<int>& tokens, int replays, uint64_t seed, BenchFlush flush,
                      Family force = Family::automatic, bool measure_dense = true);
void print_bench_table(const BenchReport& r);
void write_bench_json(const BenchReport& r, const std::string& path);

// Uploads inputs, runs one forward on the default stream and returns out (bf16 bits, [M, H]).
std::vector<uint16_t> forward_once(Runtime& rt, const PreparedLayer& layer, const HostInputs& in,
                                   Family force = Family::automatic);

// `run --check` and `demo` accept a GPU result when rel_l2 <= kCheckRelL2 and no value is non-finite.
inline constexpr double kCheckRelL2 = 1e-2;

// ---- commands -----------------------------------------------------------------------------------

int cmd_prewarm(int argc, char** argv);
int cmd_inspect(int argc, char** argv);
int cmd_cache(int argc, char** argv);
int cmd_plan(int argc, char** argv);
int cmd_run(int argc, char** argv);
int cmd_compress(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_demo(int argc, char** argv);
int cmd_validate(int argc, char** argv);

// "moejit <name>" for messages.
std::string prog(const std::string& command);

}  // namespace moejit::cli

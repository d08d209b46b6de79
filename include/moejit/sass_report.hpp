// Loops of a disassembled kernel: at decode a kernel's speed is its inner loop's instruction count and
// where ptxas placed the loop's loads relative to its MMAs (docs/perf-log.md v16), so
// `moejit inspect KEY --emit loops` prints both without a GPU.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace moejit {

// One loop: the instructions from a backward branch's target to the branch itself.
struct SassLoop {
  std::string function;                // the kernel it belongs to ("" when the text names none)
  std::uint64_t begin = 0, end = 0;    // byte addresses of the first instruction and of the branch
  int instructions = 0;                // begin..end inclusive
  int depth = 0;                       // 0 outermost; +1 per enclosing loop of the same function
  std::map<std::string, int> opcodes;  // per base opcode (the mnemonic before its first '.')
  int spills = 0;                      // local-memory loads and stores (LDL, STL)
  // Memory operations and MMAs in program order, each with its position in the loop (1 = first
  // instruction): "LDG@12 LDG@14 HMMA@60 ..." (global loads, shared loads and stores, local ones,
  // L2 requests, MMAs).
  std::string order;
};

// Every loop of `sass`, the text of `cuobjdump --dump-sass` or `nvdisasm --print-code` (instruction
// lines "/*0a10*/  [@P0] OPCODE operands ;", "Function : name" headers), ordered by function and start
// address. Lines that are not instructions are ignored; text without instructions gives no loops.
// Pure function, thread-safe; throws only std::bad_alloc.
std::vector<SassLoop> sass_loops(std::string_view sass);

// A human-readable report of sass_loops(sass): per loop its range, size, opcode counts, spills and
// the order of its memory operations and MMAs. "no loops" when there are none. Pure, thread-safe;
// throws only std::bad_alloc.
std::string sass_loop_report(std::string_view sass);

}  // namespace moejit

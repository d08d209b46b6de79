// Loops of disassembled SASS (see moejit/sass_report.hpp). cuobjdump prints an instruction as
//   /*1580*/                   LOP3.LUT R40, R24, 0x81c081c0, RZ, 0xc0, !PT ;   /* 0x... */
//   /*1e10*/              @!P0 BRA 0x1580 ;                                     /* 0x... */
// (nvdisasm the same without the encoding comment); a branch whose target lies before it closes a loop.
// Predicated, divergent (BRA.DIV) and conditional (BRA P3, 0x...) branches all count, except the
// padding branch to itself and the unconditional returns of out-of-line cold paths (they span an EXIT).
#include "moejit/sass_report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <sstream>

namespace moejit {
namespace {

struct Instruction {
  std::uint64_t address;
  std::string opcode;  // full mnemonic, e.g. LDG.E.NA.128.CONSTANT
  std::string operands;
  bool predicated = false;  // guarded by @P / @!P
};

bool is_hex(char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; }

// "/*hex*/ [@pred] OPCODE operands ;" -> instruction; false for any other line.
bool parse_instruction(std::string_view line, Instruction& out) {
  auto pos = line.find("/*");
  if (pos == std::string_view::npos) return false;
  auto close = line.find("*/", pos + 2);
  if (close == std::string_view::npos || close == pos + 2) return false;
  const std::string_view addr = line.substr(pos + 2, close - pos - 2);
  if (!std::all_of(addr.begin(), addr.end(), is_hex) || addr.size() > 16) return false;
  std::string_view rest = line.substr(close + 2);
  const auto semi = rest.find(';');
  if (semi == std::string_view::npos) return false;
  rest = rest.substr(0, semi);
  std::istringstream in{std::string(rest)};
  std::string word;
  if (!(in >> word)) return false;
  const bool predicated = word[0] == '@';
  if (predicated && !(in >> word)) return false;  // guard predicate
  if (word.empty() || !std::isupper(static_cast<unsigned char>(word[0]))) return false;
  out.address = std::stoull(std::string(addr), nullptr, 16);
  out.opcode = word;
  out.predicated = predicated;
  std::getline(in, out.operands);
  return true;
}

std::string base_opcode(const std::string& opcode) { return opcode.substr(0, opcode.find('.')); }

// The branch target: the last hexadecimal literal of a BRA's operands; false when there is none.
bool branch_target(const Instruction& ins, std::uint64_t& target) {
  if (base_opcode(ins.opcode) != "BRA") return false;
  const auto x = ins.operands.rfind("0x");
  if (x == std::string::npos) return false;
  std::size_t end = x + 2;
  while (end < ins.operands.size() && is_hex(ins.operands[end])) ++end;
  if (end == x + 2 || end - x - 2 > 16) return false;
  target = std::stoull(ins.operands.substr(x + 2, end - x - 2), nullptr, 16);
  return true;
}

bool in_order(const std::string& base) {
  return base == "LDG" || base == "LDS" || base == "STS" || base == "LDSM" || base == "LDL" || base == "STL" ||
         base == "CCTL" || base == "HMMA" || base == "IMMA" || base == "HGMMA" || base == "LDGSTS" || base == "UBLKCP";
}

// "Function : name" header -> name.
bool function_header(std::string_view line, std::string& name) {
  const auto f = line.find("Function : ");
  if (f == std::string_view::npos) return false;
  std::string_view rest = line.substr(f + 11);
  while (!rest.empty() && std::isspace(static_cast<unsigned char>(rest.back()))) rest.remove_suffix(1);
  name = std::string(rest);
  return true;
}

void add_loops(const std::string& function, const std::vector<Instruction>& code, std::vector<SassLoop>& out) {
  std::vector<SassLoop> loops;
  for (std::size_t i = 0; i < code.size(); ++i) {
    std::uint64_t target = 0;
    // A branch to itself is the padding after the last EXIT, not a loop.
    if (!branch_target(code[i], target) || target >= code[i].address) continue;
    std::size_t first = i;
    while (first > 0 && code[first - 1].address >= target) --first;
    if (code[first].address != target) continue;  // the target is not an instruction of this function
    // ptxas places cold paths (a divergent warp's fallback for a warp-wide operation) after the
    // function's end; they return into it with an unconditional branch that spans an EXIT. Not a loop.
    bool spans_exit = false;
    for (std::size_t j = first; j < i && !spans_exit; ++j) spans_exit = base_opcode(code[j].opcode) == "EXIT";
    if (!code[i].predicated && spans_exit) continue;
    SassLoop loop;
    loop.function = function;
    loop.begin = target;
    loop.end = code[i].address;
    loop.instructions = static_cast<int>(i - first + 1);
    for (std::size_t j = first; j <= i; ++j) {
      const std::string base = base_opcode(code[j].opcode);
      ++loop.opcodes[base];
      if (base == "LDL" || base == "STL") ++loop.spills;
      if (in_order(base)) {
        if (!loop.order.empty()) loop.order += ' ';
        loop.order += fmt::format("{}@{}", base, j - first + 1);
      }
    }
    loops.push_back(std::move(loop));
  }
  for (auto& l : loops)
    for (const auto& o : loops)
      if (&o != &l && o.begin <= l.begin && l.end <= o.end && (o.begin < l.begin || l.end < o.end)) ++l.depth;
  std::sort(loops.begin(), loops.end(), [](const SassLoop& a, const SassLoop& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end > b.end;
  });
  for (auto& l : loops) out.push_back(std::move(l));
}

}  // namespace

std::vector<SassLoop> sass_loops(std::string_view sass) {
  std::vector<SassLoop> out;
  std::string function;
  std::vector<Instruction> code;
  while (!sass.empty()) {  // line by line, as parse_ptxas_resources reads its log
    const auto nl = sass.find('\n');
    const std::string_view line = sass.substr(0, nl);
    sass = nl == std::string_view::npos ? std::string_view{} : sass.substr(nl + 1);
    std::string name;
    Instruction ins;
    if (function_header(line, name)) {
      add_loops(function, code, out);
      code.clear();
      function = name;
    } else if (parse_instruction(line, ins)) {
      code.push_back(std::move(ins));
    }
  }
  add_loops(function, code, out);
  return out;
}

std::string sass_loop_report(std::string_view sass) {
  const std::vector<SassLoop> loops = sass_loops(sass);
  if (loops.empty()) return "no loops\n";
  std::string out;
  std::string function = "\x01";
  for (const SassLoop& l : loops) {
    if (l.function != function) {
      function = l.function;
      if (!function.empty()) out += fmt::format("{}\n", function);
    }
    std::vector<std::pair<std::string, int>> ops(l.opcodes.begin(), l.opcodes.end());
    std::stable_sort(ops.begin(), ops.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    std::string counts;
    for (const auto& [op, n] : ops) counts += fmt::format("{}{} {}", counts.empty() ? "" : ", ", op, n);
    out += fmt::format("{}loop {:#06x}-{:#06x}: {} instructions{}\n", std::string(2 * l.depth, ' '), l.begin, l.end,
                       l.instructions, l.spills ? fmt::format(", {} spill loads/stores", l.spills) : "");
    out += fmt::format("{}  {}\n", std::string(2 * l.depth, ' '), counts);
    if (!l.order.empty()) out += fmt::format("{}  order: {}\n", std::string(2 * l.depth, ' '), l.order);
  }
  return out;
}

}  // namespace moejit

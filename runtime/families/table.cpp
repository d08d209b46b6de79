// The table of planned families' launchers (the generator's table: generator/families/table.cpp).
#include <fmt/format.h>

#include "moejit/error.hpp"
#include "runtime/families/families.hpp"

namespace moejit::detail {
namespace {
struct FamilyLauncher {
  Family family;
  void (*launch)(const ForwardContext& ctx);
};
constexpr FamilyLauncher kLaunchers[] = {
    {Family::decode, launch_decode}, {Family::batch, launch_batch}, {Family::prefill, launch_prefill}};
}  // namespace

void launch_plan(const ForwardContext& ctx) {
  for (const FamilyLauncher& l : kLaunchers)
    if (l.family == ctx.plan.family) return l.launch(ctx);
  throw Error(fmt::format("forward: no launcher for the {} family", to_string(ctx.plan.family)));
}

}  // namespace moejit::detail

/// @file
/// OpRegistry: OpId → handler table.
#include <algorithm>
#include <cstdio>

#include "facetrace/runtime/op.h"

namespace facetrace::runtime {

#ifdef FT_HAVE_CUDA
void register_builtin_ops(OpRegistry& registry);  // builtin_ops.cpp
#endif

OpRegistry& OpRegistry::global() {
  static OpRegistry* instance = [] {
    auto* r = new OpRegistry();
#ifdef FT_HAVE_CUDA
    r->add_provider(&register_builtin_ops);
#endif
    return r;
  }();
  return *instance;
}

Status OpRegistry::add(OpId id, std::string name, OpHandler handler) {
  std::lock_guard lock(mu_);
  if (auto it = ops_.find(id); it != ops_.end())
    return invalid_argument("op " + std::to_string(id) + " ('" + name + "') is already registered as '" +
                            it->second.name + "'");
  ops_.emplace(id, Entry{std::move(name), std::move(handler)});
  return {};
}

void OpRegistry::add_provider(Provider provider) {
  {
    std::lock_guard lock(mu_);
    if (std::find(providers_.begin(), providers_.end(), provider) != providers_.end()) return;
    providers_.push_back(provider);
  }
  provider(*this);
}

const OpHandler* OpRegistry::find(OpId id) const {
  std::lock_guard lock(mu_);
  auto it = ops_.find(id);
  return it == ops_.end() ? nullptr : &it->second.handler;
}

std::string OpRegistry::name(OpId id) const {
  std::lock_guard lock(mu_);
  if (auto it = ops_.find(id); it != ops_.end()) return it->second.name;
  char buf[32];
  std::snprintf(buf, sizeof buf, "op 0x%08x", id);
  return buf;
}

std::vector<OpId> OpRegistry::ids() const {
  std::lock_guard lock(mu_);
  std::vector<OpId> out;
  for (const auto& [id, e] : ops_) out.push_back(id);
  return out;
}

}  // namespace facetrace::runtime

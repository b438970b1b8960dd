// Process groups as collectives see them (collectives.h).

#include "collectives.h"

#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/GroupRegistry.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

namespace torchscan::collectives {
namespace {

// The TorchBind class c10d registers ProcessGroup as.
constexpr const char* kProcessGroupClass = "__torch__.torch.classes.c10d.ProcessGroup";

bool read(const c10::intrusive_ptr<c10d::ProcessGroup>& group, int64_t& size, int64_t& rank) {
  if (!group) return false;
  size = group->getSize();
  rank = group->getRank();
  return true;
}

}  // namespace

bool group_of(const c10::IValue& value, int64_t& size, int64_t& rank) noexcept try {
  if (value.isObject()) {
    const auto& object = value.toObjectRef();
    const auto& type = object.type();
    if (!type || !type->name() || type->name()->qualifiedName() != kProcessGroupClass) return false;
    // A custom-class object holds its C++ instance in slot 0, as a capsule (IValue::toCustomClass
    // without its type-map lookup, which needs c10d's typeid across libraries).
    auto holder = object.getSlot(0).toCapsule();
    return read(c10::static_intrusive_pointer_cast<c10d::ProcessGroup>(std::move(holder)), size, rank);
  }
  if (value.isString()) {
    // An unknown name throws: not a group.
    return read(c10d::resolve_process_group(value.toStringRef()), size, rank);
  }
  return false;
} catch (...) {
  return false;
}

}  // namespace torchscan::collectives

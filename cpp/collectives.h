// A collective's process group, read for the core's byte counts (collectives.cpp). Kept apart
// so that the c10d headers (which pull in all of ATen) compile in one file only.
#pragma once

#include <cstdint>

namespace c10 {
class IValue;
}

namespace torchscan::collectives {

// The size and this process's rank of the process group `value` is or names: a c10d
// ProcessGroup object (the `process_group` argument of `c10d::allreduce_` and the like), or the
// name of a registered group (the `group_name` of the functional collectives). False for
// anything else. Never throws.
bool group_of(const c10::IValue& value, int64_t& size, int64_t& rank) noexcept;

}  // namespace torchscan::collectives

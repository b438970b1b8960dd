// The C++ half of the cxx bridge (src/ffi.rs). Kept free of ATen headers so that the generated
// bridge code compiles quickly; the definitions live in observer.cpp.
#pragma once

#include <cstdint>

#include "rust/cxx.h"

namespace at {
struct RecordFunction;
}

namespace torchscan::ffi {

struct EventDescription;

// One dispatcher event, valid for the duration of a start or end callback.
struct OpEvent {
  const at::RecordFunction* fn;
};

// All three are noexcept: an exception must never cross into Rust.
EventDescription describe(const OpEvent& event) noexcept;
void read_inputs(const OpEvent& event, rust::Vec<int64_t>& out) noexcept;
void read_outputs(const OpEvent& event, rust::Vec<int64_t>& out) noexcept;

}  // namespace torchscan::ffi

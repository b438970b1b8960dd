// The C++ half of the cxx bridge (src/ffi.rs). Kept free of ATen headers so that the generated
// bridge code compiles quickly; the definitions live in observer.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "rust/cxx.h"

namespace at {
struct RecordFunction;
}
namespace c10 {
struct IValue;
}

namespace torchscan::ffi {

struct EventDescription;

// One dispatcher event, valid for the duration of a start or end callback: the operator's own
// arguments (read once per event: finding them looks up the operator's schema), and the calling
// thread's buffer for its encoded arguments.
struct OpEvent {
  const at::RecordFunction* fn;
  const c10::IValue* args;
  std::size_t num_args;
  std::vector<int64_t>* buffer;
};

// All three are noexcept: an exception must never cross into Rust. The encoded arguments live
// in the event's buffer, valid until the next read on the same thread.
EventDescription describe(const OpEvent& event) noexcept;

// The Rust API's way in (api.cpp): open a session observing the calling thread, close it (stop
// observing), discard it in any state, and a CPU peak-memory measurement. They throw
// torchscan::Error, which cxx hands to Rust as an Err with the message.
int64_t begin_counting();
void end_counting(int64_t handle);
void end_counting_discard(int64_t handle) noexcept;
int64_t begin_memory();
rust::String end_memory(int64_t id);
rust::Slice<const int64_t> read_inputs(const OpEvent& event) noexcept;
rust::Slice<const int64_t> read_outputs(const OpEvent& event) noexcept;
rust::Slice<const int64_t> read_collective_inputs(const OpEvent& event) noexcept;

}  // namespace torchscan::ffi

// The C++ half of the cxx bridge (src/ffi.rs). Kept free of ATen headers so that the generated
// bridge code compiles quickly; the definitions live in observer.cpp.
#pragma once

#include <cstddef>
#include <algorithm>
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

// A thread's encoded arguments (src/args.rs describes the stream). Its storage only grows, and
// is kept across events and sessions: appending is a capacity check and plain stores, with no
// value-initialization of what is about to be written (std::vector's resize would zero it).
class ArgBuffer {
 public:
  ArgBuffer() = default;
  ArgBuffer(ArgBuffer&& other) noexcept : storage_(std::move(other.storage_)), size_(other.size_) {
    other.size_ = 0;
  }
  ArgBuffer& operator=(ArgBuffer&& other) noexcept {
    storage_ = std::move(other.storage_);
    size_ = other.size_;
    other.size_ = 0;
    return *this;
  }
  void clear() noexcept {
    size_ = 0;
  }
  std::size_t size() const noexcept {
    return size_;
  }
  const int64_t* data() const noexcept {
    return storage_.data();
  }
  [[gnu::always_inline]] void push(int64_t value) {
    if (size_ == storage_.size()) [[unlikely]]
      grow(size_ + 1);
    storage_[size_++] = value;
  }
  // Room for `n` more values, to be written through the pointer.
  [[gnu::always_inline]] int64_t* extend(std::size_t n) {
    if (size_ + n > storage_.size()) [[unlikely]]
      grow(size_ + n);
    int64_t* at = storage_.data() + size_;
    size_ += n;
    return at;
  }
  void truncate(std::size_t size) noexcept {
    if (size < size_) size_ = size;
  }

 private:
  // Out of line: the steady state never grows.
  [[gnu::noinline, gnu::cold]] void grow(std::size_t needed) {
    storage_.resize(std::max<std::size_t>(needed, 2 * storage_.size() + 32));
  }
  std::vector<int64_t> storage_;
  std::size_t size_ = 0;
};

// One dispatcher event, valid for the duration of a start or end callback: the operator's own
// arguments (read once per event: finding them looks up the operator's schema), and the calling
// thread's buffer for its encoded arguments.
struct OpEvent {
  const at::RecordFunction* fn;
  const c10::IValue* args;
  std::size_t num_args;
  ArgBuffer* buffer;
};

// All three are noexcept: an exception must never cross into Rust. The encoded arguments live
// in the event's buffer, valid until the next read on the same thread.
EventDescription describe(const OpEvent& event) noexcept;
// The call's route, `2 * backend + through_autograd` (c10::BackendComponent; whether its dispatch
// passes through an autograd key), kUnknownRoute for other layouts and for calls without tensors.
constexpr uint8_t kUnknownRoute = 255;
uint8_t call_route(const OpEvent& event) noexcept;

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
// As read_inputs, then a DATA record summarising the tensor values a data-dependent formula
// needs (RoI Align's adaptive sampling grids, an embedding bag's non-padding ids); only read
// after a formula said the call depends on the data, never on the per-operator path.
rust::Slice<const int64_t> read_data_inputs(const OpEvent& event) noexcept;

}  // namespace torchscan::ffi

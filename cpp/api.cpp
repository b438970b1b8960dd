// The public C++ API (cpp/include/torchscan/torchscan.h) and the entry points the Rust API
// reaches through the cxx bridge. Both sit on the session functions the torch.ops.torchscan.*
// operators use, and both turn c10 errors into plain exceptions with the core's message.

#include <c10/util/Exception.h>

#include "bridge.h"
#include "sessions.h"
#include "torchscan/torchscan.h"

namespace torchscan {
namespace {

template <class F>
auto translated(F f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error&) {
    throw;
  } catch (const c10::Error& e) {
    throw Error(e.what_without_backtrace());
  } catch (const std::exception& e) {
    throw Error(e.what());
  }
}

}  // namespace

Counter::Counter() : handle_(translated([] { return sessions::open(""); })), state_(State::Counting) {}

Counter::~Counter() {
  // Frees the session in whatever state it is (never throws): an unreported count is dropped.
  sessions::discard(handle_);
}

std::string Counter::report() {
  if (state_ != State::Counting) throw Error("torchscan::Counter::report() was already called");
  state_ = State::Reported;
  return translated([&] {
    sessions::close(handle_);  // no custom formulas in this API: nothing is pending
    return sessions::finish(handle_, "[]");
  });
}

Scope::Scope(Counter& counter, const std::string& label) : counter_(counter) {
  if (!counter.counting()) throw Error("torchscan::Scope(\"" + label + "\"): the counter already reported");
  translated([&] { sessions::push_scope(counter.handle_, label); });
}

Scope::~Scope() {
  if (!counter_.counting()) return;
  try {
    sessions::pop_scope(counter_.handle_);
  } catch (...) {
    // A destructor must not throw; an unbalanced pop leaves the count itself intact.
  }
}

std::string measure_flops(const std::function<void()>& work) {
  Counter counter;
  work();
  return counter.report();
}

std::string measure_peak_memory(const std::function<void()>& work, const std::string& device) {
  if (device != "cpu" && device != "cpu:0") {
    throw Error("torchscan::measure_peak_memory: device must be \"cpu\" in the C++ API, got \"" + device + "\"");
  }
  int64_t id = translated([] { return sessions::memory_start(); });
  try {
    work();
  } catch (...) {
    try {
      sessions::memory_stop(id);
    } catch (...) {
      // The workload's own exception is the one to report.
    }
    throw;
  }
  return translated([&] { return sessions::memory_stop(id); });
}

namespace ffi {

int64_t begin_counting() {
  return translated([] { return sessions::open(""); });
}

void end_counting(int64_t handle) {
  translated([&] { sessions::close(handle); });
}

void end_counting_discard(int64_t handle) noexcept {
  sessions::discard(handle);
}

int64_t begin_memory() {
  return translated([] { return sessions::memory_start(); });
}

rust::String end_memory(int64_t id) {
  return rust::String(translated([&] { return sessions::memory_stop(id); }));
}

}  // namespace ffi
}  // namespace torchscan

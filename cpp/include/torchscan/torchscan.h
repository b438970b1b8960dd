// torchscan for C++ libtorch applications: exact FLOP counts of the operators a piece of code
// dispatches (forward, backward, optimizer steps), attributed to scopes, and the peak CPU memory
// of a callable. Reports are the JSON documents Python's torchscan returns (FlopReport,
// MemoryStats); see docs/cpp.md for the link line.
//
//   torchscan::Counter counter;                      // counting starts
//   {
//     torchscan::Scope scope(counter, "encoder");    // work below is attributed to "encoder"
//     auto y = model->forward(x);
//   }
//   std::string report = counter.report();           // counting stops; FlopReport JSON
//
// Every failure is a torchscan::Error (a std::runtime_error) with a message saying what went
// wrong; nothing aborts the process. C++17; no libtorch header is needed to include this one.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>

namespace torchscan {

// The one exception type of this API.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Counts every operator the constructing thread dispatches, and the backward work autograd
// threads do for it, from construction until report() (or destruction, which discards the
// count). Must be used on one thread; counters may nest.
class Counter {
 public:
  Counter();
  ~Counter();
  Counter(const Counter&) = delete;
  Counter& operator=(const Counter&) = delete;

  // Stops counting and returns the FlopReport as JSON. Callable once; a second call throws.
  std::string report();

  // True until report() is called.
  bool counting() const noexcept {
    return state_ == State::Counting;
  }

 private:
  friend class Scope;
  enum class State { Counting, Reported };
  int64_t handle_;
  State state_;
};

// Attributes the work done while it lives to `label` in the report's `by_module` (a scope's
// count includes the scopes opened inside it). Scopes must be destroyed in reverse order of
// construction, before their counter reports.
class Scope {
 public:
  Scope(Counter& counter, const std::string& label);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  Counter& counter_;
};

// Runs `work` once under a Counter and returns the FlopReport (JSON). Exceptions from `work`
// propagate unchanged, after the count is discarded.
std::string measure_flops(const std::function<void()>& work);

// Runs `work` once and returns the peak of the CPU memory held by PyTorch tensors it allocated
// (MemoryStats JSON: device, metric, baseline_bytes, peak_bytes, delta_bytes, ...). `device`
// must be "cpu" (CUDA peaks come from c10's caching allocator statistics; use them directly).
// Refused while a profiler is active on this thread.
std::string measure_peak_memory(const std::function<void()>& work, const std::string& device = "cpu");

}  // namespace torchscan

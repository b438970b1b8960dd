// Allocator events -> Rust (src/memory.rs), for measure_peak_memory on the CPU.
//
// PyTorch reports every allocation and free to the MemoryReportingInfoBase found under
// DebugInfoKind::PROFILER_STATE in the thread's debug info (which autograd threads inherit).
// That slot is the profiler's: the reporter must be a ProfilerStateBase (a bare
// MemoryReportingInfoBase there crashes torch._C._autograd._profiler_type()), its state is
// Disabled so nothing believes a profiler runs, and a slot already taken is refused, never
// replaced.

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include <c10/util/ThreadLocalDebugInfo.h>
#include <torch/csrc/profiler/orchestration/observer.h>
#include <torch/library.h>

#include "observer.h"
#include "sessions.h"
#include "torchscan/src/ffi.rs.h"

namespace torchscan {
namespace {

using torch::profiler::impl::ActiveProfilerType;
using torch::profiler::impl::ProfilerConfig;
using torch::profiler::impl::ProfilerState;
using torch::profiler::impl::ProfilerStateBase;

class PeakMemoryReporter final : public ProfilerStateBase {
 public:
  PeakMemoryReporter()
      : ProfilerStateBase(ProfilerConfig(ProfilerState::Disabled, /*report_input_shapes=*/false,
                                         /*profile_memory=*/true)),
        tracker_(ffi::new_memory_tracker()) {}

  void reportMemoryUsage(void* ptr, int64_t alloc_size, size_t /*total_allocated*/, size_t /*total_reserved*/,
                         c10::Device device) override {
    if (device.is_cpu()) tracker_->record(reinterpret_cast<std::size_t>(ptr), alloc_size);
  }

  ActiveProfilerType profilerType() override {
    return ActiveProfilerType::NONE;
  }

  std::string report_json() const {
    return std::string(ffi::memory_report_json(*tracker_));
  }

 private:
  rust::Box<ffi::MemoryTracker> tracker_;
};

struct Measurement {
  std::shared_ptr<PeakMemoryReporter> reporter;
  uint64_t thread;
};

std::mutex g_mutex;
std::unordered_map<int64_t, Measurement> g_measurements;
std::atomic<int64_t> g_next{1};

}  // namespace

namespace sessions {

int64_t memory_start() {
  TORCH_CHECK(c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PROFILER_STATE) == nullptr &&
                  ProfilerStateBase::get(/*global=*/true) == nullptr,
              "measure_peak_memory cannot run while a profiler (torch.profiler, "
              "torch.autograd.profiler, or another measure_peak_memory) is active on this thread; "
              "stop it first");
  auto reporter = std::make_shared<PeakMemoryReporter>();
  c10::ThreadLocalDebugInfo::_push(c10::DebugInfoKind::PROFILER_STATE, reporter);
  int64_t id = g_next.fetch_add(1);
  std::lock_guard<std::mutex> lock(g_mutex);
  g_measurements.emplace(id, Measurement{std::move(reporter), observer::current_thread()});
  return id;
}

std::string memory_stop(int64_t id) {
  Measurement m;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = g_measurements.find(id);
    TORCH_CHECK(it != g_measurements.end(), "unknown torchscan memory measurement ", id);
    TORCH_CHECK(it->second.thread == observer::current_thread(), "torchscan memory measurement ", id,
                " must be stopped on the thread that started it");
    m = std::move(it->second);
    g_measurements.erase(it);
  }
  auto* top = c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PROFILER_STATE);
  TORCH_CHECK(top == m.reporter.get(),
              "the profiler slot changed during measure_peak_memory (a profiler started inside the "
              "workload and is still running); the measurement is void");
  c10::ThreadLocalDebugInfo::_pop(c10::DebugInfoKind::PROFILER_STATE);
  return m.reporter->report_json();
}

}  // namespace sessions
}  // namespace torchscan

TORCH_LIBRARY_FRAGMENT(torchscan, m) {
  m.def(torch::schema("memory_start() -> int", c10::AliasAnalysisKind::CONSERVATIVE),
        &torchscan::sessions::memory_start);
  m.def(torch::schema("memory_stop(int measurement) -> str", c10::AliasAnalysisKind::CONSERVATIVE),
        &torchscan::sessions::memory_stop);
}

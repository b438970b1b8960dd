// The torch.ops.torchscan.* surface: what Python, TorchScript and C++ callers use to drive a
// counting session. Errors from the Rust core arrive as rust::Error (the message) and
// ffi::last_error_kind() (the kind, a bridge enum), and are rethrown here, in one place, as the c10
// error class Python maps to the matching exception.

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/dispatch/ObservedOperators.h>
#include <torch/library.h>

#include "observer.h"
#include "sessions.h"
#include "torchscan/src/ffi.rs.h"

namespace torchscan {
namespace {

// One per session (src/registry.rs MAX_SESSIONS, shared through the bridge).
constexpr std::size_t kSlots = static_cast<std::size_t>(ffi::Limits::Sessions);
// A handle's slot is its low bits (src/registry.rs, Handle::pack).
static_assert((kSlots & (kSlots - 1)) == 0, "the session count must be a power of two");

// What the C++ side must remember about an open session: its callbacks and its thread.
struct Observing {
  std::atomic<int64_t> handle{0};
  std::atomic<uint64_t> counting{0};
  std::atomic<uint64_t> marker{0};
  std::atomic<uint64_t> thread{0};
};
std::array<Observing, kSlots> g_observing;

[[noreturn]] void throw_mapped(const std::string& message) {
  switch (ffi::last_error_kind()) {
    case ffi::ErrorKind::Value:
      TORCH_CHECK_VALUE(false, message);
    case ffi::ErrorKind::Type:
      TORCH_CHECK_TYPE(false, message);
    default:
      TORCH_CHECK(false, message);
  }
}

template <class F>
auto call_core(F f) -> decltype(f()) {
  try {
    return f();
  } catch (const rust::Error& e) {
    throw_mapped(e.what());
  }
}

std::size_t slot_of(int64_t handle) {
  return static_cast<std::size_t>(static_cast<uint64_t>(handle) & (kSlots - 1));
}

// Stops the callbacks of `handle`'s session if it is still observing; true if it was. A session
// counts the thread that opened it: stopped on another thread (a `with count_flops()` inside a
// generator closed elsewhere, a finalizer), it is discarded, its count lost, and closing it there
// is an error (`discard` swallows it). Its slot is free at once: the opening thread's callback
// is removed by that thread later (observer.cpp, orphaned_here).
bool stop_observing(int64_t handle) {
  if (handle <= 0) return false;
  std::size_t slot = slot_of(handle);
  Observing& o = g_observing[slot];
  int64_t expected = handle;
  if (!o.handle.compare_exchange_strong(expected, 0)) return false;
  observer::Callbacks callbacks{o.counting.exchange(0), o.marker.exchange(0)};
  uint64_t owner = o.thread.load();
  uint64_t here = observer::current_thread();
  if (owner == here) {
    observer::stop(slot, callbacks);
    return true;
  }
  observer::orphan(slot, callbacks);
  ffi::discard_session(handle);
  TORCH_CHECK(false, "torchscan session ", handle, " was opened on thread ", owner, " and closed on thread ", here,
              ": a session counts the thread that opened it and must be closed there (a `with "
              "torchscan.count_flops()` in a generator closed on another thread?); it is discarded");
}

// Refuses an operation on `handle` from another thread than the one that opened it, except the
// autograd engine's threads (a CUDA backward runs there, with the opening thread's callbacks).
void check_owner(int64_t handle, const char* operation) {
  Observing& o = g_observing[slot_of(handle)];
  if (handle <= 0 || o.handle.load() != handle) return;  // unknown or closed: the core says so
  uint64_t owner = o.thread.load();
  uint64_t here = observer::current_thread();
  TORCH_CHECK(owner == here || observer::in_backward(), "torchscan session ", handle, " belongs to thread ", owner,
              ": ", operation, " from thread ", here, " is refused");
}

int64_t live_sessions() {
  return static_cast<int64_t>(ffi::live_sessions());
}

int64_t kept_sessions() {
  return static_cast<int64_t>(ffi::kept_sessions());
}

std::string module_metrics(const std::string& calls) {
  return std::string(call_core([&] { return ffi::module_metrics(calls); }));
}

std::string analysis_report(int64_t session, const std::string& document) {
  return std::string(call_core([&] { return ffi::analysis_report(session, document); }));
}

void enter_call(int64_t session, const std::string& module_label, const std::string& call_label) {
  call_core([&] { ffi::push_scopes(session, module_label, call_label); });
}

void exit_call(int64_t session) {
  call_core([&] { ffi::pop_scopes(session, 2); });
}

std::string format_info(const std::string& report, const std::string& wrap_mode, bool receptive_field,
                        bool effective_rf_stats, int64_t max_width, int64_t max_depth) {
  TORCH_CHECK_VALUE(max_width >= 0, "max_width must not be negative, got ", max_width);
  return std::string(call_core([&] {
    return ffi::format_info(report, wrap_mode, receptive_field, effective_rf_stats, static_cast<std::size_t>(max_width),
                            max_depth);
  }));
}

std::string format_flops(const std::string& report, const std::string& by, int64_t max_depth, int64_t max_width,
                         const std::string& order) {
  TORCH_CHECK_VALUE(max_width >= 0, "max_width must not be negative, got ", max_width);
  return std::string(
      call_core([&] { return ffi::format_flops(report, by, max_depth, static_cast<std::size_t>(max_width), order); }));
}

std::string module_tree(const std::string& report) {
  return std::string(call_core([&] { return ffi::module_tree(report); }));
}

std::string throughput_report(const std::string& steps, double peak, bool keep_steps) {
  return std::string(call_core([&] { return ffi::throughput_report(steps, peak, keep_steps); }));
}

std::string merge_reports(const std::string& reports) {
  return std::string(call_core([&] { return ffi::merge_reports(reports); }));
}

std::string compare_reports(const std::string& before, const std::string& after) {
  return std::string(call_core([&] { return ffi::compare_reports(before, after); }));
}

// How the formula registry treats an operator: [class, detail] (the coverage table).
std::vector<std::string> classify_operator(const std::string& name) {
  ffi::OperatorClass c = ffi::classify_operator(name);
  return {std::string(c.kind), std::string(c.detail)};
}

std::vector<std::string> registry_operators() {
  std::vector<std::string> names;
  for (const auto& name : ffi::registry_operators()) names.emplace_back(name);
  return names;
}

std::string torchscan_version() {
  return std::string(ffi::torchscan_version());
}

std::string torch_version() {
  return TORCHSCAN_TORCH_VERSION;
}

// Marks one run of an inductor-compiled graph (python/torchscan/_compiled.py): the event is
// what sessions observe; the core reports its work as uncounted compiled code.
void inductor_graph() {}

// Marks one run of a graph compiled by an AOTAutograd backend (aot_eager) that could not be
// priced: its operators count as they run, but the modules inside it run no call of their own.
void unlabelled_graph() {}

// Around each run of a compiled graph priced when it was compiled (src/session/priced.rs): sessions
// observing the thread count nothing the run dispatches, and the end adds the graph's price when
// the run completed.
void compiled_begin() {}
void compiled_end(int64_t /*graph*/, bool /*completed*/) {}

// The module hooks (python/torchscan/_hooks.c) call these through plain function pointers (with
// the C types of its typedefs) on every module call: no torch.ops call, no Python object, one
// call into the core each. `unnamed` receives the sessions that have not named the module (at
// most `capacity`).
size_t module_enter(uint64_t module, int64_t* unnamed, size_t capacity) noexcept {
  return ffi::enter_module(module, rust::Slice<int64_t>(unnamed, capacity));
}

// After Python named `module` for `session` (its first call): enter it in that session only.
int module_enter_in(int64_t session, uint64_t module) noexcept {
  return ffi::enter_module_in(session, module) ? 1 : 0;
}

void module_exit(uint64_t module) noexcept {
  ffi::exit_module(module);
}

// Names a module tree for `session` (identities, and their labels newline-joined); 0 on failure.
int module_names(int64_t session, const int64_t* modules, size_t count, const char* labels, size_t length) noexcept {
  try {
    ffi::name_modules(session, rust::Slice<const int64_t>(modules, count), rust::Str(labels, length));
    return 1;
  } catch (...) {
    return 0;
  }
}

// Labels `session`'s work by the module calls the hooks extension's frame walker shows open on
// the thread `owner` names (src/host_frames.rs); 1 when it does, 0 when it cannot, -1 when the
// session is not open.
int module_label_by_frames(int64_t session, uint64_t owner) noexcept {
  try {
    return ffi::label_by_frames(session, owner) ? 1 : 0;
  } catch (...) {
    return -1;
  }
}

// The hooks extension's frame walker and namer (plain C functions; see src/host_frames.rs).
void module_register_frames(void* walk, void* name) noexcept {
  ffi::register_host_frames(reinterpret_cast<size_t>(walk), reinterpret_cast<size_t>(name));
}

// The version of the table below; _hooks.c refuses a table of another version.
constexpr int64_t kModuleHooksAbi = 3;

template <class F>
int64_t address(F* f) {
  return static_cast<int64_t>(reinterpret_cast<intptr_t>(f));
}

// [ABI version, module_enter, module_enter_in, module_exit, module_names,
// module_label_by_frames, module_register_frames]: how the hooks
// extension, a separate Python module, finds the entry points of this library (whose symbols are
// not exported).
std::vector<int64_t> module_hooks() {
  return {
      kModuleHooksAbi,        address(&module_enter),           address(&module_enter_in),       address(&module_exit),
      address(&module_names), address(&module_label_by_frames), address(&module_register_frames)};
}

int64_t enter_modules(int64_t session, c10::ArrayRef<int64_t> modules) {
  return static_cast<int64_t>(call_core(
      [&] { return ffi::enter_modules(session, rust::Slice<const int64_t>(modules.data(), modules.size())); }));
}

void exit_modules(int64_t session, int64_t count) {
  TORCH_CHECK_VALUE(count >= 0, "count must not be negative, got ", count);
  call_core([&] { ffi::exit_modules(session, static_cast<size_t>(count)); });
}

int64_t open_module_calls(int64_t session) {
  return static_cast<int64_t>(call_core([&] { return ffi::open_module_calls(session); }));
}

}  // namespace

namespace sessions {

int64_t open(const std::string& config) {
  auto opened = call_core([&] { return ffi::open_session(config); });
  Observing& o = g_observing[opened.slot];
  o.thread.store(observer::current_thread());
  o.handle.store(opened.handle);
  try {
    auto callbacks = observer::start(opened.slot, opened.generation, opened.capture_outputs, opened.all_threads);
    o.counting.store(callbacks.counting);
    o.marker.store(callbacks.marker);
  } catch (...) {
    o.handle.store(0);
    ffi::discard_session(opened.handle);
    throw;
  }
  return opened.handle;
}

std::string close(int64_t handle) {
  stop_observing(handle);
  auto pending = call_core([&] { return ffi::close_session(handle); });
  return std::string(pending);
}

std::string end(int64_t handle) {
  stop_observing(handle);
  call_core([&] { return ffi::close_session(handle); });
  return std::string(call_core([&] { return ffi::finish_session(handle, "[]"); }));
}

int64_t end_kept(int64_t handle) {
  stop_observing(handle);
  call_core([&] { return ffi::close_session(handle); });
  return call_core([&] { return ffi::keep_session(handle); });
}

std::string kept_report(int64_t id) {
  return std::string(call_core([&] { return ffi::kept_report(id); }));
}

void drop_kept(int64_t id) noexcept {
  ffi::drop_kept(id);
}

std::string finish(int64_t handle, const std::string& custom_flops) {
  auto report = call_core([&] { return ffi::finish_session(handle, custom_flops); });
  return std::string(report);
}

// Closes a recording session (see python/torchscan/_compiled.py) into a priced graph.
int64_t price(int64_t handle) {
  stop_observing(handle);
  call_core([&] { return ffi::close_session(handle); });
  return call_core([&] { return ffi::price_session(handle); });
}

void discard(int64_t handle) {
  try {
    stop_observing(handle);
  } catch (const c10::Error&) {
    return;  // another thread's session: discarded there
  }
  ffi::discard_session(handle);
}

void push_scope(int64_t handle, const std::string& label) {
  check_owner(handle, "push_scope");
  call_core([&] { ffi::push_scope(handle, label); });
}

void pop_scope(int64_t handle) {
  check_owner(handle, "pop_scope");
  call_core([&] { ffi::pop_scope(handle); });
}

void name_modules(int64_t handle, c10::ArrayRef<int64_t> modules, const std::string& labels) {
  call_core([&] { ffi::name_modules(handle, rust::Slice<const int64_t>(modules.data(), modules.size()), labels); });
}

}  // namespace sessions
}  // namespace torchscan

// The scope operators run twice per module call while a session observes every operator. An
// operator's "observed" bit is read from this list when the operator is registered, so the
// names go in before TORCH_LIBRARY below (static initialisers run in definition order within a
// file): the dispatcher then starts no RecordFunction for them, and neither our callbacks nor
// torch.profiler pay for them. The core still classifies any torchscan:: operator it does see as
// internal.
static const bool g_scope_operators_unobserved = [] {
  auto& unobserved = c10::ObservedOperators::getUnobservedOperatorList();
  for (const char* name : {"torchscan::enter_call", "torchscan::exit_call", "torchscan::push_scope",
                           "torchscan::pop_scope", "torchscan::enter_modules", "torchscan::exit_modules"}) {
    unobserved.insert(name);
  }
  return true;
}();

// Every operator has side effects on native state: CONSERVATIVE alias analysis keeps TorchScript
// from reordering them or removing a call whose result is unused (close_session, say).
TORCH_LIBRARY(torchscan, m) {
  auto def = [&](const char* schema, auto fn) {
    m.def(torch::schema(schema, c10::AliasAnalysisKind::CONSERVATIVE), fn);
  };
  def("open_session(str config=\"\") -> int", &torchscan::sessions::open);
  def("close_session(int session) -> str", &torchscan::sessions::close);
  def("finish_session(int session, str custom_flops=\"[]\") -> str", &torchscan::sessions::finish);
  def("discard_session(int session) -> ()", &torchscan::sessions::discard);
  def("push_scope(int session, str label) -> ()", &torchscan::sessions::push_scope);
  def("pop_scope(int session) -> ()", &torchscan::sessions::pop_scope);
  def("name_modules(int session, int[] modules, str labels) -> ()", &torchscan::sessions::name_modules);
  def("end_session(int session) -> str", &torchscan::sessions::end);
  def("end_kept(int session) -> int", &torchscan::sessions::end_kept);
  def("kept_report(int kept) -> str", &torchscan::sessions::kept_report);
  def("drop_kept(int kept) -> ()", [](int64_t id) { torchscan::sessions::drop_kept(id); });
  def("kept_sessions() -> int", &torchscan::kept_sessions);
  def("module_hooks() -> int[]", &torchscan::module_hooks);
  def("enter_modules(int session, int[] modules) -> int", &torchscan::enter_modules);
  def("exit_modules(int session, int count) -> ()", &torchscan::exit_modules);
  def("open_module_calls(int session) -> int", &torchscan::open_module_calls);
  def("live_sessions() -> int", &torchscan::live_sessions);
  def("torch_version() -> str", &torchscan::torch_version);
  def("torchscan_version() -> str", &torchscan::torchscan_version);
  def("classify_operator(str name) -> str[]", &torchscan::classify_operator);
  def("registry_operators() -> str[]", &torchscan::registry_operators);
  def("inductor_graph() -> ()", &torchscan::inductor_graph);
  def("unlabelled_graph() -> ()", &torchscan::unlabelled_graph);
  def("compiled_begin() -> ()", &torchscan::compiled_begin);
  def("compiled_end(int graph, bool completed) -> ()", &torchscan::compiled_end);
  def("price_session(int session) -> int", &torchscan::sessions::price);
  def("module_metrics(str calls) -> str", &torchscan::module_metrics);
  def("analysis_report(int session, str document) -> str", &torchscan::analysis_report);
  def("enter_call(int session, str module_label, str call_label) -> ()", &torchscan::enter_call);
  def("exit_call(int session) -> ()", &torchscan::exit_call);
  def("compare_reports(str before, str after) -> str", &torchscan::compare_reports);
  def("merge_reports(str reports) -> str", &torchscan::merge_reports);
  def("format_info(str report, str wrap_mode, bool receptive_field, bool effective_rf_stats, int max_width=0, "
      "int max_depth=-1) -> str",
      &torchscan::format_info);
  def("format_flops(str report, str by, int max_depth=-1, int max_width=0, str order=\"\") -> str",
      &torchscan::format_flops);
  def("module_tree(str report) -> str", &torchscan::module_tree);
  def("throughput_report(str steps, float peak, bool keep_steps) -> str", &torchscan::throughput_report);
}

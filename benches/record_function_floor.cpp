// The floor under torchscan's per-operator cost: RecordFunction callbacks registered as the
// shim registers them (a global one that needs the inputs and tells the opening thread by one
// comparison, and a disabled thread-local marker) and doing nothing but count events. Built and
// driven by benches/record_function_floor.py.

#include <ATen/record_function.h>
#include <torch/extension.h>

namespace {

uint64_t g_events = 0;
uint64_t g_outermost = 0;
thread_local int t_depth = 0;
thread_local bool t_opened = false;
uint64_t g_counting = 0;
uint64_t g_marker = 0;

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction&) {
  if (!t_opened) return nullptr;
  ++g_events;
  if (t_depth++ == 0) ++g_outermost;
  return nullptr;
}

void on_end(const at::RecordFunction&, at::ObserverContext*) {
  if (t_opened) --t_depth;
}

std::unique_ptr<at::ObserverContext> on_marker(const at::RecordFunction&) {
  return nullptr;
}

void on_marker_end(const at::RecordFunction&, at::ObserverContext*) {}

void install() {
  t_opened = true;
  g_marker = at::addThreadLocalCallback(at::RecordFunctionCallback(on_marker, on_marker_end));
  at::disableCallback(g_marker);
  g_counting = at::addGlobalCallback(at::RecordFunctionCallback(on_start, on_end)
                                         .needsInputs(true)
                                         .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION}));
}

void uninstall() {
  at::removeCallback(g_counting);
  at::removeCallback(g_marker);
  t_opened = false;
}

}  // namespace

PYBIND11_MODULE(record_function_floor, m) {
  m.def("install", &install);
  m.def("uninstall", &uninstall);
  m.def("events", [] { return std::make_pair(g_events, g_outermost); });
}

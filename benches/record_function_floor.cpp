// The floor under torchscan's per-operator cost: RecordFunction callbacks registered as the
// shim registers them (a thread-local one that needs the inputs, a global one that does not)
// and doing nothing but count events. Built and driven by benches/record_function_floor.py.

#include <ATen/record_function.h>
#include <torch/extension.h>

namespace {

uint64_t g_events = 0;
uint64_t g_outermost = 0;
thread_local int t_depth = 0;
uint64_t g_counting = 0;
uint64_t g_detecting = 0;

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction&) {
  ++g_events;
  if (t_depth++ == 0) ++g_outermost;
  return nullptr;
}

void on_end(const at::RecordFunction&, at::ObserverContext*) {
  --t_depth;
}

std::unique_ptr<at::ObserverContext> on_detect(const at::RecordFunction&) {
  return nullptr;
}

void on_detect_end(const at::RecordFunction&, at::ObserverContext*) {}

void install() {
  g_counting = at::addThreadLocalCallback(
      at::RecordFunctionCallback(on_start, on_end).needsInputs(true).scopes({at::RecordScope::FUNCTION}));
  g_detecting =
      at::addGlobalCallback(at::RecordFunctionCallback(on_detect, on_detect_end).scopes({at::RecordScope::FUNCTION}));
}

void uninstall() {
  at::removeCallback(g_counting);
  at::removeCallback(g_detecting);
}

}  // namespace

PYBIND11_MODULE(record_function_floor, m) {
  m.def("install", &install);
  m.def("uninstall", &uninstall);
  m.def("events", [] { return std::make_pair(g_events, g_outermost); });
}

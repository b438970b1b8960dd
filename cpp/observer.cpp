// RecordFunction callbacks -> Rust. This is the per-operator hot path: no allocation, no lock
// of our own (the Rust session's mutex is per session, uncontended), nothing thrown.
//
// Each session owns a slot. Callbacks are plain function pointers, so every slot gets its own
// pair of trampolines (a template instantiated per slot): a thread-local callback travels with
// ThreadLocalState to autograd worker threads and still knows its session there, and nested
// sessions on one thread each see every event.

#include <array>
#include <cstring>
#include <atomic>
#include <utility>
#include <vector>

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <ATen/record_function.h>

#include "observer.h"
#include "torchscan/cpp/bridge.h"

namespace torch::autograd {
// The graph task the calling thread is executing, -1 outside autograd's backward
// (torch/csrc/autograd/graph_task.h; declared here to keep that header's includes out).
int get_current_graph_task_id();
}  // namespace torch::autograd
#include "torchscan/src/ffi.rs.h"

namespace torchscan::ffi {
namespace {

constexpr int64_t kNone = static_cast<int64_t>(ArgTag::None);
constexpr int64_t kTensor = static_cast<int64_t>(ArgTag::Tensor);
constexpr int64_t kInt = static_cast<int64_t>(ArgTag::Int);
constexpr int64_t kDouble = static_cast<int64_t>(ArgTag::Double);
constexpr int64_t kBool = static_cast<int64_t>(ArgTag::Bool);
constexpr int64_t kIntList = static_cast<int64_t>(ArgTag::IntList);
constexpr int64_t kBoolList = static_cast<int64_t>(ArgTag::BoolList);
constexpr int64_t kTensorList = static_cast<int64_t>(ArgTag::TensorList);
constexpr int64_t kOther = static_cast<int64_t>(ArgTag::Other);

using Buffer = std::vector<int64_t>;

// One per thread: reused, so encoding arguments allocates only while it grows.
thread_local Buffer t_buffer;

// (dtype, ndim, sizes...) of a defined, strided-or-sparse tensor; false for the others.
bool push_tensor_record(const at::Tensor& t, Buffer& out) {
  if (!t.defined() || t.is_nested()) return false;
  auto sizes = t.sizes();
  out.push_back(static_cast<int64_t>(t.scalar_type()));
  out.push_back(static_cast<int64_t>(sizes.size()));
  for (auto s : sizes) out.push_back(s);
  return true;
}

void encode(const c10::IValue& v, Buffer& out) {
  if (v.isTensor()) {
    out.push_back(kTensor);
    if (!push_tensor_record(v.toTensor(), out)) {
      out.pop_back();
      out.push_back(v.toTensor().defined() ? kOther : kNone);
    }
  } else if (v.isInt()) {
    out.push_back(kInt);
    out.push_back(v.toInt());
  } else if (v.isSymInt()) {
    auto maybe = v.toSymInt().maybe_as_int();
    if (maybe) {
      out.push_back(kInt);
      out.push_back(*maybe);
    } else {
      out.push_back(kOther);
    }
  } else if (v.isDouble()) {
    double d = v.toDouble();
    int64_t bits;
    static_assert(sizeof bits == sizeof d);
    std::memcpy(&bits, &d, sizeof bits);
    out.push_back(kDouble);
    out.push_back(bits);
  } else if (v.isBool()) {
    out.push_back(kBool);
    out.push_back(v.toBool() ? 1 : 0);
  } else if (v.isNone()) {
    out.push_back(kNone);
  } else if (v.isIntList()) {
    const auto& list = v.toIntList();
    out.push_back(kIntList);
    out.push_back(static_cast<int64_t>(list.size()));
    for (int64_t x : list) out.push_back(x);
  } else if (v.isBoolList()) {
    const auto& list = v.toBoolList();
    out.push_back(kBoolList);
    out.push_back(static_cast<int64_t>(list.size()));
    for (bool x : list) out.push_back(x ? 1 : 0);
  } else if (v.isTensorList()) {
    const auto& list = v.toTensorList();
    size_t start = out.size();
    out.push_back(kTensorList);
    out.push_back(static_cast<int64_t>(list.size()));
    for (const at::Tensor& t : list) {
      if (!push_tensor_record(t, out)) {
        // A list with undefined or nested tensors has no shape list to offer.
        out.resize(start);
        out.push_back(kOther);
        return;
      }
    }
  } else {
    out.push_back(kOther);
  }
}

// Dense backends: where a call on ordinary (strided) tensors dispatches. An operator with a
// kernel for one of them computes by itself; one without is a composite for such calls. Kernels
// registered only for sparse, quantized, nested or mkldnn layouts do not make `linear` or
// `matmul` opaque for dense tensors (docs/methodology.md lists this limit).
const c10::DispatchKeySet& backend_keys() {
  using K = c10::DispatchKey;
  static const c10::DispatchKeySet keys({K::CPU, K::CUDA, K::HIP, K::XPU, K::MPS, K::XLA, K::Lazy, K::HPU,
                                         K::MTIA, K::PrivateUse1});
  return keys;
}

bool has_own_kernel(const c10::OperatorHandle& op, const std::string& name) {
  if (op.hasKernelForAnyDispatchKey(backend_keys())) return true;
  // ATen's CompositeExplicitAutograd kernels are decompositions into dispatched operators;
  // elsewhere (a user's library) such a kernel may compute by itself, out of our sight.
  bool aten = name.rfind("aten::", 0) == 0 || name.rfind("prims::", 0) == 0;
  return !aten && (op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd) ||
                   op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional));
}

}  // namespace

EventDescription describe(const OpEvent& event) noexcept {
  EventDescription d{};
  try {
    auto name = event.fn->operator_name();
    if (!name) return d;  // not a dispatcher operator
    d.is_op = true;
    d.name = rust::String(name->name);
    auto op = c10::Dispatcher::singleton().findOp(*name);
    if (!op) {
      d.has_own_kernel = true;  // unknown: never assume it free
      return d;
    }
    d.has_own_kernel = has_own_kernel(*op, name->name);
    if (op->hasSchema()) {
      for (const auto& arg : op->schema().arguments()) {
        if (!arg.kwarg_only()) ++d.positional_args;
      }
    }
  } catch (...) {
    d.has_own_kernel = true;
  }
  return d;
}

rust::Slice<const int64_t> read_inputs(const OpEvent& event) noexcept {
  Buffer& out = t_buffer;
  out.clear();
  try {
    for (const auto& v : event.fn->inputs()) encode(v, out);
  } catch (...) {
    out.clear();  // an empty stream: the formula reports the missing arguments
  }
  return {out.data(), out.size()};
}

rust::Slice<const int64_t> read_outputs(const OpEvent& event) noexcept {
  Buffer& out = t_buffer;
  out.clear();
  try {
    for (const auto& v : event.fn->outputs()) encode(v, out);
  } catch (...) {
    out.clear();
  }
  return {out.data(), out.size()};
}

}  // namespace torchscan::ffi

namespace torchscan::observer {
namespace {

constexpr std::size_t kSlots = 64;

// Generation of the session in each slot; 0 while the slot observes nothing.
std::array<std::atomic<uint64_t>, kSlots> g_generation{};

// Per thread and slot: nesting depth, and where the current skipped / backward region began.
struct ThreadSlot {
  uint64_t generation = 0;
  int64_t depth = 0;
  int64_t skip_from = 0;
  int64_t backward_from = 0;
  int64_t backward_sequence = -1;  // the enclosing autograd node's sequence number
  int64_t last_node_sequence = -1;  // the last autograd node entered on this thread
  bool capture = false;
};
thread_local std::array<ThreadSlot, kSlots> t_slots;

inline ThreadSlot* active(std::size_t slot, uint64_t& generation) {
  generation = g_generation[slot].load(std::memory_order_acquire);
  if (generation == 0) return nullptr;
  ThreadSlot& st = t_slots[slot];
  if (st.generation != generation) st = ThreadSlot{generation};
  return &st;
}

void on_start(std::size_t slot, const at::RecordFunction& fn) {
  uint64_t generation;
  ThreadSlot* st = active(slot, generation);
  if (!st) return;
  ++st->depth;
  if (st->skip_from != 0) return;  // inside a claimed, ignored or uncounted operator
  if (fn.scope() == at::RecordScope::BACKWARD_FUNCTION) {
    // An autograd node, not an operator: what runs inside it is backward work.
    if (st->backward_from == 0) {
      st->backward_from = st->depth;
      st->backward_sequence = fn.seqNr();
      st->last_node_sequence = fn.seqNr();
    }
    return;
  }
  ffi::OpEvent event{&fn};
  auto key = reinterpret_cast<std::size_t>(fn.name());
  auto token = reinterpret_cast<std::size_t>(st);
  // Backward work: inside an autograd node, or elsewhere in the engine's execution of a graph
  // task. Between nodes the engine fits the gradients a node returned to its inputs' shapes
  // (the sum that reduces a bias gradient over the batch): that work belongs to the node that
  // just ran, the last one entered on this thread.
  bool in_node = st->backward_from != 0;
  bool backward = in_node || torch::autograd::get_current_graph_task_id() != -1;
  int64_t sequence = in_node ? st->backward_sequence : backward ? st->last_node_sequence : fn.seqNr();
  uint8_t decision = ffi::on_op_start(slot, generation, key, token, backward, sequence, event);
  if (decision != 0) {
    st->skip_from = st->depth;
    st->capture = decision == 2;
  }
}

void on_end(std::size_t slot, const at::RecordFunction& fn) {
  uint64_t generation;
  ThreadSlot* st = active(slot, generation);
  if (!st || st->depth == 0) return;
  if (st->depth == st->skip_from) {
    if (st->capture) {
      ffi::OpEvent event{&fn};
      ffi::on_custom_end(slot, generation, reinterpret_cast<std::size_t>(st), event);
    }
    st->skip_from = 0;
    st->capture = false;
  }
  if (st->depth == st->backward_from) st->backward_from = 0;
  --st->depth;
}

template <std::size_t Slot>
std::unique_ptr<at::ObserverContext> start_trampoline(const at::RecordFunction& fn) {
  on_start(Slot, fn);
  return nullptr;
}

template <std::size_t Slot>
void end_trampoline(const at::RecordFunction& fn, at::ObserverContext*) {
  on_end(Slot, fn);
}

struct Trampolines {
  at::RecordFunctionCallback::StartCallback start;
  at::RecordFunctionCallback::EndCallback end;
};

template <std::size_t... I>
constexpr std::array<Trampolines, kSlots> make_trampolines(std::index_sequence<I...>) {
  return {Trampolines{&start_trampoline<I>, &end_trampoline<I>}...};
}

constexpr auto kTrampolines = make_trampolines(std::make_index_sequence<kSlots>{});

}  // namespace

uint64_t start(std::size_t slot, uint64_t generation, bool capture_outputs) {
  TORCH_CHECK(slot < kSlots, "torchscan: session slot ", slot, " out of range");
  g_generation[slot].store(generation, std::memory_order_release);
  auto callback = at::RecordFunctionCallback(kTrampolines[slot].start, kTrampolines[slot].end)
                      .needsInputs(true)
                      .needsOutputs(capture_outputs)
                      .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION});
  return at::addThreadLocalCallback(callback);
}

void stop(std::size_t slot, uint64_t callback) {
  if (slot >= kSlots) return;
  g_generation[slot].store(0, std::memory_order_release);
  if (callback != 0) at::removeCallback(callback);
}

uint64_t current_thread() {
  return at::RecordFunction::currentThreadId();
}

}  // namespace torchscan::observer

// RecordFunction callbacks -> Rust. This is the per-operator hot path: no allocation, no lock
// of our own (the Rust session's mutex is per session, uncontended), nothing thrown.
//
// Each session owns a slot. Callbacks are plain function pointers, so every slot gets its own
// pair of trampolines (a template instantiated per slot): a thread-local callback travels with
// ThreadLocalState to autograd worker threads and still knows its session there, and nested
// sessions on one thread each see every event.

#include <cxxabi.h>

#include <algorithm>
#include <cmath>
#include <array>
#include <cstring>
#include <atomic>
#include <exception>
#include <memory>
#include <utility>
#include <vector>

#include <ATen/SparseCsrTensorImpl.h>
#include <ATen/SparseTensorImpl.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <ATen/core/class_type.h>
#include <ATen/core/function.h>
#include <ATen/core/ivalue.h>
#include <ATen/record_function.h>

#include "collectives.h"
#include "observer.h"
#include "torchscan/cpp/bridge.h"

namespace torch::autograd {
// The graph task the calling thread is executing, -1 outside autograd's backward
// (torch/csrc/autograd/graph_task.h; declared here to keep that header's includes out).
int get_current_graph_task_id();
}  // namespace torch::autograd

namespace at::functorch {
// torch.func's wrapper tensor (ATen/functorch/TensorWrapper.h, whose includes need a JSON library
// that torch does not ship): only these two exported functions are used, never its layout.
struct TensorWrapper {
  bool is_alive() const;
};
TensorWrapper* maybeGetTensorWrapper(const at::Tensor& tensor);
}  // namespace at::functorch
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
constexpr int64_t kSparse = static_cast<int64_t>(ArgTag::Sparse);
constexpr int64_t kPacked = static_cast<int64_t>(ArgTag::Packed);
constexpr int64_t kGroup = static_cast<int64_t>(ArgTag::Group);
constexpr int64_t kData = static_cast<int64_t>(ArgTag::Data);
constexpr int64_t kChoice = static_cast<int64_t>(ArgTag::Choice);

// The string arguments a formula reads (src/args.rs, `choice`): QR's mode, least squares' driver.
struct ChoiceEntry {
  const char* text;
  std::size_t size;
  StringChoice code;
};
constexpr std::array<ChoiceEntry, 7> kChoices{{
    {"reduced", 7, StringChoice::Reduced},
    {"complete", 8, StringChoice::Complete},
    {"r", 1, StringChoice::R},
    {"gels", 4, StringChoice::Gels},
    {"gelsy", 5, StringChoice::Gelsy},
    {"gelsd", 5, StringChoice::Gelsd},
    {"gelss", 5, StringChoice::Gelss},
}};

// The code of a string of that table, 0 for any other: compared in place, nothing allocated.
int64_t choice_code(const std::string& text) {
  for (const auto& entry : kChoices) {
    if (text.size() == entry.size && std::memcmp(text.data(), entry.text, entry.size) == 0) {
      return static_cast<int64_t>(entry.code);
    }
  }
  return 0;
}

using Buffer = ArgBuffer;

}  // namespace

// The operator's own arguments. A boxed call (functorch's fallbacks, the older vmap's loop over
// rows) hands RecordFunction its whole stack, with the caller's values below the arguments.
// None when they cannot be found (the formula then reports its missing arguments).
c10::ArrayRef<const c10::IValue> arguments(const at::RecordFunction& fn) noexcept {
  try {
    auto inputs = fn.inputs();
    std::size_t n = fn.num_inputs();
    if (n < inputs.size()) inputs = inputs.slice(inputs.size() - n);
    return inputs;
  } catch (...) {
    return {};
  }
}

namespace {

// (Parentheses: braces would pick ArrayRef's initializer-list constructor, a list of two
// IValues made of the pointer and the count.)
inline c10::ArrayRef<const c10::IValue> event_arguments(const OpEvent& event) {
  return c10::ArrayRef<const c10::IValue>(event.args, event.num_args);
}

// (dtype, ndim, sizes...) of a defined, strided-or-sparse tensor; false for the others.
// A strided nested tensor (NestedTensorCPU/CUDA kernels) has no single shape: its record is its
// elements as a flat tensor, so elementwise and reduction formulas price it and the formulas that
// need shapes (matrix products, convolutions) find none. Jagged nested tensors are Python
// subclasses whose kernels run on their dense values, which are recorded as they are.
bool is_strided_nested(const at::Tensor& t) {
  return t.key_set().has(c10::DispatchKey::NestedTensorCPU) || t.key_set().has(c10::DispatchKey::NestedTensorCUDA);
}

// (dtype, ndim, sizes...): the record of a tensor with one shape.
inline void push_shape_record(const at::Tensor& t, Buffer& out) {
  auto sizes = t.sizes();
  // One capacity check and plain stores: the hot path's commonest record.
  std::size_t ndim = sizes.size();
  int64_t* record = out.extend(2 + ndim);
  record[0] = static_cast<int64_t>(t.scalar_type());
  record[1] = static_cast<int64_t>(ndim);
  const int64_t* dims = sizes.data();
  // Stores for the few dimensions of nearly every tensor: std::copy (a memmove call) costs more
  // than the copy of so few values.
  if (ndim <= 4) {
    for (std::size_t i = 0; i < ndim; ++i) record[2 + i] = dims[i];
  } else {
    std::copy(dims, dims + ndim, record + 2);
  }
}

bool push_tensor_record(const at::Tensor& t, Buffer& out) {
  if (!t.defined()) return false;
  if (is_strided_nested(t)) {
    out.push(static_cast<int64_t>(t.scalar_type()));
    out.push(1);
    out.push(t.numel());
    return true;
  }
  if (t.is_nested()) return false;
  push_shape_record(t, out);
  return true;
}

// The values a sparse tensor stores, read from its impl (calling values() would dispatch an
// operator from inside the observer). -1 when unknown.
int64_t stored_values(const at::Tensor& t) {
  switch (t.layout()) {
    case c10::kSparse:
      return static_cast<at::SparseTensorImpl*>(t.unsafeGetTensorImpl())->values().numel();
    case c10::kSparseCsr:
    case c10::kSparseCsc:
    case c10::kSparseBsr:
    case c10::kSparseBsc:
      return static_cast<at::SparseCsrTensorImpl*>(t.unsafeGetTensorImpl())->values().numel();
    default:
      return -1;
  }
}

bool is_sparse_layout(c10::Layout layout) {
  return layout == c10::kSparse || layout == c10::kSparseCsr || layout == c10::kSparseCsc ||
         layout == c10::kSparseBsr || layout == c10::kSparseBsc;
}

// A quantized kernel's packed weight (a torchbind object: `LinearPackedParamsBase`,
// `Conv{1,2,3}dPackedParamsBase`) hides its shape from the dispatcher. Its record, read through
// the object's own methods: the weight's (dtype, ndim, dims...), then n and n parameters (for a
// linear, whether it has a bias, 1 or 0; for a convolution the spatial rank d, stride, padding, output padding and
// dilation (d each), groups, transposed). Unpacking copies the weight, so each object is read
// once per thread and kept by a weak reference (which also keeps its address from being reused
// while the entry lives); the cache allocates only when it meets a new object.
struct PackedEntry {
  c10::weak_intrusive_ptr<c10::ivalue::Object> object;
  std::vector<int64_t> record;
};
constexpr std::size_t kPackedCacheSize = 256;
thread_local std::vector<PackedEntry> t_packed;

bool ends_with(const std::string& s, const char* suffix) {
  std::size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

c10::IValue call_method(const c10::intrusive_ptr<c10::ivalue::Object>& object, const char* name) {
  torch::jit::Function& method = object->type()->getMethod(name);
  torch::jit::Stack stack{c10::IValue(object)};
  method.run(stack);
  TORCH_CHECK(stack.size() == 1, "torchscan: unexpected result of ", name);
  return std::move(stack[0]);
}

void push_ints(const c10::IValue& list, std::vector<int64_t>& out) {
  for (int64_t x : list.toIntList()) out.push_back(x);
}

// The record of a packed weight (see above); false for any other object.
bool read_packed(const c10::intrusive_ptr<c10::ivalue::Object>& object, std::vector<int64_t>& record) {
  const auto& type = object->type();
  if (!type || !type->name()) return false;
  const std::string& name = type->name()->qualifiedName();
  bool linear = ends_with(name, "quantized.LinearPackedParamsBase");
  int64_t dims = ends_with(name, "quantized.Conv1dPackedParamsBase")   ? 1
                 : ends_with(name, "quantized.Conv2dPackedParamsBase") ? 2
                 : ends_with(name, "quantized.Conv3dPackedParamsBase") ? 3
                                                                       : 0;
  if (!linear && dims == 0) return false;
  // The methods run operators (unpacking allocates a tensor): none of them is the workload's.
  at::RecordFunctionGuard no_observers(false);
  c10::IValue unpacked = linear ? call_method(object, "unpack") : c10::IValue();
  c10::IValue weight = linear ? unpacked.toTupleRef().elements().at(0) : call_method(object, "weight");
  Buffer weight_record;
  if (!weight.isTensor() || !push_tensor_record(weight.toTensor(), weight_record)) return false;
  record.assign(weight_record.data(), weight_record.data() + weight_record.size());
  if (linear) {
    // One parameter: whether it holds a bias (a dynamic kernel adds it in floating point).
    const auto& elements = unpacked.toTupleRef().elements();
    const bool bias = elements.size() > 1 && elements[1].isTensor() && elements[1].toTensor().defined();
    record.push_back(1);
    record.push_back(bias ? 1 : 0);
    return true;
  }
  std::vector<int64_t> params{dims};
  for (const char* list : {"stride", "padding", "output_padding", "dilation"}) {
    push_ints(call_method(object, list), params);
  }
  params.push_back(call_method(object, "groups").toInt());
  params.push_back(call_method(object, "transpose").toBool() ? 1 : 0);
  record.push_back(static_cast<int64_t>(params.size()));
  record.insert(record.end(), params.begin(), params.end());
  return true;
}

bool encode_packed(const c10::IValue& v, Buffer& out) {
  const auto& object = v.toObject();
  for (const auto& entry : t_packed) {
    if (entry.object._unsafe_get_target() == object.get()) {
      out.push(kPacked);
      std::copy(entry.record.begin(), entry.record.end(), out.extend(entry.record.size()));
      return true;
    }
  }
  std::vector<int64_t> record;
  if (!read_packed(object, record)) return false;
  // Objects that died free their entries; a full cache forgets its oldest entry.
  t_packed.erase(
      std::remove_if(t_packed.begin(), t_packed.end(), [](const PackedEntry& e) { return e.object.expired(); }),
      t_packed.end());
  if (t_packed.size() >= kPackedCacheSize) t_packed.erase(t_packed.begin());
  t_packed.push_back(PackedEntry{c10::weak_intrusive_ptr<c10::ivalue::Object>(object), record});
  out.push(kPacked);
  std::copy(record.begin(), record.end(), out.extend(record.size()));
  return true;
}

// The commonest record, a strided tensor that is not nested, without the rare layouts' checks
// below (the same record as theirs would be). False for any other value.
//
// Told apart by its dispatch keys alone (TensorImpl::layout(), which GCC calls out of line, looks
// at the same keys first): none of the sparse, compressed-sparse, mkldnn or nested ones, and not
// a Python subclass, which alone may declare a layout of its own (its layout policy).
constexpr c10::DispatchKeySet kNotPlainStrided =
    c10::DispatchKeySet({c10::DispatchKey::Sparse, c10::DispatchKey::SparseCsr, c10::DispatchKey::MkldnnCPU,
                         c10::DispatchKey::NestedTensor, c10::DispatchKey::Python});

inline bool push_strided_tensor(const c10::IValue& v, Buffer& out) {
  if (!v.isTensor()) return false;
  const at::Tensor& t = v.toTensor();
  if (!t.defined() || t.key_set().has_any(kNotPlainStrided)) return false;
  out.push(kTensor);
  push_shape_record(t, out);
  return true;
}

// Any value but the commonest (a dense tensor, an int, None: see encode): out of line, so that
// the common path pays for none of its stack frame.
[[gnu::noinline]] void encode_other(const c10::IValue& v, Buffer& out) {
  if (v.isTensor() && v.toTensor().defined() && is_sparse_layout(v.toTensor().layout())) {
    // Never a TENSOR record: no dense formula may price it by its dense shape.
    const at::Tensor& t = v.toTensor();
    out.push(kSparse);
    out.push(static_cast<int64_t>(t.layout()));
    out.push(stored_values(t));
    push_tensor_record(t, out);
  } else if (v.isTensor()) {
    out.push(kTensor);
    if (!push_tensor_record(v.toTensor(), out)) {
      out.truncate(out.size() - 1);
      out.push(v.toTensor().defined() ? kOther : kNone);
    }
  } else if (v.isSymInt()) {
    auto maybe = v.toSymInt().maybe_as_int();
    if (maybe) {
      out.push(kInt);
      out.push(*maybe);
    } else {
      out.push(kOther);
    }
  } else if (v.isDouble()) {
    double d = v.toDouble();
    int64_t bits;
    static_assert(sizeof bits == sizeof d);
    std::memcpy(&bits, &d, sizeof bits);
    out.push(kDouble);
    out.push(bits);
  } else if (v.isBool()) {
    out.push(kBool);
    out.push(v.toBool() ? 1 : 0);
  } else if (v.isIntList()) {
    const auto& list = v.toIntList();
    out.push(kIntList);
    out.push(static_cast<int64_t>(list.size()));
    int64_t* values = out.extend(list.size());
    for (int64_t x : list) *values++ = x;
  } else if (v.isBoolList()) {
    const auto& list = v.toBoolList();
    out.push(kBoolList);
    out.push(static_cast<int64_t>(list.size()));
    for (bool x : list) out.push(x ? 1 : 0);
  } else if (v.isTensorList()) {
    const auto& list = v.toTensorList();
    size_t start = out.size();
    out.push(kTensorList);
    out.push(static_cast<int64_t>(list.size()));
    for (const at::Tensor& t : list) {
      if ((t.defined() && is_sparse_layout(t.layout())) || !push_tensor_record(t, out)) {
        // A list with undefined, nested or sparse tensors has no shape list to offer.
        out.truncate(start);
        out.push(kOther);
        return;
      }
    }
  } else if (v.isObject()) {
    bool packed = false;
    try {
      packed = encode_packed(v, out);
    } catch (...) {
      packed = false;  // a packed weight whose methods failed: priced as unknown
    }
    if (!packed) out.push(kOther);
  } else if (v.isString()) {
    // An algorithm's name (linalg_qr's mode, linalg_lstsq's driver) as its code; other strings
    // are no formula's business.
    const int64_t code = choice_code(v.toStringRef());
    if (code != 0) {
      int64_t* record = out.extend(2);
      record[0] = kChoice;
      record[1] = code;
    } else {
      out.push(kOther);
    }
  } else if (v.isComplexDouble()) {
    // A complex Scalar (`x * 1j`): the kernel computes in the complex dtype, so the call's
    // complex operands include it. Its record is a 0-d complex128 tensor's (broadcasts to
    // nothing, and says complex).
    int64_t* record = out.extend(3);
    record[0] = kTensor;
    record[1] = static_cast<int64_t>(at::kComplexDouble);
    record[2] = 0;
  } else {
    out.push(kOther);
  }
}

inline void encode(const c10::IValue& v, Buffer& out) {
  if (push_strided_tensor(v, out)) return;
  if (v.isInt()) {
    int64_t* record = out.extend(2);
    record[0] = kInt;
    record[1] = v.toInt();
  } else if (v.isNone()) {
    out.push(kNone);
  } else {
    encode_other(v, out);
  }
}

// Dense backends: where a call on ordinary (strided) tensors dispatches. An operator with a
// kernel for one of them computes by itself; one without is a composite for such calls. Kernels
// registered only for sparse, quantized, nested or mkldnn layouts do not make `linear` or
// `matmul` opaque for dense tensors (docs/methodology.md lists this limit).
const c10::DispatchKeySet& backend_keys() {
  using K = c10::DispatchKey;
  static const c10::DispatchKeySet keys(
      {K::CPU, K::CUDA, K::HIP, K::XPU, K::MPS, K::XLA, K::Lazy, K::HPU, K::MTIA, K::PrivateUse1});
  return keys;
}

// Kernels for other layouts: quantized, sparse, mkldnn, nested.
const c10::DispatchKeySet& layout_keys() {
  using K = c10::DispatchKey;
  static const c10::DispatchKeySet keys({K::QuantizedCPU, K::QuantizedCUDA, K::SparseCPU, K::SparseCUDA,
                                         K::SparseCsrCPU, K::SparseCsrCUDA, K::MkldnnCPU, K::NestedTensorCPU,
                                         K::NestedTensorCUDA});
  return keys;
}

bool has_own_kernel(const c10::OperatorHandle& op, const std::string& name) {
  if (op.hasKernelForAnyDispatchKey(backend_keys())) return true;
  // ATen's CompositeExplicitAutograd kernels are decompositions into dispatched operators;
  // elsewhere (a user's library) such a kernel may compute by itself, out of our sight.
  bool aten = name.rfind("aten::", 0) == 0 || name.rfind("prims::", 0) == 0;
  if (aten) return false;
  // Outside ATen, an operator with kernels for other layouts only (quantized::linear for
  // QuantizedCPU) computes by itself too. (ATen operators with such kernels stay composites for
  // dense calls: `linear` must not become opaque for dense tensors.)
  return op.hasKernelForAnyDispatchKey(layout_keys()) ||
         op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd) ||
         op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional);
}

// The routes on which a call runs the operator's CompositeImplicitAutograd kernel, as bits
// `2 * backend + through_autograd` (see call_route). Such a call is a composite's: its
// decomposition is what computes, and what is counted, even where the operator has kernels of
// its own on other backends (`_fused_rms_norm`: a CUDA kernel, a composite on CPU). The
// dispatcher's rule (OperatorEntry::computeDispatchTableEntryWithDebug): below autograd, a
// backend's own kernel, then CompositeExplicitAutograd(NonFunctional), then the composite;
// through autograd, the composite unless the backend or CompositeExplicitAutograd has a kernel.
uint64_t composite_routes(const c10::OperatorHandle& op) {
  using K = c10::DispatchKey;
  if (!op.hasKernelForDispatchKey(K::CompositeImplicitAutograd)) return 0;
  bool explicit_kernel = op.hasKernelForDispatchKey(K::CompositeExplicitAutograd);
  bool nonfunctional = op.hasKernelForDispatchKey(K::CompositeExplicitAutogradNonFunctional);
  uint64_t routes = 0;
  for (auto b = static_cast<uint8_t>(c10::BackendComponent::CPUBit);
       b <= static_cast<uint8_t>(c10::BackendComponent::EndOfBackendKeys); ++b) {
    auto backend = static_cast<c10::BackendComponent>(b);
    bool direct = op.hasKernelForDispatchKey(c10::toRuntimePerBackendFunctionalityKey(K::Dense, backend));
    if (!direct && !explicit_kernel && !nonfunctional) routes |= uint64_t{1} << (2 * b);
    if (!direct && !explicit_kernel && !op.hasKernelForDispatchKey(c10::getAutogradKeyFromBackend(backend))) {
      routes |= uint64_t{1} << (2 * b + 1);
    }
  }
  return routes;
}

// Layouts whose calls take other routes than a dense backend's (their kernels are not composites').
constexpr c10::DispatchKeySet kOtherLayouts =
    c10::DispatchKeySet({c10::DispatchKey::Sparse, c10::DispatchKey::SparseCsr, c10::DispatchKey::Quantized,
                         c10::DispatchKey::MkldnnCPU, c10::DispatchKey::NestedTensor});

}  // namespace

uint8_t call_route(const OpEvent& event) noexcept {
  try {
    const auto tls = c10::impl::tls_local_dispatch_key_set();
    c10::DispatchKeySet keys = tls.included_;
    for (const auto& v : event_arguments(event)) {
      if (v.isTensor()) {
        keys = keys | v.toTensor().key_set();
      } else if (v.isList() && v.isTensorList()) {
        for (const c10::IValue& e : v.toListRef()) {
          if (e.isTensor()) keys = keys | e.toTensor().key_set();
        }
      }
    }
    keys = keys - tls.excluded_;
    if (keys.has_any(kOtherLayouts)) return kUnknownRoute;
    auto backend = static_cast<uint8_t>(keys.highestBackendKey());
    if (backend == 0 || backend > static_cast<uint8_t>(c10::BackendComponent::EndOfBackendKeys)) return kUnknownRoute;
    return static_cast<uint8_t>(2 * backend + (keys.has(c10::DispatchKey::AutogradFunctionality) ? 1 : 0));
  } catch (...) {
    return kUnknownRoute;
  }
}

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
    if (d.has_own_kernel) d.composite_routes = composite_routes(*op);
    d.explicit_composite = op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd) ||
                           op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional);
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
  Buffer& out = *event.buffer;
  out.clear();
  try {
    for (const auto& v : event_arguments(event)) encode(v, out);
  } catch (...) {
    out.clear();  // an empty stream: the formula reports the missing arguments
  }
  return {out.data(), out.size()};
}

rust::Slice<const int64_t> read_collective_inputs(const OpEvent& event) noexcept {
  Buffer& out = *event.buffer;
  out.clear();
  try {
    for (const auto& v : event_arguments(event)) {
      int64_t size = 0;
      int64_t rank = 0;
      if ((v.isObject() || v.isString()) && collectives::group_of(v, size, rank)) {
        int64_t* group = out.extend(3);
        group[0] = kGroup;
        group[1] = size;
        group[2] = rank;
      } else {
        encode(v, out);
      }
    }
  } catch (...) {
    out.clear();
  }
  return {out.data(), out.size()};
}

namespace {

// A dense tensor whose values this process can read in place: on the CPU, strided, no wrapper
// (functorch, Python subclass or fake tensors are skipped), so no operator is dispatched. (Only
// functionality keys here: a backend key such as Meta would share the Dense bit with every
// CPU tensor; the device test excludes meta tensors.)
bool readable_on_cpu(const at::Tensor& t) {
  using K = c10::DispatchKey;
  static const c10::DispatchKeySet wrappers(
      {K::Python, K::PythonTLSSnapshot, K::FuncTorchBatched, K::Batched, K::FuncTorchGradWrapper, K::Functionalize});
  return t.defined() && t.layout() == c10::kStrided && t.device().is_cpu() && !t.is_nested() &&
         (t.key_set() & wrappers).empty() && t.has_storage() && t.data_ptr() != nullptr;
}

// RoI Align with an adaptive sampling ratio: each box samples ceil(h / pooled_h) x
// ceil(w / pooled_w) points per bin, from its size (torchvision's roi_align_kernel.cpp, in the
// boxes' dtype). The sum of those grids over the boxes, or -1 when the boxes cannot be read.
template <typename T>
int64_t roi_grid_sum(const at::Tensor& rois, double scale, int64_t pooled_h, int64_t pooled_w, bool aligned) {
  const T* data = rois.const_data_ptr<T>();
  const int64_t boxes = rois.size(0);
  const int64_t row = rois.stride(0);
  const int64_t col = rois.stride(1);
  const T offset = aligned ? static_cast<T>(0.5) : static_cast<T>(0);
  const T s = static_cast<T>(scale);
  int64_t total = 0;
  for (int64_t k = 0; k < boxes; ++k) {
    const T* box = data + k * row;
    T width = (box[3 * col] * s - offset) - (box[1 * col] * s - offset);
    T height = (box[4 * col] * s - offset) - (box[2 * col] * s - offset);
    if (!aligned) {
      width = std::max(width, static_cast<T>(1));
      height = std::max(height, static_cast<T>(1));
    }
    const auto grid_h = static_cast<int64_t>(std::ceil(height / static_cast<T>(pooled_h)));
    const auto grid_w = static_cast<int64_t>(std::ceil(width / static_cast<T>(pooled_w)));
    total += grid_h * grid_w;
  }
  return total;
}

// `rois` at `args[1]`; spatial scale, pooled sizes, sampling ratio and aligned at the indices given.
int64_t adaptive_roi_samples(c10::ArrayRef<const c10::IValue> args, std::size_t ratio, std::size_t aligned) {
  if (args.size() <= std::max(ratio, aligned) || !args[1].isTensor() || !args[ratio].isInt()) return -1;
  if (args[ratio].toInt() > 0) return -1;
  const at::Tensor& rois = args[1].toTensor();
  if (!readable_on_cpu(rois) || rois.dim() != 2 || rois.size(1) != 5) return -1;
  const double scale = args[2].toDouble();
  const int64_t pooled_h = args[3].toInt();
  const int64_t pooled_w = args[4].toInt();
  const bool is_aligned = args[aligned].toBool();
  if (pooled_h <= 0 || pooled_w <= 0) return -1;
  switch (rois.scalar_type()) {
    case at::kFloat:
      return roi_grid_sum<float>(rois, scale, pooled_h, pooled_w, is_aligned);
    case at::kDouble:
      return roi_grid_sum<double>(rois, scale, pooled_h, pooled_w, is_aligned);
    default:
      return -1;
  }
}

// The ids at `args[1]` other than the padding index at `args[padding]` (the rows an embedding
// bag's kernel accumulates), or -1 when there is no padding index or the ids cannot be read.
int64_t non_padding_ids(c10::ArrayRef<const c10::IValue> args, std::size_t padding) {
  if (args.size() <= padding || !args[1].isTensor() || !args[padding].isInt()) return -1;
  const int64_t pad = args[padding].toInt();
  if (pad < 0) return -1;
  const at::Tensor& ids = args[1].toTensor();
  if (!readable_on_cpu(ids) || ids.dim() != 1) return -1;
  const int64_t n = ids.size(0);
  const int64_t stride = ids.stride(0);
  int64_t kept = 0;
  switch (ids.scalar_type()) {
    case at::kLong: {
      const int64_t* data = ids.const_data_ptr<int64_t>();
      for (int64_t i = 0; i < n; ++i) kept += data[i * stride] != pad;
      return kept;
    }
    case at::kInt: {
      const int32_t* data = ids.const_data_ptr<int32_t>();
      for (int64_t i = 0; i < n; ++i) kept += data[i * stride] != pad;
      return kept;
    }
    default:
      return -1;
  }
}

// What the formula of a data-dependent call needs from its tensors' values, or -1.
int64_t data_summary(const OpEvent& event) {
  const auto args = event_arguments(event);
  const char* name = event.fn->name();
  if (std::strcmp(name, "torchvision::roi_align") == 0) return adaptive_roi_samples(args, 5, 6);
  if (std::strcmp(name, "torchvision::_roi_align_backward") == 0) return adaptive_roi_samples(args, 9, 10);
  if (std::strcmp(name, "aten::_embedding_bag") == 0 || std::strcmp(name, "aten::_embedding_bag_forward_only") == 0) {
    return non_padding_ids(args, 8);
  }
  if (std::strcmp(name, "aten::_embedding_bag_backward") == 0) return non_padding_ids(args, 11);
  if (std::strcmp(name, "aten::_embedding_bag_dense_backward") == 0) return non_padding_ids(args, 9);
  // Least squares without a driver on an underdetermined system: the device's default driver
  // (gelsy on the CPU, gels elsewhere) decides the count, so where `A` is: 1 on the CPU, else 0.
  if (std::strcmp(name, "aten::linalg_lstsq") == 0) {
    if (args.empty() || !args[0].isTensor() || !args[0].toTensor().defined()) return -1;
    return args[0].toTensor().device().is_cpu() ? 1 : 0;
  }
  return -1;
}

}  // namespace

rust::Slice<const int64_t> read_data_inputs(const OpEvent& event) noexcept {
  Buffer& out = *event.buffer;
  out.clear();
  try {
    for (const auto& v : event_arguments(event)) encode(v, out);
    const int64_t summary = data_summary(event);
    if (summary >= 0) {
      out.push(kData);
      out.push(summary);
    }
  } catch (...) {
    out.clear();
  }
  return {out.data(), out.size()};
}

rust::Slice<const int64_t> read_outputs(const OpEvent& event) noexcept {
  Buffer& out = *event.buffer;
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

// One per session (src/registry.rs MAX_SESSIONS, shared through the bridge).
constexpr std::size_t kSlots = static_cast<std::size_t>(ffi::Limits::Sessions);

// Generation of the session in each slot; 0 while the slot observes nothing.
std::array<std::atomic<uint64_t>, kSlots> g_generation{};
// Per slot: whether the session counts every thread, and the thread that opened it.
std::array<std::atomic<bool>, kSlots> g_all_threads{};
std::array<std::atomic<uint64_t>, kSlots> g_owner{};
// Per slot: the handle of the session's thread-local marker (0: none, or every thread counted).
std::array<std::atomic<uint64_t>, kSlots> g_marker{};

// Which thread an event comes from (src/session/mod.rs, Origin).
enum class Origin : uint8_t { Followed = 0, Foreign = 1, Unfollowed = 2 };

// Bits of the core's Decision (src/session/mod.rs), shared through the bridge.
constexpr uint8_t kSkip = static_cast<uint8_t>(ffi::DecisionBit::Skip);
constexpr uint8_t kKernel = static_cast<uint8_t>(ffi::DecisionBit::Kernel);
constexpr uint8_t kPending = static_cast<uint8_t>(ffi::DecisionBit::Pending);
constexpr uint8_t kSuppress = static_cast<uint8_t>(ffi::DecisionBit::Suppress);
constexpr uint8_t kResume = static_cast<uint8_t>(ffi::DecisionBit::Resume);

// A call whose nested calls are skipped (claimed, ignored, uncounted, or fake), until it ends.
// The core either waits for its end (pending: a rare outcome) or counted it at its start and
// left a receipt, handed back only if the call raises: a call that returns costs nothing more.
struct Claim {
  int64_t depth = 0;
  int exceptions = 0;    // uncaught_exceptions() when it started
  bool pending = false;  // the core waits for its end
  bool kernel = false;   // an ATen kernel: calls from its autograd layer are operators of their own
  ffi::Receipt receipt{};
};

// Claims open at once on one thread: one, plus one per autograd-layer call nested in a claimed
// kernel (a tangent inside a tangent...). Deeper nesting is skipped like a decomposition.
constexpr int kMaxClaims = 6;

// Per thread and slot: nesting depth, the open claims, where the current backward region began.
struct ThreadSlot {
  uint64_t generation = 0;
  int64_t depth = 0;
  int64_t backward_from = 0;
  int64_t backward_sequence = -1;   // the enclosing autograd node's sequence number
  int64_t last_node_sequence = -1;  // the last autograd node entered on this thread
  int claims = 0;
  int suppressed = 0;  // open runs of priced compiled graphs: their operators are in the price
  std::array<Claim, kMaxClaims> claim{};
  // Open wrapper calls (interposed: a dispatch mode, a subclass, a transform): (depth, exceptions
  // when it started, where its receipts begin in `undo`). A wrapper call that raises did not
  // deliver its result either, though the kernels it ran returned (selective checkpointing's
  // caching mode runs the kernel, then the stop is raised from the wrapper call's pack hook):
  // the counts of the kernels it ran are taken back.
  int wrappers = 0;
  std::array<std::array<int64_t, 3>, kMaxClaims> wrapper{};
  std::vector<ffi::Receipt> undo;  // receipts of kernels that returned inside open wrapper calls
  // Encoded arguments: reused, so encoding allocates only while it grows (and once per session).
  ffi::ArgBuffer buffer;
  // This thread's count of uncaught exceptions (see uncaught_exceptions), found at first use.
  const unsigned int* uncaught = nullptr;
  // Whether this thread may be running an autograd graph task: it entered an autograd node in
  // this session, or was inside a graph task at the session's first event here. A graph task
  // runs nodes first (the root, or the output's node): work between nodes comes after one on
  // the same thread. Until then forward operators skip the engine's thread-local lookup.
  bool engine = false;
};

// std::uncaught_exceptions(), which reads the count from the thread's exception globals (the
// Itanium C++ ABI's __cxa_eh_globals, which libstdc++ and libc++abi lay out alike: the stack of
// caught exceptions, then the count) through two calls and a thread-local lookup, twice per
// counted operator. The globals keep their address for the thread's lifetime, so each thread
// slot keeps a pointer to the count.
struct EhGlobals {
  void* caught_exceptions;
  unsigned int uncaught_exceptions;
};

inline int uncaught_exceptions(ThreadSlot* st) {
  if (st->uncaught == nullptr) {
    st->uncaught = &reinterpret_cast<const EhGlobals*>(abi::__cxa_get_globals())->uncaught_exceptions;
  }
  return static_cast<int>(*st->uncaught);
}

// Per thread and slot: the thread-local marker this thread installed (see `start`), and for
// which session (generation): the thread that opened the session. A session closed or discarded
// on another thread cannot remove this thread's marker (thread-local callbacks are removed on
// their own thread): it stays, ignored, until this thread meets it again (`orphaned_here`).
struct Installed {
  uint64_t generation = 0;
  uint64_t callback = 0;
};

// All of a thread's observer state, made at its first callback and reached through one plain
// pointer, read once per callback: a thread-local of a shared library costs a lookup call per
// access, one with a constructor also a guard check on each, and GCC recomputes the address of
// a thread-local object after every call rather than keep it.
struct ThreadState {
  std::array<ThreadSlot, kSlots> slots;
  std::array<Installed, kSlots> installed;
  // PyTorch's dispatch key set of this thread (a thread-local of libc10, see dispatch_keys):
  // its address, fixed for the thread's lifetime.
  const c10::impl::PODLocalDispatchKeySet* dispatch_keys = nullptr;
};
thread_local ThreadState* t_state = nullptr;
// The thread's state was freed (the thread is exiting): later callbacks on it do nothing.
thread_local bool t_state_freed = false;

struct StateOwner {
  std::unique_ptr<ThreadState> state;
  ~StateOwner() {
    t_state = nullptr;
    t_state_freed = true;
  }
};

[[gnu::noinline]] ThreadState* make_state() noexcept {
  if (t_state_freed) return nullptr;
  try {
    thread_local StateOwner owner;
    owner.state = std::make_unique<ThreadState>();
#if !(defined(_MSC_VER) || defined(C10_ANDROID) || defined(C10_IPHONE))
    owner.state->dispatch_keys = &c10::impl::raw_local_dispatch_key_set;
#endif
    t_state = owner.state.get();
    return t_state;
  } catch (...) {
    return nullptr;  // no memory for it: this thread's events are not observed
  }
}

// The thread's included and excluded dispatch keys. Read through c10's thread-local, each read
// costs a call to its init wrapper and one to __tls_get_addr (a thread-local of another shared
// library); read through its address, found once per thread, a load. (Where c10 reads it through
// a function, so does this.)
inline c10::impl::LocalDispatchKeySet dispatch_keys(const ThreadState& ts) noexcept {
#if defined(_MSC_VER) || defined(C10_ANDROID) || defined(C10_IPHONE)
  return c10::impl::tls_local_dispatch_key_set();
#else
  return *ts.dispatch_keys;
#endif
}

// The calling thread's state; null only while the thread exits or without memory.
inline ThreadState* thread_state() noexcept {
  ThreadState* ts = t_state;
  return ts != nullptr ? ts : make_state();
}

// True when this thread's marker for `slot` belongs to a session that is gone (now removed).
bool orphaned_here(ThreadState& ts, std::size_t slot) {
  Installed& mine = ts.installed[slot];
  if (mine.callback == 0 || mine.generation == g_generation[slot].load(std::memory_order_acquire)) return false;
  // Only where the thread's own callbacks are in force (not a copy of another thread's, which
  // autograd's engine installs around a node): removal looks for the handle in the current ones.
  const auto& current = at::get_record_function_tls_().sorted_tls_callbacks_;
  bool present = std::any_of(current.begin(), current.end(), [&](const auto& e) { return e.handle_ == mine.callback; });
  if (!present) return false;
  // Safe inside a callback: the running RecordFunction holds its own copy of the callbacks.
  at::removeCallback(mine.callback);
  mine = Installed{};
  return true;
}

// A slot's first event of a session on this thread: the state starts afresh, but the buffers
// keep their capacity (a loop that opens a session per step would allocate them anew each time)
// and the exception count's address (the thread's, for its lifetime).
void renew(ThreadSlot& st, uint64_t generation) {
  ffi::ArgBuffer buffer = std::move(st.buffer);
  std::vector<ffi::Receipt> undo = std::move(st.undo);
  const unsigned int* uncaught = st.uncaught;
  st = ThreadSlot{generation};
  buffer.clear();
  undo.clear();
  st.buffer = std::move(buffer);
  st.undo = std::move(undo);
  st.uncaught = uncaught;
  st.engine = torch::autograd::get_current_graph_task_id() != -1;
}

inline ThreadSlot* active(ThreadState& ts, std::size_t slot, uint64_t& generation) {
  generation = g_generation[slot].load(std::memory_order_acquire);
  if (generation == 0) return nullptr;
  ThreadSlot& st = ts.slots[slot];
  if (st.generation != generation) renew(st, generation);
  return &st;
}

// Keys that put a wrapper in front of every kernel: Python dispatch modes and tensor subclasses,
// torch.func's transforms (vmap's batched tensors, grad's and jvp's levels), functionalization.
// (Batched is the older vmap of autograd.grad's is_grads_batched.) Not wrappers: the modes that
// only handle randomness under vmap (VmapMode, FuncTorchVmapMode), which stay set around the
// batched kernels, and FuncTorchGradWrapper, which marks a level's wrapper tensor (it reaches
// its kernel through the dynamic-layer keys) and stays on the tensors the innermost call uses.
// A call that dispatches to one of them is answered by the wrapper, which calls the kernels
// (with their real shapes) itself, or answers from a cache without any.
constexpr c10::DispatchKeySet kWrapperKeys = c10::DispatchKeySet(
    {c10::DispatchKey::Python, c10::DispatchKey::PythonTLSSnapshot, c10::DispatchKey::PythonDispatcher,
     c10::DispatchKey::PreDispatch, c10::DispatchKey::FuncTorchDynamicLayerFrontMode,
     c10::DispatchKey::FuncTorchDynamicLayerBackMode, c10::DispatchKey::FuncTorchBatched,
     c10::DispatchKey::BatchedNestedTensor, c10::DispatchKey::Batched, c10::DispatchKey::Functionalize});

enum class CallKind { Kernel, Interposed, Fake };

// How the dispatcher will treat this call: the keys of its tensors with the thread's included
// keys, less the excluded ones (what Dispatcher::call computes). Nothing here throws in practice;
// should it, the call is taken for a kernel call rather than let anything escape the callback.
// `tensors`: whether the call has a tensor argument (else it is a factory function).
CallKind call_kind(const ThreadState& ts, c10::ArrayRef<const c10::IValue> args, bool& tensors) noexcept try {
  const auto tls = dispatch_keys(ts);
  // FakeTensor runs its meta kernels with Meta forced on (in_kernel_invocation_manager): shape
  // propagation (torch.compile's tracing), no work. Real meta tensors carry Meta themselves.
  if (tls.included_.has(c10::DispatchKey::Meta)) return CallKind::Fake;
  c10::DispatchKeySet keys = tls.included_;
  bool dead_wrapper = false;
  auto add = [&](const at::Tensor& t) {
    tensors = true;
    keys = keys | t.key_set();
    if (t.key_set().has(c10::DispatchKey::FuncTorchGradWrapper)) {
      auto* wrapper = at::functorch::maybeGetTensorWrapper(t);
      dead_wrapper = dead_wrapper || (wrapper != nullptr && !wrapper->is_alive());
    }
  };
  for (const auto& v : args) {
    if (v.isTensor()) {
      add(v.toTensor());
    } else if (v.isList() && v.isTensorList()) {  // isTensorList is not inlined: lists only
      // Its elements in place (toTensorList would copy the list's handle: two atomic updates).
      for (const c10::IValue& e : v.toListRef()) {
        if (e.isTensor()) add(e.toTensor());
      }
    }
  }
  keys = keys - tls.excluded_;
  // A torch.func level's wrapper tensor whose level has exited (a vjp function called after
  // its grad transform returned): functorch's fallback unwraps it and calls the operator again.
  if (dead_wrapper && keys.has(c10::DispatchKey::FuncTorchGradWrapper)) return CallKind::Interposed;
  return keys.has_any(kWrapperKeys) ? CallKind::Interposed : CallKind::Kernel;
} catch (...) {
  return CallKind::Kernel;
}

// Inside a claimed ATen kernel, calls made below its autograd layer run with the autograd keys
// excluded (AutoDispatchBelowADInplaceOrView): the kernel's own decomposition. Calls made with
// autograd live come from its autograd layer: forward-mode tangents, saved-tensor hooks.
inline bool below_autograd(const ThreadState& ts) {
  return dispatch_keys(ts).excluded_.has(c10::DispatchKey::AutogradFunctionality);
}

inline void push_claim(ThreadSlot* st, bool pending, bool kernel, const ffi::Receipt& receipt) {
  st->claim[st->claims++] = Claim{st->depth, uncaught_exceptions(st), pending, kernel, receipt};
}

void on_start(ThreadState& ts, std::size_t slot, const at::RecordFunction& fn, Origin origin) {
  uint64_t generation;
  ThreadSlot* st = active(ts, slot, generation);
  if (!st) return;
  ++st->depth;
  if (st->claims > 0) {
    const Claim& inner = st->claim[st->claims - 1];
    if (!inner.kernel || st->claims == kMaxClaims || below_autograd(ts)) return;
    // Called by the claimed kernel's autograd layer: an operator of its own, counted below.
  }
  if (st->suppressed > 0) {
    // Inside a priced compiled graph's run: nothing is counted one by one, the outermost end
    // counts the whole graph. Nested runs only move the depth.
    const char* name = fn.name();
    bool end = std::strcmp(name, "torchscan::compiled_end") == 0;
    if (!end || st->suppressed > 1) {
      if (end) --st->suppressed;
      if (std::strcmp(name, "torchscan::compiled_begin") == 0) ++st->suppressed;
      push_claim(st, /*pending=*/false, /*kernel=*/false, ffi::Receipt{});
      return;
    }
  }
  if (fn.scope() == at::RecordScope::BACKWARD_FUNCTION) {
    // An autograd node, not an operator: what runs inside it is backward work.
    st->engine = true;
    if (st->backward_from == 0) {
      st->backward_from = st->depth;
      st->backward_sequence = fn.seqNr();
      st->last_node_sequence = fn.seqNr();
    }
    return;
  }
  auto args = ffi::arguments(fn);
  bool tensors = false;
  CallKind kind = call_kind(ts, args, tensors);
  if (kind == CallKind::Fake) {
    push_claim(st, /*pending=*/false, /*kernel=*/false, ffi::Receipt{});
    return;
  }
  ffi::OpEvent event{&fn, args.data(), args.size(), &st->buffer};
  auto key = reinterpret_cast<std::size_t>(fn.name());
  auto token = reinterpret_cast<std::size_t>(st);
  // Backward work: inside an autograd node, or elsewhere in the engine's execution of a graph
  // task. Between nodes the engine fits the gradients a node returned to its inputs' shapes
  // (the sum that reduces a bias gradient over the batch): that work belongs to the node that
  // just ran, the last one entered on this thread.
  bool in_node = st->backward_from != 0;
  // (On threads nobody follows, always look: their events are few, and what ran there is only noted.)
  bool engine = st->engine || origin == Origin::Unfollowed;
  bool backward = in_node || (engine && torch::autograd::get_current_graph_task_id() != -1);
  int64_t sequence = in_node ? st->backward_sequence : backward ? st->last_node_sequence : fn.seqNr();
  ffi::Receipt receipt{};
  ffi::OpStart start{
      slot, generation, key, token, backward, sequence, kind == CallKind::Interposed, static_cast<uint8_t>(origin)};
  uint8_t decision = ffi::on_op_start(start, event, receipt);
  if (decision & kSuppress) ++st->suppressed;
  if ((decision & kResume) && st->suppressed > 0) --st->suppressed;
  if (decision & kSkip) {
    // A factory function (no tensor argument) has no autograd layer: whatever it calls is its
    // own implementation (a meta kernel written in Python, say), not an operator of its own.
    push_claim(st, (decision & kPending) != 0, (decision & kKernel) != 0 && tensors, receipt);
  } else if (kind == CallKind::Interposed && st->wrappers < kMaxClaims) {
    st->wrapper[st->wrappers++] = {st->depth, uncaught_exceptions(st), static_cast<int64_t>(st->undo.size())};
  }
}

void on_end(ThreadState& ts, std::size_t slot, const at::RecordFunction& fn) {
  uint64_t generation;
  ThreadSlot* st = active(ts, slot, generation);
  if (!st || st->depth == 0) return;
  if (st->claims > 0 && st->claim[st->claims - 1].depth == st->depth) {
    const Claim& claim = st->claim[--st->claims];
    // Ended by an exception (the destructor of RecordFunction runs while it unwinds): the
    // operator did not deliver its result, and is not counted.
    bool completed = uncaught_exceptions(st) <= claim.exceptions;
    if (claim.pending) {
      auto args = ffi::arguments(fn);
      ffi::OpEvent event{&fn, args.data(), args.size(), &st->buffer};
      ffi::on_op_end(slot, generation, reinterpret_cast<std::size_t>(st), completed, event);
    } else if (!completed && claim.receipt.valid) {
      ffi::on_op_abort(slot, generation, claim.receipt);
    } else if (st->wrappers > 0 && claim.receipt.valid) {
      st->undo.push_back(claim.receipt);
    }
  } else if (st->wrappers > 0 && st->wrapper[st->wrappers - 1][0] == st->depth) {
    const auto [depth, exceptions, first] = st->wrapper[--st->wrappers];
    if (uncaught_exceptions(st) > exceptions) {
      for (auto i = static_cast<std::size_t>(first); i < st->undo.size(); ++i) {
        ffi::on_op_abort(slot, generation, st->undo[i]);
      }
      st->undo.resize(static_cast<std::size_t>(first));
    } else if (st->wrappers == 0) {
      st->undo.clear();
    }
  }
  if (st->depth == st->backward_from) st->backward_from = 0;
  --st->depth;
}

// The counting callback when the session counts every thread: global.
template <std::size_t Slot>
std::unique_ptr<at::ObserverContext> start_trampoline(const at::RecordFunction& fn) {
  Origin origin = Origin::Followed;
  if (at::RecordFunction::currentThreadId() != g_owner[Slot].load(std::memory_order_relaxed)) {
    origin = Origin::Foreign;
  }
  if (ThreadState* ts = thread_state()) on_start(*ts, Slot, fn, origin);
  return nullptr;
}

template <std::size_t Slot>
void end_trampoline(const at::RecordFunction& fn, at::ObserverContext*) {
  if (ThreadState* ts = thread_state()) on_end(*ts, Slot, fn);
}

// The marker: a thread-local callback that never runs (disabled), which the threads a session
// follows carry: the thread that opened it, and the threads that take over its thread-local
// state (autograd's device threads, around each node they run for it; at::launch's tasks). One
// function per slot, so that a marker found on a thread names its slot.
template <std::size_t Slot>
std::unique_ptr<at::ObserverContext> marker_trampoline(const at::RecordFunction&) {
  return nullptr;
}

void marker_end(const at::RecordFunction&, at::ObserverContext*) {}

template <std::size_t... I>
constexpr std::array<at::RecordFunctionCallback::StartCallback, kSlots> make_markers(std::index_sequence<I...>) {
  return {&marker_trampoline<I>...};
}

constexpr auto kMarkers = make_markers(std::make_index_sequence<kSlots>{});

// Whether a thread-local callback is the marker of a session that is open now.
bool live_marker(const at::RecordFunctionCallbacksEntry& entry) {
  for (std::size_t slot = 0; slot < kSlots; ++slot) {
    if (kMarkers[slot] == entry.callback_.start()) {
      return g_marker[slot].load(std::memory_order_relaxed) == entry.handle_ &&
             g_generation[slot].load(std::memory_order_acquire) != 0;
    }
  }
  return false;
}

// Where an event of the session in `slot` comes from, on a thread other than the one that opened
// it: a thread carrying its marker is followed; one carrying another open session's marker, or
// another tool's thread-local callbacks, is somebody else's; any other thread is one that nobody
// follows (a thread pool's worker), whose work the report notes as missed. False: not this
// session's event at all.
[[gnu::noinline]] bool origin_elsewhere(ThreadState& ts, std::size_t slot, Origin& origin) noexcept {
  orphaned_here(ts, slot);
  uint64_t marker = g_marker[slot].load(std::memory_order_relaxed);
  bool others = false;
  for (const auto& entry : at::get_record_function_tls_().sorted_tls_callbacks_) {
    if (entry.handle_ == marker) {
      origin = Origin::Followed;
      return true;
    }
    // Another tool's callbacks (a profiler's), or another session's marker; a marker left by a
    // session that is gone marks nothing.
    others = others || (entry.enabled_ ? true : live_marker(entry));
  }
  if (others) return false;
  origin = Origin::Unfollowed;
  return true;
}

// The session's own events, found among those of every thread (see origin_elsewhere). The
// thread that opened the session is followed: one comparison.
inline bool origin_of(ThreadState& ts, std::size_t slot, Origin& origin) noexcept {
  const Installed& mine = ts.installed[slot];
  if (mine.callback != 0 && mine.generation == g_generation[slot].load(std::memory_order_relaxed)) {
    origin = Origin::Followed;
    return true;
  }
  return origin_elsewhere(ts, slot, origin);
}

// The counting callback otherwise: global, with the origin of each event found as above. (One
// global callback costs PyTorch less than a thread-local one beside a global one that would
// watch the other threads: each callback is a call at the start and one at the end of every
// operator, about 35 ns more per operator.)
template <std::size_t Slot>
std::unique_ptr<at::ObserverContext> followed_start_trampoline(const at::RecordFunction& fn) {
  ThreadState* ts = thread_state();
  Origin origin;
  if (ts != nullptr && origin_of(*ts, Slot, origin)) on_start(*ts, Slot, fn, origin);
  return nullptr;
}

template <std::size_t Slot>
void followed_end_trampoline(const at::RecordFunction& fn, at::ObserverContext*) {
  ThreadState* ts = thread_state();
  Origin origin;
  if (ts != nullptr && origin_of(*ts, Slot, origin)) on_end(*ts, Slot, fn);
}

struct Trampolines {
  at::RecordFunctionCallback::StartCallback start;
  at::RecordFunctionCallback::EndCallback end;
  at::RecordFunctionCallback::StartCallback followed_start;
  at::RecordFunctionCallback::EndCallback followed_end;
};

template <std::size_t... I>
constexpr std::array<Trampolines, kSlots> make_trampolines(std::index_sequence<I...>) {
  return {Trampolines{&start_trampoline<I>, &end_trampoline<I>, &followed_start_trampoline<I>,
                      &followed_end_trampoline<I>}...};
}

constexpr auto kTrampolines = make_trampolines(std::make_index_sequence<kSlots>{});

}  // namespace

Callbacks start(std::size_t slot, uint64_t generation, bool capture_outputs, bool all_threads) {
  TORCH_CHECK(slot < kSlots, "torchscan: session slot ", slot, " out of range");
  ThreadState* ts = thread_state();
  TORCH_CHECK(ts != nullptr, "torchscan: no memory for the thread's observer state");
  // Markers this thread still carries for sessions that were closed elsewhere.
  for (std::size_t other = 0; other < kSlots; ++other) orphaned_here(*ts, other);
  g_all_threads[slot].store(all_threads, std::memory_order_relaxed);
  g_owner[slot].store(at::RecordFunction::currentThreadId(), std::memory_order_relaxed);
  g_marker[slot].store(0, std::memory_order_relaxed);
  Callbacks callbacks;
  try {
    if (!all_threads) {
      // Disabled at once: it marks the thread (and is copied with its thread-local state),
      // and costs no operator anything.
      callbacks.marker = at::addThreadLocalCallback(at::RecordFunctionCallback(kMarkers[slot], marker_end));
      at::disableCallback(callbacks.marker);
      ts->installed[slot] = Installed{generation, callbacks.marker};
      g_marker[slot].store(callbacks.marker, std::memory_order_relaxed);
    }
    g_generation[slot].store(generation, std::memory_order_release);
    const Trampolines& t = kTrampolines[slot];
    auto counting =
        at::RecordFunctionCallback(all_threads ? t.start : t.followed_start, all_threads ? t.end : t.followed_end)
            .needsInputs(true)
            .needsOutputs(capture_outputs)
            .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION});
    callbacks.counting = at::addGlobalCallback(counting);
  } catch (...) {
    stop(slot, callbacks);
    throw;
  }
  return callbacks;
}

void stop(std::size_t slot, Callbacks callbacks) {
  if (slot >= kSlots) return;
  g_generation[slot].store(0, std::memory_order_release);
  g_marker[slot].store(0, std::memory_order_relaxed);
  if (callbacks.counting != 0) at::removeCallback(callbacks.counting);
  ThreadState* ts = thread_state();
  if (ts != nullptr && callbacks.marker != 0 && ts->installed[slot].callback == callbacks.marker)
    orphaned_here(*ts, slot);
}

void orphan(std::size_t slot, Callbacks callbacks) {
  if (slot >= kSlots) return;
  g_generation[slot].store(0, std::memory_order_release);
  g_marker[slot].store(0, std::memory_order_relaxed);
  // The counting callback is global, removed from any thread; the marker is thread-local, left
  // to the opening thread (orphaned_here), which ignores it until then.
  if (callbacks.counting != 0) at::removeCallback(callbacks.counting);
}

uint64_t current_thread() {
  return at::RecordFunction::currentThreadId();
}

bool in_backward() {
  return torch::autograd::get_current_graph_task_id() != -1;
}

}  // namespace torchscan::observer

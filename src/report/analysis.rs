//! The AnalysisReport: what `crawl_module`, `summary` and `torchscan MODEL --json` report. Python
//! describes the call values and the context; the core decides every metric, status and total.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::flop::{Diagnostic, FlopReport};
use super::metric::Metric;
use super::ordered::OrderedMap;

/// The report of torchscan.crawl_module and summary, as `torchscan --json` writes it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AnalysisReport {
    #[schemars(extend("const" = 1))]
    pub schema_version: u32,
    pub context: AnalysisContext,
    pub inputs: Inputs,
    /// One record per module call, in call order.
    pub layers: Vec<Layer>,
    /// The operator FLOPs of the same forward (nothing counted in structure mode).
    pub operator_flops: FlopReport,
    pub totals: Totals,
    pub diagnostics: Vec<Diagnostic>,
    /// `torchscan MODEL --train`: one training step of the model, counted (additive: absent
    /// from crawl_module's reports).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    #[schemars(with = "TrainingStep")]
    pub training: Option<TrainingStep>,
    /// `torchscan MODEL --memory`: the peak memory of the analysed forward, run once more
    /// (additive: absent from crawl_module's reports).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    #[schemars(with = "PeakMemory")]
    pub memory: Option<PeakMemory>,
    /// The modules of `named_modules()` that hold parameters (of their own) and were never
    /// called, in `named_modules()` order: an unused `nn.Linear` kept as an attribute. They are
    /// not layers (no call); the module tree every table is drawn from gives each a row, its
    /// parameters counted in its parents'. Additive: absent when there are none.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub uncalled_modules: Vec<UncalledModule>,
}

/// A module that holds parameters and was never called (`AnalysisReport.uncalled_modules`):
/// its place, its type and the tensors it holds that no call (and no uncalled module before it)
/// counted, with the layers' accounting (`shared`: some were counted there).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UncalledModule {
    /// The module's dotted path, escaped as the layers' are.
    #[schemars(length(min = 1))]
    pub path: String,
    #[schemars(length(min = 1))]
    pub name: String,
    #[schemars(range(min = 1))]
    pub depth: u64,
    #[serde(rename = "type")]
    #[schemars(length(min = 1))]
    pub type_name: String,
    pub parameters: Parameters,
    pub buffers: Buffers,
}

/// One training step (`torchscan MODEL --train`): the forward in training mode, a loss, the
/// backward and one optimizer step, counted in one session.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TrainingStep {
    /// The `torch.optim` optimizer the step took (`adamw`, `adam`, `sgd`), with its defaults.
    #[schemars(length(min = 1))]
    pub optimizer: String,
    /// The step's FlopReport: `by_phase` has `forward`, `backward` and `optimizer`.
    pub flops: FlopReport,
    /// With `--memory`: the peak memory of a second, identical step (counted apart).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    #[schemars(with = "PeakMemory")]
    pub memory: Option<PeakMemory>,
}

/// torchscan.measure_peak_memory's MemoryStats.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PeakMemory {
    #[schemars(length(min = 1))]
    pub device: String,
    /// `pytorch_tensor_bytes` (CPU), `pytorch_reserved_bytes` (CUDA) or
    /// `pytorch_driver_allocated_bytes` (MPS).
    #[schemars(length(min = 1))]
    pub metric: String,
    pub baseline_bytes: u64,
    pub peak_bytes: u64,
    /// The peak of bytes the workload held above `baseline_bytes`.
    pub delta_bytes: u64,
    /// CUDA only: the peak of bytes allocated to tensors.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    #[schemars(with = "u64")]
    pub allocated_peak_bytes: Option<u64>,
    /// MPS only: the bytes allocated to tensors when the workload ended.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    #[schemars(with = "u64")]
    pub allocated_end_bytes: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AnalysisContext {
    #[schemars(length(min = 1))]
    pub torchscan_version: String,
    #[schemars(length(min = 1))]
    pub torch_version: String,
    #[schemars(length(min = 1))]
    pub python_version: String,
    /// The model's class, `module.QualifiedName`.
    #[schemars(length(min = 1))]
    pub model_type: String,
    pub execution_mode: ExecutionMode,
    /// The model's `training` flag before the analysis (which restores it).
    pub training_before: bool,
    /// The devices of the parameters and buffers, sorted.
    #[schemars(extend("uniqueItems" = true))]
    pub devices: Vec<String>,
    /// The dtypes of the parameters and buffers, sorted.
    #[schemars(extend("uniqueItems" = true))]
    pub dtypes: Vec<String>,
    /// Present in structure mode only.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    #[schemars(with = "AnalysisMode")]
    pub analysis_mode: Option<AnalysisMode>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ExecutionMode {
    /// One forward pass in `eval()` mode under `torch.no_grad()`.
    #[serde(rename = "evaluation_no_grad")]
    EvaluationNoGrad,
    /// One forward pass in `train()` mode under `torch.no_grad()` (`crawl_module(training=True)`);
    /// the buffers it updates and the random generators are restored afterwards.
    #[serde(rename = "training_no_grad")]
    TrainingNoGrad,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum AnalysisMode {
    /// Shapes and parameters only: no FLOPs counted.
    Structure,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum InputSource {
    /// Built from `input_shape` and `dtype`.
    Generated,
    /// The caller's `args`/`kwargs`.
    Provided,
}

/// The model's inputs, described (never their values).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Inputs {
    pub source: InputSource,
    pub args: Vec<ValueMeta>,
    pub kwargs: OrderedMap<ValueMeta>,
}

/// The positional and keyword arguments of one call, described.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CallMeta {
    pub args: Vec<ValueMeta>,
    pub kwargs: OrderedMap<ValueMeta>,
}

/// One value of a call, described by kind: shapes, dtypes and type names, never values.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum ValueMeta {
    Tensor {
        shape: Vec<u64>,
        #[schemars(regex(pattern = r"^torch\."))]
        dtype: String,
        #[schemars(length(min = 1))]
        device: String,
        requires_grad: bool,
    },
    None,
    Tuple {
        items: Vec<ValueMeta>,
    },
    List {
        items: Vec<ValueMeta>,
    },
    Mapping {
        #[serde(rename = "type")]
        #[schemars(length(min = 1))]
        type_name: String,
        items: Vec<MappingItem>,
    },
    Scalar {
        #[serde(rename = "type")]
        #[schemars(length(min = 1))]
        type_name: String,
    },
    Object {
        #[serde(rename = "type")]
        #[schemars(length(min = 1))]
        type_name: String,
    },
    /// A container met again inside itself (`l = [y]; l.append(l)`): the container `depth`
    /// levels up (1: the one that holds it directly), described there and not again.
    Cycle {
        #[schemars(range(min = 1))]
        depth: u64,
    },
}

/// One entry of a mapping. The key is kept only for integer and identifier keys (which cannot
/// carry private text such as paths).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MappingItem {
    #[serde(skip_serializing_if = "Option::is_none", default)]
    #[schemars(with = "MappingKey")]
    pub key: Option<MappingKey>,
    #[schemars(length(min = 1))]
    pub key_type: String,
    pub value: ValueMeta,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum MappingKey {
    /// Python's `True`/`False` (a bool is an int there).
    Bool(bool),
    Int(i64),
    Unsigned(u64),
    Text(String),
}

/// One module call, in call order; its identity is `(path, call_index)`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Layer {
    /// The module's dotted path (`''` for the root).
    pub path: String,
    /// Which call of this module (from 0).
    pub call_index: u64,
    #[schemars(length(min = 1))]
    pub name: String,
    pub depth: u64,
    #[serde(rename = "type")]
    #[schemars(length(min = 1))]
    pub type_name: String,
    /// The module's other paths (a module registered under several names): `path` is the one
    /// under the module whose forward made this call.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub aliases: Vec<String>,
    /// Its parameters were uninitialized when the call started (a lazy module): counted as the
    /// call materialized them.
    #[serde(skip_serializing_if = "std::ops::Not::not", default)]
    pub lazy: bool,
    /// A submodule of a TorchScript module: module hooks do not run inside TorchScript, so it is
    /// listed from the module tree (its structure, parameters and buffers) without its calls
    /// (no `input`, `output` or formula metrics; `calls` unavailable).
    #[serde(skip_serializing_if = "std::ops::Not::not", default)]
    pub scripted: bool,
    /// What the call was given; absent only for a `scripted` submodule (its calls are not seen).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    #[schemars(with = "CallMeta")]
    pub input: Option<CallMeta>,
    /// What the call returned; absent only for a `scripted` submodule.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    #[schemars(with = "ValueMeta")]
    pub output: Option<ValueMeta>,
    pub parameters: Parameters,
    pub buffers: Buffers,
    pub metrics: LayerMetrics,
}

/// Parameters a layer call counts first (`shared`: some were counted by an earlier call). A
/// count of 2^64 or more (meta tensors can be that large) is null: the totals say why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Parameters {
    pub trainable: Option<u64>,
    pub frozen: Option<u64>,
    pub bytes: Option<u64>,
    pub shared: bool,
    /// A pruned module's call (`torch.nn.utils.prune`): what its pruning masks keep of the
    /// parameters counted here (`trainable + frozen` count the dense tensors). Absent when the
    /// module is not pruned, or its mask cannot be counted (on the meta device).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub effective: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Buffers {
    pub elements: Option<u64>,
    pub bytes: Option<u64>,
    pub shared: bool,
}

/// A layer call's metrics. Every call has `calls`; full mode adds `operator_flops`, and a leaf
/// module (one that module formulas price) the module-formula metrics.
// The fields are in alphabetical order, the order reports have always been written in.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LayerMetrics {
    pub calls: Metric,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    #[schemars(with = "Metric")]
    pub dmas: Option<Metric>,
    /// A pruned module's MACs counting only the weights its masks keep (present only for a
    /// pruned module): `macs` stays the dense count that the kernels run.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    #[schemars(with = "Metric")]
    pub effective_macs: Option<Metric>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    #[schemars(with = "Metric")]
    pub effective_padding: Option<Metric>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    #[schemars(with = "Metric")]
    pub effective_stride: Option<Metric>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    #[schemars(with = "Metric")]
    pub macs: Option<Metric>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    #[schemars(with = "Metric")]
    pub module_flops: Option<Metric>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    #[schemars(with = "Metric")]
    pub operator_flops: Option<Metric>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    #[schemars(with = "Metric")]
    pub receptive_field: Option<Metric>,
}

impl LayerMetrics {
    /// `(name, metric)` of the metrics present, in report order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, &Metric)> {
        [
            ("calls", Some(&self.calls)),
            ("dmas", self.dmas.as_ref()),
            ("effective_macs", self.effective_macs.as_ref()),
            ("effective_padding", self.effective_padding.as_ref()),
            ("effective_stride", self.effective_stride.as_ref()),
            ("macs", self.macs.as_ref()),
            ("module_flops", self.module_flops.as_ref()),
            ("operator_flops", self.operator_flops.as_ref()),
            ("receptive_field", self.receptive_field.as_ref()),
        ]
        .into_iter()
        .filter_map(|(name, metric)| metric.map(|m| (name, m)))
    }
}

/// The model's totals: parameters and buffers (`model`), module formulas summed over the layer
/// calls and operator FLOPs (`forward`).
// The fields are in alphabetical order, the order reports have always been written in.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Totals {
    pub buffer_bytes: Metric,
    pub buffer_elements: Metric,
    pub dmas: Metric,
    /// `macs` with the weights that pruning masks remove left out (equal to `macs` for a model
    /// without masks). Optional only so that reports written before it was added still read.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    #[schemars(with = "Metric")]
    pub effective_macs: Option<Metric>,
    /// `parameters` less the elements that pruning masks remove (equal to `parameters` for a
    /// model without masks). Optional only so that older reports still read.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    #[schemars(with = "Metric")]
    pub effective_parameters: Option<Metric>,
    pub frozen_parameters: Metric,
    pub macs: Metric,
    pub module_flops: Metric,
    pub operator_flops: Metric,
    pub parameter_bytes: Metric,
    pub parameters: Metric,
    pub trainable_parameters: Metric,
}

impl Totals {
    /// `(name, metric)` of every total, in report order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, &Metric)> {
        [
            ("buffer_bytes", Some(&self.buffer_bytes)),
            ("buffer_elements", Some(&self.buffer_elements)),
            ("dmas", Some(&self.dmas)),
            ("effective_macs", self.effective_macs.as_ref()),
            ("effective_parameters", self.effective_parameters.as_ref()),
            ("frozen_parameters", Some(&self.frozen_parameters)),
            ("macs", Some(&self.macs)),
            ("module_flops", Some(&self.module_flops)),
            ("operator_flops", Some(&self.operator_flops)),
            ("parameter_bytes", Some(&self.parameter_bytes)),
            ("parameters", Some(&self.parameters)),
            ("trainable_parameters", Some(&self.trainable_parameters)),
        ]
        .into_iter()
        .filter_map(|(name, metric)| metric.map(|m| (name, m)))
    }
}

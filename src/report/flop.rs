//! The FlopReport: what `measure_flops`, `count_flops(...).report()` and an AnalysisReport's
//! `operator_flops` say. Every map is a `BTreeMap` so that identical runs give byte-identical
//! JSON.

use std::collections::BTreeMap;

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};

use super::communication::{Communication, Distributed};
use super::metric::{MetricResult, Status};
use crate::formulas::ignored::Reason;
use crate::formulas::Category;

/// `aten.mm`: the operator-packet spelling reports use.
const PACKET_PATTERN: &str = r"^[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*$";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Warning,
    Error,
}

/// Why a metric is not complete. `code` is a stable identifier for programs, `message` is for
/// people.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Diagnostic {
    /// `uncounted_operator`, `formula_error`, `custom_formula_error`, `flop_overflow`,
    /// `internal_error`, `unsupported_module_metric`, `module_metric_error`,
    /// `missing_metric_tensor`, ...
    #[schemars(regex(pattern = r"^[a-z][a-z0-9_]*$"))]
    pub code: String,
    pub severity: Severity,
    #[schemars(length(min = 1))]
    pub metric: String,
    #[schemars(length(min = 1))]
    pub message: String,
    /// The layer's dotted path (`''` for the root).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    #[schemars(with = "String")]
    pub path: Option<String>,
    /// The operator packet, like `aten.mm`.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    #[schemars(with = "String", regex(pattern = PACKET_PATTERN))]
    pub operator: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FlopContext {
    #[schemars(length(min = 1))]
    pub torch_version: String,
    #[schemars(length(min = 1))]
    pub torchscan_version: String,
    #[schemars(length(min = 1))]
    pub method: String,
    /// This rank's place in a `torch.distributed` job (additive in schema version 2).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub distributed: Option<Distributed>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct IgnoredCount {
    #[schemars(range(min = 1))]
    pub calls: u64,
    /// Why the operator does no arithmetic (`formulas::ignored::Reason`).
    #[schemars(schema_with = "ignore_reasons")]
    pub reason: String,
}

/// What measure_flops, count_flops and crawl_module (`operator_flops`) report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FlopReport {
    /// 2 (1: written by torchscan before `communication`; read as 2 without it).
    #[schemars(range(min = 1, max = 2))]
    pub schema_version: u32,
    pub context: FlopContext,
    #[schemars(extend("properties" = {"scope": {"const": "workload"}}))]
    pub total: MetricResult,
    /// Module label (`ResNet`, `ResNet.layer1.0.conv1`) -> counted FLOPs of its calls, children
    /// included: plain numbers, as torchscan 0.2 and PyTorch's counter give them. A module whose
    /// count overflowed is absent; `by_module_status` says whether each number is complete.
    pub by_module: BTreeMap<String, u64>,
    /// Module label -> status of its `by_module` number (additive to the 0.2 schema).
    pub by_module_status: BTreeMap<String, Status>,
    /// Per module *call* (`crawl_module`'s layer identities): inclusive FLOPs. Only sessions that
    /// push call scopes have it; `crawl_module` moves it into the layers.
    #[serde(skip_serializing_if = "BTreeMap::is_empty", default)]
    pub by_call: BTreeMap<String, MetricResult>,
    /// Operator packet (`aten.mm`) -> FLOPs of the counted operators (as in 0.2).
    #[schemars(extend("propertyNames" = {"pattern": PACKET_PATTERN}))]
    pub by_operator: BTreeMap<String, u64>,
    /// Operator packet -> calls, for every counted operator (additive).
    #[schemars(extend(
        "propertyNames" = {"pattern": PACKET_PATTERN},
        "additionalProperties" = {"type": "integer", "minimum": 1}
    ))]
    pub operator_calls: BTreeMap<String, u64>,
    /// Category -> FLOPs of the counted operators in it (exact sums of `by_operator`).
    #[schemars(schema_with = "by_category")]
    pub by_category: BTreeMap<String, u64>,
    /// `forward`; `backward` once a workload runs backward; `optimizer` once a `torch.optim` step
    /// ran (its work, out of `forward`).
    #[schemars(extend(
        "propertyNames" = {"enum": ["forward", "backward", "optimizer"]},
        "additionalProperties" = {"$ref": "#/$defs/MetricResult", "properties": {"scope": {"const": "phase"}}}
    ))]
    pub by_phase: BTreeMap<String, MetricResult>,
    /// Operator packet -> calls of an operator that does no arithmetic, and why.
    #[schemars(extend("propertyNames" = {"pattern": PACKET_PATTERN}))]
    pub ignored_operators: BTreeMap<String, IgnoredCount>,
    pub diagnostics: Vec<Diagnostic>,
    /// Integer operations of quantized kernels, kept apart from the FLOPs above; present when
    /// such a kernel ran (additive).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub integer_ops: Option<IntegerOps>,
    /// What this rank's `torch.distributed` collectives moved; present when one ran (schema
    /// version 2).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub communication: Option<Communication>,
    /// Labels (as `by_module`'s) of the modules that hold parameters and were never called, in
    /// `named_modules()` order: `crawl_module`'s `operator_flops` has them, so that the module
    /// tree of `format_flops` gives each a row (0 FLOPs); so do `measure_flops` and
    /// `count_flops` given `modules=`, for the modules of those roots that made no call (labels
    /// by hooks) or ran no operator (by frames: no `by_module` entry, none inside them).
    /// Additive: absent when there are none.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub uncalled_modules: Vec<String>,
}

/// The integer arithmetic of quantized kernels (`quantized::linear`, `quantized::conv2d`,
/// `aten::_int_mm`, quantized `add`/`mul`): 2 operations per integer multiply-accumulate, 1 per
/// elementwise result (`docs/formulas.md`). complete: `value` is the number and `known_value`
/// equals it; partial: `value` is null and `known_value` a lower bound; unavailable: both null.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct IntegerOps {
    pub status: Status,
    pub value: Option<u64>,
    pub known_value: Option<u64>,
    #[schemars(extend("const" = "integer_ops"))]
    pub unit: String,
    /// Operator packet -> integer operations of its calls (their calls are in `operator_calls`).
    #[schemars(extend("propertyNames" = {"pattern": PACKET_PATTERN}))]
    pub by_operator: BTreeMap<String, u64>,
}

impl IntegerOps {
    pub const UNIT: &'static str = "integer_ops";

    pub fn new(known: u64, incomplete: bool, overflowed: bool, by_operator: BTreeMap<String, u64>) -> Self {
        let (status, value, known_value) = if overflowed {
            (Status::Unavailable, None, None)
        } else if incomplete {
            (Status::Partial, None, Some(known))
        } else {
            (Status::Complete, Some(known), Some(known))
        };
        IntegerOps { status, value, known_value, unit: Self::UNIT.to_string(), by_operator }
    }
}

fn ignore_reasons(_: &mut SchemaGenerator) -> Schema {
    let names: Vec<&str> = Reason::ALL.iter().map(|r| r.name()).collect();
    json_schema!({"type": "string", "enum": names})
}

fn by_category(_: &mut SchemaGenerator) -> Schema {
    let names: Vec<&str> = Category::ALL.iter().filter(|c| c.is_flops()).map(|c| c.name()).collect();
    json_schema!({
        "type": "object",
        "propertyNames": {"enum": names},
        "additionalProperties": {"type": "integer", "minimum": 0},
    })
}

/// `aten::mm` -> `aten.mm`, the operator-packet spelling reports use.
pub fn packet_name(qualified: &str) -> String {
    qualified.replacen("::", ".", 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packet_names() {
        assert_eq!(packet_name("aten::mm"), "aten.mm");
        assert_eq!(packet_name("mylib::my_op"), "mylib.my_op");
    }
}

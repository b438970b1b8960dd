//! The ReportDiff: what `compare_reports` and `torchscan compare --json` give. Field order is
//! alphabetical throughout, the order these reports have always been written in.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::metric::{nullable_number, Number, Status};

/// The difference between two AnalysisReports.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReportDiff {
    pub layers: LayerChanges,
    #[schemars(extend("const" = 1))]
    pub schema_version: i64,
    /// Every total of either report.
    pub totals: BTreeMap<String, MetricDiff>,
}

/// Layer calls match on `(path, call_index)`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LayerChanges {
    /// Calls only `after` has, with their metrics.
    pub added: Vec<LayerSnapshot>,
    /// Only the metrics that differ, of the calls both reports have.
    pub changed: Vec<LayerDiff>,
    /// Calls only `before` has, with their metrics.
    pub removed: Vec<LayerSnapshot>,
}

/// An added or removed layer call with its metrics.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LayerSnapshot {
    pub call_index: i64,
    pub metrics: BTreeMap<String, ComparedMetric>,
    pub path: String,
}

/// A layer call both reports have, with the metrics that differ.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LayerDiff {
    pub call_index: i64,
    pub metrics: BTreeMap<String, MetricDiff>,
    pub path: String,
}

/// One metric before and after. `delta` is a number only when both sides are complete;
/// otherwise the worse status wins (a metric missing on one side is unavailable, its side null).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend(
    "if" = {"properties": {"status": {"const": "complete"}}},
    "then" = {"properties": {"delta": {"type": "number"}, "before": {"type": "object"}, "after": {"type": "object"}}},
    "else" = {"properties": {"delta": {"type": "null"}}}
))]
pub struct MetricDiff {
    #[schemars(schema_with = "nullable_metric")]
    pub after: Option<ComparedMetric>,
    #[schemars(schema_with = "nullable_metric")]
    pub before: Option<ComparedMetric>,
    #[schemars(schema_with = "nullable_number")]
    pub delta: Option<Number>,
    /// Why the two sides cannot be compared, when they measure the metric differently (another
    /// unit, scope or method); the status is then `unavailable`.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    #[schemars(with = "String")]
    pub reason: Option<String>,
    pub status: Status,
}

fn nullable_metric(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let metric = generator.subschema_for::<ComparedMetric>();
    schemars::json_schema!({"oneOf": [metric, {"type": "null"}]})
}

/// A metric as the compared report has it (this package's or torchscan 0.2's, which may lack
/// `unit`, `scope` and `method`), validated: the status invariant holds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(transform = super::metric::status_invariant)]
pub struct ComparedMetric {
    #[schemars(schema_with = "nullable_number")]
    pub known_value: Option<Number>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    #[schemars(with = "String")]
    pub method: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    #[schemars(with = "String")]
    pub scope: Option<String>,
    pub status: Status,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    #[schemars(with = "String")]
    pub unit: Option<String>,
    #[schemars(schema_with = "nullable_number")]
    pub value: Option<Number>,
}

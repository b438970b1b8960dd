//! ThroughputReport: the achieved FLOP rate of counted, timed steps (`torchscan.Throughput`), and
//! the model FLOPs utilization (MFU) when the device's peak is given.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{MetricResult, Status};

/// A rate (FLOP/s) or a fraction (MFU): a float, with the status rules of every metric (a
/// partial count gives a partial rate: `known_value` is then a lower bound).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RateResult {
    pub status: Status,
    pub value: Option<f64>,
    pub known_value: Option<f64>,
    /// `FLOP/s`, or `fraction` (MFU: achieved over peak).
    #[schemars(extend("enum" = ["FLOP/s", "fraction"]))]
    pub unit: String,
}

/// One timed step: its counted FLOPs, by phase, and its seconds; or, with `count` above 1, that
/// many steps folded into one record (their FLOPs, phases and seconds summed), which is how a
/// long loop keeps a bounded record without `keep_steps`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StepTiming {
    pub flops: MetricResult,
    /// The step's FLOPs by phase, as its FlopReport's `by_phase` (`forward`, `backward` once it
    /// runs backward, `optimizer` once a `torch.optim` step ran). Additive: a record without it
    /// (torchscan before 0.3) has no phases.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend(
        "propertyNames" = {"enum": ["forward", "backward", "optimizer"]},
        "additionalProperties" = {"$ref": "#/$defs/MetricResult", "properties": {"scope": {"const": "phase"}}}
    ))]
    pub by_phase: BTreeMap<String, MetricResult>,
    pub seconds: f64,
    #[serde(default = "one_step", skip_serializing_if = "is_one_step")]
    #[schemars(range(min = 1), default = "one_step")]
    pub count: u64,
}

fn one_step() -> u64 {
    1
}

fn is_one_step(count: &u64) -> bool {
    *count == 1
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ThroughputReport {
    #[schemars(extend("const" = 1))]
    pub schema_version: u32,
    /// Timed steps.
    pub steps: u64,
    /// Their seconds, summed (each from the step's start to its end, counting included).
    pub seconds: f64,
    /// Their FLOPs, summed (statuses merged: any partial step makes the sum partial).
    pub flops: MetricResult,
    /// Their FLOPs by phase (`forward`, `backward`, `optimizer`), each summed over the steps
    /// that have it, with the same status rules. Additive: absent from reports before 0.3.
    #[serde(default)]
    #[schemars(extend(
        "propertyNames" = {"enum": ["forward", "backward", "optimizer"]},
        "additionalProperties" = {"$ref": "#/$defs/MetricResult", "properties": {"scope": {"const": "phase"}}}
    ))]
    pub by_phase: BTreeMap<String, MetricResult>,
    /// `flops / seconds`.
    pub flops_per_second: RateResult,
    /// The device's peak the MFU is measured against (FLOP/s); `null` when none was given.
    pub peak_flops_per_second: Option<f64>,
    /// `flops_per_second / peak_flops_per_second`; unavailable without a peak.
    pub mfu: RateResult,
    /// Each step's timing, when they were kept (`keep_steps=True`); else empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub per_step: Vec<StepTiming>,
}

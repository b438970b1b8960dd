//! The report types, as serde structs. Every map is a `BTreeMap` so that identical runs give
//! byte-identical JSON. Field names follow `docs/schema.md` (schema_version 1).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub const SCHEMA_VERSION: u32 = 1;
/// `method` of every operator-FLOP metric.
pub const METHOD_NATIVE: &str = "torchscan_native_dispatch";
/// Units as torchscan 0.2 spells them.
pub const UNIT_FLOPS: &str = "FLOPs";
pub const TORCHSCAN_VERSION: &str = env!("CARGO_PKG_VERSION");

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Complete,
    Partial,
    Unavailable,
}

/// `{"status", "value", "known_value", "unit", "scope", "method"}` with the contract's
/// invariant: complete => value == known_value; partial => value null, known_value a lower
/// bound; unavailable => both null. Only the constructors below build one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetricResult {
    pub status: Status,
    pub value: Option<u64>,
    pub known_value: Option<u64>,
    pub unit: String,
    pub scope: String,
    pub method: String,
}

impl MetricResult {
    fn new(status: Status, value: Option<u64>, known_value: Option<u64>, scope: &str) -> Self {
        MetricResult {
            status,
            value,
            known_value,
            unit: UNIT_FLOPS.to_string(),
            scope: scope.to_string(),
            method: METHOD_NATIVE.to_string(),
        }
    }

    pub fn complete(value: u64, scope: &str) -> Self {
        Self::new(Status::Complete, Some(value), Some(value), scope)
    }

    pub fn partial(known: u64, scope: &str) -> Self {
        Self::new(Status::Partial, None, Some(known), scope)
    }

    pub fn unavailable(scope: &str) -> Self {
        Self::new(Status::Unavailable, None, None, scope)
    }

    /// A counted value whose completeness and overflow state are known.
    pub fn from_count(known: u64, incomplete: bool, overflowed: bool, scope: &str) -> Self {
        if overflowed {
            Self::unavailable(scope)
        } else if incomplete {
            Self::partial(known, scope)
        } else {
            Self::complete(known, scope)
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Warning,
    Error,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Diagnostic {
    pub code: String,
    pub severity: Severity,
    pub metric: String,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub operator: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlopContext {
    pub torch_version: String,
    pub torchscan_version: String,
    pub method: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IgnoredCount {
    pub calls: u64,
    pub reason: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlopReport {
    pub schema_version: u32,
    pub context: FlopContext,
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
    pub by_operator: BTreeMap<String, u64>,
    /// Operator packet -> calls, for every counted operator (additive).
    pub operator_calls: BTreeMap<String, u64>,
    /// Category -> FLOPs of the counted operators in it (exact sums of `by_operator`).
    pub by_category: BTreeMap<String, u64>,
    /// `forward`, and `backward` once a workload runs backward.
    pub by_phase: BTreeMap<String, MetricResult>,
    pub ignored_operators: BTreeMap<String, IgnoredCount>,
    pub diagnostics: Vec<Diagnostic>,
}

/// `aten::mm` -> `aten.mm`, the operator-packet spelling reports use.
pub fn packet_name(qualified: &str) -> String {
    qualified.replacen("::", ".", 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_invariants() {
        let c = MetricResult::complete(5, "workload");
        assert_eq!((c.status, c.value, c.known_value), (Status::Complete, Some(5), Some(5)));
        let p = MetricResult::from_count(5, true, false, "workload");
        assert_eq!((p.status, p.value, p.known_value), (Status::Partial, None, Some(5)));
        let u = MetricResult::from_count(5, true, true, "workload");
        assert_eq!((u.status, u.value, u.known_value), (Status::Unavailable, None, None));
        let zero = MetricResult::from_count(0, false, false, "workload");
        assert_eq!(zero.value, Some(0));
        let json = serde_json::to_string(&c).unwrap();
        assert_eq!(
            json,
            r#"{"status":"complete","value":5,"known_value":5,"unit":"FLOPs","scope":"workload","method":"torchscan_native_dispatch"}"#
        );
    }

    #[test]
    fn packet_names() {
        assert_eq!(packet_name("aten::mm"), "aten.mm");
        assert_eq!(packet_name("mylib::my_op"), "mylib.my_op");
    }
}

//! Numbers with a status: the contract's MetricResult, as the FlopReport counts it (`MetricResult`,
//! integer FLOPs) and as the AnalysisReport and ReportDiff carry it (`Metric`, any unit).

use std::borrow::Cow;

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};
use serde_json::json;

/// `method` of every operator-FLOP metric.
pub const METHOD_NATIVE: &str = "torchscan_native_dispatch";
/// Units as torchscan 0.2 spells them.
pub const UNIT_FLOPS: &str = "FLOPs";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Complete,
    Partial,
    Unavailable,
}

/// The unit of a metric, spelled as torchscan 0.2 spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Unit {
    #[serde(rename = "FLOPs")]
    Flops,
    #[serde(rename = "MACs")]
    Macs,
    #[serde(rename = "DMAs")]
    Dmas,
    #[serde(rename = "elements")]
    Elements,
    #[serde(rename = "bytes")]
    Bytes,
    #[serde(rename = "calls")]
    Calls,
}

impl Unit {
    pub fn name(self) -> &'static str {
        match self {
            Unit::Flops => "FLOPs",
            Unit::Macs => "MACs",
            Unit::Dmas => "DMAs",
            Unit::Elements => "elements",
            Unit::Bytes => "bytes",
            Unit::Calls => "calls",
        }
    }
}

/// A metric's number: counts are integers, receptive-field values may be fractional, and a
/// difference may be negative. Written as JSON writes numbers (`5`, `-3`, `1.5`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Number {
    Int(u64),
    Signed(i64),
    Float(f64),
}

impl Number {
    /// The exact integer, when the number is one.
    pub fn integer(self) -> Option<i128> {
        match self {
            Number::Int(v) => Some(v.into()),
            Number::Signed(v) => Some(v.into()),
            Number::Float(_) => None,
        }
    }

    pub fn as_f64(self) -> f64 {
        match self {
            Number::Int(v) => v as f64,
            Number::Signed(v) => v as f64,
            Number::Float(v) => v,
        }
    }

    /// The integer `v` in the narrowest exact variant, or the nearest float beyond 64 bits.
    pub fn from_i128(v: i128) -> Number {
        if let Ok(v) = u64::try_from(v) {
            Number::Int(v)
        } else if let Ok(v) = i64::try_from(v) {
            Number::Signed(v)
        } else {
            Number::Float(v as f64)
        }
    }

    /// Equal as numbers: integers exactly, otherwise as floats.
    pub fn same(self, other: Number) -> bool {
        match (self.integer(), other.integer()) {
            (Some(a), Some(b)) => a == b,
            _ => self.as_f64() == other.as_f64(),
        }
    }
}

impl JsonSchema for Number {
    fn schema_name() -> Cow<'static, str> {
        "Number".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({"type": "number"})
    }
}

/// Schema of a field that is always present and may be null (`value`, `known_value`, `delta`).
pub(crate) fn nullable_number(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"type": ["number", "null"]})
}

pub(crate) fn nullable_count(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"type": ["integer", "null"], "minimum": 0})
}

/// The status invariant of every metric, as the schema states it: complete => value and
/// known_value are numbers; partial => value is null and known_value a number; unavailable =>
/// both are null.
pub(crate) fn status_invariant(schema: &mut Schema) {
    let case = |status: &str, value: &str, known: &str| {
        json!({
            "if": {"properties": {"status": {"const": status}}},
            "then": {"properties": {"value": {"type": value}, "known_value": {"type": known}}},
        })
    };
    schema.insert(
        "allOf".into(),
        json!([
            case("complete", "number", "number"),
            case("partial", "null", "number"),
            case("unavailable", "null", "null"),
        ]),
    );
}

/// An operator-FLOP count with its status (FlopReport `total`, `by_phase`, `by_call`). complete:
/// `value` is the number and `known_value` equals it; partial: `value` is null and `known_value`
/// a lower bound; unavailable: both null. Read `value` only when `status` is complete.
// Only the constructors below build one, so that the invariant holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(transform = status_invariant)]
pub struct MetricResult {
    pub status: Status,
    #[schemars(schema_with = "nullable_count")]
    pub value: Option<u64>,
    #[schemars(schema_with = "nullable_count")]
    pub known_value: Option<u64>,
    #[schemars(extend("const" = "FLOPs"))]
    pub unit: String,
    /// What the number covers: `workload`, `phase`, `module_call`.
    #[schemars(length(min = 1))]
    pub scope: String,
    /// How it was obtained: `torchscan_native_dispatch`, or `not_requested`.
    #[schemars(length(min = 1))]
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

    /// The sum of counts: complete when every part is, partial (a lower bound: the known values
    /// summed) when a part is partial or unavailable, unavailable when the sum overflows.
    pub fn sum<'a>(parts: impl IntoIterator<Item = &'a MetricResult>, scope: &str) -> Self {
        let mut complete = true;
        let mut known: Option<u64> = Some(0);
        for part in parts {
            let value = match part.status {
                Status::Complete => part.value,
                _ => {
                    complete = false;
                    part.known_value
                }
            };
            known = known.and_then(|k| k.checked_add(value.unwrap_or(0)));
        }
        match known {
            None => Self::unavailable(scope),
            Some(k) if complete => Self::complete(k, scope),
            Some(k) => Self::partial(k, scope),
        }
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

/// A number of any unit with its status (AnalysisReport layers and totals). complete: `value` is
/// the number and `known_value` equals it; partial: `value` is null and `known_value` a lower
/// bound; unavailable: both null. Read `value` only when `status` is complete.
// Only the constructors below build one, so that the invariant holds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(transform = status_invariant)]
pub struct Metric {
    pub status: Status,
    #[schemars(schema_with = "nullable_number")]
    pub value: Option<Number>,
    #[schemars(schema_with = "nullable_number")]
    pub known_value: Option<Number>,
    pub unit: Unit,
    /// What the number covers: `workload`, `phase`, `forward`, `model`, `module_call`.
    #[schemars(length(min = 1))]
    pub scope: String,
    /// How it was obtained: `torchscan_native_dispatch`, `torchscan_module_formula`, `pytorch`,
    /// `pytorch_hook`, `not_requested`, `not_applicable`.
    #[schemars(length(min = 1))]
    pub method: String,
}

impl Metric {
    pub fn complete(value: Number, unit: Unit, scope: &str, method: &str) -> Self {
        Metric {
            status: Status::Complete,
            value: Some(value),
            known_value: Some(value),
            unit,
            scope: scope.into(),
            method: method.into(),
        }
    }

    pub fn partial(known: u64, unit: Unit, scope: &str, method: &str) -> Self {
        Metric {
            status: Status::Partial,
            value: None,
            known_value: Some(Number::Int(known)),
            unit,
            scope: scope.into(),
            method: method.into(),
        }
    }

    pub fn unavailable(unit: Unit, scope: &str, method: &str) -> Self {
        Metric {
            status: Status::Unavailable,
            value: None,
            known_value: None,
            unit,
            scope: scope.into(),
            method: method.into(),
        }
    }

    /// The known integer count, if any.
    pub fn known_count(&self) -> Option<u64> {
        match self.known_value {
            Some(Number::Int(v)) => Some(v),
            _ => None,
        }
    }
}

impl From<MetricResult> for Metric {
    /// An operator-FLOP metric among a report's other metrics (its unit is always FLOPs).
    fn from(m: MetricResult) -> Self {
        Metric {
            status: m.status,
            value: m.value.map(Number::Int),
            known_value: m.known_value.map(Number::Int),
            unit: Unit::Flops,
            scope: m.scope,
            method: m.method,
        }
    }
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
        assert_eq!(serde_json::to_string(&Metric::from(c)).unwrap(), json);
        for unit in [Unit::Flops, Unit::Macs, Unit::Dmas, Unit::Elements, Unit::Bytes, Unit::Calls] {
            assert_eq!(serde_json::to_value(unit).unwrap(), unit.name());
        }
    }

    #[test]
    fn numbers_round_trip_as_json_writes_them() {
        for text in ["5", "-3", "1.5", "18446744073709551615", "-9223372036854775808", "1.0"] {
            let n: Number = serde_json::from_str(text).unwrap();
            assert_eq!(serde_json::to_string(&n).unwrap(), text);
        }
        assert_eq!(Number::from_i128(-(u64::MAX as i128)), Number::Float(-(u64::MAX as f64)));
        assert_eq!(Number::from_i128(-2), Number::Signed(-2));
        assert_eq!(Number::from_i128(7), Number::Int(7));
        assert!(Number::Int(3).same(Number::Float(3.0)));
        assert!(!Number::Int(u64::MAX).same(Number::Int(u64::MAX - 1)));
    }
}

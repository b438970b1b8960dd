//! `compare_reports`: a pure, deterministic diff of two AnalysisReports (this package's or
//! torchscan 0.2's: the same schema). Reports are validated first (`before` then `after`; totals,
//! then layers), every problem named by its location (`before['totals']['macs']['value']`).
//!
//! Python encodes what JSON cannot say (see `torchscan/compare.py`): a tuple as
//! `{"\u0000tuple": [...]}`, a mapping with a non-string key as `{"\u0000nonstr": true}`, a
//! non-finite float as `{"\u0000float": "nan"}`, any other object as `{"\u0000type": "Name"}`.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::report::{ComparedMetric, LayerChanges, LayerDiff, LayerSnapshot, MetricDiff, Number, ReportDiff, Status};

const MARK_NONSTR: &str = "\u{0}nonstr";
const MARK_FLOAT: &str = "\u{0}float";
const SUPPORTED: i64 = 1;
const NOT_APPLICABLE: &str = "not_applicable";
const NOT_REQUESTED: &str = "not_requested";

type Metrics = BTreeMap<String, ComparedMetric>;

struct Normalized {
    version: i64,
    totals: Metrics,
    layers: BTreeMap<(String, i64), Metrics>,
}

fn type_error(message: String) -> Error {
    Error::ReportType(message)
}

fn value_error(message: String) -> Error {
    Error::ReportValue(message)
}

fn repr(name: &str) -> String {
    format!("'{}'", name.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// A JSON object that stands for a real mapping (not one of the encoder's markers).
fn mapping<'a>(value: &'a Value, location: &str) -> Result<&'a Map<String, Value>> {
    match value.as_object() {
        Some(map) if map.keys().any(|k| k.starts_with('\u{0}') && k != MARK_NONSTR) => {
            Err(type_error(format!("{location} must be a mapping")))
        }
        Some(map) => Ok(map),
        None => Err(type_error(format!("{location} must be a mapping"))),
    }
}

fn string_keys(map: &Map<String, Value>, location: &str) -> Result<()> {
    if map.contains_key(MARK_NONSTR) {
        return Err(type_error(format!("{location} keys must be strings")));
    }
    Ok(())
}

/// `Some(number)`, `None` for null; errors for anything else (a bool is not a number).
fn number(value: &Value, location: &str) -> Result<Option<Number>> {
    match value {
        Value::Null => Ok(None),
        Value::Number(n) => Ok(Some(
            (n.as_u64().map(Number::Int))
                .or_else(|| n.as_i64().map(Number::Signed))
                .unwrap_or_else(|| Number::Float(n.as_f64().unwrap_or(f64::NAN))),
        )),
        Value::Object(o) if o.contains_key(MARK_FLOAT) => {
            Err(value_error(format!("{location} must be a finite number or None")))
        }
        _ => Err(type_error(format!("{location} must be a number or None"))),
    }
}

fn normalize_metric(value: &Value, location: &str) -> Result<ComparedMetric> {
    let map = mapping(value, location)?;
    for field in ["status", "value", "known_value"] {
        if !map.contains_key(field) {
            return Err(value_error(format!("{location} must contain '{field}'")));
        }
    }
    let status = match map["status"].as_str() {
        Some("complete") => Status::Complete,
        Some("partial") => Status::Partial,
        Some("unavailable") => Status::Unavailable,
        _ => return Err(value_error(format!("{location}['status'] must be 'complete', 'partial', or 'unavailable'"))),
    };
    let value = number(&map["value"], &format!("{location}['value']"))?;
    let known_value = number(&map["known_value"], &format!("{location}['known_value']"))?;
    match status {
        Status::Complete => {
            let Some(v) = value else {
                return Err(value_error(format!("{location}['value'] must be a number when status is 'complete'")));
            };
            if !known_value.is_some_and(|k| k.same(v)) {
                return Err(value_error(format!(
                    "{location}['known_value'] must equal 'value' when status is 'complete'"
                )));
            }
        }
        Status::Partial if value.is_some() || known_value.is_none() => {
            return Err(value_error(format!("{location} must have only a known_value when status is 'partial'")))
        }
        Status::Unavailable if value.is_some() || known_value.is_some() => {
            return Err(value_error(format!("{location} numeric values must be None when status is 'unavailable'")))
        }
        _ => {}
    }
    let text = |field: &str| -> Result<Option<String>> {
        match map.get(field) {
            None => Ok(None),
            Some(Value::String(text)) => Ok(Some(text.clone())),
            Some(_) => Err(type_error(format!("{location}['{field}'] must be a string"))),
        }
    };
    Ok(ComparedMetric {
        status,
        value,
        known_value,
        unit: text("unit")?,
        scope: text("scope")?,
        method: text("method")?,
    })
}

fn normalize_metrics(value: &Value, location: &str) -> Result<Metrics> {
    let map = mapping(value, location)?;
    string_keys(map, location)?;
    let mut out = Metrics::new();
    for (name, metric) in map {
        out.insert(name.clone(), normalize_metric(metric, &format!("{location}[{}]", repr(name)))?);
    }
    Ok(out)
}

fn normalize(report: &Value, location: &str) -> Result<Normalized> {
    let map = mapping(report, location)?;
    let version_location = format!("{location}['schema_version']");
    let version = match map.get("schema_version") {
        Some(Value::Number(n)) if n.is_i64() => n.as_i64().unwrap_or_default(),
        _ => return Err(type_error(format!("{version_location} must be an integer"))),
    };
    let totals = normalize_metrics(map.get("totals").unwrap_or(&Value::Null), &format!("{location}['totals']"))?;
    let layers_location = format!("{location}['layers']");
    let items = match map.get("layers") {
        Some(Value::Array(items)) => items,
        _ => return Err(type_error(format!("{layers_location} must be a list"))),
    };
    let mut layers = BTreeMap::new();
    for (i, item) in items.iter().enumerate() {
        let item_location = format!("{layers_location}[{i}]");
        let layer = mapping(item, &item_location)?;
        let path = layer
            .get("path")
            .and_then(Value::as_str)
            .ok_or_else(|| type_error(format!("{item_location}['path'] must be a string")))?;
        let call_index = match layer.get("call_index") {
            Some(Value::Number(n)) if n.is_i64() => n.as_i64().unwrap_or_default(),
            Some(Value::Number(n)) if n.is_u64() => {
                return Err(value_error(format!("{item_location}['call_index'] is out of range, got {n}")))
            }
            _ => return Err(type_error(format!("{item_location}['call_index'] must be an integer"))),
        };
        if call_index < 0 {
            return Err(value_error(format!(
                "{item_location}['call_index'] must not be negative (call indices count from 0), got {call_index}"
            )));
        }
        let key = (path.to_string(), call_index);
        if layers.contains_key(&key) {
            return Err(value_error(format!(
                "{layers_location} contains duplicate layer call ({}, {call_index})",
                repr(path)
            )));
        }
        let metrics =
            normalize_metrics(layer.get("metrics").unwrap_or(&Value::Null), &format!("{item_location}['metrics']"))?;
        layers.insert(key, metrics);
    }
    Ok(Normalized { version, totals, layers })
}

/// `after - before`: exact for integers (counts are up to 2^64 - 1, so a difference spans
/// -(2^64 - 1) ..= 2^64 - 1: emitted as an integer when it fits `i64` or `u64`, else as the
/// nearest float); a float difference otherwise.
fn delta(before: Number, after: Number) -> Number {
    match (before.integer(), after.integer()) {
        (Some(b), Some(a)) => Number::from_i128(a - b),
        _ => Number::Float(after.as_f64() - before.as_f64()),
    }
}

fn diff_metric(before: Option<&ComparedMetric>, after: Option<&ComparedMetric>) -> MetricDiff {
    let status = match (before, after) {
        (Some(b), Some(a)) => {
            let statuses = [b.status, a.status];
            if statuses.contains(&Status::Unavailable) {
                Status::Unavailable
            } else if statuses.contains(&Status::Partial) {
                Status::Partial
            } else {
                Status::Complete
            }
        }
        _ => Status::Unavailable,
    };
    let delta = match (status, before.and_then(|b| b.value), after.and_then(|a| a.value)) {
        (Status::Complete, Some(b), Some(a)) => Some(delta(b, a)),
        _ => None,
    };
    MetricDiff { after: after.cloned(), before: before.cloned(), delta, status }
}

fn diff_metrics(before: &Metrics, after: &Metrics, changed_only: bool) -> Result<BTreeMap<String, MetricDiff>> {
    let names: BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    let mut out = BTreeMap::new();
    for name in names {
        let (b, a) = (before.get(name), after.get(name));
        if changed_only && b == a {
            continue;
        }
        if let (Some(b), Some(a)) = (b, a) {
            // A metric without a number on one side (`not_applicable`: a receptive field where
            // another module type now sits at the path; `not_requested`: structure mode) can
            // differ in method: its status makes the difference unavailable, not incompatible.
            let numberless = |m: &ComparedMetric| matches!(m.method.as_deref(), Some(NOT_APPLICABLE | NOT_REQUESTED));
            let methods = if numberless(b) || numberless(a) { (&None, &None) } else { (&b.method, &a.method) };
            for (field, x, y) in
                [("unit", &b.unit, &a.unit), ("scope", &b.scope, &a.scope), ("method", methods.0, methods.1)]
            {
                if x != y {
                    return Err(value_error(format!("metric {} has incompatible {field}", repr(name))));
                }
            }
        }
        out.insert(name.clone(), diff_metric(b, a));
    }
    Ok(out)
}

fn snapshot(key: &(String, i64), metrics: &Metrics) -> LayerSnapshot {
    LayerSnapshot { call_index: key.1, metrics: metrics.clone(), path: key.0.clone() }
}

/// The ReportDiff of two reports (JSON values, encoded as described above).
pub fn compare(before: &Value, after: &Value) -> Result<ReportDiff> {
    let b = normalize(before, "before")?;
    let a = normalize(after, "after")?;
    if b.version != a.version {
        return Err(value_error(format!("schema versions differ: {} != {}", b.version, a.version)));
    }
    if b.version != SUPPORTED {
        return Err(value_error(format!("unsupported schema version: {}", b.version)));
    }
    let totals = diff_metrics(&b.totals, &a.totals, false)?;
    let added = a.layers.iter().filter(|(k, _)| !b.layers.contains_key(*k)).map(|(k, m)| snapshot(k, m)).collect();
    let removed = b.layers.iter().filter(|(k, _)| !a.layers.contains_key(*k)).map(|(k, m)| snapshot(k, m)).collect();
    let mut changed = Vec::new();
    for (key, before_metrics) in &b.layers {
        let Some(after_metrics) = a.layers.get(key) else { continue };
        let metrics = diff_metrics(before_metrics, after_metrics, true)?;
        if !metrics.is_empty() {
            changed.push(LayerDiff { call_index: key.1, metrics, path: key.0.clone() });
        }
    }
    Ok(ReportDiff { layers: LayerChanges { added, changed, removed }, schema_version: b.version, totals })
}

/// `compare` over JSON text, for the FFI.
pub fn compare_json(before: &str, after: &str) -> Result<String> {
    let parse = |text: &str, which: &str| {
        serde_json::from_str::<Value>(text).map_err(|e| value_error(format!("{which} is not valid JSON ({e})")))
    };
    let diff = compare(&parse(before, "before")?, &parse(after, "after")?)?;
    serde_json::to_string(&diff).map_err(|e| Error::Internal(format!("the diff cannot be serialized: {e}")))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// The diff as JSON, as users read it.
    fn diff(before: &Value, after: &Value) -> Value {
        serde_json::to_value(compare(before, after).unwrap()).unwrap()
    }

    fn m(status: &str, value: Value, known: Value) -> Value {
        json!({"status": status, "value": value, "known_value": known, "unit": "FLOPs", "scope": "s", "method": "x"})
    }

    fn report(flops: Value, layers: Value) -> Value {
        json!({"schema_version": 1, "totals": {"module_flops": flops}, "layers": layers})
    }

    fn layer(path: &str, index: i64, flops: u64) -> Value {
        json!({"path": path, "call_index": index, "metrics": {"module_flops": m("complete", json!(flops), json!(flops))}})
    }

    #[test]
    fn diff_of_totals_and_layers() {
        let before = report(m("complete", json!(100), json!(100)), json!([layer("a", 0, 60), layer("b", 0, 40)]));
        let after = report(m("complete", json!(130), json!(130)), json!([layer("a", 0, 90), layer("c", 0, 40)]));
        let d = diff(&before, &after);
        assert_eq!(d["totals"]["module_flops"]["delta"], 30);
        assert_eq!(d["totals"]["module_flops"]["status"], "complete");
        assert_eq!(d["layers"]["added"][0]["path"], "c");
        assert_eq!(d["layers"]["removed"][0]["path"], "b");
        assert_eq!(d["layers"]["changed"][0]["metrics"]["module_flops"]["delta"], 30);
        assert_eq!(d["schema_version"], 1);
    }

    #[test]
    fn status_propagation() {
        let before = report(m("partial", Value::Null, json!(5)), json!([]));
        let after = report(m("complete", json!(9), json!(9)), json!([]));
        let d = diff(&before, &after);
        assert_eq!(d["totals"]["module_flops"]["status"], "partial");
        assert_eq!(d["totals"]["module_flops"]["delta"], Value::Null);
        let missing = json!({"schema_version": 1, "totals": {}, "layers": []});
        let d = diff(&before, &missing);
        assert_eq!(d["totals"]["module_flops"]["status"], "unavailable");
        assert_eq!(d["totals"]["module_flops"]["after"], Value::Null);
    }

    #[test]
    fn errors_name_their_location() {
        let ok = report(m("complete", json!(1), json!(1)), json!([]));
        let check = |bad: Value, expected: &str| {
            let e = compare(&bad, &ok).unwrap_err();
            assert_eq!(e.to_string(), expected);
        };
        check(json!([1]), "before must be a mapping");
        check(
            json!({"schema_version": true, "totals": {}, "layers": []}),
            "before['schema_version'] must be an integer",
        );
        check(
            report(json!({"status": "complete", "value": 1}), json!([])),
            "before['totals']['module_flops'] must contain 'known_value'",
        );
        check(
            report(m("done", json!(1), json!(1)), json!([])),
            "before['totals']['module_flops']['status'] must be 'complete', 'partial', or 'unavailable'",
        );
        check(
            report(m("complete", json!(true), json!(1)), json!([])),
            "before['totals']['module_flops']['value'] must be a number or None",
        );
        check(
            report(m("complete", json!({MARK_FLOAT: "nan"}), json!(1)), json!([])),
            "before['totals']['module_flops']['value'] must be a finite number or None",
        );
        check(
            report(m("complete", json!(1), json!(2)), json!([])),
            "before['totals']['module_flops']['known_value'] must equal 'value' when status is 'complete'",
        );
        check(
            json!({"schema_version": 1, "totals": {MARK_NONSTR: true}, "layers": []}),
            "before['totals'] keys must be strings",
        );
        check(
            json!({"schema_version": 1, "totals": {}, "layers": {"\u{0}tuple": []}}),
            "before['layers'] must be a list",
        );
        check(
            report(m("complete", json!(1), json!(1)), json!([layer("a", 0, 1), layer("a", 0, 2)])),
            "before['layers'] contains duplicate layer call ('a', 0)",
        );
        check(
            json!({"schema_version": 1, "totals": {}, "layers": [{"path": 3}]}),
            "before['layers'][0]['path'] must be a string",
        );
    }

    #[test]
    fn versions_and_incompatible_metrics() {
        let one = report(m("complete", json!(1), json!(1)), json!([]));
        let mut two = one.clone();
        two["schema_version"] = json!(2);
        assert_eq!(compare(&one, &two).unwrap_err().to_string(), "schema versions differ: 1 != 2");
        assert_eq!(compare(&two, &two).unwrap_err().to_string(), "unsupported schema version: 2");
        let mut other_unit = one.clone();
        other_unit["totals"]["module_flops"]["unit"] = json!("MACs");
        assert_eq!(compare(&one, &other_unit).unwrap_err().to_string(), "metric 'module_flops' has incompatible unit");
        let mut other_method = one.clone();
        other_method["totals"]["module_flops"]["method"] = json!("y");
        assert!(compare(&one, &other_method).is_err());
        // A numberless side (not applicable) differs in method without being incompatible.
        let mut numberless = one.clone();
        numberless["totals"]["module_flops"] = json!({"status": "unavailable", "value": null, "known_value": null, "unit": "FLOPs", "scope": "s",
                   "method": "not_applicable"});
        let d = diff(&one, &numberless);
        assert_eq!(d["totals"]["module_flops"]["status"], "unavailable");
        assert_eq!(d["totals"]["module_flops"]["delta"], Value::Null);
    }
}

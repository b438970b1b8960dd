//! `compare_reports`: a pure, deterministic diff of two AnalysisReports (this package's or
//! torchscan 0.2's: the same schema). Reports are validated first (`before` then `after`; totals,
//! then layers), every problem named by its location (`before['totals']['macs']['value']`).
//!
//! Python hands over only the fields a comparison reads, as plain JSON, once it has checked what
//! only Python can see (tuples for lists, keys that are not strings, non-finite floats, objects
//! JSON has no word for: `torchscan/compare.py`, `torchscan/_wire.c`). The schema versions are
//! read first: reports of different versions are not read further. A well-formed report is read
//! straight into typed fields; only one that is not is read as a JSON tree, for its error. A
//! metric that the two reports measure differently (another unit, scope or method) is a
//! `ValueError` naming the field (`incompatible unit ...`: torchscan 0.2's rule) when both sides
//! have a number to compare; when one side has none (unavailable, not applicable, not
//! requested) it is an `unavailable` difference with its reason.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::report::{ComparedMetric, LayerChanges, LayerDiff, LayerSnapshot, MetricDiff, Number, ReportDiff, Status};

const SUPPORTED: i64 = 1;
const NOT_APPLICABLE: &str = "not_applicable";
const NOT_REQUESTED: &str = "not_requested";

/// A text of a report (a metric's name, unit, scope, method), stored once per distinct value:
/// a large report repeats a handful of them a million times.
type Text = Arc<str>;

#[derive(Default)]
struct Texts(HashSet<Text>);

impl Texts {
    fn get(&mut self, text: &str) -> Text {
        if let Some(stored) = self.0.get(text) {
            return stored.clone();
        }
        let stored: Text = text.into();
        self.0.insert(stored.clone());
        stored
    }
}

/// A validated metric as the comparison holds it; a `ComparedMetric` once it is reported.
#[derive(Clone, PartialEq)]
struct Metric {
    status: Status,
    value: Option<Number>,
    known_value: Option<Number>,
    unit: Option<Text>,
    scope: Option<Text>,
    method: Option<Text>,
}

impl Metric {
    fn reported(&self) -> ComparedMetric {
        let text = |t: &Option<Text>| t.as_deref().map(str::to_string);
        ComparedMetric {
            status: self.status,
            value: self.value,
            known_value: self.known_value,
            unit: text(&self.unit),
            scope: text(&self.scope),
            method: text(&self.method),
        }
    }
}

type Metrics = BTreeMap<Text, Metric>;

struct Normalized {
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

/// Where a value sits (`before['layers'][3]['metrics']['macs']`), spelled out only when an
/// error names it: a 100,000-layer report has about a million metrics, and building their
/// locations on the success path cost more than the comparison itself.
type Location<'a> = &'a dyn Fn() -> String;

/// The fields of a metric that a comparison reads, in their JSON types. A well-formed report
/// is read straight into these (no JSON tree: a tenth of the time and memory on a large
/// report); one that is not is read again as a tree, for the error that names the location.
#[derive(Deserialize)]
struct WireMetric<'a> {
    status: Status,
    // Present, even when null: `deserialize_with` makes an `Option` field required.
    #[serde(deserialize_with = "Option::deserialize")]
    value: Option<Number>,
    #[serde(deserialize_with = "Option::deserialize")]
    known_value: Option<Number>,
    // Borrowed from the JSON text: a text with an escape sends the report to the tree reading.
    #[serde(default, borrow, deserialize_with = "text")]
    unit: Option<&'a str>,
    #[serde(default, borrow, deserialize_with = "text")]
    scope: Option<&'a str>,
    #[serde(default, borrow, deserialize_with = "text")]
    method: Option<&'a str>,
}

/// A text field that may be absent, but not null.
fn text<'de: 'a, 'a, D: serde::Deserializer<'de>>(deserializer: D) -> std::result::Result<Option<&'a str>, D::Error> {
    <&str>::deserialize(deserializer).map(Some)
}

#[derive(Deserialize)]
struct WireLayer<'a> {
    path: String,
    call_index: i64,
    #[serde(borrow)]
    metrics: BTreeMap<&'a str, WireMetric<'a>>,
}

#[derive(Deserialize)]
struct WireReport<'a> {
    #[serde(borrow)]
    totals: BTreeMap<&'a str, WireMetric<'a>>,
    layers: Vec<WireLayer<'a>>,
}

/// The status invariant, checked on a metric read either way.
fn checked_metric(metric: WireMetric, texts: &mut Texts, location: Location) -> Result<Metric> {
    let WireMetric { status, value, known_value, unit, scope, method } = metric;
    let invalid = match status {
        Status::Complete => match value {
            None => Some("['value'] must be a number when status is 'complete'"),
            Some(v) if !known_value.is_some_and(|k| k.same(v)) => {
                Some("['known_value'] must equal 'value' when status is 'complete'")
            }
            Some(_) => None,
        },
        Status::Partial if value.is_some() || known_value.is_none() => {
            Some(" must have only a known_value when status is 'partial'")
        }
        Status::Unavailable if value.is_some() || known_value.is_some() => {
            Some(" numeric values must be None when status is 'unavailable'")
        }
        _ => None,
    };
    match invalid {
        Some(problem) => Err(value_error(format!("{}{problem}", location()))),
        None => {
            let mut text = |t: Option<&str>| t.map(|t| texts.get(t));
            Ok(Metric { status, value, known_value, unit: text(unit), scope: text(scope), method: text(method) })
        }
    }
}

/// A layer call's key, unless its index is negative or another call of the report has it.
fn layer_key(
    layers: &BTreeMap<(String, i64), Metrics>,
    path: String,
    call_index: i64,
    side: &str,
    item: Location,
) -> Result<(String, i64)> {
    if call_index < 0 {
        return Err(value_error(format!(
            "{}['call_index'] must not be negative (call indices count from 0), got {call_index}",
            item()
        )));
    }
    let key = (path, call_index);
    if layers.contains_key(&key) {
        return Err(value_error(format!(
            "{side}['layers'] contains duplicate layer call ({}, {call_index})",
            repr(&key.0)
        )));
    }
    Ok(key)
}

fn checked_metrics(metrics: BTreeMap<&str, WireMetric>, texts: &mut Texts, location: Location) -> Result<Metrics> {
    let mut out = Metrics::new();
    for (name, metric) in metrics {
        let metric = checked_metric(metric, texts, &|| format!("{}[{}]", location(), repr(name)))?;
        out.insert(texts.get(name), metric);
    }
    Ok(out)
}

/// A report read straight into its typed fields; `None` when it is not well-formed JSON of
/// the right types (the tree reading then names the problem).
fn normalize_typed(text: &str, side: &str) -> Option<Result<Normalized>> {
    let report = serde_json::from_str::<WireReport>(text).ok()?;
    let read = || -> Result<Normalized> {
        let texts = &mut Texts::default();
        let totals = checked_metrics(report.totals, texts, &|| format!("{side}['totals']"))?;
        let mut layers = BTreeMap::new();
        for (i, layer) in report.layers.into_iter().enumerate() {
            let item = || format!("{side}['layers'][{i}]");
            let key = layer_key(&layers, layer.path, layer.call_index, side, &item)?;
            let metrics = checked_metrics(layer.metrics, texts, &|| format!("{}['metrics']", item()))?;
            layers.insert(key, metrics);
        }
        Ok(Normalized { totals, layers })
    };
    Some(read())
}

fn mapping<'a>(value: &'a Value, location: Location) -> Result<&'a Map<String, Value>> {
    value.as_object().ok_or_else(|| type_error(format!("{} must be a mapping", location())))
}

/// `Some(number)`, `None` for null; errors for anything else (a bool is not a number).
fn number(value: &Value, location: Location, field: &str) -> Result<Option<Number>> {
    match value {
        Value::Null => Ok(None),
        Value::Number(n) => Ok(Some(
            (n.as_u64().map(Number::Int))
                .or_else(|| n.as_i64().map(Number::Signed))
                .unwrap_or_else(|| Number::Float(n.as_f64().unwrap_or(f64::NAN))),
        )),
        _ => Err(type_error(format!("{}['{field}'] must be a number or None", location()))),
    }
}

/// A metric's fields read from a JSON tree, each wrong type or missing field named.
fn wire_metric<'a>(value: &'a Value, location: Location) -> Result<WireMetric<'a>> {
    let map = mapping(value, location)?;
    for field in ["status", "value", "known_value"] {
        if !map.contains_key(field) {
            return Err(value_error(format!("{} must contain '{field}'", location())));
        }
    }
    let status = match map["status"].as_str() {
        Some("complete") => Status::Complete,
        Some("partial") => Status::Partial,
        Some("unavailable") => Status::Unavailable,
        _ => {
            return Err(value_error(format!(
                "{}['status'] must be 'complete', 'partial', or 'unavailable'",
                location()
            )))
        }
    };
    let text = |field: &str| -> Result<Option<&'a str>> {
        match map.get(field) {
            None => Ok(None),
            Some(Value::String(text)) => Ok(Some(text)),
            Some(_) => Err(type_error(format!("{}['{field}'] must be a string", location()))),
        }
    };
    Ok(WireMetric {
        status,
        value: number(&map["value"], location, "value")?,
        known_value: number(&map["known_value"], location, "known_value")?,
        unit: text("unit")?,
        scope: text("scope")?,
        method: text("method")?,
    })
}

fn normalize_metrics(value: &Value, texts: &mut Texts, location: Location) -> Result<Metrics> {
    let map = mapping(value, location)?;
    let mut out = Metrics::new();
    for (name, metric) in map {
        let at = || format!("{}[{}]", location(), repr(name));
        let metric = checked_metric(wire_metric(metric, &at)?, texts, &at)?;
        out.insert(texts.get(name), metric);
    }
    Ok(out)
}

fn version(report: &Value, location: &str) -> Result<i64> {
    match mapping(report, &|| location.to_string())?.get("schema_version") {
        Some(Value::Number(n)) if n.is_i64() => Ok(n.as_i64().unwrap_or_default()),
        _ => Err(type_error(format!("{location}['schema_version'] must be an integer"))),
    }
}

/// A report read from its JSON tree, every problem named by its location.
fn normalize(report: &Value, side: &str) -> Result<Normalized> {
    let map = mapping(report, &|| side.to_string())?;
    let texts = &mut Texts::default();
    let totals = normalize_metrics(map.get("totals").unwrap_or(&Value::Null), texts, &|| format!("{side}['totals']"))?;
    let items = match map.get("layers") {
        Some(Value::Array(items)) => items,
        _ => return Err(type_error(format!("{side}['layers'] must be a list"))),
    };
    let mut layers = BTreeMap::new();
    for (i, item) in items.iter().enumerate() {
        let item_location = || format!("{side}['layers'][{i}]");
        let layer = mapping(item, &item_location)?;
        let path = layer
            .get("path")
            .and_then(Value::as_str)
            .ok_or_else(|| type_error(format!("{}['path'] must be a string", item_location())))?;
        let call_index = match layer.get("call_index") {
            Some(Value::Number(n)) if n.is_i64() => n.as_i64().unwrap_or_default(),
            Some(Value::Number(n)) if n.is_u64() => {
                return Err(value_error(format!("{}['call_index'] is out of range, got {n}", item_location())))
            }
            _ => return Err(type_error(format!("{}['call_index'] must be an integer", item_location()))),
        };
        let key = layer_key(&layers, path.to_string(), call_index, side, &item_location)?;
        let metrics = normalize_metrics(layer.get("metrics").unwrap_or(&Value::Null), texts, &|| {
            format!("{}['metrics']", item_location())
        })?;
        layers.insert(key, metrics);
    }
    Ok(Normalized { totals, layers })
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

fn diff_metric(before: Option<&Metric>, after: Option<&Metric>) -> MetricDiff {
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
    MetricDiff { after: after.map(Metric::reported), before: before.map(Metric::reported), delta, reason: None, status }
}

/// The first of unit, scope and method that differs between the two sides of a metric, with
/// both values as the messages show them (torchscan 0.2 counted operators with PyTorch's flop
/// counter, this version natively: their `operator_flops` differ in method).
fn incompatibility(before: &Metric, after: &Metric) -> Option<(&'static str, String, String)> {
    // A metric without a number on one side (`not_applicable`: a receptive field where another
    // module type now sits at the path; `not_requested`: structure mode) can differ in method:
    // its status already makes the difference unavailable.
    let numberless = |m: &Metric| matches!(m.method.as_deref(), Some(NOT_APPLICABLE | NOT_REQUESTED));
    let methods =
        if numberless(before) || numberless(after) { (&None, &None) } else { (&before.method, &after.method) };
    let fields =
        [("unit", &before.unit, &after.unit), ("scope", &before.scope, &after.scope), ("method", methods.0, methods.1)];
    let shown = |side: &Option<Text>| side.as_deref().map_or_else(|| "none given".to_string(), repr);
    fields.into_iter().find(|(_, b, a)| b != a).map(|(field, b, a)| (field, shown(b), shown(a)))
}

/// A side of a metric that holds a number (its value or a known lower bound).
fn has_number(metric: &Metric) -> bool {
    metric.value.is_some() || metric.known_value.is_some()
}

/// The differences of two sets of metrics; `owner` names them in an error (`the totals`, `layer
/// call ('fc', 0)`), spelled out only then.
fn diff_metrics(
    before: &Metrics,
    after: &Metrics,
    changed_only: bool,
    owner: &dyn Fn() -> String,
) -> Result<BTreeMap<String, MetricDiff>> {
    let names: BTreeSet<&Text> = before.keys().chain(after.keys()).collect();
    let mut out = BTreeMap::new();
    for name in names {
        let (b, a) = (before.get(name), after.get(name));
        if changed_only && b == a {
            continue;
        }
        let mut diff = diff_metric(b, a);
        if let (Some(b), Some(a)) = (b, a) {
            if let Some((field, was, is)) = incompatibility(b, a) {
                // Two numbers measured differently cannot be subtracted: torchscan 0.2 refuses
                // the comparison, and code written for it catches that ValueError.
                if has_number(b) && has_number(a) {
                    return Err(value_error(format!(
                        "incompatible {field} for metric {} of {}: {was} before, {is} after (the reports \
                         measured it differently; compare reports made the same way)",
                        repr(name),
                        owner()
                    )));
                }
                let reason = format!("measured differently: {field} {was} before, {is} after");
                diff = MetricDiff { delta: None, reason: Some(reason), status: Status::Unavailable, ..diff };
            }
        }
        out.insert(name.to_string(), diff);
    }
    Ok(out)
}

fn snapshot(key: &(String, i64), metrics: &Metrics) -> LayerSnapshot {
    let metrics = metrics.iter().map(|(name, metric)| (name.to_string(), metric.reported())).collect();
    LayerSnapshot { call_index: key.1, metrics, path: key.0.clone() }
}

fn checked_version(before: i64, after: i64) -> Result<i64> {
    if before != after {
        return Err(value_error(format!("schema versions differ: {before} != {after}")));
    }
    if before != SUPPORTED {
        return Err(value_error(format!("unsupported schema version: {before}")));
    }
    Ok(before)
}

fn diff(b: Normalized, a: Normalized, version: i64) -> Result<ReportDiff> {
    let totals = diff_metrics(&b.totals, &a.totals, false, &|| "the totals".to_string())?;
    let added = a.layers.iter().filter(|(k, _)| !b.layers.contains_key(*k)).map(|(k, m)| snapshot(k, m)).collect();
    let removed = b.layers.iter().filter(|(k, _)| !a.layers.contains_key(*k)).map(|(k, m)| snapshot(k, m)).collect();
    let mut changed = Vec::new();
    for (key, before_metrics) in &b.layers {
        let Some(after_metrics) = a.layers.get(key) else { continue };
        let owner = || format!("layer call ({}, {})", repr(&key.0), key.1);
        let metrics = diff_metrics(before_metrics, after_metrics, true, &owner)?;
        if !metrics.is_empty() {
            changed.push(LayerDiff { call_index: key.1, metrics, path: key.0.clone() });
        }
    }
    Ok(ReportDiff { layers: LayerChanges { added, changed, removed }, schema_version: version, totals })
}

/// The ReportDiff of two reports (JSON values, encoded as described above).
pub fn compare(before: &Value, after: &Value) -> Result<ReportDiff> {
    let version = checked_version(version(before, "before")?, version(after, "after")?)?;
    diff(normalize(before, "before")?, normalize(after, "after")?, version)
}

/// The top of a report, read without building the rest of its tree.
#[derive(Deserialize)]
struct Head {
    schema_version: Option<Value>,
}

fn parse(text: &str, which: &str) -> Result<Value> {
    serde_json::from_str::<Value>(text).map_err(|e| value_error(format!("{which} is not valid JSON ({e})")))
}

/// A report's schema version, read from its text: a report that is not a mapping, or whose
/// version is not an integer, is parsed whole for the error that names the problem.
fn text_version(text: &str, which: &str) -> Result<i64> {
    match serde_json::from_str::<Head>(text) {
        Ok(Head { schema_version: Some(Value::Number(n)) }) if n.is_i64() => Ok(n.as_i64().unwrap_or_default()),
        _ => version(&parse(text, which)?, which),
    }
}

/// `compare` over JSON text, for the FFI. The versions are read first, then each side in turn
/// (straight into its typed fields when it is well-formed).
pub fn compare_json(before: &str, after: &str) -> Result<String> {
    let version = checked_version(text_version(before, "before")?, text_version(after, "after")?)?;
    let read =
        |text: &str, side: &str| normalize_typed(text, side).unwrap_or_else(|| normalize(&parse(text, side)?, side));
    let b = read(before, "before")?;
    let a = read(after, "after")?;
    serde_json::to_string(&diff(b, a, version)?)
        .map_err(|e| Error::Internal(format!("the diff cannot be serialized: {e}")))
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
            report(m("complete", json!(1), json!(2)), json!([])),
            "before['totals']['module_flops']['known_value'] must equal 'value' when status is 'complete'",
        );
        check(json!({"schema_version": 1, "totals": {}, "layers": {}}), "before['layers'] must be a list");
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
        // Versions first: nothing else of a report of another version is read.
        let bare = |v: i64| json!({"schema_version": v});
        assert_eq!(compare(&bare(1), &bare(2)).unwrap_err().to_string(), "schema versions differ: 1 != 2");
        // Two numbers measured differently: torchscan 0.2's ValueError, naming the field.
        let mut other_unit = one.clone();
        other_unit["totals"]["module_flops"]["unit"] = json!("MACs");
        assert_eq!(
            compare(&one, &other_unit).unwrap_err().to_string(),
            "incompatible unit for metric 'module_flops' of the totals: 'FLOPs' before, 'MACs' after (the reports \
             measured it differently; compare reports made the same way)"
        );
        let mut other_scope = one.clone();
        other_scope["totals"]["module_flops"]["scope"] = json!("t");
        assert!(compare(&one, &other_scope).unwrap_err().to_string().starts_with("incompatible scope "));
        let mut no_method = one.clone();
        no_method["totals"]["module_flops"].as_object_mut().unwrap().remove("method");
        let e = compare(&one, &no_method).unwrap_err().to_string();
        assert!(
            e.starts_with("incompatible method for metric 'module_flops' of the totals: 'x' before, none given after")
        );
        // In a layer call too, which the message names.
        let layered = report(m("complete", json!(1), json!(1)), json!([layer("a", 0, 1)]));
        let mut relayered = layered.clone();
        relayered["layers"][0]["metrics"]["module_flops"]["method"] = json!("y");
        let e = compare_json(&layered.to_string(), &relayered.to_string()).unwrap_err().to_string();
        assert!(
            e.starts_with("incompatible method for metric 'module_flops' of layer call ('a', 0): 'x' before"),
            "{e}"
        );
        assert!(diff(&one, &one)["totals"]["module_flops"].get("reason").is_none());
        // A side without a number (unavailable) cannot be subtracted anyway: an unavailable
        // difference that says why, no error.
        let mut empty = one.clone();
        empty["totals"]["module_flops"] = json!({"status": "unavailable", "value": null, "known_value": null,
            "unit": "MACs", "scope": "s", "method": "x"});
        let d = diff(&one, &empty);
        assert_eq!(d["totals"]["module_flops"]["status"], "unavailable");
        assert_eq!(d["totals"]["module_flops"]["delta"], Value::Null);
        assert_eq!(d["totals"]["module_flops"]["reason"], "measured differently: unit 'FLOPs' before, 'MACs' after");
        // A numberless side (not applicable) differs in method without being incompatible.
        let mut numberless = one.clone();
        numberless["totals"]["module_flops"] = json!({"status": "unavailable", "value": null, "known_value": null, "unit": "FLOPs", "scope": "s",
                   "method": "not_applicable"});
        let d = diff(&one, &numberless);
        assert_eq!(d["totals"]["module_flops"]["status"], "unavailable");
        assert_eq!(d["totals"]["module_flops"]["delta"], Value::Null);
    }

    #[test]
    fn text_is_read_typed_or_as_a_tree_with_the_same_result() {
        let before = report(m("complete", json!(100), json!(100)), json!([layer("a", 0, 60), layer("b", 0, 40)]));
        // A metric name with an escape cannot be borrowed from the text: read as a tree.
        let mut after = report(m("complete", json!(130), json!(130)), json!([layer("a", 0, 90)]));
        after["totals"]["tab\tname"] = m("partial", Value::Null, json!(1));
        let (b, a) = (before.to_string(), after.to_string());
        assert!(normalize_typed(&b, "before").is_some());
        assert!(normalize_typed(&a, "after").is_none());
        let from_text: Value = serde_json::from_str(&compare_json(&b, &a).unwrap()).unwrap();
        assert_eq!(from_text, diff(&before, &after));
        assert_eq!(from_text["totals"]["tab\tname"]["status"], "unavailable");
        // Errors found on the typed path name their location as the tree path does.
        let bad = report(m("complete", json!(1), json!(2)), json!([]));
        let e = compare_json(&bad.to_string(), &b).unwrap_err().to_string();
        assert_eq!(e, compare(&bad, &before).unwrap_err().to_string());
        assert_eq!(e, "before['totals']['module_flops']['known_value'] must equal 'value' when status is 'complete'");
    }
}

//! `crawl_module`'s AnalysisReport (schema_version 1), assembled from the document Python hands
//! over: the observed layer calls (identity, metadata, parameter accounting), the module
//! descriptors of the metric leaves, and the same-forward operator FLOP report. Every metric,
//! status, diagnostic and total is decided here.

use std::collections::BTreeSet;

use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::error::{Error, Result};
use crate::modules::{Call, Failure, RfNumber};
use crate::report::SCHEMA_VERSION;

pub const METHOD_MODULE: &str = "torchscan_module_formula";
const NOT_REQUESTED: &str = "not_requested";

#[derive(Deserialize)]
struct Document {
    mode: Mode,
    context: Value,
    inputs: Value,
    layers: Vec<LayerCall>,
    parameter_totals: ParameterTotals,
    /// The FlopReport of the same forward (`null` in structure mode, or when the caller hands
    /// the report over directly, see [`assemble_with`]).
    #[serde(default)]
    operator_flops: Option<Value>,
    torch_version: String,
}

#[derive(Deserialize, PartialEq, Eq, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum Mode {
    Full,
    Structure,
}

#[derive(Deserialize)]
struct ParameterTotals {
    trainable: u64,
    frozen: u64,
    parameter_bytes: u64,
    buffer_elements: u64,
    buffer_bytes: u64,
}

#[derive(Deserialize)]
struct LayerCall {
    path: String,
    call_index: u64,
    name: String,
    depth: u64,
    #[serde(rename = "type")]
    type_name: String,
    input: Value,
    output: Value,
    parameters: Value,
    buffers: Value,
    /// Module formulas apply (a module without children, MultiheadAttention, a root Transformer).
    leaf: bool,
    /// The module-formula descriptor; absent when the call exposed no input or output tensor.
    #[serde(default)]
    call: Option<Call>,
    /// The receptive field does not apply (attention): unavailable without a diagnostic.
    #[serde(default)]
    rf_not_applicable: bool,
}

fn metric(status: &str, value: Option<Value>, known: Option<Value>, unit: &str, scope: &str, method: &str) -> Value {
    json!({"status": status, "value": value, "known_value": known, "unit": unit, "scope": scope, "method": method})
}

fn complete(value: Value, unit: &str, scope: &str, method: &str) -> Value {
    metric("complete", Some(value.clone()), Some(value), unit, scope, method)
}

fn unavailable(unit: &str, scope: &str, method: &str) -> Value {
    metric("unavailable", None, None, unit, scope, method)
}

fn diagnostic(code: &str, metric: &str, path: &str, message: String) -> Value {
    json!({"code": code, "severity": "warning", "metric": metric, "path": path, "message": message})
}

/// One module-formula count as a MetricResult, with its diagnostic when it is not complete.
fn count_metric(
    result: &std::result::Result<u64, Failure>,
    name: &str,
    unit: &str,
    path: &str,
    diagnostics: &mut Vec<Value>,
) -> Value {
    match result {
        Ok(v) => complete(json!(v), unit, "module_call", METHOD_MODULE),
        Err(Failure::Unsupported(type_name)) => {
            diagnostics.push(diagnostic(
                "unsupported_module_metric",
                name,
                path,
                format!("Module type not supported: {type_name}"),
            ));
            metric("partial", None, Some(json!(0)), unit, "module_call", METHOD_MODULE)
        }
        Err(Failure::Error(message)) | Err(Failure::MissingTensor(message)) => {
            diagnostics.push(diagnostic("module_metric_error", name, path, format!("NotImplementedError: {message}")));
            unavailable(unit, "module_call", METHOD_MODULE)
        }
    }
}

fn rf_value(n: RfNumber) -> Value {
    match n {
        RfNumber::Int(i) => json!(i),
        RfNumber::Float(f) => json!(f),
    }
}

const RF_METRICS: [&str; 3] = ["receptive_field", "effective_stride", "effective_padding"];

fn leaf_metrics(layer: &LayerCall, metrics: &mut Map<String, Value>, diagnostics: &mut Vec<Value>) {
    let path = layer.path.as_str();
    let Some(call) = &layer.call else {
        for (name, unit) in [("module_flops", "FLOPs"), ("macs", "MACs"), ("dmas", "DMAs")] {
            diagnostics.push(diagnostic(
                "missing_metric_tensor",
                name,
                path,
                "The module call did not expose both an input and output tensor.".into(),
            ));
            metrics.insert(name.into(), unavailable(unit, "module_call", METHOD_MODULE));
        }
        return;
    };
    let m = call.metrics();
    metrics.insert("module_flops".into(), count_metric(&m.flops, "module_flops", "FLOPs", path, diagnostics));
    metrics.insert("macs".into(), count_metric(&m.macs, "macs", "MACs", path, diagnostics));
    metrics.insert("dmas".into(), count_metric(&m.dmas, "dmas", "DMAs", path, diagnostics));
    let rf: [Value; 3] = match (&m.receptive_field, layer.rf_not_applicable) {
        (_, true) => [(); 3].map(|_| unavailable("elements", "module_call", "not_applicable")),
        (Ok(values), false) => values.map(|v| complete(rf_value(v), "elements", "module_call", METHOD_MODULE)),
        (Err(failure), false) => {
            let (code, message) = match failure {
                Failure::Unsupported(t) => ("unsupported_module_metric", format!("Module type not supported: {t}")),
                Failure::Error(e) | Failure::MissingTensor(e) => {
                    ("module_metric_error", format!("NotImplementedError: {e}"))
                }
            };
            diagnostics.push(diagnostic(code, "receptive_field", path, message));
            [(); 3].map(|_| unavailable("elements", "module_call", METHOD_MODULE))
        }
    };
    for (name, value) in RF_METRICS.iter().zip(rf) {
        metrics.insert((*name).into(), value);
    }
}

/// Sum of a layer metric over the layers that have it: complete if all are, partial (a lower
/// bound) if some number is known, unavailable otherwise.
fn aggregate(layers: &[Value], name: &str, unit: &str) -> Value {
    let results: Vec<&Value> = layers.iter().filter_map(|l| l["metrics"].get(name)).collect();
    if results.is_empty() {
        return unavailable(unit, "forward", METHOD_MODULE);
    }
    let mut total: Option<u64> = Some(0);
    let mut any_known = false;
    for r in &results {
        if let Some(k) = r["known_value"].as_u64() {
            any_known = true;
            total = total.and_then(|t| t.checked_add(k));
        }
    }
    let all_complete = results.iter().all(|r| r["status"] == "complete");
    match total {
        None => unavailable(unit, "forward", METHOD_MODULE),
        Some(t) if all_complete => complete(json!(t), unit, "forward", METHOD_MODULE),
        Some(t) if any_known => metric("partial", None, Some(json!(t)), unit, "forward", METHOD_MODULE),
        Some(_) => unavailable(unit, "forward", METHOD_MODULE),
    }
}

/// Builds the report; returns it with the names of the incomplete metrics (what `strict`
/// refuses: totals that are not complete, except those not requested, and every diagnostic's
/// metric).
pub fn assemble(document: &str) -> Result<(Value, Vec<String>)> {
    assemble_with(document, None)
}

/// As [`assemble`], with the same forward's FlopReport given directly (from the session).
pub fn assemble_with(document: &str, flops: Option<crate::report::FlopReport>) -> Result<(Value, Vec<String>)> {
    let mut doc: Document =
        serde_json::from_str(document).map_err(|e| Error::BadConfig(format!("malformed analysis document: {e}")))?;
    if let Some(report) = flops {
        doc.operator_flops = serde_json::to_value(report).ok();
    }
    let full = doc.mode == Mode::Full;
    let mut operator_flops = match (doc.operator_flops, full) {
        (Some(report), true) => report,
        // Structure mode: the FlopReport's shape, nothing counted.
        _ => json!({
            "schema_version": SCHEMA_VERSION,
            "context": {"torch_version": doc.torch_version, "torchscan_version": crate::report::TORCHSCAN_VERSION,
                        "method": NOT_REQUESTED},
            "total": unavailable("FLOPs", "workload", NOT_REQUESTED),
            "by_module": {}, "by_module_status": {}, "by_operator": {}, "operator_calls": {}, "by_category": {},
            "by_phase": {}, "ignored_operators": {}, "diagnostics": [],
        }),
    };
    let by_call = operator_flops.as_object_mut().and_then(|o| o.remove("by_call")).unwrap_or_else(|| json!({}));

    let mut diagnostics = Vec::new();
    let mut layers = Vec::with_capacity(doc.layers.len());
    for (index, layer) in doc.layers.into_iter().enumerate() {
        let mut metrics = Map::new();
        metrics.insert("calls".into(), complete(json!(1), "calls", "module_call", "pytorch_hook"));
        if full {
            let own = by_call
                .get(index.to_string())
                .cloned()
                .unwrap_or_else(|| complete(json!(0), "FLOPs", "module_call", crate::report::METHOD_NATIVE));
            metrics.insert("operator_flops".into(), own);
            if layer.leaf {
                leaf_metrics(&layer, &mut metrics, &mut diagnostics);
            }
        }
        // Built by move: `json!` would deep-copy these trees through serialization.
        let mut record = Map::new();
        record.insert("path".into(), Value::String(layer.path));
        record.insert("call_index".into(), json!(layer.call_index));
        record.insert("name".into(), Value::String(layer.name));
        record.insert("depth".into(), json!(layer.depth));
        record.insert("type".into(), Value::String(layer.type_name));
        record.insert("input".into(), layer.input);
        record.insert("output".into(), layer.output);
        record.insert("parameters".into(), layer.parameters);
        record.insert("buffers".into(), layer.buffers);
        record.insert("metrics".into(), Value::Object(metrics));
        layers.push(Value::Object(record));
    }
    if let Some(op_diagnostics) = operator_flops["diagnostics"].as_array() {
        diagnostics.extend(op_diagnostics.iter().cloned());
    }

    let p = &doc.parameter_totals;
    let model = |v: u64, unit: &str| complete(json!(v), unit, "model", "pytorch");
    let mut totals = Map::new();
    totals.insert("parameters".into(), model(p.trainable + p.frozen, "elements"));
    totals.insert("trainable_parameters".into(), model(p.trainable, "elements"));
    totals.insert("frozen_parameters".into(), model(p.frozen, "elements"));
    totals.insert("parameter_bytes".into(), model(p.parameter_bytes, "bytes"));
    totals.insert("buffer_elements".into(), model(p.buffer_elements, "elements"));
    totals.insert("buffer_bytes".into(), model(p.buffer_bytes, "bytes"));
    for (name, unit) in [("module_flops", "FLOPs"), ("macs", "MACs"), ("dmas", "DMAs")] {
        let value = if full { aggregate(&layers, name, unit) } else { unavailable(unit, "forward", NOT_REQUESTED) };
        totals.insert(name.into(), value);
    }
    totals.insert("operator_flops".into(), operator_flops["total"].clone());

    let mut incomplete: BTreeSet<String> = totals
        .iter()
        .filter(|(_, m)| m["status"] != "complete" && m["method"] != NOT_REQUESTED)
        .map(|(name, _)| name.clone())
        .collect();
    incomplete.extend(diagnostics.iter().filter_map(|d| d["metric"].as_str().map(String::from)));

    let mut report = Map::new();
    report.insert("schema_version".into(), json!(SCHEMA_VERSION));
    report.insert("context".into(), doc.context);
    report.insert("inputs".into(), doc.inputs);
    report.insert("layers".into(), Value::Array(layers));
    report.insert("operator_flops".into(), operator_flops);
    report.insert("totals".into(), Value::Object(totals));
    report.insert("diagnostics".into(), Value::Array(diagnostics));
    Ok((Value::Object(report), incomplete.into_iter().collect()))
}

/// `{"report": ..., "incomplete": [...]}` as JSON, for the FFI.
pub fn assemble_json(document: &str, flops: Option<crate::report::FlopReport>) -> Result<String> {
    let (report, incomplete) = assemble_with(document, flops)?;
    let mut out = Map::new();
    out.insert("report".into(), report);
    out.insert("incomplete".into(), Value::Array(incomplete.into_iter().map(Value::String).collect()));
    Ok(Value::Object(out).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer(path: &str, leaf: bool, call: Value) -> Value {
        json!({"path": path, "call_index": 0, "name": path, "depth": 1, "type": "T", "input": {}, "output": {},
               "parameters": {}, "buffers": {}, "leaf": leaf, "call": call})
    }

    fn document(mode: &str, layers: Vec<Value>) -> String {
        json!({
            "mode": mode, "context": {"k": 1}, "inputs": {"source": "generated", "args": [], "kwargs": {}},
            "layers": layers, "torch_version": "2.13.0",
            "parameter_totals": {"trainable": 10, "frozen": 2, "parameter_bytes": 48, "buffer_elements": 3, "buffer_bytes": 12},
            "operator_flops": {"total": {"status": "complete", "value": 64, "known_value": 64, "unit": "FLOPs",
                               "scope": "workload", "method": "torchscan_native_dispatch"},
                               "by_call": {"1": {"status": "complete", "value": 64, "known_value": 64, "unit": "FLOPs",
                                           "scope": "module_call", "method": "torchscan_native_dispatch"}},
                               "diagnostics": []},
        })
        .to_string()
    }

    fn linear() -> Value {
        json!({"family": "linear", "in_features": 8, "out_features": 4, "bias": true, "num_params": 36,
               "input": [1, 8], "output": [1, 4]})
    }

    #[test]
    fn full_mode_metrics_totals_and_per_call_operator_flops() {
        let doc = document("full", vec![layer("", false, Value::Null), layer("fc", true, linear())]);
        let (report, incomplete) = assemble(&doc).unwrap();
        assert!(incomplete.is_empty());
        let fc = &report["layers"][1]["metrics"];
        assert_eq!(fc["module_flops"]["value"], 64);
        assert_eq!(fc["macs"]["value"], 32);
        assert_eq!(fc["receptive_field"]["value"], json!(1.0));
        assert_eq!(fc["operator_flops"]["value"], 64);
        assert_eq!(report["layers"][0]["metrics"]["operator_flops"]["value"], 0);
        assert!(report["layers"][0]["metrics"].get("module_flops").is_none(), "containers have no formulas");
        assert_eq!(report["totals"]["module_flops"]["value"], 64);
        assert_eq!(report["totals"]["parameters"]["value"], 12);
        assert_eq!(report["totals"]["operator_flops"]["value"], 64);
        assert!(report["operator_flops"].get("by_call").is_none());
    }

    #[test]
    fn unsupported_leaf_is_partial_with_diagnostics() {
        let custom = json!({"family": "unsupported", "type": "Mine", "input": [1], "output": [1]});
        let doc = document("full", vec![layer("m", true, custom), layer("fc", true, linear())]);
        let (report, incomplete) = assemble(&doc).unwrap();
        assert_eq!(report["totals"]["module_flops"]["status"], "partial");
        assert_eq!(report["totals"]["module_flops"]["known_value"], 64);
        let codes: Vec<&str> =
            report["diagnostics"].as_array().unwrap().iter().map(|d| d["code"].as_str().unwrap()).collect();
        assert_eq!(codes, vec!["unsupported_module_metric"; 4]);
        assert_eq!(report["diagnostics"][0]["message"], "Module type not supported: Mine");
        assert_eq!(incomplete, vec!["dmas", "macs", "module_flops", "receptive_field"]);
    }

    #[test]
    fn missing_tensors_and_structure_mode() {
        let doc = document("full", vec![layer("m", true, Value::Null)]);
        let (report, _) = assemble(&doc).unwrap();
        assert_eq!(report["diagnostics"].as_array().unwrap().len(), 3);
        assert_eq!(report["totals"]["macs"]["status"], "unavailable");
        assert!(report["layers"][0]["metrics"].get("receptive_field").is_none());

        let (report, incomplete) = assemble(&document("structure", vec![layer("fc", true, linear())])).unwrap();
        assert_eq!(report["totals"]["module_flops"]["method"], "not_requested");
        assert_eq!(report["operator_flops"]["context"]["method"], "not_requested");
        assert_eq!(report["layers"][0]["metrics"].as_object().unwrap().len(), 1);
        assert!(incomplete.is_empty(), "not requested is not incomplete");
    }

    #[test]
    fn malformed_documents_are_value_errors() {
        assert!(matches!(assemble("{}"), Err(Error::BadConfig(_))));
    }
}

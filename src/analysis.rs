//! `crawl_module`'s AnalysisReport, assembled from the document Python hands over: the observed
//! layer calls (identity, metadata, parameter accounting), the module descriptors of the metric
//! leaves, and the same-forward operator FLOP report. Every metric, status, diagnostic and total
//! is decided here; the report is the owned model of `report::AnalysisReport`.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::modules::{Call, Failure, Module, RfNumber};
use crate::report::{
    AnalysisContext, AnalysisReport, Buffers, CallMeta, Diagnostic, FlopContext, FlopReport, Inputs, Layer,
    LayerMetrics, Metric, MetricResult, Number, Parameters, Severity, Status, Totals, UncalledModule, Unit, ValueMeta,
    SCHEMA_VERSION,
};

pub const METHOD_MODULE: &str = "torchscan_module_formula";
const NOT_REQUESTED: &str = "not_requested";
/// `method` of a metric that has no meaning for the module (a receptive field of attention, or
/// of a normalization across positions): unavailable, and not a gap (no diagnostic).
const NOT_APPLICABLE: &str = "not_applicable";

/// What Python hands over. Layer records are arrays and refer to a table of the modules, so
/// that per-module constants (identity, type, formula descriptor) travel once.
#[derive(Deserialize)]
struct Document {
    mode: Mode,
    context: AnalysisContext,
    inputs: Inputs,
    modules: Vec<ModuleRow>,
    layers: Vec<LayerCall>,
    parameter_totals: ParameterTotals,
    torch_version: String,
    /// `summary`'s table, drawn from the report in the same call (no second trip through JSON).
    #[serde(default)]
    table: Option<TableRequest>,
    /// The paths of the outermost TorchScript modules with submodules (module hooks do not run
    /// inside TorchScript: their submodules' calls are not seen).
    #[serde(default)]
    scripted: Vec<String>,
    /// The modules that hold parameters and were never called, in `named_modules()` order.
    #[serde(default)]
    uncalled: Vec<UncalledRecord>,
}

/// `[module, label, parameters, buffers]` of a module never called that holds parameters: its
/// row in `modules`, its `by_module` label, and the tensors no call (and no earlier uncalled
/// module) counted.
#[derive(Deserialize)]
struct UncalledRecord(usize, String, Parameters, Buffers);

/// The table `summary` prints: `format_info`'s options and `aggregate_info`'s depth.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TableRequest {
    wrap_mode: Option<String>,
    receptive_field: bool,
    effective_rf_stats: bool,
    max_depth: Option<u64>,
    max_width: Option<usize>,
}

impl TableRequest {
    fn draw(&self, report: &AnalysisReport) -> Result<String> {
        let wrap = crate::summary::Wrap::parse(self.wrap_mode.as_deref())?;
        if let Some(depth) = self.max_depth {
            // torchscan 0.2's aggregate_info: a depth no layer has is refused.
            if !report.layers.is_empty() && !report.layers.iter().any(|layer| layer.depth == depth) {
                let deepest = report.layers.iter().map(|layer| layer.depth).max().unwrap_or_default();
                return Err(Error::BadArgument(format!(
                    "max_depth {depth} is higher than the module depth ({deepest})."
                )));
            }
        }
        // The whole tree, cut at the depth: a row still counts what it holds below it.
        crate::summary::format_info(
            report,
            wrap,
            self.receptive_field,
            self.effective_rf_stats,
            self.max_width,
            self.max_depth,
        )
    }
}

#[derive(Deserialize, PartialEq, Eq, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum Mode {
    Full,
    Structure,
}

#[derive(Deserialize)]
struct ParameterTotals {
    // null: 2^64 or more (Python counts exactly; the report model's counts are 64-bit).
    trainable: Option<u64>,
    frozen: Option<u64>,
    parameter_bytes: Option<u64>,
    buffer_elements: Option<u64>,
    buffer_bytes: Option<u64>,
    /// null also when a tensor is still uninitialized after the forward (a lazy module that did
    /// not run, an `UninitializedParameter` its forward never materialized): the size is unknown.
    #[serde(default)]
    uninitialized: bool,
    /// The parameter elements pruning masks remove (null: a mask cannot be counted, on the meta
    /// device); absent in documents without masks.
    #[serde(default = "no_masks")]
    masked_out: Option<u64>,
}

fn no_masks() -> Option<u64> {
    Some(0)
}

/// One pruned tensor of a module: `[elements its mask keeps (null: uncountable), elements]`.
#[derive(Deserialize)]
struct Mask(Option<u64>, u64);

/// `[path, name, depth, type, leaf, attention, descriptor, aliases, masks]` of one module.
#[derive(Deserialize)]
struct ModuleRow {
    path: String,
    name: String,
    depth: u64,
    type_name: String,
    /// Module formulas apply (a module without children, MultiheadAttention, a root Transformer).
    leaf: bool,
    /// MultiheadAttention or a root Transformer: every call carries its whole descriptor, and
    /// the receptive field does not apply (unavailable without a diagnostic).
    attention: bool,
    /// The module-formula descriptor, without shapes (null for a module never priced).
    descriptor: Option<Module>,
    /// The module's other paths (registered under several names).
    #[serde(default)]
    aliases: Vec<String>,
    /// Its pruned tensors (`torch.nn.utils.prune`), by name: empty when it is not pruned.
    #[serde(default)]
    masks: BTreeMap<String, Mask>,
}

/// `[module, call_index, input, output, parameters, buffers, call, lazy, scripted]` of one module
/// call (or, `scripted`, of a module inside TorchScript whose calls are not seen).
#[derive(Deserialize)]
struct LayerCall {
    module: usize,
    call_index: u64,
    /// Null for a scripted submodule (listed, not seen called).
    input: Option<CallMeta>,
    output: Option<ValueMeta>,
    parameters: Parameters,
    buffers: Buffers,
    /// `[first input shape, first output shape]` priced with the module's descriptor, a whole
    /// descriptor (attention), or null when the call exposed no input or output tensor.
    call: Option<CallShapes>,
    /// The module's parameters were uninitialized when the call started (a lazy module).
    #[serde(default)]
    lazy: bool,
    /// A submodule of a TorchScript module, listed from the module tree: no call was seen.
    #[serde(default)]
    scripted: bool,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum CallShapes {
    Shapes(Vec<i64>, Vec<i64>),
    Whole(Box<Call>),
}

/// What `crawl_module` gets back: the report, and the names of its incomplete metrics (what
/// `strict` refuses: totals that are not complete, except those not requested, and every
/// diagnostic's metric).
#[derive(Serialize)]
struct Assembled<'a> {
    report: &'a AnalysisReport,
    incomplete: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    table: Option<String>,
}

fn diagnostic(code: &str, metric: &str, path: &str, message: String) -> Diagnostic {
    Diagnostic {
        code: code.into(),
        severity: Severity::Warning,
        metric: metric.into(),
        message,
        path: Some(path.into()),
        operator: None,
    }
}

/// One module-formula count as a metric, with its diagnostic when it is not complete.
fn count_metric(
    result: &std::result::Result<u64, Failure>,
    name: &str,
    unit: Unit,
    path: &str,
    diagnostics: &mut Vec<Diagnostic>,
) -> Metric {
    match result {
        Ok(v) => Metric::complete(Number::Int(*v), unit, "module_call", METHOD_MODULE),
        Err(Failure::Unsupported(type_name)) => {
            diagnostics.push(diagnostic(
                "unsupported_module_metric",
                name,
                path,
                format!("Module type not supported: {type_name}"),
            ));
            Metric::partial(0, unit, "module_call", METHOD_MODULE)
        }
        Err(Failure::Error(message)) | Err(Failure::MissingTensor(message)) => {
            diagnostics.push(diagnostic("module_metric_error", name, path, format!("NotImplementedError: {message}")));
            Metric::unavailable(unit, "module_call", METHOD_MODULE)
        }
        Err(Failure::NotApplicable(_)) => Metric::unavailable(unit, "module_call", NOT_APPLICABLE),
    }
}

fn rf_value(n: RfNumber) -> Number {
    match n {
        RfNumber::Int(i) => Number::Signed(i),
        RfNumber::Float(f) => Number::Float(f),
    }
}

/// The module-formula counts of a layer call: name, unit, and the field that holds it.
fn count_slots(m: &mut LayerMetrics) -> [(&'static str, Unit, &mut Option<Metric>); 3] {
    [
        ("module_flops", Unit::Flops, &mut m.module_flops),
        ("macs", Unit::Macs, &mut m.macs),
        ("dmas", Unit::Dmas, &mut m.dmas),
    ]
}

fn rf_slots(m: &mut LayerMetrics) -> [&mut Option<Metric>; 3] {
    [&mut m.receptive_field, &mut m.effective_stride, &mut m.effective_padding]
}

fn leaf_metrics(
    call: Option<&Call>,
    attention: bool,
    path: &str,
    metrics: &mut LayerMetrics,
    diagnostics: &mut Vec<Diagnostic>,
) {
    let Some(call) = call else {
        for (name, unit, slot) in count_slots(metrics) {
            diagnostics.push(diagnostic(
                "missing_metric_tensor",
                name,
                path,
                "The module call did not expose both an input and output tensor.".into(),
            ));
            *slot = Some(Metric::unavailable(unit, "module_call", METHOD_MODULE));
        }
        return;
    };
    let m = call.metrics();
    for ((name, unit, slot), count) in count_slots(metrics).into_iter().zip([&m.flops, &m.macs, &m.dmas]) {
        *slot = Some(count_metric(count, name, unit, path, diagnostics));
    }
    let rf: [Metric; 3] = match (&m.receptive_field, attention) {
        (_, true) | (Err(Failure::NotApplicable(_)), false) => {
            [(); 3].map(|_| Metric::unavailable(Unit::Elements, "module_call", NOT_APPLICABLE))
        }
        (Ok(values), false) => {
            values.map(|v| Metric::complete(rf_value(v), Unit::Elements, "module_call", METHOD_MODULE))
        }
        (Err(failure), false) => {
            let (code, message) = match failure {
                Failure::Unsupported(t) => ("unsupported_module_metric", format!("Module type not supported: {t}")),
                Failure::Error(e) | Failure::MissingTensor(e) | Failure::NotApplicable(e) => {
                    ("module_metric_error", format!("NotImplementedError: {e}"))
                }
            };
            diagnostics.push(diagnostic(code, "receptive_field", path, message));
            [(); 3].map(|_| Metric::unavailable(Unit::Elements, "module_call", METHOD_MODULE))
        }
    };
    for (slot, value) in rf_slots(metrics).into_iter().zip(rf) {
        *slot = Some(value);
    }
}

/// Sum of a layer metric over the layers that have it: complete if all are, partial (a lower
/// bound) if some number is known, unavailable otherwise.
fn aggregate(layers: &[Layer], pick: fn(&LayerMetrics) -> Option<&Metric>, unit: Unit) -> Metric {
    let results: Vec<&Metric> = layers.iter().filter_map(|l| pick(&l.metrics)).collect();
    if results.is_empty() {
        return Metric::unavailable(unit, "forward", METHOD_MODULE);
    }
    let mut total: Option<u64> = Some(0);
    let mut any_known = false;
    for r in &results {
        if let Some(k) = r.known_count() {
            any_known = true;
            total = total.and_then(|t| t.checked_add(k));
        }
    }
    let all_complete = results.iter().all(|r| r.status == Status::Complete);
    match total {
        None => Metric::unavailable(unit, "forward", METHOD_MODULE),
        Some(t) if all_complete => Metric::complete(Number::Int(t), unit, "forward", METHOD_MODULE),
        Some(t) if any_known => Metric::partial(t, unit, "forward", METHOD_MODULE),
        Some(_) => Metric::unavailable(unit, "forward", METHOD_MODULE),
    }
}

/// Structure mode's operator report: the FlopReport's shape, nothing counted.
fn not_requested(torch_version: String) -> FlopReport {
    let mut total = MetricResult::unavailable("workload");
    total.method = NOT_REQUESTED.into();
    FlopReport {
        schema_version: crate::report::FLOP_SCHEMA_VERSION,
        context: FlopContext {
            torch_version,
            torchscan_version: crate::report::TORCHSCAN_VERSION.into(),
            method: NOT_REQUESTED.into(),
            distributed: None,
        },
        total,
        by_module: BTreeMap::new(),
        by_module_status: BTreeMap::new(),
        by_call: BTreeMap::new(),
        by_operator: BTreeMap::new(),
        operator_calls: BTreeMap::new(),
        by_category: BTreeMap::new(),
        by_phase: BTreeMap::new(),
        ignored_operators: BTreeMap::new(),
        diagnostics: Vec::new(),
        integer_ops: None,
        communication: None,
        uncalled_modules: Vec::new(),
    }
}

/// The per-call operator FLOPs (`by_call`, keyed by layer index), moved out of the report.
fn per_call(report: &mut FlopReport, layers: usize) -> Vec<Option<MetricResult>> {
    let mut by_index: Vec<Option<MetricResult>> = vec![None; layers];
    for (key, value) in std::mem::take(&mut report.by_call) {
        if let Some(slot) = key.parse::<usize>().ok().and_then(|i| by_index.get_mut(i)) {
            *slot = Some(value);
        }
    }
    by_index
}

/// A TorchScript module's submodules run inside the TorchScript interpreter, where module hooks
/// do not: their calls, shapes and module formulas are not seen (the operators they run are).
fn scripted_diagnostics(path: &str) -> Vec<Diagnostic> {
    let shown = if path.is_empty() { "the root module" } else { path };
    ["module_flops", "macs", "dmas"]
        .into_iter()
        .map(|metric| {
            diagnostic(
                "scripted_module",
                metric,
                path,
                format!(
                    "{shown} is a TorchScript module: module hooks do not run inside TorchScript, so its \
                     submodules' calls and their {metric} are not seen (its parameters and buffers, and the \
                     operator FLOPs of what it runs, are counted); analyse the module before \
                     torch.jit.script for per-layer figures"
                ),
            )
        })
        .collect()
}

/// The report, and the names of its incomplete metrics. `flops` is the FlopReport of the same
/// forward (from the session), `None` in structure mode.
pub fn assemble(document: &str, flops: Option<FlopReport>) -> Result<(AnalysisReport, Vec<String>)> {
    assemble_document(parse(document)?, flops)
}

fn parse(document: &str) -> Result<Document> {
    serde_json::from_str(document).map_err(|e| Error::BadAnalysisInput(format!("malformed analysis document: {e}")))
}

fn assemble_document(doc: Document, flops: Option<FlopReport>) -> Result<(AnalysisReport, Vec<String>)> {
    let full = doc.mode == Mode::Full;
    let mut operator_flops = match flops {
        Some(report) if full => report,
        _ => not_requested(doc.torch_version),
    };
    let mut by_call = per_call(&mut operator_flops, doc.layers.len());

    let mut diagnostics = Vec::new();
    let mut layers = Vec::with_capacity(doc.layers.len());
    for (index, layer) in doc.layers.into_iter().enumerate() {
        let own = if full { Some(by_call[index].take()) } else { None };
        layers.push(layer_record(index, layer, &doc.modules, own, &mut diagnostics)?);
    }
    if full {
        diagnostics.extend(doc.scripted.iter().flat_map(|path| scripted_diagnostics(path)));
    }
    diagnostics.extend(operator_flops.diagnostics.iter().cloned());
    let mut uncalled_modules = Vec::with_capacity(doc.uncalled.len());
    for UncalledRecord(module, label, parameters, buffers) in doc.uncalled {
        let row = doc.modules.get(module).ok_or_else(|| {
            Error::BadAnalysisInput(format!("malformed analysis document: an uncalled module names module {module}"))
        })?;
        if row.path.is_empty() {
            return Err(Error::BadAnalysisInput("malformed analysis document: the root is listed as uncalled".into()));
        }
        operator_flops.uncalled_modules.push(label);
        uncalled_modules.push(UncalledModule {
            path: row.path.clone(),
            name: row.name.clone(),
            depth: row.depth,
            type_name: row.type_name.clone(),
            parameters,
            buffers,
        });
    }
    let hidden = !doc.scripted.is_empty();
    let totals = totals(&doc.parameter_totals, &layers, full, hidden, &operator_flops, &mut diagnostics);
    // Without pruning masks the effective totals repeat the dense ones: named once, as those.
    let pruned =
        doc.parameter_totals.masked_out != Some(0) || layers.iter().any(|l| l.metrics.effective_macs.is_some());

    let mut incomplete: BTreeSet<String> = totals
        .iter()
        .filter(|(name, _)| pruned || !name.starts_with("effective_"))
        .filter(|(_, m)| m.status != Status::Complete && m.method != NOT_REQUESTED)
        .map(|(name, _)| name.to_string())
        .collect();
    incomplete.extend(diagnostics.iter().map(|d| d.metric.clone()));
    let report = AnalysisReport {
        schema_version: SCHEMA_VERSION,
        context: doc.context,
        inputs: doc.inputs,
        layers,
        operator_flops,
        totals,
        diagnostics,
        training: None,
        memory: None,
        uncalled_modules,
    };
    Ok((report, incomplete.into_iter().collect()))
}

/// [`assemble`] as JSON: `{"report": AnalysisReport, "incomplete": [metric names]}`, and
/// `"table"` (the text `summary` prints) when the document asks for one.
pub fn assemble_json(document: &str, flops: Option<FlopReport>) -> Result<String> {
    let mut doc = parse(document)?;
    let request = doc.table.take();
    let (report, incomplete) = assemble_document(doc, flops)?;
    let table = request.map(|request| request.draw(&report)).transpose()?;
    serde_json::to_string(&Assembled { report: &report, incomplete: &incomplete, table })
        .map_err(|e| Error::Internal(format!("the report cannot be serialized: {e}")))
}

/// One layer record of the report. `own_flops`: in full mode, the operator FLOPs counted inside
/// this call (`Some(None)`: none were).
fn layer_record(
    index: usize,
    layer: LayerCall,
    modules: &[ModuleRow],
    own_flops: Option<Option<MetricResult>>,
    diagnostics: &mut Vec<Diagnostic>,
) -> Result<Layer> {
    let row = modules.get(layer.module).ok_or_else(|| {
        Error::BadAnalysisInput(format!("malformed analysis document: layer {index} names module {}", layer.module))
    })?;
    let calls = if layer.scripted {
        // Not a gap of its own: the scripted module's diagnostic says what cannot be seen.
        Metric::unavailable(Unit::Calls, "module_call", "torchscript")
    } else {
        Metric::complete(Number::Int(1), Unit::Calls, "module_call", "pytorch_hook")
    };
    let mut metrics = LayerMetrics {
        calls,
        dmas: None,
        effective_macs: None,
        effective_padding: None,
        effective_stride: None,
        macs: None,
        module_flops: None,
        operator_flops: None,
        receptive_field: None,
    };
    if let Some(own) = own_flops.filter(|_| !layer.scripted) {
        metrics.operator_flops = Some(own.unwrap_or_else(|| MetricResult::complete(0, "module_call")).into());
        if row.leaf {
            let call = match layer.call {
                None => None,
                Some(CallShapes::Whole(call)) => Some(*call),
                Some(CallShapes::Shapes(input, output)) => {
                    let module = row.descriptor.clone().ok_or_else(|| {
                        Error::BadAnalysisInput(format!(
                            "malformed analysis document: module {} has no descriptor",
                            row.path
                        ))
                    })?;
                    Some(Call { input: Some(input), output: Some(output), module })
                }
            };
            leaf_metrics(call.as_ref(), row.attention, &row.path, &mut metrics, diagnostics);
            if !row.masks.is_empty() {
                let macs = metrics.macs.as_ref();
                metrics.effective_macs = macs.map(|macs| effective_macs(row, macs, diagnostics));
            }
        }
    }
    Ok(Layer {
        path: row.path.clone(),
        call_index: layer.call_index,
        name: row.name.clone(),
        depth: row.depth,
        type_name: row.type_name.clone(),
        aliases: row.aliases.clone(),
        lazy: layer.lazy,
        scripted: layer.scripted,
        input: layer.input,
        output: layer.output,
        parameters: layer.parameters,
        buffers: layer.buffers,
        metrics,
    })
}

/// A pruned module call's MACs with the masked weights left out. The MACs of Linear and of
/// (transposed) convolutions are the weight's elements times the positions each is applied at,
/// so removing weight elements removes MACs in proportion, exactly; a mask on a bias removes
/// none (bias adds are not MACs). Other modules' MACs are not a multiple of one masked tensor:
/// their effective MACs are unavailable, with a diagnostic.
fn effective_macs(row: &ModuleRow, macs: &Metric, diagnostics: &mut Vec<Diagnostic>) -> Metric {
    let unavailable = || Metric::unavailable(Unit::Macs, "module_call", METHOD_MODULE);
    let Some(dense) = macs.value.and_then(|v| v.integer()).and_then(|v| u64::try_from(v).ok()) else {
        return unavailable(); // the dense count's own diagnostic says why
    };
    let mut gap = |message: String| {
        diagnostics.push(diagnostic("pruned_module_macs", "effective_macs", &row.path, message));
        unavailable()
    };
    let weight_proportional =
        matches!(row.descriptor, Some(Module::Linear(_) | Module::Conv(_) | Module::ConvTranspose(_)));
    let names: Vec<&str> = row.masks.keys().map(String::as_str).collect();
    if !weight_proportional {
        return gap(format!(
            "{} is pruned ({}), and its MACs are not proportional to a masked weight: its effective MACs are \
             not computed",
            row.type_name,
            names.join(", ")
        ));
    }
    let Some(Mask(kept, numel)) = row.masks.get("weight") else {
        return Metric::complete(Number::Int(dense), Unit::Macs, "module_call", METHOD_MODULE);
    };
    match kept {
        Some(kept) if *numel > 0 && dense % numel == 0 => {
            Metric::complete(Number::Int(dense / numel * kept), Unit::Macs, "module_call", METHOD_MODULE)
        }
        Some(_) => gap(format!("the MACs ({dense}) are not a multiple of the weight's {numel} elements")),
        None => gap("the weight's pruning mask is on the meta device: what it keeps cannot be counted".into()),
    }
}

/// The report's totals: the model's parameters and buffers, the module formulas summed over the
/// layers (full mode), and the operator FLOPs of the forward.
/// `hidden`: some calls were not seen (TorchScript submodules): the module-formula totals are at
/// most partial.
fn totals(
    p: &ParameterTotals,
    layers: &[Layer],
    full: bool,
    hidden: bool,
    operator_flops: &FlopReport,
    diagnostics: &mut Vec<Diagnostic>,
) -> Totals {
    let mut model = |name: &str, v: Option<u64>, unit: Unit| match v {
        Some(v) => Metric::complete(Number::Int(v), unit, "model", "pytorch"),
        None => {
            let (code, message) = if p.uninitialized {
                (
                    "uninitialized_parameters",
                    format!(
                        "the model holds parameters or buffers still uninitialized after the forward (a lazy \
                         module that did not run, an UninitializedParameter the forward never materialized): \
                         their sizes are unknown, so the model's {name} are unavailable"
                    ),
                )
            } else {
                ("count_overflow", format!("the model's {name} reach 2^64 or more; the total is unavailable"))
            };
            diagnostics.push(Diagnostic {
                code: code.into(),
                severity: Severity::Error,
                metric: name.into(),
                message,
                path: None,
                operator: None,
            });
            Metric::unavailable(unit, "model", "pytorch")
        }
    };
    let formula = |pick: fn(&LayerMetrics) -> Option<&Metric>, unit: Unit| {
        if !full {
            return Metric::unavailable(unit, "forward", NOT_REQUESTED);
        }
        let total = aggregate(layers, pick, unit);
        match total.known_count() {
            Some(known) if hidden && total.status == Status::Complete => {
                Metric::partial(known, unit, "forward", METHOD_MODULE)
            }
            _ => total,
        }
    };
    let parameters = p.trainable.zip(p.frozen).and_then(|(t, f)| t.checked_add(f));
    let effective_parameters = match p.masked_out {
        Some(removed) => {
            model("effective_parameters", parameters.and_then(|dense| dense.checked_sub(removed)), Unit::Elements)
        }
        None => Metric::unavailable(Unit::Elements, "model", "pytorch"),
    };
    let totals = Totals {
        buffer_bytes: model("buffer_bytes", p.buffer_bytes, Unit::Bytes),
        buffer_elements: model("buffer_elements", p.buffer_elements, Unit::Elements),
        dmas: formula(|m| m.dmas.as_ref(), Unit::Dmas),
        // A layer without masks keeps all its MACs.
        effective_macs: Some(formula(|m| m.effective_macs.as_ref().or(m.macs.as_ref()), Unit::Macs)),
        effective_parameters: Some(effective_parameters),
        frozen_parameters: model("frozen_parameters", p.frozen, Unit::Elements),
        macs: formula(|m| m.macs.as_ref(), Unit::Macs),
        module_flops: formula(|m| m.module_flops.as_ref(), Unit::Flops),
        operator_flops: operator_flops.total.clone().into(),
        parameter_bytes: model("parameter_bytes", p.parameter_bytes, Unit::Bytes),
        parameters: model("parameters", parameters, Unit::Elements),
        trainable_parameters: model("trainable_parameters", p.trainable, Unit::Elements),
    };
    if p.masked_out.is_none() {
        diagnostics.push(Diagnostic {
            code: "pruned_module_parameters".into(),
            severity: Severity::Warning,
            metric: "effective_parameters".into(),
            message: "a pruning mask is on the meta device: what it keeps cannot be counted".into(),
            path: None,
            operator: None,
        });
    }
    totals
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;

    /// One module called once: its table row and its layer record (the document's two arrays).
    struct Layer(Value, Value);

    fn layer(path: &str, leaf: bool, descriptor: Value, call: Value) -> Layer {
        Layer(
            json!([path, path, 1, "T", leaf, false, descriptor]),
            json!([0, 0, {"args": [], "kwargs": {}}, {"kind": "none"}, [1, 0, 4, false], [0, 0, false], call]),
        )
    }

    fn context(mode: &str) -> Value {
        let mut context = json!({"torchscan_version": "0.3.0", "torch_version": "2.13.0", "python_version": "3.11.2",
            "model_type": "m.M", "execution_mode": "evaluation_no_grad", "training_before": true,
            "devices": ["cpu"], "dtypes": ["torch.float32"]});
        if mode == "structure" {
            context["analysis_mode"] = json!("structure");
        }
        context
    }

    fn document(mode: &str, layers: Vec<Layer>) -> String {
        let (modules, calls): (Vec<Value>, Vec<Value>) = layers
            .into_iter()
            .enumerate()
            .map(|(i, Layer(row, mut call))| {
                call[0] = json!(i);
                (row, call)
            })
            .unzip();
        json!({
            "mode": mode, "context": context(mode), "inputs": {"source": "generated", "args": [], "kwargs": {}},
            "modules": modules, "layers": calls, "torch_version": "2.13.0",
            "parameter_totals": {"trainable": 10, "frozen": 2, "parameter_bytes": 48, "buffer_elements": 3, "buffer_bytes": 12},
        })
        .to_string()
    }

    /// A session's report: 64 FLOPs in total, all of them inside layer call 1.
    fn flops() -> FlopReport {
        let mut report = not_requested("2.13.0".into());
        report.context.method = crate::report::METHOD_NATIVE.into();
        report.total = MetricResult::complete(64, "workload");
        report.by_call.insert("1".into(), MetricResult::complete(64, "module_call"));
        report
    }

    fn assemble(document: &str) -> (Value, Vec<String>) {
        let flops = document.contains(r#""mode":"full""#).then(flops);
        let out: Value = serde_json::from_str(&assemble_json(document, flops).unwrap()).unwrap();
        let incomplete = out["incomplete"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string());
        (out["report"].clone(), incomplete.collect())
    }

    fn linear() -> Layer {
        let descriptor =
            json!({"family": "linear", "in_features": 8, "out_features": 4, "bias": true, "num_params": 36});
        layer("fc", true, descriptor, json!([[1, 8], [1, 4]]))
    }

    fn container() -> Layer {
        layer("", false, Value::Null, Value::Null)
    }

    #[test]
    fn full_mode_metrics_totals_and_per_call_operator_flops() {
        let doc = document("full", vec![container(), linear()]);
        let (report, incomplete) = assemble(&doc);
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
    fn call_metadata_and_context_are_kept() {
        let doc = document("full", vec![linear()]);
        let (report, _) = assemble(&doc);
        assert_eq!(report["context"], context("full"));
        assert_eq!(report["inputs"]["source"], "generated");
        assert_eq!(report["layers"][0]["input"], json!({"args": [], "kwargs": {}}));
        assert_eq!(report["layers"][0]["output"], json!({"kind": "none"}));
        assert_eq!(
            report["layers"][0]["parameters"],
            json!({"trainable": 1, "frozen": 0, "bytes": 4, "shared": false})
        );
        assert_eq!(report["layers"][0]["buffers"], json!({"elements": 0, "bytes": 0, "shared": false}));
        assert_eq!((&report["layers"][0]["path"], &report["layers"][0]["type"]), (&json!("fc"), &json!("T")));
        assert_eq!(report["schema_version"], 1);
    }

    #[test]
    fn identical_documents_give_identical_reports() {
        let doc = document("full", vec![container(), linear()]);
        assert_eq!(assemble_json(&doc, Some(flops())).unwrap(), assemble_json(&doc, Some(flops())).unwrap());
    }

    #[test]
    fn attention_calls_carry_whole_descriptors_and_no_receptive_field() {
        let mha = json!({"family": "multihead_attention", "embed_dim": 4, "num_heads": 2, "head_dim": 2,
            "batch_first": true, "in_proj_bias": true, "out_proj_in_features": 4, "out_proj_bias": true,
            "bias_kv": false, "add_zero_attn": false, "dropout": 0.0, "training": false,
            "query": [1, 3, 4], "key": [1, 3, 4], "value": [1, 3, 4], "key_padding_mask": null, "attn_mask": null,
            "need_weights": false, "average_attn_weights": true, "averaged_weights_returned": false});
        let Layer(mut row, record) = layer("attn", true, Value::Null, mha);
        row[5] = json!(true);
        let (report, incomplete) = assemble(&document("full", vec![Layer(row, record)]));
        let metrics = &report["layers"][0]["metrics"];
        assert!(metrics["module_flops"]["value"].as_u64().unwrap() > 0);
        assert_eq!(metrics["receptive_field"]["status"], "unavailable");
        assert_eq!(metrics["receptive_field"]["method"], "not_applicable");
        assert!(incomplete.is_empty(), "{incomplete:?}");
    }

    #[test]
    fn unsupported_leaf_is_partial_with_diagnostics() {
        let custom = layer("m", true, json!({"family": "unsupported", "type": "Mine"}), json!([[1], [1]]));
        let doc = document("full", vec![custom, linear()]);
        let (report, incomplete) = assemble(&doc);
        assert_eq!(report["totals"]["module_flops"]["status"], "partial");
        assert_eq!(report["totals"]["module_flops"]["known_value"], 64);
        assert_eq!(report["totals"]["module_flops"]["value"], Value::Null);
        let codes: Vec<&str> =
            report["diagnostics"].as_array().unwrap().iter().map(|d| d["code"].as_str().unwrap()).collect();
        assert_eq!(codes, vec!["unsupported_module_metric"; 4]);
        assert_eq!(report["diagnostics"][0]["message"], "Module type not supported: Mine");
        assert_eq!(report["diagnostics"][0]["path"], "m");
        // The effective MACs of a model without masks are its MACs (partial alike), not named twice.
        assert_eq!(report["totals"]["effective_macs"]["status"], "partial");
        assert_eq!(incomplete, vec!["dmas", "macs", "module_flops", "receptive_field"]);
    }

    /// `linear()` with pruning masks on its row.
    fn pruned(masks: Value) -> Layer {
        let Layer(mut row, call) = linear();
        row.as_array_mut().unwrap().extend([json!([]), masks]);
        Layer(row, call)
    }

    #[test]
    fn pruned_linear_effective_macs_and_parameters() {
        // Linear(8, 4) on (1, 8): 32 MACs, one per weight element; the mask keeps 20 of 32.
        let mut doc: Value =
            serde_json::from_str(&document("full", vec![pruned(json!({"weight": [20, 32]}))])).unwrap();
        doc["parameter_totals"]["masked_out"] = json!(12);
        doc["layers"][0][4] = json!([36, 0, 144, false, 24]);
        let (report, incomplete) = assemble(&doc.to_string());
        assert!(incomplete.is_empty(), "{incomplete:?}");
        let fc = &report["layers"][0];
        assert_eq!(fc["metrics"]["macs"]["value"], 32, "the kernels still run dense");
        assert_eq!(fc["metrics"]["effective_macs"]["value"], 20);
        assert_eq!(fc["parameters"]["effective"], 24);
        assert_eq!(report["totals"]["effective_macs"]["value"], 20);
        assert_eq!(report["totals"]["parameters"]["value"], 12);
        assert_eq!(report["totals"]["effective_parameters"]["value"], 0);

        // A mask on the bias alone removes no MACs (bias adds are not MACs).
        let (report, _) = assemble(&document("full", vec![pruned(json!({"bias": [2, 4]}))]));
        assert_eq!(report["layers"][0]["metrics"]["effective_macs"]["value"], 32);
        // No masks: the effective totals equal the dense ones, and no layer has the field.
        let (report, _) = assemble(&document("full", vec![linear()]));
        assert_eq!(report["totals"]["effective_macs"]["value"], 32);
        assert_eq!(report["totals"]["effective_parameters"]["value"], 12);
        assert!(report["layers"][0]["metrics"].get("effective_macs").is_none());
        assert!(report["layers"][0]["parameters"].get("effective").is_none());
    }

    #[test]
    fn pruned_masks_that_cannot_be_priced_are_named() {
        // A mask on the meta device: what it keeps is unknown.
        let mut doc: Value =
            serde_json::from_str(&document("full", vec![pruned(json!({"weight": [null, 32]}))])).unwrap();
        doc["parameter_totals"]["masked_out"] = Value::Null;
        let (report, incomplete) = assemble(&doc.to_string());
        assert_eq!(report["layers"][0]["metrics"]["effective_macs"]["status"], "unavailable");
        assert_eq!(report["totals"]["effective_parameters"]["status"], "unavailable");
        assert_eq!(incomplete, vec!["effective_macs", "effective_parameters"]);
        // A pruned module whose MACs are not a multiple of one weight (PReLU's slopes).
        let Layer(mut row, mut call) = pruned(json!({"weight": [3, 4]}));
        row[6] = json!({"family": "activation", "kind": "prelu", "weights": 4});
        call[6] = json!([[1, 4], [1, 4]]);
        let (report, _) = assemble(&document("full", vec![Layer(row, call)]));
        let codes: Vec<&str> =
            report["diagnostics"].as_array().unwrap().iter().map(|d| d["code"].as_str().unwrap()).collect();
        assert!(codes.contains(&"pruned_module_macs"), "{codes:?}");
    }

    #[test]
    fn uncalled_modules_are_listed_with_their_labels() {
        // The root called (1 parameter), `unused` (an unused Linear(3, 5): 20) never called.
        let root = layer("", false, Value::Null, Value::Null);
        let unused = Layer(json!(["unused", "unused", 1, "Linear", true, false, null]), json!([]));
        let mut doc: Value = serde_json::from_str(&document("full", vec![root])).unwrap();
        doc["modules"].as_array_mut().unwrap().push(unused.0);
        doc["uncalled"] = json!([[1, "M.unused", [20, 0, 80, false], [0, 0, false]]]);
        let (report, _) = assemble(&doc.to_string());
        assert_eq!(
            report["uncalled_modules"],
            json!([{"path": "unused", "name": "unused", "depth": 1, "type": "Linear",
                    "parameters": {"trainable": 20, "frozen": 0, "bytes": 80, "shared": false},
                    "buffers": {"elements": 0, "bytes": 0, "shared": false}}])
        );
        assert_eq!(report["operator_flops"]["uncalled_modules"], json!(["M.unused"]));
        // Without any: neither field is written (the reports of before read the same).
        let (report, _) = assemble(&document("full", vec![linear()]));
        assert!(report.get("uncalled_modules").is_none());
        assert!(report["operator_flops"].get("uncalled_modules").is_none());
        // A module index out of range is a malformed document.
        doc["uncalled"] = json!([[7, "M.x", [1, 0, 4, false], [0, 0, false]]]);
        let error = assemble_document(parse(&doc.to_string()).unwrap(), None).map(|_| ()).unwrap_err();
        assert!(error.to_string().contains("an uncalled module names module 7"), "{error}");
    }

    #[test]
    fn scripted_submodules_are_listed_without_calls() {
        let Layer(row, mut call) = linear();
        call.as_array_mut().unwrap().extend([json!(false), json!(true)]);
        call[2] = Value::Null;
        call[3] = Value::Null;
        let mut doc: Value = serde_json::from_str(&document("full", vec![container(), Layer(row, call)])).unwrap();
        doc["scripted"] = json!([""]);
        let (report, incomplete) = assemble(&doc.to_string());
        let fc = &report["layers"][1];
        assert_eq!(fc["scripted"], true);
        assert!(fc.get("input").is_none() && fc.get("output").is_none());
        assert_eq!(fc["metrics"]["calls"]["status"], "unavailable");
        assert!(fc["metrics"].get("operator_flops").is_none() && fc["metrics"].get("macs").is_none());
        assert_eq!(fc["parameters"]["trainable"], 1);
        assert!(incomplete.contains(&"module_flops".to_string()));
        let table = crate::summary::format_info(
            &serde_json::from_value(report).unwrap(),
            crate::summary::Wrap::Mid,
            false,
            false,
            None,
            None,
        )
        .unwrap();
        assert!(table.lines().any(|line| line.contains("fc") && line.contains('?')), "{table}");
    }

    #[test]
    fn missing_tensors_and_structure_mode() {
        let doc = document("full", vec![layer("m", true, Value::Null, Value::Null)]);
        let (report, _) = assemble(&doc);
        assert_eq!(report["diagnostics"].as_array().unwrap().len(), 3);
        assert_eq!(report["totals"]["macs"]["status"], "unavailable");
        assert!(report["layers"][0]["metrics"].get("receptive_field").is_none());

        let (report, incomplete) = assemble(&document("structure", vec![linear()]));
        assert_eq!(report["totals"]["module_flops"]["method"], "not_requested");
        assert_eq!(report["totals"]["operator_flops"]["method"], "not_requested");
        assert_eq!(report["operator_flops"]["context"]["method"], "not_requested");
        assert_eq!(report["layers"][0]["metrics"].as_object().unwrap().len(), 1);
        assert!(incomplete.is_empty(), "not requested is not incomplete");
    }

    #[test]
    fn malformed_documents_are_value_errors() {
        assert!(matches!(assemble_json("{}", None), Err(Error::BadAnalysisInput(_))));
        assert!(matches!(assemble_json("not json", None), Err(Error::BadAnalysisInput(_))));
        // A layer naming a module the table lacks; shapes for a module without a descriptor.
        let mut doc: Value = serde_json::from_str(&document("full", vec![linear()])).unwrap();
        doc["layers"][0][0] = json!(7);
        let error = assemble_json(&doc.to_string(), Some(flops())).unwrap_err();
        assert!(error.to_string().contains("layer 0 names module 7"), "{error}");
        let doc = document("full", vec![layer("m", true, Value::Null, json!([[1], [1]]))]);
        let error = assemble_json(&doc, Some(flops())).unwrap_err();
        assert!(error.to_string().contains("module m has no descriptor"), "{error}");
    }

    #[test]
    fn the_table_summary_prints_is_drawn_in_the_same_call() {
        let with_table = |table: Value| {
            let mut doc: Value = serde_json::from_str(&document("full", vec![container(), linear()])).unwrap();
            doc["table"] = table;
            assemble_json(&doc.to_string(), Some(flops()))
        };
        let request = json!({"wrap_mode": "mid", "receptive_field": false, "effective_rf_stats": false,
            "max_depth": null, "max_width": null});
        let out: Value = serde_json::from_str(&with_table(request.clone()).unwrap()).unwrap();
        let report: AnalysisReport = serde_json::from_value(out["report"].clone()).unwrap();
        let expected =
            crate::summary::format_info(&report, crate::summary::Wrap::Mid, false, false, None, None).unwrap();
        assert_eq!(out["table"], expected.as_str());
        // Without a request there is no table; a depth no layer has is refused, naming the deepest.
        assert!(serde_json::from_str::<Value>(
            &assemble_json(&document("full", vec![linear()]), Some(flops())).unwrap()
        )
        .unwrap()
        .get("table")
        .is_none());
        let mut too_deep = request;
        too_deep["max_depth"] = json!(9);
        let error = with_table(too_deep).unwrap_err().to_string();
        assert!(error.starts_with("max_depth 9 is higher than the module depth ("), "{error}");
    }
}

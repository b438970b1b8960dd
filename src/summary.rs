//! The layer table of an AnalysisReport: what `summary` prints, `format_info` draws and the
//! `torchscan` command shows, one table for all three. Rows are the module tree
//! (`module_tree.rs`: calls in call order, a container never called itself given a row of its
//! own); columns Layer / Type / Output Shape / Param # / Buffers / Trainable / FLOPs (+ receptive
//! field, effective stride and padding on request), where a row's Param #, Buffers and FLOPs
//! include those of the rows inside it. Under it, torchscan 0.2's footer: `Trainable params`,
//! `Non-trainable params`, `Total params`, the model size (in MB of 10^6 bytes), and one line
//! per FLOP/MAC/DMA total that says which method counted it (`known` before a partial value).

use crate::error::{Error, Result};
use crate::module_tree::{Counts, Node, Tree};
use crate::report::{AnalysisReport, Metric, Status, ValueMeta};

/// The columns the table can show, in order.
const HEADERS: [&str; COLUMNS] = [
    "Layer",
    "Type",
    "Output Shape",
    "Param #",
    "Buffers",
    "Trainable",
    "FLOPs",
    "Receptive field",
    "Effective stride",
    "Effective padding",
];
const COLUMNS: usize = 10;
// What wrapping caps each column at (torchscan 0.2's widths; Param # wider for a pruned layer's
// "(N unmasked)").
const MAX_WIDTHS: [usize; COLUMNS] = [27, 20, 25, 27, 15, 9, 22, 15, 16, 17];
const MARGIN: &str = "  ";
// Column indices.
const PARAMS: usize = 3;
const BUFFERS: usize = 4;
const FLOPS: usize = 6;
const RF: usize = 7;
/// The counts, right-aligned as numbers are read.
const NUMERIC: [usize; 3] = [PARAMS, BUFFERS, FLOPS];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wrap {
    Mid,
    End,
    None,
}

impl Wrap {
    pub fn parse(mode: Option<&str>) -> Result<Wrap> {
        match mode {
            Some("mid") => Ok(Wrap::Mid),
            Some("end") => Ok(Wrap::End),
            None => Ok(Wrap::None),
            Some(other) => Err(Error::BadArgument(format!("wrap_mode must be 'mid', 'end' or None, got {other:?}"))),
        }
    }
}

pub(crate) fn chars(s: &str) -> usize {
    s.chars().count()
}

/// Python's `s[:n]` (a negative `n` counts from the end).
fn prefix(s: &str, n: isize) -> String {
    let len = chars(s) as isize;
    let end = if n < 0 { (len + n).max(0) } else { n.min(len) };
    s.chars().take(end as usize).collect()
}

pub(crate) fn wrap_string(s: &str, max_len: usize, mode: Wrap) -> String {
    const WRAP: &str = "[...]";
    if chars(s) <= max_len || mode == Wrap::None {
        return s.to_string();
    }
    match mode {
        Wrap::End => prefix(s, max_len as isize - chars(WRAP) as isize) + WRAP,
        _ => {
            let last = s.rsplit('.').next().unwrap_or(s);
            let tail = format!("{WRAP}.{last}");
            // A last component too long to keep (or no dot at all): cut at the end instead,
            // rather than leave a name that the column then cuts to "[..".
            if chars(&tail) >= max_len {
                return wrap_string(s, max_len, Wrap::End);
            }
            prefix(s, max_len as isize - chars(&tail) as isize) + &tail
        }
    }
}

/// Pads to `width` then truncates to it (Python `f"{s:<{w}}"` then `f"{s:.{w}}"`).
fn fit(s: &str, width: Option<usize>) -> String {
    match width {
        Some(w) => format!("{s:<w$}").chars().take(w).collect(),
        None => s.to_string(),
    }
}

/// A layer's name in the tree, with control characters escaped (a name can hold an escape
/// sequence, which must not reach a terminal raw).
fn tree_name(name: &str, depth: u64) -> String {
    let name = crate::flops_table::printable(name);
    match depth {
        0 => name,
        1 => format!("├─{name}"),
        d => format!("{}└─{name}", "|    ".repeat(d as usize - 1)),
    }
}

fn shape_text(meta: &ValueMeta) -> String {
    let items = |items: &[ValueMeta]| items.iter().map(shape_text).collect::<Vec<_>>().join(", ");
    match meta {
        ValueMeta::Tensor { shape, .. } if shape.len() == 1 => format!("({},)", shape[0]),
        ValueMeta::Tensor { shape, .. } => {
            format!("({})", shape.iter().map(u64::to_string).collect::<Vec<_>>().join(", "))
        }
        ValueMeta::Tuple { items: values } => format!("({})", items(values)),
        ValueMeta::List { items: values } => format!("[{}]", items(values)),
        ValueMeta::Mapping { items: entries, .. } => {
            format!("{{{}}}", entries.iter().map(|e| shape_text(&e.value)).collect::<Vec<_>>().join(", "))
        }
        ValueMeta::None => "none".into(),
        ValueMeta::Scalar { .. } => "scalar".into(),
        ValueMeta::Object { .. } => "object".into(),
        ValueMeta::Cycle { depth } => format!("<cycle {depth} up>"),
    }
}

pub(crate) fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The number a metric stands for: its value when complete, else its known lower bound.
fn metric_number(metric: &Metric) -> Option<f64> {
    let number = if metric.status == Status::Complete { metric.value } else { metric.known_value };
    number.map(|n| n.as_f64())
}

/// A complete count (parameters, bytes); `None` when it is not (2^64 or more).
fn count(metric: &Metric) -> Option<u64> {
    metric.value.and_then(|n| n.integer()).and_then(|v| u64::try_from(v).ok())
}

/// A total count as the table shows it.
fn count_text(metric: &Metric) -> String {
    count(metric).map_or_else(|| "unavailable (>= 2^64)".to_string(), thousands)
}

/// The Param # cell: parameters, and for a pruned layer the parameters its masks keep.
fn param_text(elements: Option<u64>, effective: Option<u64>) -> String {
    let elements = elements.map_or_else(|| ">= 2^64".to_string(), thousands);
    match effective {
        Some(kept) => format!("{elements} ({} unmasked)", thousands(kept)),
        None => elements,
    }
}

/// A layer call's operator FLOPs: exact when complete, `>= N` when partial (a lower bound),
/// `?` when unavailable, `-` when not counted (structure mode).
fn flops_cell(metric: Option<&Metric>) -> String {
    let Some(metric) = metric else { return "-".to_string() };
    let known = |n: Option<crate::report::Number>| n.and_then(|n| n.integer()).and_then(|v| u64::try_from(v).ok());
    match metric.status {
        Status::Complete => known(metric.value).map_or_else(|| "?".to_string(), thousands),
        Status::Partial => {
            known(metric.known_value).map_or_else(|| "?".to_string(), |n| format!(">= {}", thousands(n)))
        }
        Status::Unavailable => "?".to_string(),
    }
}

/// A row's cells; `widths` None: as long as `free` allows (the measuring pass).
fn cells(node: &Node, widths: &[Option<usize>; COLUMNS], free: usize, wrap: Wrap) -> [String; COLUMNS] {
    let name = tree_name(&node.name, node.depth);
    let name_limit = widths[0].unwrap_or(free);
    let Counts { parameters, trainable, buffers } = node.counts;
    let text = |count: Option<u64>| count.map_or_else(|| ">= 2^64".to_string(), thousands);
    let (type_name, shape, effective) = match node.layer {
        Some(layer) => (
            // A lazy module's call materialized its parameters: marked, as torchinfo marks it.
            if layer.lazy { format!("{} (lazy)", layer.type_name) } else { layer.type_name.clone() },
            // A submodule inside TorchScript: listed, its calls (and shapes) not seen.
            layer.output.as_ref().map_or_else(|| "?".into(), shape_text),
            layer.parameters.effective.filter(|_| node.children.is_empty()),
        ),
        // A module never called: its type when it holds parameters (an unused attribute), no
        // output; a container never called itself (a ModuleList): no type either.
        None => (node.uncalled.map_or_else(|| "-".to_string(), |m| m.type_name.clone()), "-".to_string(), None),
    };
    let rf = |pick: fn(&crate::report::LayerMetrics) -> &Option<Metric>| match node.layer {
        None => "-".to_string(),
        Some(layer) => match pick(&layer.metrics).as_ref().and_then(metric_number) {
            Some(v) => format!("{v:.0}"),
            None => "?".to_string(),
        },
    };
    [
        fit(&wrap_string(&name, name_limit, wrap), widths[0]),
        fit(&crate::flops_table::printable(&type_name), widths[1]),
        fit(&wrap_string(&shape, widths[2].unwrap_or(free), Wrap::End), widths[2]),
        fit(&param_text(parameters, effective), widths[PARAMS]),
        fit(&text(buffers), widths[BUFFERS]),
        fit(
            if parameters == Some(0) {
                "-"
            } else if trainable == Some(0) {
                "False"
            } else if trainable.is_some() && trainable != parameters {
                "Partly"
            } else {
                "True"
            },
            widths[5],
        ),
        fit(&flops_cell(node.operator_flops.as_ref()), widths[FLOPS]),
        fit(&rf(|m| &m.receptive_field), widths[RF]),
        fit(&rf(|m| &m.effective_stride), widths[RF + 1]),
        fit(&rf(|m| &m.effective_padding), widths[RF + 2]),
    ]
}

fn unit_scale(v: f64) -> (f64, &'static str) {
    for (scale, prefix) in [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")] {
        if (v / scale).floor() > 0.0 {
            return (v / scale, prefix);
        }
    }
    (v, "")
}

fn total_line(name: &str, metric: &Metric) -> String {
    let complete = metric.status == Status::Complete;
    match metric_number(metric) {
        None => format!("{name}: unavailable"),
        Some(v) => {
            let (scaled, prefix) = unit_scale(v);
            let unit = metric.unit.name();
            format!("{name}: {}{scaled:.2} {prefix}{unit}", if complete { "" } else { "known " })
        }
    }
}

/// Narrowest the Layer, Type and Output Shape columns become to fit `max_width`.
const MIN_WIDTHS: [usize; 3] = [12, 8, 10];

fn row_length(widths: &[usize; COLUMNS], shown: &[usize], margin: &str) -> usize {
    shown.iter().map(|&c| widths[c]).sum::<usize>() + shown.len().saturating_sub(1) * margin.len()
}

/// Narrows the Layer, then the Output Shape, then the Type column (never below [`MIN_WIDTHS`])
/// until the row is at most `max_width` characters; other columns keep their width.
fn fit_to(widths: &mut [usize; COLUMNS], shown: &[usize], margin: &str, max_width: usize) {
    let mut excess = row_length(widths, shown, margin).saturating_sub(max_width);
    for column in [0, 2, 1] {
        let cut = excess.min(widths[column].saturating_sub(MIN_WIDTHS[column]));
        widths[column] -= cut;
        excess -= cut;
    }
}

/// The columns the table shows, in order.
fn shown_columns(receptive_field: bool, effective_rf_stats: bool) -> Vec<usize> {
    let mut shown = vec![0, 1, 2, PARAMS, BUFFERS, 5, FLOPS];
    if receptive_field {
        shown.push(RF);
        if effective_rf_stats {
            shown.extend([RF + 1, RF + 2]);
        }
    }
    shown
}

/// The table for `report` (`format_info` in Python). `wrap` other than None caps each column at
/// torchscan 0.2's widths, shortening names as it says; with `max_width` (a terminal's width)
/// the name, shape and type columns narrow to fit it. `max_depth` shows the rows down to that
/// depth, each still counting what it holds.
pub fn format_info(
    report: &AnalysisReport,
    wrap: Wrap,
    receptive_field: bool,
    effective_rf_stats: bool,
    max_width: Option<usize>,
    max_depth: Option<u64>,
) -> Result<String> {
    let tree = Tree::of_report(report);
    let rows: Vec<&Node> = tree.nodes.iter().filter(|node| max_depth.is_none_or(|depth| node.depth <= depth)).collect();
    let shown = shown_columns(receptive_field, effective_rf_stats);
    // Without wrapping (and without a width to fit) nothing is cut: a file or a pipe gets every
    // name whole.
    let capped = wrap != Wrap::None || max_width.is_some();
    let wrap = if wrap == Wrap::None && max_width.is_some() { Wrap::Mid } else { wrap };
    let free = if capped { 100 } else { usize::MAX };
    let mut widths: [usize; COLUMNS] = HEADERS.map(chars);
    for node in &rows {
        for (w, cell) in widths.iter_mut().zip(cells(node, &[None; COLUMNS], free, wrap)) {
            *w = (*w).max(chars(&cell));
        }
    }
    if capped {
        for (w, max) in widths.iter_mut().zip(MAX_WIDTHS) {
            *w = (*w).min(max);
        }
    }
    if let Some(max_width) = max_width {
        fit_to(&mut widths, &shown, MARGIN, max_width);
    }
    let length = row_length(&widths, &shown, MARGIN);
    let (thin, thick, dashes) = ("_".repeat(length), "=".repeat(length), "-".repeat(length));
    let fixed: [Option<usize>; COLUMNS] = widths.map(Some);
    let aligned = |column: usize, cell: &str| {
        let w = widths[column];
        if NUMERIC.contains(&column) {
            format!("{:>w$}", cell.trim_end())
        } else {
            format!("{cell:<w$}")
        }
    };
    let header = shown.iter().map(|&c| aligned(c, HEADERS[c])).collect::<Vec<_>>().join(MARGIN);
    let mut lines = vec![thin.clone(), header.trim_end().to_string(), thick.clone()];
    for node in &rows {
        let row = cells(node, &fixed, free, wrap);
        let row = shown.iter().map(|&c| aligned(c, &row[c])).collect::<Vec<_>>().join(MARGIN);
        lines.push(row.trim_end().to_string());
    }
    lines.push(thick);
    footer(report, &dashes, &mut lines);
    if rows.iter().any(|node| node.layer.is_none() && node.uncalled.is_none()) {
        lines.push(
            "A row of type '-' is a container never called itself (a ModuleList): it holds the rows under it.".into(),
        );
    }
    if rows.iter().any(|node| node.uncalled.is_some()) {
        lines.push(
            "A row with a type and output '-' is a module never called: it holds parameters, it ran nothing.".into(),
        );
    }
    lines.push(thin);
    Ok(lines.join("\n"))
}

fn pruned(report: &AnalysisReport) -> bool {
    report.layers.iter().any(|layer| layer.parameters.effective.is_some() || layer.metrics.effective_macs.is_some())
}

/// A byte count in SI megabytes (10^6 bytes).
fn megabytes(bytes: u64) -> String {
    format!("{:.2} MB", bytes as f64 / 1e6)
}

/// The lines under the table: torchscan 0.2's three parameter lines, the buffers and the model
/// size in MB, then one line per FLOPs figure saying which method counted it.
fn footer(report: &AnalysisReport, dashes: &str, lines: &mut Vec<String>) {
    let totals = &report.totals;
    let pruned = pruned(report);
    lines.push(format!("Trainable params: {}", count_text(&totals.trainable_parameters)));
    lines.push(format!("Non-trainable params: {}", count_text(&totals.frozen_parameters)));
    lines.push(format!("Total params: {}", count_text(&totals.parameters)));
    if let Some(effective) = totals.effective_parameters.as_ref().filter(|_| pruned) {
        lines.push(format!("Unmasked params (pruning masks applied): {}", count_text(effective)));
    }
    lines.push(dashes.to_string());
    lines.push(format!("Buffers: {} elements", count_text(&totals.buffer_elements)));
    match count(&totals.parameter_bytes).zip(count(&totals.buffer_bytes)) {
        Some((parameters, buffers)) => lines.push(format!(
            "Model size (params + buffers): {} (parameters {}, buffers {}; 1 MB = 10^6 bytes)",
            megabytes(parameters.saturating_add(buffers)),
            megabytes(parameters),
            megabytes(buffers)
        )),
        None => lines.push("Model size (params + buffers): unavailable (>= 2^64 bytes)".to_string()),
    }
    lines.push(dashes.to_string());
    for (label, metric) in [
        ("Operator FLOPs (the kernels that ran, the FLOPs column)", Some(&totals.operator_flops)),
        ("Module-formula FLOPs (torchscan 0.2's method)", Some(&totals.module_flops)),
        ("Module-formula MACs", Some(&totals.macs)),
        ("Unmasked module-formula MACs (pruning masks applied)", totals.effective_macs.as_ref().filter(|_| pruned)),
        ("Module-formula DMAs", Some(&totals.dmas)),
    ] {
        let Some(metric) = metric else { continue };
        if metric.method == "not_requested" {
            lines.push(format!("{label}: not requested (mode=\"structure\")"));
        } else {
            lines.push(total_line(label, metric));
        }
    }
    lines.push(dashes.to_string());
    lines.push("A row's Param #, Buffers and FLOPs include those of the rows inside it.".to_string());
    if !report.diagnostics.is_empty() {
        lines.push(format!("Diagnostics: {} (report['diagnostics'] lists them)", report.diagnostics.len()));
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;

    fn metric(v: u64, unit: &str) -> Value {
        json!({"status": "complete", "value": v, "known_value": v, "unit": unit, "scope": "s", "method": "m"})
    }

    fn tensor(shape: Value) -> Value {
        json!({"kind": "tensor", "shape": shape, "dtype": "torch.float32", "device": "cpu", "requires_grad": false})
    }

    /// torchscan 0.2's README example: summary(nn.Conv2d(3, 8, 3), (3, 32, 32)).
    fn conv_json() -> Value {
        let flops = json!({
            "schema_version": 1, "context": {"torch_version": "2.13.0", "torchscan_version": "0.3.0", "method": "m"},
            "total": {"status": "complete", "value": 388_800, "known_value": 388_800, "unit": "FLOPs",
                      "scope": "workload", "method": "m"},
            "by_module": {}, "by_module_status": {}, "by_operator": {}, "operator_calls": {}, "by_category": {},
            "by_phase": {}, "ignored_operators": {}, "diagnostics": [],
        });
        json!({
            "schema_version": 1,
            "context": {"torchscan_version": "0.3.0", "torch_version": "2.13.0", "python_version": "3.11.2",
                        "model_type": "torch.nn.modules.conv.Conv2d", "execution_mode": "evaluation_no_grad",
                        "training_before": true, "devices": ["cpu"], "dtypes": ["torch.float32"]},
            "inputs": {"source": "generated", "args": [tensor(json!([1, 3, 32, 32]))], "kwargs": {}},
            "layers": [{"path": "", "call_index": 0, "name": "conv2d", "depth": 0, "type": "Conv2d",
                        "input": {"args": [tensor(json!([1, 3, 32, 32]))], "kwargs": {}},
                        "output": tensor(json!([1, 8, 30, 30])),
                        "parameters": {"trainable": 224, "frozen": 0, "bytes": 896, "shared": false},
                        "buffers": {"elements": 0, "bytes": 0, "shared": false},
                        "metrics": {"calls": metric(1, "calls"), "receptive_field": metric(3, "elements")}}],
            "operator_flops": flops,
            "totals": {"parameters": metric(224, "elements"), "trainable_parameters": metric(224, "elements"),
                       "frozen_parameters": metric(0, "elements"), "parameter_bytes": metric(896, "bytes"),
                       "buffer_bytes": metric(0, "bytes"), "buffer_elements": metric(0, "elements"),
                       "module_flops": metric(388_800, "FLOPs"), "macs": metric(194_400, "MACs"),
                       "dmas": metric(201_824, "DMAs"), "operator_flops": metric(388_800, "FLOPs")},
            "diagnostics": [],
        })
    }

    fn report(value: Value) -> AnalysisReport {
        serde_json::from_value(value).unwrap()
    }

    fn conv_report() -> AnalysisReport {
        report(conv_json())
    }

    #[test]
    fn reproduces_the_reference_table() {
        let table = format_info(&conv_report(), Wrap::Mid, false, false, None, None).unwrap();
        let dashes = "-".repeat(66);
        assert_eq!(
            table.lines().collect::<Vec<_>>(),
            vec![
                "_".repeat(66).as_str(),
                "Layer   Type    Output Shape    Param #  Buffers  Trainable  FLOPs",
                "=".repeat(66).as_str(),
                // The root is named by its type, as by_module labels it; no FLOPs counted per call.
                "Conv2d  Conv2d  (1, 8, 30, 30)      224        0  True           -",
                "=".repeat(66).as_str(),
                "Trainable params: 224",
                "Non-trainable params: 0",
                "Total params: 224",
                &dashes,
                "Buffers: 0 elements",
                "Model size (params + buffers): 0.00 MB (parameters 0.00 MB, buffers 0.00 MB; 1 MB = 10^6 bytes)",
                &dashes,
                "Operator FLOPs (the kernels that ran, the FLOPs column): 388.80 kFLOPs",
                "Module-formula FLOPs (torchscan 0.2's method): 388.80 kFLOPs",
                "Module-formula MACs: 194.40 kMACs",
                "Module-formula DMAs: 201.82 kDMAs",
                &dashes,
                "A row's Param #, Buffers and FLOPs include those of the rows inside it.",
                "_".repeat(66).as_str(),
            ]
        );
    }

    #[test]
    fn partial_and_unavailable_totals_and_rf_columns() {
        let mut r = conv_json();
        r["totals"]["macs"] =
            json!({"status": "partial", "value": null, "known_value": 0, "unit": "MACs", "scope": "s", "method": "m"});
        r["totals"]["dmas"] = json!({"status": "unavailable", "value": null, "known_value": null, "unit": "DMAs",
            "scope": "s", "method": "m"});
        r["totals"]["module_flops"]["method"] = json!("not_requested");
        r["diagnostics"] = json!([{"code": "x", "severity": "warning", "metric": "macs", "message": "m"}]);
        let r = report(r);
        let table = format_info(&r, Wrap::Mid, true, false, None, None).unwrap();
        assert!(table.contains("\nModule-formula MACs: known 0.00 MACs\n"), "{table}");
        assert!(table.contains("\nModule-formula DMAs: unavailable\n"), "{table}");
        assert!(table.contains("\nModule-formula FLOPs (torchscan 0.2's method): not requested (mode=\"structure\")\n"));
        assert!(table.contains("Diagnostics: 1 (report['diagnostics'] lists them)"));
        assert!(table.lines().nth(1).unwrap().ends_with("FLOPs  Receptive field"));
        assert!(table.lines().nth(3).unwrap().ends_with("-  3"), "{table}");
    }

    #[test]
    fn helpers() {
        assert_eq!(thousands(11_689_512), "11,689,512");
        assert_eq!(tree_name("conv1", 2), "|    └─conv1");
        assert_eq!(wrap_string("features.denseblock1.denselayer1", 20, Wrap::Mid), "fea[...].denselayer1");
        assert_eq!(wrap_string("abcdefghij", 8, Wrap::End), "abc[...]");
        // No dot, or a last component too long: cut at the end (not "[.." once fitted).
        assert_eq!(wrap_string("|    └─word_embeddings", 12, Wrap::Mid), "|    └─[...]");
        assert_eq!(wrap_string("a.bcdefghijkl", 10, Wrap::Mid), "a.bcd[...]");
        let meta = |v: Value| serde_json::from_value::<ValueMeta>(v).unwrap();
        assert_eq!(shape_text(&meta(tensor(json!([4])))), "(4,)");
        assert_eq!(shape_text(&meta(json!({"kind": "tuple", "items": [{"kind": "none"}]}))), "(none)");
        let mapping = json!({"kind": "mapping", "type": "dict", "items": [
            {"key": "a", "key_type": "str", "value": tensor(json!([2, 3]))},
            {"key_type": "tuple", "value": {"kind": "scalar", "type": "int"}}]});
        assert_eq!(shape_text(&meta(json!({"kind": "list", "items": [mapping]}))), "[{(2, 3), scalar}]");
        assert!(Wrap::parse(Some("start")).is_err());
    }

    #[test]
    fn max_width_narrows_the_name_shape_and_type_columns() {
        let r = conv_report();
        let wide = format_info(&r, Wrap::Mid, false, false, None, None).unwrap();
        let full = wide.lines().next().unwrap().chars().count();
        // Never below the minimum widths: an impossible width gives the narrowest table.
        let tiny = format_info(&r, Wrap::Mid, false, false, Some(10), None).unwrap();
        let floor = tiny.lines().next().unwrap().chars().count();
        assert!(floor > 10 && floor < full, "{floor} {full}");
        let target = full - 1;
        let narrow = format_info(&r, Wrap::Mid, false, false, Some(target), None).unwrap();
        assert_eq!(narrow.lines().next().unwrap().chars().count(), target);
        assert!(narrow.lines().take(4).all(|l| l.chars().count() <= target), "{narrow}");
        assert_eq!(format_info(&r, Wrap::Mid, false, false, Some(1000), None).unwrap(), wide);
    }

    /// A root holding a trainable Linear (10 parameters, 100 FLOPs) and a frozen BatchNorm (4
    /// parameters, 9 buffer elements, a partial 50 FLOPs) called with a 3-element input.
    fn nested_report() -> AnalysisReport {
        let mut r = conv_json();
        let layer = |path: &str, depth: u64, kind: &str, trainable: u64, frozen: u64, buffers: u64, flops: Value| {
            json!({"path": path, "call_index": 0, "name": if path.is_empty() { "net" } else { path }, "depth": depth,
                   "type": kind, "input": {"args": [tensor(json!([1, 3]))], "kwargs": {}},
                   "output": tensor(json!([1, 3])),
                   "parameters": {"trainable": trainable, "frozen": frozen, "bytes": 4 * (trainable + frozen),
                                  "shared": false},
                   "buffers": {"elements": buffers, "bytes": 4 * buffers, "shared": false},
                   "metrics": {"calls": metric(1, "calls"), "operator_flops": flops}})
        };
        let partial = json!({"status": "partial", "value": null, "known_value": 50, "unit": "FLOPs", "scope": "s",
                             "method": "m"});
        r["layers"] = json!([
            layer("", 0, "Net", 0, 0, 0, metric(150, "FLOPs")),
            layer("fc", 1, "Linear", 10, 0, 0, metric(100, "FLOPs")),
            layer("\u{1b}[31mbn", 1, "BatchNorm1d", 0, 4, 9, partial),
        ]);
        report(r)
    }

    #[test]
    fn columns_count_what_a_row_holds() {
        let r = nested_report();
        let table = format_info(&r, Wrap::Mid, false, false, None, None).unwrap();
        let rows: Vec<&str> = table.lines().collect();
        assert_eq!(rows[1], "Layer         Type         Output Shape  Param #  Buffers  Trainable  FLOPs");
        // The root holds 10 + 4 parameters (10 trainable: partly), 9 buffer elements.
        assert_eq!(rows[3], "Net           Net          (1, 3)             14        9  Partly       150");
        assert_eq!(rows[4], "├─fc          Linear       (1, 3)             10        0  True         100");
        // The escape byte is shown escaped; a partial count is a lower bound.
        assert_eq!(rows[5], "├─\\x1b[31mbn  BatchNorm1d  (1, 3)              4        9  False      >= 50");
        // Down to depth 0: the root alone, still counting what it holds.
        let root = format_info(&r, Wrap::Mid, false, false, None, Some(0)).unwrap();
        assert!(root.lines().nth(3).unwrap().starts_with("Net "), "{root}");
        assert!(root.lines().nth(3).unwrap().contains("14"), "{root}");
        assert!(root.lines().nth(4).unwrap().starts_with('='), "{root}");
    }

    #[test]
    fn an_uncalled_module_is_a_row_with_its_type_and_no_output() {
        // nested_report and an unused Linear(3, 5) attribute: 3 * 5 + 5 = 20 parameters, never
        // called. The root: 14 + 20 = 34 parameters (30 trainable: partly).
        let mut r = serde_json::to_value(nested_report()).unwrap();
        r["uncalled_modules"] = json!([{"path": "unused", "name": "unused", "depth": 1, "type": "Linear",
            "parameters": {"trainable": 20, "frozen": 0, "bytes": 80, "shared": false},
            "buffers": {"elements": 0, "bytes": 0, "shared": false}}]);
        let table = format_info(&report(r), Wrap::Mid, false, false, None, None).unwrap();
        let rows: Vec<&str> = table.lines().collect();
        assert_eq!(rows[3], "Net           Net          (1, 3)             34        9  Partly       150");
        // After its called siblings; 0 FLOPs (it ran nothing).
        assert_eq!(rows[6], "├─unused      Linear       -                  20        0  True           0");
        assert!(table.contains("\nA row with a type and output '-' is a module never called"), "{table}");
        assert!(!table.contains("A row of type '-'"), "{table}");
    }

    #[test]
    fn an_uncalled_container_is_a_row_that_holds_its_calls() {
        // GPT-2's shape: `h` (a ModuleList) is never called, its block `h.0` is, after `drop`.
        let mut r = conv_json();
        let layer = |path: &str, depth: u64, kind: &str, params: u64, flops: u64| {
            json!({"path": path, "call_index": 0, "name": path, "depth": depth, "type": kind,
                   "input": {"args": [], "kwargs": {}}, "output": tensor(json!([1, 4])),
                   "parameters": {"trainable": params, "frozen": 0, "bytes": 4 * params, "shared": false},
                   "buffers": {"elements": 0, "bytes": 0, "shared": false},
                   "metrics": {"calls": metric(1, "calls"), "operator_flops": metric(flops, "FLOPs")}})
        };
        r["layers"] = json!([
            layer("", 0, "GPT", 0, 30),
            layer("drop", 1, "Dropout", 0, 0),
            layer("h.0", 2, "Block", 0, 20),
            layer("h.0.fc", 3, "Linear", 20, 20),
            layer("h.1", 2, "Block", 6, 10),
        ]);
        let table = format_info(&report(r), Wrap::None, false, false, None, None).unwrap();
        let rows: Vec<&str> = table.lines().skip(3).take(5).collect();
        assert_eq!(
            rows,
            vec![
                "GPT             GPT      (1, 4)             26        0  True          30",
                "├─drop          Dropout  (1, 4)              0        0  -              0",
                // 20 + 6 parameters and 20 + 10 FLOPs, of the blocks it holds.
                "├─h             -        -                  26        0  True          30",
                "|    └─0        Block    (1, 4)             20        0  True          20",
                "|    |    └─fc  Linear   (1, 4)             20        0  True          20",
            ]
        );
        assert!(table.contains("\nA row of type '-' is a container never called itself"), "{table}");
    }

    #[test]
    fn nothing_is_cut_without_wrapping_or_a_width() {
        let mut r = nested_report();
        let long = "a".repeat(150);
        r.layers[1].path = long.clone();
        let whole = format_info(&r, Wrap::None, false, false, None, None).unwrap();
        assert!(whole.contains(&format!("├─{long}  Linear")), "{whole}");
        let fitted = format_info(&r, Wrap::Mid, false, false, Some(80), None).unwrap();
        assert!(fitted.lines().take(6).all(|line| line.chars().count() <= 80), "{fitted}");
        assert!(fitted.contains("[...]"), "{fitted}");
        // Wrapping (summary's default) caps the columns at torchscan 0.2's widths.
        let capped = format_info(&r, Wrap::Mid, false, false, None, None).unwrap();
        assert!(!capped.contains(&long), "{capped}");
    }
}

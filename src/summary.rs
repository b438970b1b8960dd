//! The text table of an AnalysisReport, in two layouts:
//! - classic (`summary`, `format_info`): exactly as torchscan 0.2 lays it out, columns Layer /
//!   Type / Output Shape / Param # (parameters and buffers) / Trainable (+ receptive field,
//!   effective stride and padding on request), then the parameter, size and metric-total lines
//!   (`known` before a partial value);
//! - detailed (the `torchscan` command): parameters and buffers in columns of their own and each
//!   call's operator FLOPs, then totals that say which method each FLOPs figure comes from, with
//!   sizes in SI megabytes.

use crate::error::{Error, Result};
use crate::report::{AnalysisReport, Layer, Metric, Status, ValueMeta};

/// The columns either layout can show, in order: the classic layout leaves out Buffers and
/// FLOPs (its Param # counts parameters and buffers together), the detailed one shows both.
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
// Param # is wider than torchscan 0.2's 15 for a pruned layer's "(N unmasked)".
const MAX_WIDTHS: [usize; COLUMNS] = [27, 20, 25, 27, 15, 9, 22, 15, 16, 17];
const MARGIN: &str = "    ";
const DETAILED_MARGIN: &str = "  ";
// Column indices the layouts choose between.
const BUFFERS: usize = 4;
const FLOPS: usize = 6;
const RF: usize = 7;

/// Which table: torchscan 0.2's (`summary`), or the command line's (see the module comment).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    Classic,
    Detailed,
}

impl Layout {
    pub fn parse(layout: &str) -> Result<Layout> {
        match layout {
            "classic" => Ok(Layout::Classic),
            "detailed" => Ok(Layout::Detailed),
            other => Err(Error::BadArgument(format!("layout must be 'classic' or 'detailed', got {other:?}"))),
        }
    }
}

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

/// The Param # cell: parameters (and, in the classic layout, buffers: torchscan 0.2), and for
/// a pruned layer the parameters its masks keep.
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

/// The parameter and buffer elements a layer call counts first (None: 2^64 or more).
fn own_counts(layer: &Layer) -> Counts {
    let params = &layer.parameters;
    Counts {
        parameters: params.trainable.zip(params.frozen).and_then(|(t, f)| t.checked_add(f)),
        trainable: params.trainable,
        buffers: layer.buffers.elements,
    }
}

#[derive(Clone, Copy)]
struct Counts {
    parameters: Option<u64>,
    trainable: Option<u64>,
    buffers: Option<u64>,
}

impl Counts {
    fn add(self, other: Counts) -> Counts {
        let sum = |a: Option<u64>, b: Option<u64>| a.zip(b).and_then(|(a, b)| a.checked_add(b));
        Counts {
            parameters: sum(self.parameters, other.parameters),
            trainable: sum(self.trainable, other.trainable),
            buffers: sum(self.buffers, other.buffers),
        }
    }
}

/// Each layer call's counts with those of the calls inside it (the layers that follow it in
/// call order, deeper than it): what a collapsed container holds, as torchinfo counts it.
/// Parameters are counted by the call that saw them first, so nothing is counted twice.
fn inclusive_counts(layers: &[Layer]) -> Vec<Counts> {
    let mut sums: Vec<Counts> = layers.iter().map(own_counts).collect();
    // Open calls (index, depth), outermost first: a finished call adds its sum to its parent.
    let mut open: Vec<(usize, u64)> = Vec::new();
    let close = |open: &mut Vec<(usize, u64)>, sums: &mut Vec<Counts>| {
        let (child, _) = open.pop().expect("an open call");
        if let Some(&(parent, _)) = open.last() {
            sums[parent] = sums[parent].add(sums[child]);
        }
    };
    for (index, layer) in layers.iter().enumerate() {
        while open.last().is_some_and(|&(_, depth)| depth >= layer.depth) {
            close(&mut open, &mut sums);
        }
        open.push((index, layer.depth));
    }
    while !open.is_empty() {
        close(&mut open, &mut sums);
    }
    sums
}

/// A layer's cells; `widths` None: as long as `free` allows (the measuring pass).
fn cells(
    layer: &Layer,
    counts: Counts,
    widths: &[Option<usize>; COLUMNS],
    free: usize,
    wrap: Wrap,
    layout: Layout,
) -> [String; COLUMNS] {
    let name = tree_name(&layer.name, layer.depth);
    // torchscan 0.2 wraps names to 3 more characters than the column, which then cuts the
    // marker to "[.."; the detailed layout wraps to the column.
    let slack = if layout == Layout::Classic { 3 } else { 0 };
    let name_limit = widths[0].map_or(free, |w| w + slack);
    let params = &layer.parameters;
    // A count of 2^64 or more (null in the report) is shown as such.
    let owned = counts.parameters;
    let elements = match layout {
        Layout::Classic => owned.zip(counts.buffers).and_then(|(p, b)| p.checked_add(b)),
        Layout::Detailed => owned,
    };
    let rf = |metric: &Option<Metric>| match metric.as_ref().and_then(metric_number) {
        Some(v) => format!("{v:.0}"),
        None => "?".to_string(),
    };
    [
        fit(&wrap_string(&name, name_limit, wrap), widths[0]),
        // A lazy module's call materialized its parameters: marked, as torchinfo marks it.
        fit(
            &crate::flops_table::printable(&if layer.lazy {
                format!("{} (lazy)", layer.type_name)
            } else {
                layer.type_name.clone()
            }),
            widths[1],
        ),
        // A submodule inside TorchScript: listed, its calls (and shapes) not seen.
        fit(
            &wrap_string(
                &layer.output.as_ref().map_or_else(|| "?".into(), shape_text),
                widths[2].unwrap_or(free),
                Wrap::End,
            ),
            widths[2],
        ),
        fit(&param_text(elements, params.effective), widths[3]),
        fit(&counts.buffers.map_or_else(|| ">= 2^64".to_string(), thousands), widths[BUFFERS]),
        fit(
            if owned == Some(0) {
                "-"
            } else if counts.trainable == Some(0) {
                "False"
            } else if layout == Layout::Detailed && counts.trainable.is_some() && counts.trainable != owned {
                "Partly"
            } else {
                "True"
            },
            widths[5],
        ),
        fit(&flops_cell(layer.metrics.operator_flops.as_ref()), widths[FLOPS]),
        fit(&rf(&layer.metrics.receptive_field), widths[RF]),
        fit(&rf(&layer.metrics.effective_stride), widths[RF + 1]),
        fit(&rf(&layer.metrics.effective_padding), widths[RF + 2]),
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

/// The columns a table shows, in order.
fn shown_columns(layout: Layout, receptive_field: bool, effective_rf_stats: bool) -> Vec<usize> {
    let mut shown = match layout {
        Layout::Classic => vec![0, 1, 2, 3, 5],
        Layout::Detailed => vec![0, 1, 2, 3, BUFFERS, 5, FLOPS],
    };
    if receptive_field {
        shown.push(RF);
        if effective_rf_stats {
            shown.extend([RF + 1, RF + 2]);
        }
    }
    shown
}

/// The table for `report` (`format_info` in Python) in `layout`; with `max_width` (a
/// terminal's width) the name, shape and type columns narrow to fit it.
pub fn format_info(
    report: &AnalysisReport,
    wrap: Wrap,
    receptive_field: bool,
    effective_rf_stats: bool,
    max_width: Option<usize>,
    layout: Layout,
    max_depth: Option<u64>,
) -> Result<String> {
    let counts = match layout {
        Layout::Classic => report.layers.iter().map(own_counts).collect(),
        Layout::Detailed => inclusive_counts(&report.layers),
    };
    let rows: Vec<(&Layer, Counts)> = report
        .layers
        .iter()
        .zip(counts)
        .filter(|(layer, _)| max_depth.is_none_or(|depth| layer.depth <= depth))
        .collect();
    let shown = shown_columns(layout, receptive_field, effective_rf_stats);
    // The detailed table without a width to fit (written to a file or a pipe) cuts nothing;
    // torchscan 0.2's caps every column. It also sets its columns closer, to fit more.
    let unbounded = layout == Layout::Detailed && max_width.is_none();
    let (free, margin) = match layout {
        Layout::Classic => (100, MARGIN),
        Layout::Detailed => (if unbounded { usize::MAX } else { 100 }, DETAILED_MARGIN),
    };
    let wrap = if unbounded { Wrap::None } else { wrap };
    let mut widths: [usize; COLUMNS] = HEADERS.map(chars);
    for &(layer, counts) in &rows {
        for (w, cell) in widths.iter_mut().zip(cells(layer, counts, &[None; COLUMNS], free, wrap, layout)) {
            *w = (*w).max(chars(&cell));
        }
    }
    if !unbounded {
        for (w, max) in widths.iter_mut().zip(MAX_WIDTHS) {
            *w = (*w).min(max);
        }
    }
    if let Some(max_width) = max_width {
        fit_to(&mut widths, &shown, margin, max_width);
    }
    let length = row_length(&widths, &shown, margin);
    let (thin, thick) = ("_".repeat(length), "=".repeat(length));
    let fixed: [Option<usize>; COLUMNS] = widths.map(Some);
    // The detailed table right-aligns its counts, as numbers are read.
    let right = |column: usize| layout == Layout::Detailed && [3, BUFFERS, FLOPS].contains(&column);
    let header = shown.iter().map(|&c| {
        let w = widths[c];
        if right(c) {
            format!("{:>w$}", HEADERS[c])
        } else {
            format!("{:<w$}", HEADERS[c])
        }
    });
    let mut lines = vec![thin.clone(), header.collect::<Vec<_>>().join(margin), thick.clone()];
    for &(layer, counts) in &rows {
        let row = cells(layer, counts, &fixed, free, wrap, layout);
        let row = shown.iter().map(|&c| {
            let w = widths[c];
            if right(c) {
                format!("{:>w$}", row[c].trim_end())
            } else {
                row[c].clone()
            }
        });
        let row = row.collect::<Vec<_>>().join(margin);
        // The classic rows keep torchscan 0.2's trailing padding.
        lines.push(if layout == Layout::Classic { row } else { row.trim_end().to_string() });
    }
    lines.push(thick);
    match layout {
        Layout::Classic => classic_footer(report, length, &mut lines),
        Layout::Detailed => detailed_footer(report, &mut lines),
    }
    lines.push(thin);
    Ok(lines.join("\n"))
}

fn pruned(report: &AnalysisReport) -> bool {
    report.layers.iter().any(|layer| layer.parameters.effective.is_some() || layer.metrics.effective_macs.is_some())
}

/// torchscan 0.2's lines under the table (the size in MiB, which 0.2 spelled "Mb").
fn classic_footer(report: &AnalysisReport, length: usize, lines: &mut Vec<String>) {
    let totals = &report.totals;
    let dots = "-".repeat(length);
    lines.push(format!("Trainable params: {}", count_text(&totals.trainable_parameters)));
    lines.push(format!("Non-trainable params: {}", count_text(&totals.frozen_parameters)));
    lines.push(format!("Total params: {}", count_text(&totals.parameters)));
    let pruned = pruned(report);
    if let Some(effective) = totals.effective_parameters.as_ref().filter(|_| pruned) {
        lines.push(format!("Unmasked params (pruning masks applied): {}", count_text(effective)));
    }
    lines.push(dots.clone());
    match count(&totals.parameter_bytes).zip(count(&totals.buffer_bytes)) {
        Some((parameters, buffers)) => {
            let size = (parameters as f64 + buffers as f64) / 1024f64.powi(2);
            lines.push(format!("Model size (params + buffers): {size:.2} MiB"));
        }
        None => lines.push("Model size (params + buffers): unavailable (>= 2^64 bytes)".to_string()),
    }
    lines.push(dots);
    for (label, metric) in [
        ("Module-formula forward FLOPs", &totals.module_flops),
        ("Multiply-Accumulations", &totals.macs),
        ("Direct memory accesses", &totals.dmas),
        ("Operator forward FLOPs", &totals.operator_flops),
    ] {
        lines.push(total_line(label, metric));
        if let Some(effective) = totals.effective_macs.as_ref().filter(|_| pruned && label.starts_with("Multiply")) {
            lines.push(total_line("Unmasked Multiply-Accumulations (pruning masks applied)", effective));
        }
    }
    if !report.diagnostics.is_empty() {
        lines.push(format!("Diagnostics: {} (inspect report['diagnostics'])", report.diagnostics.len()));
    }
}

/// A byte count in SI megabytes (10^6 bytes).
fn megabytes(bytes: u64) -> String {
    format!("{:.2} MB", bytes as f64 / 1e6)
}

/// The detailed table's lines: parameters and buffers apart, sizes in MB, and one line per
/// FLOPs figure saying which method counted it.
fn detailed_footer(report: &AnalysisReport, lines: &mut Vec<String>) {
    let totals = &report.totals;
    lines.push(format!(
        "Parameters: {} (trainable {}, frozen {})",
        count_text(&totals.parameters),
        count_text(&totals.trainable_parameters),
        count_text(&totals.frozen_parameters)
    ));
    if let Some(effective) = totals.effective_parameters.as_ref().filter(|_| pruned(report)) {
        lines.push(format!("Parameters the pruning masks keep: {}", count_text(effective)));
    }
    lines.push(format!("Buffers: {} elements", count_text(&totals.buffer_elements)));
    match count(&totals.parameter_bytes).zip(count(&totals.buffer_bytes)) {
        Some((parameters, buffers)) => lines.push(format!(
            "Size: {} (parameters {}, buffers {}; 1 MB = 10^6 bytes)",
            megabytes(parameters.saturating_add(buffers)),
            megabytes(parameters),
            megabytes(buffers)
        )),
        None => lines.push("Size: unavailable (>= 2^64 bytes)".to_string()),
    }
    for (label, metric) in [
        ("Operator FLOPs (the kernels that ran, the FLOPs column)", &totals.operator_flops),
        ("Module-formula FLOPs (torchscan 0.2's method)", &totals.module_flops),
        ("Module-formula MACs", &totals.macs),
        ("Module-formula DMAs", &totals.dmas),
    ] {
        if metric.method == "not_requested" {
            continue;
        }
        lines.push(total_line(label, metric));
    }
    lines.push("A layer's Param #, Buffers and FLOPs include those of the layers inside it.".to_string());
    if !report.diagnostics.is_empty() {
        lines.push(format!("Diagnostics: {} (listed below)", report.diagnostics.len()));
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
        let table = format_info(&conv_report(), Wrap::Mid, false, false, None, Layout::Classic, None).unwrap();
        let trimmed: Vec<&str> = table.lines().map(str::trim_end).collect();
        assert_eq!(
            trimmed,
            vec![
                "__________________________________________________________",
                "Layer     Type      Output Shape      Param #    Trainable",
                "==========================================================",
                "conv2d    Conv2d    (1, 8, 30, 30)    224        True",
                "==========================================================",
                "Trainable params: 224",
                "Non-trainable params: 0",
                "Total params: 224",
                "----------------------------------------------------------",
                "Model size (params + buffers): 0.00 MiB",
                "----------------------------------------------------------",
                "Module-formula forward FLOPs: 388.80 kFLOPs",
                "Multiply-Accumulations: 194.40 kMACs",
                "Direct memory accesses: 201.82 kDMAs",
                "Operator forward FLOPs: 388.80 kFLOPs",
                "__________________________________________________________",
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
        r["diagnostics"] = json!([{"code": "x", "severity": "warning", "metric": "macs", "message": "m"}]);
        let r = report(r);
        let table = format_info(&r, Wrap::Mid, true, false, None, Layout::Classic, None).unwrap();
        assert!(table.contains("Multiply-Accumulations: known 0.00 MACs"));
        assert!(table.contains("Direct memory accesses: unavailable"));
        assert!(table.contains("Diagnostics: 1 (inspect report['diagnostics'])"));
        assert!(table.lines().nth(1).unwrap().contains("Receptive field"));
        assert!(table.lines().nth(3).unwrap().trim_end().ends_with('3'));
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
        let wide = format_info(&r, Wrap::Mid, false, false, None, Layout::Classic, None).unwrap();
        let full = wide.lines().next().unwrap().chars().count();
        // Never below the minimum widths: an impossible width gives the narrowest table.
        let tiny = format_info(&r, Wrap::Mid, false, false, Some(10), Layout::Classic, None).unwrap();
        let floor = tiny.lines().next().unwrap().chars().count();
        assert!(floor > 10 && floor < full, "{floor} {full}");
        let target = full - 1;
        let narrow = format_info(&r, Wrap::Mid, false, false, Some(target), Layout::Classic, None).unwrap();
        assert_eq!(narrow.lines().next().unwrap().chars().count(), target);
        assert!(narrow.lines().take(4).all(|l| l.chars().count() <= target), "{narrow}");
        assert_eq!(format_info(&r, Wrap::Mid, false, false, Some(1000), Layout::Classic, None).unwrap(), wide);
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
    fn the_detailed_layout_splits_buffers_adds_flops_and_counts_what_a_layer_holds() {
        let r = nested_report();
        let table = format_info(&r, Wrap::Mid, false, false, None, Layout::Detailed, None).unwrap();
        let rows: Vec<&str> = table.lines().collect();
        assert_eq!(rows[1], "Layer         Type         Output Shape  Param #  Buffers  Trainable  FLOPs");
        // The root holds 10 + 4 parameters (10 trainable: partly), 9 buffer elements.
        assert_eq!(rows[3], "net           Net          (1, 3)             14        9  Partly       150");
        assert_eq!(rows[4], "├─fc          Linear       (1, 3)             10        0  True         100");
        // The escape byte is shown escaped; a partial count is a lower bound.
        assert_eq!(rows[5], "├─\\x1b[31mbn  BatchNorm1d  (1, 3)              4        9  False      >= 50");
        assert!(table.contains("Size: 0.00 MB (parameters 0.00 MB, buffers 0.00 MB; 1 MB = 10^6 bytes)"), "{table}");
        assert!(table.contains("Operator FLOPs (the kernels that ran, the FLOPs column): 388.80 kFLOPs"), "{table}");
        assert!(table.contains("Module-formula FLOPs (torchscan 0.2's method): 388.80 kFLOPs"));
        // Down to depth 0: the root alone, still counting what it holds.
        let root = format_info(&r, Wrap::Mid, false, false, None, Layout::Detailed, Some(0)).unwrap();
        assert!(root.lines().nth(3).unwrap().starts_with("net"), "{root}");
        assert!(root.lines().nth(3).unwrap().contains("14"), "{root}");
        assert!(root.lines().nth(4).unwrap().starts_with('='), "{root}");
        // The classic layout keeps torchscan 0.2's Param # (own parameters and buffers).
        let classic = format_info(&r, Wrap::Mid, false, false, None, Layout::Classic, None).unwrap();
        assert!(classic.lines().nth(3).unwrap().starts_with("net    "), "{classic}");
        assert!(classic.lines().nth(5).unwrap().contains("13"), "{classic}");
        assert!(Layout::parse("wide").is_err());
    }

    #[test]
    fn the_detailed_layout_cuts_nothing_without_a_width() {
        let mut r = nested_report();
        let long = "a".repeat(150);
        r.layers[1].name = long.clone();
        let whole = format_info(&r, Wrap::Mid, false, false, None, Layout::Detailed, None).unwrap();
        assert!(whole.contains(&format!("├─{long}  Linear")), "{whole}");
        let fitted = format_info(&r, Wrap::Mid, false, false, Some(80), Layout::Detailed, None).unwrap();
        assert!(fitted.lines().take(6).all(|line| line.chars().count() <= 80), "{fitted}");
        assert!(fitted.contains("[...]"), "{fitted}");
        // torchscan 0.2's table caps its columns whatever the width.
        let classic = format_info(&r, Wrap::Mid, false, false, None, Layout::Classic, None).unwrap();
        assert!(!classic.contains(&long), "{classic}");
    }
}

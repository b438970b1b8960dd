//! The module tree every table is drawn from (the layer table of `summary`, `format_info` and
//! the `torchscan` command, the module rows of `format_flops`, the HTML page's icicle).
//!
//! A report's layers are module calls in call order; a table is a tree. The tree is built from
//! the paths, never from the depths alone: a call's parent is the latest row of the nearest
//! module above it in the path, and a module above it that was never called itself (GPT-2's
//! `h` ModuleList, Llama's `layers`, whose forward is the model's loop over them) gets a row of
//! its own, placed where its first call below it comes. So a call never lands under the
//! sibling that happened to be called before it (GPT-2's blocks under `drop`, Llama's layers
//! under `rotary_emb`). Siblings keep call order.
//!
//! A module that holds parameters but was never called (an unused `nn.Linear` kept as an
//! attribute: the report's `uncalled_modules`) gets a row too, under its parent, after the
//! parent's called children, in `named_modules()` order; its parameters count in its parents'
//! (so the root holds every parameter of the model, each once), its FLOPs are 0 (none counted
//! in structure mode). A container never called that holds parameters of its own is one row.

use std::collections::HashMap;

use serde::Serialize;

use crate::report::{AnalysisReport, Buffers, Layer, Metric, Number, Parameters, Status, UncalledModule, Unit};

/// One row: a module call, or a module above calls that was never called itself, or a module
/// never called that holds parameters.
pub struct Node<'a> {
    /// The call; `None` for a module never called itself.
    pub layer: Option<&'a Layer>,
    /// A module never called that holds parameters (its type, its tensors); with `layer`
    /// `None`. A container above calls that holds parameters of its own has it too.
    pub uncalled: Option<&'a UncalledModule>,
    /// Its index in the report's layers.
    pub index: Option<usize>,
    /// The module's path (`""` for the root), escaped as in the report.
    pub path: String,
    /// The last component of the path (the root: its type, as `by_module` labels it).
    pub name: String,
    /// Components of the path: 0 for the root.
    pub depth: u64,
    pub parent: Option<usize>,
    pub children: Vec<usize>,
    /// The parameters and buffers of the calls in this row's subtree (each tensor counted by
    /// the call that saw it first, so nothing is counted twice).
    pub counts: Counts,
    /// The operator FLOPs of the row: the call's own (inclusive of what it called), or a
    /// container's children summed. `None` where nothing was counted (structure mode).
    pub operator_flops: Option<Metric>,
}

/// Parameter and buffer elements (`None`: 2^64 or more, or unknown).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counts {
    pub parameters: Option<u64>,
    pub trainable: Option<u64>,
    pub buffers: Option<u64>,
}

impl Counts {
    const ZERO: Counts = Counts { parameters: Some(0), trainable: Some(0), buffers: Some(0) };

    /// What a call (or an uncalled module) counts first (its own tensors not seen before).
    fn own(params: &Parameters, buffers: &Buffers) -> Counts {
        Counts {
            parameters: params.trainable.zip(params.frozen).and_then(|(t, f)| t.checked_add(f)),
            trainable: params.trainable,
            buffers: buffers.elements,
        }
    }

    fn add(self, other: Counts) -> Counts {
        let sum = |a: Option<u64>, b: Option<u64>| a.zip(b).and_then(|(a, b)| a.checked_add(b));
        Counts {
            parameters: sum(self.parameters, other.parameters),
            trainable: sum(self.trainable, other.trainable),
            buffers: sum(self.buffers, other.buffers),
        }
    }
}

/// The rows of a tree, in table order (depth first, children in call order).
pub struct Tree<'a> {
    pub nodes: Vec<Node<'a>>,
}

/// A path's components: split at its dots, not at escaped ones (`\.`, see `_names.py`); the
/// root (`""`) has none.
pub fn components(path: &str) -> Vec<&str> {
    if path.is_empty() {
        return Vec::new();
    }
    let mut parts = Vec::new();
    let (bytes, mut start, mut i) = (path.as_bytes(), 0, 0);
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'.' => {
                parts.push(&path[start..i]);
                start = i + 1;
                i += 1;
            }
            _ => i += 1,
        }
    }
    parts.push(&path[start.min(path.len())..]);
    parts
}

/// The sum of children's operator FLOPs: complete when all are, a lower bound (partial) when
/// some number is known, unavailable otherwise; `None` when a child has none.
fn summed(children: &[Option<&Metric>]) -> Option<Metric> {
    let (mut total, mut complete, mut known) = (Some(0u64), true, false);
    for metric in children {
        let metric = (*metric)?;
        let number = if metric.status == Status::Complete { metric.value } else { metric.known_value };
        let number = number.and_then(|n| n.integer()).and_then(|n| u64::try_from(n).ok());
        complete &= metric.status == Status::Complete && number.is_some();
        match number {
            Some(n) => {
                known = true;
                total = total.and_then(|t| t.checked_add(n));
            }
            None => complete = false,
        }
    }
    let (scope, method) = ("module_call", "torchscan_native_dispatch");
    Some(match total {
        Some(t) if complete => Metric::complete(Number::Int(t), Unit::Flops, scope, method),
        Some(t) if known => Metric::partial(t, Unit::Flops, scope, method),
        _ => Metric::unavailable(Unit::Flops, scope, method),
    })
}

impl<'a> Tree<'a> {
    /// The tree of `layers` (a report's, in call order). `root_name` names a root row that the
    /// layers do not hold (a view without it).
    pub fn new(layers: &'a [Layer], root_name: &str) -> Tree<'a> {
        Tree::build(layers, &[], root_name, true)
    }

    /// The tree of `layers` and of the modules never called that hold parameters (`uncalled`, in
    /// `named_modules()` order). `counted`: operator FLOPs were counted (full mode), so that an
    /// uncalled module without children shows 0 (else none, as the calls).
    pub fn build(layers: &'a [Layer], uncalled: &'a [UncalledModule], root_name: &str, counted: bool) -> Tree<'a> {
        let mut built: Vec<Node<'a>> = Vec::with_capacity(layers.len() + 8);
        // The latest row of each path: a call's parent is the latest row of the path above it.
        let mut latest: HashMap<String, usize> = HashMap::new();
        fn add<'a>(built: &mut Vec<Node<'a>>, latest: &mut HashMap<String, usize>, node: Node<'a>) {
            let index = built.len();
            if let Some(parent) = node.parent {
                built[parent].children.push(index);
            }
            latest.insert(node.path.clone(), index);
            built.push(node);
        }
        // The latest row of each path above `parts`, a container row made for a path without one.
        fn parent_of<'a>(
            built: &mut Vec<Node<'a>>,
            latest: &mut HashMap<String, usize>,
            parts: &[&str],
            root_name: &str,
        ) -> Option<usize> {
            let mut parent = None;
            for depth in 0..parts.len() {
                let prefix = parts[..depth].join(".");
                parent = match latest.get(&prefix) {
                    Some(&row) => Some(row),
                    None => {
                        let name = if depth == 0 { root_name.to_string() } else { parts[depth - 1].to_string() };
                        let node = container(prefix, name, depth as u64, parent);
                        add(built, latest, node);
                        Some(built.len() - 1)
                    }
                };
            }
            parent
        }
        for (index, layer) in layers.iter().enumerate() {
            let parts = components(&layer.path);
            let parent = parent_of(&mut built, &mut latest, &parts, root_name);
            let name = match parts.last() {
                Some(last) => last.to_string(),
                None => layer.type_name.clone(),
            };
            let node = Node {
                layer: Some(layer),
                uncalled: None,
                index: Some(index),
                path: layer.path.clone(),
                name,
                depth: parts.len() as u64,
                parent,
                children: Vec::new(),
                counts: Counts::own(&layer.parameters, &layer.buffers),
                operator_flops: layer.metrics.operator_flops.clone(),
            };
            add(&mut built, &mut latest, node);
        }
        // The modules never called that hold parameters, after the calls: each under its
        // parent (a container made for a parent without a row), after the parent's rows so far.
        for module in uncalled {
            let own = Counts::own(&module.parameters, &module.buffers);
            if let Some(&row) = latest.get(&module.path).filter(|&&row| built[row].layer.is_none()) {
                // A container above calls that holds parameters of its own: one row.
                built[row].uncalled = Some(module);
                built[row].counts = built[row].counts.add(own);
                continue;
            }
            let parts = components(&module.path);
            if parts.is_empty() {
                continue; // the root is always called
            }
            let parent = parent_of(&mut built, &mut latest, &parts, root_name);
            let mut node =
                container(module.path.clone(), parts[parts.len() - 1].to_string(), parts.len() as u64, parent);
            node.uncalled = Some(module);
            node.counts = own;
            add(&mut built, &mut latest, node);
        }
        // Children come after their parents: a backward pass sums every subtree.
        for index in (0..built.len()).rev() {
            let children = std::mem::take(&mut built[index].children);
            let counts = children.iter().fold(built[index].counts, |sum, &child| sum.add(built[child].counts));
            built[index].counts = counts;
            if built[index].layer.is_none() {
                let flops: Vec<Option<&Metric>> =
                    children.iter().map(|&child| built[child].operator_flops.as_ref()).collect();
                // An uncalled module without children: 0 FLOPs when operators were counted.
                built[index].operator_flops = if flops.is_empty() && !counted { None } else { summed(&flops) };
            }
            built[index].children = children;
        }
        Tree { nodes: depth_first(built) }
    }
}

impl<'a> Tree<'a> {
    /// The tree of a report's layers and of its modules never called that hold parameters,
    /// the root named by its type (`by_module`'s label).
    pub fn of_report(report: &'a AnalysisReport) -> Tree<'a> {
        let root = match report.layers.iter().find(|layer| layer.path.is_empty()) {
            Some(root) => root.type_name.clone(),
            None => report.context.model_type.rsplit('.').next().unwrap_or("model").to_string(),
        };
        let counted = report.operator_flops.context.method != "not_requested";
        Tree::build(&report.layers, &report.uncalled_modules, &root, counted)
    }
}

/// One row of the tree as Python reads it (`torchscan.utils._module_tree`, the HTML page).
#[derive(Serialize)]
struct Row<'a> {
    path: &'a str,
    name: &'a str,
    depth: u64,
    /// The call's index in `report["layers"]`; null for a module never called itself.
    layer: Option<usize>,
    /// A module never called that holds parameters (`report["uncalled_modules"]`).
    uncalled: bool,
    /// The parent row's index; null for a root.
    parent: Option<usize>,
    #[serde(rename = "type")]
    type_name: Option<&'a str>,
    parameters: Option<u64>,
    trainable: Option<u64>,
    buffers: Option<u64>,
    operator_flops: Option<&'a Metric>,
}

/// The tree of `report` as a JSON list of rows, in table order.
pub fn tree_json(report: &AnalysisReport) -> crate::error::Result<String> {
    let tree = Tree::of_report(report);
    let rows: Vec<Row> = tree
        .nodes
        .iter()
        .map(|node| Row {
            path: &node.path,
            name: &node.name,
            depth: node.depth,
            layer: node.index,
            uncalled: node.uncalled.is_some(),
            parent: node.parent,
            type_name: node.type_name(),
            parameters: node.counts.parameters,
            trainable: node.counts.trainable,
            buffers: node.counts.buffers,
            operator_flops: node.operator_flops.as_ref(),
        })
        .collect();
    serde_json::to_string(&rows)
        .map_err(|e| crate::error::Error::Internal(format!("the module tree cannot be serialized: {e}")))
}

impl Node<'_> {
    /// The module's type: its call's, or an uncalled module's; `None` for a container never
    /// called itself that holds no parameters of its own.
    pub fn type_name(&self) -> Option<&str> {
        match (self.layer, self.uncalled) {
            (Some(layer), _) => Some(layer.type_name.as_str()),
            (None, Some(module)) => Some(module.type_name.as_str()),
            (None, None) => None,
        }
    }
}

fn container<'a>(path: String, name: String, depth: u64, parent: Option<usize>) -> Node<'a> {
    let children = Vec::new();
    let counts = Counts::ZERO;
    Node { layer: None, uncalled: None, index: None, path, name, depth, parent, children, counts, operator_flops: None }
}

/// The rows in table order: each followed by its subtree, children in the order they came.
fn depth_first(built: Vec<Node<'_>>) -> Vec<Node<'_>> {
    let mut order = Vec::with_capacity(built.len());
    let mut stack: Vec<usize> = (0..built.len()).filter(|&i| built[i].parent.is_none()).rev().collect();
    while let Some(index) = stack.pop() {
        order.push(index);
        stack.extend(built[index].children.iter().rev());
    }
    let mut new_index = vec![0; built.len()];
    for (position, &old) in order.iter().enumerate() {
        new_index[old] = position;
    }
    let mut slots: Vec<Option<Node<'_>>> = built.into_iter().map(Some).collect();
    order
        .iter()
        .map(|&old| {
            let mut node = slots[old].take().expect("each row once");
            node.parent = node.parent.map(|p| new_index[p]);
            node.children = node.children.iter().map(|&c| new_index[c]).collect();
            node
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;

    fn metric(v: u64) -> Value {
        json!({"status": "complete", "value": v, "known_value": v, "unit": "FLOPs", "scope": "s", "method": "m"})
    }

    fn layer(path: &str, params: u64, flops: Value) -> Layer {
        let depth = components(path).len();
        serde_json::from_value(json!({
            "path": path, "call_index": 0, "name": path.rsplit('.').next().unwrap(), "depth": depth,
            "type": if path.is_empty() { "GPT" } else { "T" },
            "input": {"args": [], "kwargs": {}}, "output": {"kind": "none"},
            "parameters": {"trainable": params, "frozen": 0, "bytes": 4 * params, "shared": false},
            "buffers": {"elements": 0, "bytes": 0, "shared": false},
            "metrics": {"calls": {"status": "complete", "value": 1, "known_value": 1, "unit": "calls",
                                  "scope": "module_call", "method": "pytorch_hook"}, "operator_flops": flops}}))
        .unwrap()
    }

    /// GPT-2's shape: `h` (a ModuleList) is never called; its blocks are called after `drop`.
    #[test]
    fn an_uncalled_container_gets_a_row_and_its_calls_stay_under_it() {
        let partial = json!({"status": "partial", "value": null, "known_value": 7, "unit": "FLOPs", "scope": "s",
                             "method": "m"});
        let layers = vec![
            layer("", 0, metric(100)),
            layer("wte", 10, metric(0)),
            layer("drop", 0, metric(0)),
            layer("h.0", 0, metric(40)),
            layer("h.0.mlp", 5, metric(40)),
            layer("h.1", 3, partial),
            layer("ln_f", 2, metric(20)),
        ];
        let tree = Tree::new(&layers, "GPT");
        let rows: Vec<(&str, u64, Option<u64>, bool)> =
            tree.nodes.iter().map(|n| (n.path.as_str(), n.depth, n.counts.parameters, n.layer.is_none())).collect();
        assert_eq!(
            rows,
            vec![
                ("", 0, Some(20), false),
                ("wte", 1, Some(10), false),
                ("drop", 1, Some(0), false),
                // Never called: a row of its own, holding its blocks (5 + 3 parameters).
                ("h", 1, Some(8), true),
                ("h.0", 2, Some(5), false),
                ("h.0.mlp", 3, Some(5), false),
                ("h.1", 2, Some(3), false),
                ("ln_f", 1, Some(2), false),
            ]
        );
        assert_eq!(tree.nodes[3].name, "h");
        assert_eq!(tree.nodes[3].parent, Some(0));
        assert_eq!(tree.nodes[0].children, vec![1, 2, 3, 7]);
        // The container's FLOPs: its blocks' summed, 40 + at least 7, a lower bound.
        let flops = tree.nodes[3].operator_flops.as_ref().unwrap();
        assert_eq!((flops.status, flops.known_value.and_then(|n| n.integer())), (Status::Partial, Some(47)));
        // The root is named by its type, as by_module labels it.
        assert_eq!(tree.nodes[0].name, "GPT");
    }

    #[test]
    fn a_view_without_the_root_gets_one_and_escaped_dots_are_not_split() {
        let layers = vec![layer("a\\.b", 1, metric(1)), layer("a\\.b.c", 2, metric(1))];
        let tree = Tree::new(&layers, "Net");
        let rows: Vec<(&str, &str, u64)> =
            tree.nodes.iter().map(|n| (n.path.as_str(), n.name.as_str(), n.depth)).collect();
        assert_eq!(rows, vec![("", "Net", 0), ("a\\.b", "a\\.b", 1), ("a\\.b.c", "c", 2)]);
        assert_eq!(tree.nodes[0].counts.parameters, Some(3));
        assert_eq!(components(""), Vec::<&str>::new());
        assert_eq!(components("x.0.y"), vec!["x", "0", "y"]);
    }

    fn uncalled(path: &str, type_name: &str, trainable: u64, frozen: u64, buffers: u64) -> UncalledModule {
        let components = components(path);
        serde_json::from_value(json!({
            "path": path, "name": components.last().unwrap(), "depth": components.len(), "type": type_name,
            "parameters": {"trainable": trainable, "frozen": frozen, "bytes": 4 * (trainable + frozen), "shared": false},
            "buffers": {"elements": buffers, "bytes": 4 * buffers, "shared": false}}))
        .unwrap()
    }

    /// Modules never called that hold parameters: an unused Linear(3, 5) beside a called one, a
    /// never-called block holding a frozen weight and an unused Linear inside it, and GPT-2's
    /// `h` holding a parameter of its own.
    #[test]
    fn uncalled_modules_get_rows_and_count_in_their_parents() {
        let layers = vec![
            layer("", 0, metric(100)),
            layer("fc", 16, metric(28)),
            layer("h.0", 7, metric(40)),
            layer("out", 2, metric(32)),
        ];
        let uncalled = vec![
            // Linear(3, 5): 3 * 5 + 5 = 20 parameters.
            uncalled("unused", "Linear", 20, 0, 0),
            // Called children: one row, its own 4 parameters added to its blocks' 7.
            uncalled("h", "Blocks", 4, 0, 0),
            // A block never called: 6 frozen parameters and 2 buffer elements, and a Linear(2, 1)
            // inside it (2 + 1 = 3).
            uncalled("spare", "Block", 0, 6, 2),
            uncalled("spare.proj", "Linear", 3, 0, 0),
            // Its parent holds no parameters of its own: a container is made for it.
            uncalled("aux.head", "Linear", 5, 0, 0),
        ];
        let tree = Tree::build(&layers, &uncalled, "Net", true);
        type Row<'a> = (&'a str, Option<&'a str>, Option<u64>, Option<u64>, Option<u64>);
        let rows: Vec<Row> = tree
            .nodes
            .iter()
            .map(|n| (n.path.as_str(), n.type_name(), n.counts.parameters, n.counts.trainable, n.counts.buffers))
            .collect();
        // The root: 16 + (7 + 4) + 2 + 20 + (6 + 3) + 5 = 63 parameters, of which 6 frozen
        // (57 trainable), and 2 buffer elements.
        assert_eq!(
            rows,
            vec![
                ("", Some("GPT"), Some(63), Some(57), Some(2)),
                ("fc", Some("T"), Some(16), Some(16), Some(0)),
                ("h", Some("Blocks"), Some(11), Some(11), Some(0)),
                ("h.0", Some("T"), Some(7), Some(7), Some(0)),
                ("out", Some("T"), Some(2), Some(2), Some(0)),
                // After the called siblings, in named_modules order.
                ("unused", Some("Linear"), Some(20), Some(20), Some(0)),
                ("spare", Some("Block"), Some(9), Some(3), Some(2)),
                ("spare.proj", Some("Linear"), Some(3), Some(3), Some(0)),
                ("aux", None, Some(5), Some(5), Some(0)),
                ("aux.head", Some("Linear"), Some(5), Some(5), Some(0)),
            ]
        );
        let unused = &tree.nodes[5];
        assert!(unused.layer.is_none() && unused.uncalled.is_some() && unused.parent == Some(0));
        assert_eq!(tree.nodes[7].parent, Some(6));
        // FLOPs: an uncalled module ran nothing, 0; `h` sums its block's 40.
        let flops = |i: usize| tree.nodes[i].operator_flops.as_ref().and_then(|m| m.value).and_then(|n| n.integer());
        assert_eq!((flops(5), flops(6), flops(2)), (Some(0), Some(0), Some(40)));
        // Structure mode (nothing counted): no number, as for the calls.
        let tree = Tree::build(&layers, &uncalled, "Net", false);
        assert!(tree.nodes[5].operator_flops.is_none());
        assert_eq!(tree.nodes[0].counts.parameters, Some(63));
    }
}

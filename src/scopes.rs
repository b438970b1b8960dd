//! Module attribution. Python's module hooks push and pop labels (`ResNet`,
//! `ResNet.layer1.0.conv1`); each distinct stack of labels is one node of a tree, so an event
//! adds its FLOPs to one node (no per-event walk up the stack), and the report folds the tree:
//! a module's FLOPs include its children's, and a module that appears twice on one stack
//! (recursion) is counted once.

use std::collections::{BTreeMap, HashMap};

use crate::report::Status;

/// One label's inclusive FLOPs: `None` when the count overflowed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LabelCount {
    pub flops: Option<u64>,
    pub status: Status,
}

const ROOT: u32 = 0;

/// Prefix of labels that identify one module call rather than a module.
pub const CALL_PREFIX: char = '\0';

struct Node {
    label: u32,
    parent: u32,
    flops: u64,
    overflowed: bool,
    incomplete: bool,
}

pub struct ScopeTree {
    labels: Vec<String>,
    label_ids: HashMap<String, u32>,
    nodes: Vec<Node>,
    children: HashMap<(u32, u32), u32>,
    stack: Vec<u32>,
    /// The node under the stack: the root, or the module calls a host's frames show open
    /// (`session/modules.rs`, labelling by frames).
    base: u32,
    /// (autograd sequence number, node) of forward calls made inside a module, ascending.
    sequences: Vec<(i64, u32)>,
}

impl Default for ScopeTree {
    fn default() -> Self {
        Self::new()
    }
}

impl ScopeTree {
    /// The node of work done in no module call.
    pub const ROOT: u32 = ROOT;

    pub fn new() -> ScopeTree {
        ScopeTree {
            labels: Vec::new(),
            label_ids: HashMap::new(),
            nodes: vec![Node { label: u32::MAX, parent: ROOT, flops: 0, overflowed: false, incomplete: false }],
            children: HashMap::new(),
            stack: Vec::new(),
            base: ROOT,
            sequences: Vec::new(),
        }
    }

    /// The node events are attributed to now.
    pub fn current(&self) -> u32 {
        self.stack.last().copied().unwrap_or(self.base)
    }

    /// The node the stack stands on ([`Self::current`] when nothing is pushed).
    pub fn set_base(&mut self, node: u32) {
        self.base = node;
    }

    pub fn push(&mut self, label: &str) {
        let label = self.label_id(label);
        self.push_label(label);
    }

    /// Pushes an interned label ([`Self::label_id`]): a module call's steady-state path, which
    /// allocates nothing once the call ran at this place of the tree.
    pub fn push_label(&mut self, label: u32) {
        let node = self.child_labelled(self.current(), label);
        self.stack.push(node);
    }

    /// Remembers that the forward call with autograd `sequence` ran in `node`. Sequence numbers
    /// grow with each autograd node a thread creates, so this is an append in the steady state.
    /// Calls that create no node see the number the next node will take: of several calls with
    /// one number, the last creates the node (the number moves on after it), so it wins. Only
    /// changes of node are kept (the root included): a number between two entries belongs to
    /// the earlier one (see [`Self::scope_of_sequence`]).
    pub fn remember_sequence(&mut self, sequence: i64, node: u32) {
        if sequence < 0 {
            return;
        }
        if let Some(last) = self.sequences.last_mut().filter(|(last, _)| *last == sequence) {
            last.1 = node;
            return;
        }
        match self.sequences.last() {
            Some(&(last, _)) if last > sequence => {
                if let Err(at) = self.sequences.binary_search_by_key(&sequence, |&(s, _)| s) {
                    self.sequences.insert(at, (sequence, node));
                }
            }
            // The node in force already (the root, before any entry).
            Some(&(_, current)) if current == node => {}
            None if node == ROOT => {}
            _ => self.sequences.push((sequence, node)),
        }
    }

    /// The node whose forward ran when the autograd node `sequence` was created: the last entry
    /// at or before it. Nodes that no operator call announces (a custom `Function`'s
    /// `CopySlices` and view nodes around an in-place operation on a view, the engine's
    /// accumulation between them) were created amid the calls of the module that made them.
    /// The root for none (a negative number: no node, or `AccumulateGrad`).
    pub fn scope_of_sequence(&self, sequence: i64) -> u32 {
        if sequence < 0 {
            return ROOT;
        }
        match self.sequences.binary_search_by_key(&sequence, |&(s, _)| s) {
            Ok(at) => self.sequences[at].1,
            Err(0) => ROOT,
            Err(at) => self.sequences[at - 1].1,
        }
    }

    /// The node for `label` under `parent`, created if needed (the stack is left alone): where
    /// a priced compiled graph's module work goes (`session/priced.rs`).
    pub fn child(&mut self, parent: u32, label: &str) -> u32 {
        let label = self.label_id(label);
        self.child_labelled(parent, label)
    }

    /// [`Self::child`] for an interned label.
    pub fn child_labelled(&mut self, parent: u32, label: u32) -> u32 {
        let next = self.nodes.len() as u32;
        let node = *self.children.entry((parent, label)).or_insert(next);
        if node == next {
            self.nodes.push(Node { label, parent, flops: 0, overflowed: false, incomplete: false });
        }
        node
    }

    /// The label of `node`; `None` for the root (work done in no module call).
    pub fn label_of(&self, node: u32) -> Option<&str> {
        self.label_id_of(node).and_then(|label| self.labels.get(label as usize)).map(String::as_str)
    }

    /// The node `node` was created under (the root's is the root).
    pub fn parent_of(&self, node: u32) -> u32 {
        self.nodes.get(node as usize).map_or(ROOT, |n| n.parent)
    }

    /// The interned label of `node`; `None` for the root.
    pub fn label_id_of(&self, node: u32) -> Option<u32> {
        self.nodes.get(node as usize).filter(|_| node != ROOT).map(|n| n.label)
    }

    /// Every node (a module that ran, with or without arithmetic), as (its labels from the root
    /// down, flops, overflowed, incomplete), in creation order: a closed session's scopes, to be
    /// replayed elsewhere.
    pub fn nodes(&self) -> Vec<(Vec<String>, u64, bool, bool)> {
        let mut out = Vec::new();
        for (i, n) in self.nodes.iter().enumerate() {
            let mut chain = Vec::new();
            let mut at = i as u32;
            while at != ROOT {
                let node = &self.nodes[at as usize];
                chain.push(self.labels[node.label as usize].clone());
                at = node.parent;
            }
            chain.reverse();
            out.push((chain, n.flops, n.overflowed, n.incomplete));
        }
        out
    }

    /// The label's number in this tree, interned on first use.
    pub fn label_id(&mut self, label: &str) -> u32 {
        match self.label_ids.get(label) {
            Some(&id) => id,
            None => {
                let id = self.labels.len() as u32;
                self.labels.push(label.to_string());
                self.label_ids.insert(label.to_string(), id);
                id
            }
        }
    }

    pub fn depth(&self) -> usize {
        self.stack.len()
    }

    /// `false` when there is nothing to pop.
    pub fn pop(&mut self) -> bool {
        self.stack.pop().is_some()
    }

    pub fn add_flops(&mut self, node: u32, flops: u64) {
        let n = &mut self.nodes[node as usize];
        match n.flops.checked_add(flops) {
            Some(v) => n.flops = v,
            None => n.overflowed = true,
        }
    }

    /// Takes back a count added to `node` (its call raised).
    pub fn sub_flops(&mut self, node: u32, flops: u64) {
        if let Some(n) = self.nodes.get_mut(node as usize) {
            n.flops = n.flops.saturating_sub(flops);
        }
    }

    /// A count in `node` did not fit in 64 bits: its labels (and their parents) are unavailable.
    pub fn mark_overflowed(&mut self, node: u32) {
        self.nodes[node as usize].overflowed = true;
    }

    pub fn mark_incomplete(&mut self, node: u32) {
        self.nodes[node as usize].incomplete = true;
    }

    /// Inclusive FLOPs per label. Nodes are created after their parents, so one reverse pass
    /// folds children into parents. Labels starting with [`CALL_PREFIX`] mark one module *call*
    /// (`crawl_module`'s per-layer counts); the others name modules (`by_module`).
    pub fn by_label(&self) -> BTreeMap<String, LabelCount> {
        let n = self.nodes.len();
        let mut flops: Vec<Option<u64>> = self.nodes.iter().map(|x| (!x.overflowed).then_some(x.flops)).collect();
        let mut incomplete: Vec<bool> = self.nodes.iter().map(|x| x.incomplete).collect();
        for i in (1..n).rev() {
            let parent = self.nodes[i].parent as usize;
            flops[parent] = match (flops[parent], flops[i]) {
                (Some(a), Some(b)) => a.checked_add(b),
                _ => None,
            };
            incomplete[parent] |= incomplete[i];
        }
        // Per label: sum over its outermost nodes (no ancestor with the same label).
        let mut totals: BTreeMap<u32, (Option<u64>, bool)> = BTreeMap::new();
        for i in 1..n {
            let label = self.nodes[i].label;
            if self.has_ancestor_labelled(i as u32, label) {
                continue;
            }
            let entry = totals.entry(label).or_insert((Some(0), false));
            entry.0 = match (entry.0, flops[i]) {
                (Some(a), Some(b)) => a.checked_add(b),
                _ => None,
            };
            entry.1 |= incomplete[i];
        }
        totals
            .into_iter()
            .map(|(label, (flops, incomplete))| {
                let status = match (flops, incomplete) {
                    (None, _) => Status::Unavailable,
                    (Some(_), true) => Status::Partial,
                    (Some(_), false) => Status::Complete,
                };
                (self.labels[label as usize].clone(), LabelCount { flops, status })
            })
            .collect()
    }

    /// The distinct module labels on `node`'s stack (not the call labels), outermost first.
    pub fn module_labels_of(&self, node: u32) -> Vec<&str> {
        let mut labels: Vec<&str> = Vec::new();
        let mut at = node;
        while at != ROOT {
            let Some(n) = self.nodes.get(at as usize) else { break };
            let label = self.labels[n.label as usize].as_str();
            if !label.starts_with(CALL_PREFIX) && !labels.contains(&label) {
                labels.push(label);
            }
            at = n.parent;
        }
        labels.reverse();
        labels
    }

    fn has_ancestor_labelled(&self, node: u32, label: u32) -> bool {
        let mut at = self.nodes[node as usize].parent;
        while at != ROOT {
            if self.nodes[at as usize].label == label {
                return true;
            }
            at = self.nodes[at as usize].parent;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parents_include_children_and_shared_modules_sum() {
        let mut t = ScopeTree::new();
        t.push("Net");
        t.add_flops(t.current(), 1);
        t.push("Net.block");
        t.add_flops(t.current(), 10);
        t.pop();
        t.push("Net.block"); // the same module called twice
        t.add_flops(t.current(), 100);
        t.pop();
        t.pop();
        t.add_flops(t.current(), 1000); // outside every module: in no label
        let m = t.by_label();
        assert_eq!(m["Net"], LabelCount { flops: Some(111), status: Status::Complete });
        assert_eq!(m["Net.block"].flops, Some(110));
        assert_eq!(m.len(), 2);
    }

    #[test]
    fn the_last_call_with_a_sequence_number_owns_its_node() {
        // Calls that create no autograd node see the number the next node takes; the call that
        // creates it comes last, then the number moves on.
        let mut t = ScopeTree::new();
        t.push("Net");
        let net = t.current();
        t.push("Net.conv");
        let conv = t.current();
        t.remember_sequence(7, net); // a view in Net: no node
        t.remember_sequence(7, conv); // the convolution: node 7
        t.remember_sequence(8, conv);
        t.remember_sequence(8, ScopeTree::ROOT); // node 8 is created outside every module
        assert_eq!(t.scope_of_sequence(7), conv);
        assert_eq!(t.scope_of_sequence(8), ScopeTree::ROOT);
    }

    #[test]
    fn a_node_no_call_announced_belongs_to_the_calls_around_it() {
        let mut t = ScopeTree::new();
        t.remember_sequence(3, ScopeTree::ROOT); // before any module: nothing to keep
        t.push("Net");
        let net = t.current();
        t.remember_sequence(5, net);
        t.remember_sequence(6, net); // the same node in force: not kept again
        t.pop();
        t.remember_sequence(9, ScopeTree::ROOT);
        // Nodes 5-8 (7: a CopySlices made by an in-place call on a view in Net) are Net's; from
        // 9 on the root's; before 5 and negative numbers the root's.
        assert_eq!([4, 5, 7, 8, 9, 40, -1].map(|n| t.scope_of_sequence(n)), [0, net, net, net, 0, 0, 0]);
        assert_eq!(t.sequences, vec![(5, net), (9, ScopeTree::ROOT)]);
    }

    #[test]
    fn recursion_counts_once_and_incompleteness_propagates() {
        let mut t = ScopeTree::new();
        t.push("A");
        t.push("A.b");
        t.push("A"); // A called from inside its own child
        t.add_flops(t.current(), 5);
        t.mark_incomplete(t.current());
        let m = t.by_label();
        assert_eq!(m["A"], LabelCount { flops: Some(5), status: Status::Partial });
        assert_eq!(m["A.b"].flops, Some(5));
        assert!(t.pop() && t.pop() && t.pop());
        assert!(!t.pop());
    }
}

//! Compiled graphs, priced once and counted each time they run.
//!
//! torch.compile's inductor backend turns most of a graph into generated kernels that never pass
//! the dispatcher, so the observer cannot count them as they run. The Python layer
//! (`python/torchscan/_compiled.py`) prices each graph when it is compiled instead: it replays the
//! graph's ATen operators (as AOTAutograd traced them, before inductor's decompositions) on the
//! meta device inside a recording session, with the identities of each node's modules as scopes, and
//! [`Session::into_priced`] turns that session into a [`PricedGraph`] kept in a process-wide
//! table. Each run of the compiled graph is then one event (`torchscan::compiled_end`) that adds
//! the graph's counts to every session observing it ([`Session::add_priced`]): the operators,
//! categories and module labels the eager run would have counted (each session labels the
//! modules by identity, `Session::name_modules`), below the module call (or, in backward, the
//! forward call) that ran the graph. Work the recording could not
//! price (an operator with no formula) stays partial, with the same diagnostics.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::{Class, Counter, OpDescription, OpStats, Origin, Phase, Session};
use crate::formulas::Category;

/// Work done in one module of the graph: the modules on the call stack, outermost first, by
/// identity (Python's `id`, the keys of the graph's `nn_module_stack`); empty for work done in
/// no module of the graph.
#[derive(Clone, Debug)]
pub struct PricedScope {
    chain: Vec<u64>,
    flops: u64,
    overflowed: bool,
    incomplete: bool,
}

/// A graph's counts, for one run.
#[derive(Clone, Debug)]
pub struct PricedGraph {
    /// What the recording counted per operator.
    ops: Vec<OpStats>,
    categories: [u64; Category::ALL.len()],
    total: Counter,
    integer: Counter,
    scopes: Vec<PricedScope>,
    /// Its collectives (functional collectives in a compiled graph), by recording scope node.
    collectives: super::communication::PricedCollectives,
}

static GRAPHS: Mutex<Vec<Arc<PricedGraph>>> = Mutex::new(Vec::new());

/// Keeps `graph` for the life of the process; returns its id (what `compiled_end` carries).
pub fn register(graph: PricedGraph) -> i64 {
    let mut graphs = GRAPHS.lock().unwrap_or_else(|p| p.into_inner());
    graphs.push(Arc::new(graph));
    graphs.len() as i64 - 1
}

/// The graph `id` names; `None` for an id never registered.
pub fn lookup(id: i64) -> Option<Arc<PricedGraph>> {
    let graphs = GRAPHS.lock().unwrap_or_else(|p| p.into_inner());
    usize::try_from(id).ok().and_then(|i| graphs.get(i).cloned())
}

impl Session {
    /// What this (recording) session counted, as a graph to add to other sessions. Phases and
    /// threads do not carry over: a run is counted in the phase it runs in.
    pub fn into_priced(self) -> PricedGraph {
        let names = &self.ops;
        let collectives = self.collectives.priced(|op| names[op].name.clone());
        let ops = self.ops.into_iter().filter(|s| s.calls > 0 || s.overflowed || s.formula_errors > 0).collect();
        let scopes = self
            .scopes
            .nodes()
            .into_iter()
            .map(|(labels, flops, overflowed, incomplete)| PricedScope {
                // The recording's scopes are module identities in decimal.
                chain: labels.iter().filter_map(|label| label.parse().ok()).collect(),
                flops,
                overflowed,
                incomplete,
            })
            .collect();
        let total = Counter {
            flops: self.total.flops,
            // Other threads' work during the recording is not the graph's.
            incomplete: self.total.incomplete || self.internal_errors > 0,
            overflowed: self.total.overflowed,
        };
        let integer = Counter { incomplete: self.integer.incomplete || self.internal_errors > 0, ..self.integer };
        PricedGraph { ops, categories: self.categories, total, integer, scopes, collectives }
    }

    /// One completed run of `graph` (id `id`), in `phase`, attributed below `base`.
    pub(super) fn add_priced(&mut self, id: i64, graph: &PricedGraph, base: u32, phase: Phase, origin: Origin) {
        if origin == Origin::Unfollowed {
            for op in graph.ops.iter().filter(|op| matches!(op.class, Class::Collective(_))) {
                for _ in 0..op.calls {
                    self.collectives.record_unfollowed();
                }
            }
            for op in graph.ops.iter().filter(|op| op.flops > 0 || op.class == Class::Uncounted) {
                let index = self.priced_op(op);
                *self.unfollowed.entry(index).or_insert(0) += op.calls;
                self.total.incomplete = true;
                self.phases[phase as usize].incomplete = true;
            }
            return;
        }
        if phase == Phase::Backward {
            self.backward_seen = true;
        }
        for op in &graph.ops {
            let index = self.priced_op(op);
            let stats = &mut self.ops[index];
            stats.calls += op.calls;
            match stats.flops.checked_add(op.flops) {
                Some(v) => stats.flops = v,
                None => stats.overflowed = true,
            }
            stats.float_flops = stats.float_flops.saturating_add(op.float_flops);
            stats.overflowed |= op.overflowed;
            stats.formula_errors += op.formula_errors;
            stats.first_error = stats.first_error.or(op.first_error);
        }
        for (slot, &flops) in self.categories.iter_mut().zip(graph.categories.iter()) {
            *slot = slot.checked_add(flops).unwrap_or(u64::MAX);
        }
        self.integer.add(graph.integer.flops);
        self.integer.incomplete |= graph.integer.incomplete;
        self.integer.overflowed |= graph.integer.overflowed;
        for counter in [&mut self.total, &mut self.phases[phase as usize]] {
            counter.add(graph.total.flops);
            counter.incomplete |= graph.total.incomplete;
            counter.overflowed |= graph.total.overflowed;
        }
        if !self.priced_scopes.contains_key(&(id, base)) {
            let nodes = self.priced_nodes(graph, base);
            self.priced_scopes.insert((id, base), nodes);
        }
        let nodes = &self.priced_scopes[&(id, base)];
        for (scope, &node) in graph.scopes.iter().zip(nodes) {
            self.scopes.add_flops(node, scope.flops);
            if scope.overflowed {
                self.scopes.mark_overflowed(node);
            }
            if scope.incomplete {
                self.scopes.mark_incomplete(node);
            }
        }
        if graph.collectives.is_empty() {
            return;
        }
        // The recording's scope nodes are the graph's scopes, in order (`ScopeTree::nodes`).
        let nodes = self.priced_scopes[&(id, base)].clone();
        let mut collectives = std::mem::take(&mut self.collectives);
        collectives.add_priced(
            &graph.collectives,
            phase,
            |name| self.op_by_name.get(name).copied().unwrap_or(0),
            |scope| nodes.get(scope as usize).copied().unwrap_or(base),
        );
        self.collectives = collectives;
    }

    /// This session's entry for a priced operator (created on its first run).
    fn priced_op(&mut self, op: &OpStats) -> usize {
        match self.op_by_name.get(&op.name) {
            Some(&index) if self.ops[index].class == op.class => index,
            _ => self.add_op(
                OpDescription {
                    name: op.name.clone(),
                    has_own_kernel: op.kernel,
                    explicit_composite: false,
                    positional_args: op.positional_args,
                    composite_routes: op.composite_routes,
                },
                op.class,
            ),
        }
    }

    /// The scope node of each of `graph`'s scopes below `base`: the labels this session gave
    /// the scope's modules (`Net.layer1`, `Net.layer1.0`), pushed below `base` as eager mode's
    /// module hooks would have pushed them; a label `base` already carries (the module whose call
    /// ran the graph) is not pushed twice, and a module the session never named (one outside its
    /// roots) is passed over. Remembered per (graph, base) by the caller, so that a run
    /// allocates nothing once its graph ran there once.
    fn priced_nodes(&mut self, graph: &PricedGraph, base: u32) -> Vec<u32> {
        let mut nodes = Vec::with_capacity(graph.scopes.len());
        for scope in &graph.scopes {
            let mut node = base;
            for module in &scope.chain {
                let Some(label) = self.module_label(*module) else { continue };
                if self.scopes.label_id_of(node) != Some(label) {
                    node = self.scopes.child_labelled(node, label);
                }
            }
            nodes.push(node);
        }
        nodes
    }
}

/// (graph id, base scope) -> the scope node of each of the graph's scopes.
pub type PricedScopes = HashMap<(i64, u32), Vec<u32>>;

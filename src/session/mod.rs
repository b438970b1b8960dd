//! One counting session: operator events in, counters out. This file is the counting rule
//! (`docs/methodology.md`, The counting rule):
//! - an operator with a formula (or a caller's custom formula) **claims** its call: it is counted
//!   once and the shim skips everything nested in it;
//! - one on the ignore list costs zero, with its reason, and is skipped likewise;
//! - one without a kernel of its own (a composite) is **transparent**: its children count;
//! - any other operator is **uncounted**: the totals become partial and a diagnostic names it.
//!   It is never assumed free because of what its children did, so its children are skipped too.
//! - a claim counts only if the operator returns: one that raises (or that autograd's
//!   checkpoint stops early) is not counted. The common outcomes are counted at the start and
//!   taken back by their [`Receipt`] if the call raises; the rest wait for the end
//!   (`pending.rs`);
//! - a call that a wrapper answers first (a Python dispatch mode or tensor subclass, a
//!   torch.func transform) is not a kernel: it is transparent, and the calls the wrapper makes
//!   (the batched kernel with its real shapes, or nothing for a cache hit) count;
//! - inside an ATen kernel the shim hides nested calls made by the kernel itself
//!   (decompositions), but not those made by its autograd layer (forward-mode tangents,
//!   saved-tensor hooks): those are operators of their own (`Decision::KERNEL`).
//!
//! The per-event path (`on_op_start`) allocates nothing once every operator was seen once: the
//! operator cache is keyed by the address of the operator's name (stable for a registered
//! schema) and the argument buffers are reused.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

use crate::args::{index_stream, Args};
use crate::formulas::{self, Category, FormulaError, Rule};
use crate::pending::{Outcome, Pending};
use crate::scopes::ScopeTree;

mod assemble;
mod communication;
mod config;
mod memo;
mod modules;
pub mod priced;

pub use assemble::{parse_custom_results, CustomResult};
pub use config::{Config, Labelling, BUILT_AGAINST_TORCH};
pub use memo::PriceMemos;
pub use modules::Entered;

/// [`OpEvent::route`] of a call whose route is not a dense backend's (or has no tensor).
pub const UNKNOWN_ROUTE: u8 = 255;

/// What the shim learns about an operator the first time a session sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpDescription {
    /// Qualified name, `aten::mm`.
    pub name: String,
    /// Whether a backend kernel (CPU, CUDA, ...) implements it directly, as opposed to a
    /// composite made of other dispatched operators.
    pub has_own_kernel: bool,
    /// Whether its decomposition is a CompositeExplicitAutograd kernel, which runs below its own
    /// autograd kernel (unlike a CompositeImplicitAutograd one, which autograd sees through).
    pub explicit_composite: bool,
    /// Schema arguments before the keyword-only ones (custom formulas receive these).
    pub positional_args: usize,
    /// The routes ([`OpEvent::route`]'s values, as bits) on which a call runs the operator's
    /// CompositeImplicitAutograd kernel although it has kernels of its own elsewhere
    /// (`_fused_rms_norm`: a CUDA kernel, a composite on CPU): there the call is a composite's.
    pub composite_routes: u64,
}

/// The shim's view of one dispatcher event, read lazily: most events never need their inputs.
pub trait OpEvent {
    /// `None` when the event is not a dispatcher operator (an engine marker, a user scope).
    fn describe(&self) -> Option<OpDescription>;
    /// The encoded inputs (see `args.rs`), valid until the next read of this thread's events.
    fn inputs(&self) -> &[i64];
    /// The inputs of a collective: as [`Self::inputs`], with its process group (an object, or a
    /// functional collective's group name) read as a `GROUP` record.
    fn collective_inputs(&self) -> &[i64] {
        self.inputs()
    }
    /// The inputs and a `DATA` record of what a data-dependent formula needs from the tensors'
    /// values (`args.rs`), where the shim can read it; read only after a formula returned
    /// `DataDependent`, never on the per-operator path.
    fn data_inputs(&self) -> &[i64] {
        self.inputs()
    }
    /// Appends the encoded outputs to `out`; only called for a custom formula's call (`Decision::CAPTURE`).
    fn read_outputs(&self, out: &mut Vec<i64>);
    /// The call's route, `2 * backend + through_autograd` (`c10::BackendComponent`), 255 when
    /// unknown; only asked of operators with [`OpDescription::composite_routes`].
    fn route(&self) -> u8 {
        UNKNOWN_ROUTE
    }
}

/// What the shim does with the rest of the event, as bits (`cpp/observer.cpp` reads them):
/// skip the nested calls or look at them; and for a skipped (claimed) call, whether its end must
/// be reported (`PENDING`: the core counts it only once it has returned) or only its abort (the
/// core counted it at its start and gives the shim a [`Receipt`] to undo it should it raise).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision(pub u8);

impl Decision {
    /// Transparent (or not an operator): nested events are looked at.
    pub const DESCEND: Decision = Decision(0);
    /// Claimed, ignored or uncounted: nested events are skipped.
    pub const SKIP: Decision = Decision(1);
    /// Claimed by a custom formula: the outputs are read at the end.
    pub const CAPTURE: u8 = 2;
    /// An ATen operator with a kernel of its own: nested calls made below its autograd layer
    /// (its kernel's decomposition) are skipped, calls made by its autograd layer (forward-mode
    /// tangents, saved-tensor hooks) are operators of their own.
    pub const KERNEL: u8 = 4;
    /// The core waits for the call's end ([`Session::on_op_end`]).
    pub const PENDING: u8 = 8;
    /// A compiled graph starts running (`torchscan::compiled_begin`): until its end, the
    /// operators it dispatches are part of its price, not counted one by one.
    pub const SUPPRESS: u8 = 16;
    /// The compiled graph ended (`torchscan::compiled_end`, counted).
    pub const RESUME: u8 = 32;
    /// Nothing was done: the module calls open (labelling by frames) include modules the
    /// session has not named; the registry has the host name them, then asks again. Never seen
    /// by the shim.
    pub const NAME: Decision = Decision(64);

    fn claim(kernel: bool, extra: u8) -> Decision {
        Decision(1 | extra | if kernel { Decision::KERNEL } else { 0 })
    }

    pub fn skips(self) -> bool {
        self.0 & 1 != 0
    }

    pub fn is_pending(self) -> bool {
        self.0 & Decision::PENDING != 0
    }
}

/// What a call counted at its start added, so that the shim can have it taken back if the call
/// raises (`valid` is false when nothing was counted at the start).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Receipt {
    pub valid: bool,
    pub op: u32,
    pub scope: u32,
    pub phase: u8,
    pub category: u8,
    pub flops: u64,
    /// An integer kernel's floating-point work, counted as FLOPs ([`formulas::Formula::float`]).
    pub float_flops: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Forward = 0,
    Backward = 1,
}

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::Forward => "forward",
            Phase::Backward => "backward",
        }
    }
}

/// Where an operator event comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpCall {
    /// Identifies the operator: the address of its schema's name (stable while registered).
    pub key: usize,
    /// Identifies the calling thread's frame: pairs a custom call's start with its end.
    pub token: usize,
    pub phase: Phase,
    /// Autograd sequence number: in forward, the one the autograd node this call creates will
    /// carry (negative when none); in backward, the enclosing node's. It attributes backward
    /// work to the module whose forward created the node.
    pub sequence: i64,
    /// The call reaches a wrapper before any kernel (a Python dispatch mode or tensor subclass,
    /// a torch.func transform): it is not a kernel call, the calls the wrapper makes are.
    pub interposed: bool,
    pub origin: Origin,
}

/// Which thread an event comes from, as the session sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(u8)]
pub enum Origin {
    /// The session's thread, or a thread it hands work to (autograd's): counted.
    #[default]
    Followed = 0,
    /// Another thread, counted because the session counts every thread (`threads: "all"`);
    /// its forward work has no module label.
    Foreign = 1,
    /// Another thread the session does not count: its work is reported missing.
    Unfollowed = 2,
}

impl Origin {
    pub fn from_u8(value: u8) -> Origin {
        match value {
            1 => Origin::Foreign,
            2 => Origin::Unfollowed,
            _ => Origin::Followed,
        }
    }
}

/// Dispatched by the Python layer each time an inductor-compiled graph runs (its fused kernels
/// never pass the dispatcher): uncounted work, with its own diagnostic.
pub const COMPILED_GRAPH_OPERATOR: &str = "torchscan::inductor_graph";
/// Dispatched by the Python layer each time a graph compiled by an AOTAutograd backend
/// (`aot_eager`) that could not be priced runs: its operators are counted as they run, but
/// without the labels of the modules inside it.
pub const UNLABELLED_GRAPH_OPERATOR: &str = "torchscan::unlabelled_graph";
/// Dispatched by the Python layer around each run of a compiled graph that was priced when it
/// was compiled (`priced.rs`): its operators are not counted one by one, the end adds the price.
pub const COMPILED_BEGIN_OPERATOR: &str = "torchscan::compiled_begin";
pub const COMPILED_END_OPERATOR: &str = "torchscan::compiled_end";

/// `metric` of operator diagnostics, as torchscan 0.2 names it.
pub const OPERATOR_DIAGNOSTIC_METRIC: &str = "flops";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    Formula(usize),
    Ignored(usize),
    /// A `torch.distributed` collective (`formulas::collective`): bytes, no FLOPs.
    Collective(usize),
    Custom,
    Transparent,
    Uncounted,
    /// torchscan's own operators: neither work nor something to report.
    Internal,
    /// A priced compiled graph starts / ends running (`priced.rs`).
    CompiledBegin,
    CompiledEnd,
    /// A compiled graph runs whose modules get no labels (see [`UNLABELLED_GRAPH_OPERATOR`]).
    Unlabelled,
}

/// Per distinct operator (qualified name) of this session.
#[derive(Clone, Debug)]
struct OpStats {
    name: String,
    class: Class,
    /// An ATen kernel: calls made by its autograd layer are operators of their own.
    kernel: bool,
    /// See [`OpDescription::composite_routes`].
    composite_routes: u64,
    positional_args: usize,
    calls: u64,
    flops: u64,
    /// An integer kernel's floating-point work ([`formulas::Formula::float`]), in FLOPs; `flops`
    /// holds its integer operations.
    float_flops: u64,
    overflowed: bool,
    formula_errors: u64,
    first_error: Option<FormulaError>,
}

/// One distinct (operator, inputs, outputs) a custom formula must price.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Signature {
    op: usize,
    inputs: Vec<i64>,
    outputs: Vec<i64>,
}

#[derive(Clone, Copy, Debug, Default)]
struct Counter {
    flops: u64,
    incomplete: bool,
    overflowed: bool,
}

/// The labels torchscan's optimizer-step hooks push (`torch.ops.torchscan.push_scope`, Python's
/// `torch.optim` global step hooks) to mark where an optimizer step starts and ends. They are not
/// scopes: the session moves the forward-phase work counted between them into its `optimizer`
/// phase. Marks through the existing operator keep the shim unchanged, and the per-operator path
/// untouched (the split is two copies of a counter per step). A call label starts with
/// `CALL_PREFIX` and a digit, so no label of a module or call is one of these.
pub const OPTIMIZER_STEP_BEGIN: &str = "\u{0}optimizer_step_begin";
pub const OPTIMIZER_STEP_END: &str = "\u{0}optimizer_step_end";

/// The optimizer steps of a session: what they counted, and the open one's starting point.
#[derive(Clone, Copy, Debug, Default)]
struct OptimizerSteps {
    counted: Counter,
    seen: bool,
    /// Steps begun and not ended (an optimizer whose step calls another's: one step).
    depth: u32,
    /// The forward phase's counter when the outermost open step began.
    mark: Counter,
}

impl Counter {
    fn add(&mut self, flops: u64) {
        match self.flops.checked_add(flops) {
            Some(v) => self.flops = v,
            None => self.overflowed = true,
        }
    }
}

/// Hashes an operator's key (the address of its name) with one multiplication: the default
/// SipHash, built against adversarial keys, costs more than the rest of the lookup on the
/// per-operator path, and these keys are addresses the process chose.
#[derive(Default)]
struct AddressHasher(u64);

impl Hasher for AddressHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }

    fn write_u64(&mut self, n: u64) {
        // Fibonacci hashing; the high bits (which hashbrown uses for its tags) mix all input bits.
        self.0 = (n ^ self.0).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

pub struct Session {
    config: Config,
    ops: Vec<OpStats>,
    op_by_name: HashMap<String, usize>,
    /// Operator-name address -> index into `ops`; only dispatcher operators (stable addresses).
    cache: HashMap<usize, usize, BuildHasherDefault<AddressHasher>>,
    /// Per formula (index into `formulas::FORMULAS`): the prices of its last calls (`memo.rs`),
    /// handed from one session to the next of its registry slot.
    memos: PriceMemos,
    total: Counter,
    phases: [Counter; 2],
    optimizer: OptimizerSteps,
    /// Integer operations of quantized kernels (category `Integer`): not FLOPs, so in no FLOP
    /// total, phase, category or module count.
    integer: Counter,
    backward_seen: bool,
    /// Operator events the core failed to handle (a panic, caught): the total is a lower bound.
    internal_errors: u64,
    /// Runs of compiled graphs whose modules got no labels (see [`UNLABELLED_GRAPH_OPERATOR`]).
    unlabelled_runs: u64,

    categories: [u64; Category::ALL.len()],
    scopes: ScopeTree,
    offsets: Vec<usize>,
    /// Claimed calls that have started and not yet returned.
    pending: Vec<Pending>,
    /// What the last claimed start counted; see [`Receipt`].
    receipt: Receipt,
    /// Calls of operators that do arithmetic on threads the session does not count, by operator.
    unfollowed: BTreeMap<usize, u64>,
    signatures: BTreeMap<Signature, usize>,
    /// (signature, scope, phase) -> calls.
    custom_calls: BTreeMap<(usize, u32, u8), u64>,
    priced_scopes: priced::PricedScopes,
    /// The modules labelled by identity, and their open calls (`modules.rs`).
    modules: modules::ModuleCalls,
    /// The collectives that ran (`communication.rs`).
    collectives: communication::Collectives,
}

impl Session {
    pub fn new(config: Config) -> Session {
        let modules = modules::ModuleCalls::new(config.modules);
        Session {
            config,
            ops: Vec::new(),
            op_by_name: HashMap::new(),
            cache: HashMap::default(),
            memos: PriceMemos::default(),
            total: Counter::default(),
            phases: [Counter::default(), Counter::default()],
            optimizer: OptimizerSteps::default(),
            integer: Counter::default(),
            backward_seen: false,
            internal_errors: 0,
            unlabelled_runs: 0,
            categories: [0; Category::ALL.len()],
            scopes: ScopeTree::new(),
            offsets: Vec::with_capacity(16),
            pending: Vec::with_capacity(8),
            receipt: Receipt::default(),
            unfollowed: BTreeMap::new(),
            signatures: BTreeMap::new(),
            custom_calls: BTreeMap::new(),
            priced_scopes: priced::PricedScopes::new(),
            modules,
            collectives: communication::Collectives::default(),
        }
    }

    /// Takes the prices remembered so far (for the next session of the same slot).
    pub fn take_memos(&mut self) -> PriceMemos {
        std::mem::take(&mut self.memos)
    }

    /// Starts from the prices an earlier session remembered.
    pub fn adopt_memos(&mut self, memos: PriceMemos) {
        self.memos = memos;
    }

    pub fn needs_outputs(&self) -> bool {
        !self.config.custom_operators.is_empty()
    }

    pub fn all_threads(&self) -> bool {
        self.config.all_threads
    }

    pub fn scopes_mut(&mut self) -> &mut ScopeTree {
        &mut self.scopes
    }

    /// An optimizer step begins ([`OPTIMIZER_STEP_BEGIN`]).
    pub fn begin_optimizer_step(&mut self) {
        let steps = &mut self.optimizer;
        if steps.depth == 0 {
            steps.mark = self.phases[Phase::Forward as usize];
        }
        steps.depth = steps.depth.saturating_add(1);
        steps.seen = true;
    }

    /// An optimizer step ends ([`OPTIMIZER_STEP_END`]): the forward-phase work counted since the
    /// outermost open step began is the optimizer's (its status with it); the backward of a
    /// closure the step evaluates (LBFGS) stays backward. An end without a begin changes nothing.
    pub fn end_optimizer_step(&mut self) {
        let steps = &mut self.optimizer;
        if steps.depth == 0 {
            return;
        }
        steps.depth -= 1;
        if steps.depth > 0 {
            return;
        }
        let forward = &mut self.phases[Phase::Forward as usize];
        let (now, mark) = (*forward, steps.mark);
        steps.counted.add(now.flops.saturating_sub(mark.flops));
        steps.counted.incomplete |= now.incomplete && !mark.incomplete;
        steps.counted.overflowed |= now.overflowed && !mark.overflowed;
        *forward = mark;
    }

    /// An operator starts. A claimed call is only counted when it returns ([`Self::on_op_end`]).
    pub fn on_op_start(&mut self, call: OpCall, event: &dyn OpEvent) -> Decision {
        let OpCall { key, token, phase, sequence, interposed, origin } = call;
        if phase == Phase::Forward && origin == Origin::Followed && !self.resolve_frames() {
            return Decision::NAME;
        }
        let Some(op) = self.op_of(key, event) else {
            // Not an operator: a custom autograd Function's forward (torch.compile's
            // CompiledFunction among them) carries the number of the node it creates, whose
            // backward belongs to the module it runs in.
            if phase == Phase::Forward && origin == Origin::Followed {
                let scope = self.scopes.current();
                self.scopes.remember_sequence(sequence, scope);
            }
            return Decision::DESCEND;
        };
        match self.ops[op].class {
            Class::CompiledBegin => return Decision(Decision::SKIP.0 | Decision::SUPPRESS),
            Class::CompiledEnd => return self.on_compiled_end(event, phase, sequence, origin),
            _ => {}
        }
        // A call that runs the operator's CompositeImplicitAutograd kernel is a composite's: its
        // decomposition computes (and is counted), never the formula too. Rare: one bit test.
        let composite = self.ops[op].composite_routes != 0 && self.runs_composite(op, event);
        if origin == Origin::Unfollowed {
            return if composite { Decision::DESCEND } else { self.on_unfollowed(op, interposed, phase) };
        }
        let scope = self.scope_of(phase, origin, sequence);
        if interposed || composite {
            return Decision::DESCEND;
        }
        let kernel = self.ops[op].kernel;
        let outcome = match self.ops[op].class {
            Class::Transparent => return Decision::DESCEND,
            // Handled before (compiled graphs), or torchscan's own.
            Class::Internal | Class::CompiledBegin | Class::CompiledEnd => return Decision::SKIP,
            Class::Unlabelled => {
                // The run's work lands in the module call around it: that module's count is
                // right, its submodules' are missing, which the report says.
                if self.labels_modules() {
                    self.unlabelled_runs += 1;
                    self.scopes.mark_incomplete(scope);
                }
                return Decision::SKIP;
            }
            Class::Ignored(_) => {
                // Counted now (a call, no arithmetic); taken back if it raises.
                self.ops[op].calls += 1;
                self.receipt = Receipt {
                    valid: true,
                    op: op as u32,
                    scope,
                    phase: phase as u8,
                    category: 0,
                    flops: 0,
                    float_flops: 0,
                };
                return Decision::claim(kernel, 0);
            }
            Class::Uncounted => Outcome::Uncounted,
            Class::Formula(index) => match self.price_call(op, index, scope, phase, event) {
                Ok(decision) => return decision,
                Err(outcome) => outcome,
            },
            Class::Collective(index) => {
                // Priced now (the inputs are at hand), counted when it returns: rare calls.
                let inputs = event.collective_inputs();
                let priced = if index_stream(inputs, &mut self.offsets) {
                    (formulas::collective::COLLECTIVES[index].traffic)(&Args::new(inputs, &self.offsets))
                } else {
                    Err(FormulaError::UnexpectedShape)
                };
                Outcome::Collective(priced)
            }
            Class::Custom => {
                let inputs = event.inputs().to_vec();
                self.pending.push(Pending { token, op, scope, phase, outcome: Outcome::Custom(inputs) });
                return Decision::claim(kernel, Decision::PENDING | Decision::CAPTURE);
            }
        };
        // Rare outcomes (no formula, an error, an overflow) mark the totals incomplete, which
        // cannot be taken back: they wait for the call's end.
        self.pending.push(Pending { token, op, scope, phase, outcome });
        Decision::claim(kernel, Decision::PENDING)
    }

    /// The session's entry for the operator `key` names, described on its first event (`None`:
    /// the event is not a dispatcher operator).
    #[inline]
    fn op_of(&mut self, key: usize, event: &dyn OpEvent) -> Option<usize> {
        if let Some(&op) = self.cache.get(&key) {
            return Some(op);
        }
        let op = self.intern(event.describe()?);
        self.cache.insert(key, op);
        Some(op)
    }

    /// Whether this call of `op` runs its CompositeImplicitAutograd kernel (see
    /// [`OpDescription::composite_routes`]).
    #[cold]
    fn runs_composite(&self, op: usize, event: &dyn OpEvent) -> bool {
        let route = event.route();
        route < 64 && (self.ops[op].composite_routes >> route) & 1 == 1
    }

    /// The scope node an operator's work goes to: the current module call for forward work
    /// (remembered for the autograd node it may create), the module whose forward created the
    /// node for backward work, no module for another thread's forward work.
    #[inline]
    fn scope_of(&mut self, phase: Phase, origin: Origin, sequence: i64) -> u32 {
        match phase {
            Phase::Forward if origin == Origin::Foreign => ScopeTree::ROOT,
            Phase::Forward => {
                let scope = self.scopes.current();
                self.scopes.remember_sequence(sequence, scope);
                scope
            }
            Phase::Backward => {
                self.backward_seen = true;
                self.scopes.scope_of_sequence(sequence)
            }
        }
    }

    /// A call of an operator with a formula: counted now when the formula prices it (the
    /// common case: the shim has nothing to report at its end unless it raises, see `undo`);
    /// otherwise the outcome that waits for the call's end, or descent into its children.
    #[inline]
    fn price_call(
        &mut self,
        op: usize,
        index: usize,
        scope: u32,
        phase: Phase,
        event: &dyn OpEvent,
    ) -> Result<Decision, Outcome> {
        let inputs = event.inputs();
        let memo = self.memos.of(index);
        let result = match memo.find(inputs) {
            Some(flops) => Ok(flops),
            None => {
                let priced = if index_stream(inputs, &mut self.offsets) {
                    formulas::FORMULAS[index].price(&Args::new(inputs, &self.offsets))
                } else {
                    Err(FormulaError::UnexpectedShape)
                };
                if let Ok(flops) = priced {
                    memo.remember(inputs, flops);
                }
                priced
            }
        };
        // A count that depends on the tensors' values: priced again from what the shim reads of
        // them (never remembered: the next call with these shapes may hold other values).
        let result = match result {
            Err(FormulaError::DataDependent) => {
                let inputs = event.data_inputs();
                if index_stream(inputs, &mut self.offsets) {
                    formulas::FORMULAS[index].price(&Args::new(inputs, &self.offsets))
                } else {
                    Err(FormulaError::UnexpectedShape)
                }
            }
            other => other,
        };
        let category = formulas::FORMULAS[index].category;
        match result {
            Ok(flops) => {
                self.ops[op].calls += 1;
                self.count(op, category, scope, phase, flops);
                let float_flops = self.count_float_part(op, index, scope, phase, event);
                self.receipt = Receipt {
                    valid: true,
                    op: op as u32,
                    scope,
                    phase: phase as u8,
                    category: category as u8,
                    flops,
                    float_flops,
                };
                Ok(Decision::claim(self.ops[op].kernel, 0))
            }
            Err(FormulaError::Overflow) => Err(Outcome::Overflow(category)),
            Err(FormulaError::Descend) => Ok(Decision::DESCEND),
            Err(error) => Err(Outcome::Failed(error)),
        }
    }

    /// The floating-point work of an integer kernel (a row's [`formulas::Formula::float`]: a
    /// dynamic quantized Linear's quantization of its input, dequantization and bias), counted
    /// as FLOPs (`pointwise`) beside its integer operations; 0 for every other row. Only those
    /// few rows read their inputs a second time.
    fn count_float_part(&mut self, op: usize, index: usize, scope: u32, phase: Phase, event: &dyn OpEvent) -> u64 {
        let Some(float) = formulas::FORMULAS[index].float else { return 0 };
        let inputs = event.inputs();
        let priced = if index_stream(inputs, &mut self.offsets) {
            float(&Args::new(inputs, &self.offsets))
        } else {
            Err(FormulaError::UnexpectedShape)
        };
        let pointwise = Category::Pointwise as usize;
        match priced {
            Ok(flops) => {
                let stats = &mut self.ops[op];
                match stats.float_flops.checked_add(flops) {
                    Some(v) => stats.float_flops = v,
                    None => self.total.overflowed = true,
                }
                let slot = &mut self.categories[pointwise];
                *slot = slot.checked_add(flops).unwrap_or(u64::MAX);
                self.total.add(flops);
                self.phases[phase as usize].add(flops);
                self.scopes.add_flops(scope, flops);
                flops
            }
            Err(FormulaError::Overflow) => {
                self.categories[pointwise] = u64::MAX;
                self.total.overflowed = true;
                self.phases[phase as usize].overflowed = true;
                self.scopes.mark_overflowed(scope);
                0
            }
            // The integer part read the same arguments: unreachable but for a malformed stream.
            Err(_) => {
                self.mark_incomplete(scope, phase);
                0
            }
        }
    }

    /// The end of a priced compiled graph's run: `(graph: int, completed: bool)`. A run that
    /// raised counts nothing; one that completed adds the graph's price where an operator
    /// dispatched here would have been counted.
    fn on_compiled_end(&mut self, event: &dyn OpEvent, phase: Phase, sequence: i64, origin: Origin) -> Decision {
        let resume = Decision(Decision::SKIP.0 | Decision::RESUME);
        let inputs = event.inputs();
        if !index_stream(inputs, &mut self.offsets) {
            return resume;
        }
        let args = Args::new(inputs, &self.offsets);
        let (Some(id), Some(true)) = (args.int(0), args.bool(1)) else { return resume };
        let Some(graph) = priced::lookup(id) else { return resume };
        let base = match (phase, origin) {
            (Phase::Forward, Origin::Followed) => self.scopes.current(),
            (Phase::Forward, _) => ScopeTree::ROOT,
            (Phase::Backward, _) => self.scopes.scope_of_sequence(sequence),
        };
        self.add_priced(id, &graph, base, phase, origin);
        resume
    }

    /// What the last claimed start counted (read by the shim right after `on_op_start`).
    pub fn take_receipt(&mut self) -> Receipt {
        std::mem::take(&mut self.receipt)
    }

    /// Takes back what a call counted at its start ([`Receipt`]): the call raised. Counts that
    /// overflowed stay unavailable.
    pub fn undo(&mut self, receipt: Receipt) {
        let Some(stats) = self.ops.get_mut(receipt.op as usize) else { return };
        if !receipt.valid {
            return;
        }
        stats.calls = stats.calls.saturating_sub(1);
        let flops = receipt.flops;
        stats.flops = stats.flops.saturating_sub(flops);
        stats.float_flops = stats.float_flops.saturating_sub(receipt.float_flops);
        if receipt.category == Category::Integer as u8 {
            self.integer.flops = self.integer.flops.saturating_sub(flops);
            // Its floating-point work is FLOPs, in `pointwise`.
            self.take_back_flops(Category::Pointwise as u8, receipt.phase, receipt.scope, receipt.float_flops);
        } else {
            self.take_back_flops(receipt.category, receipt.phase, receipt.scope, flops);
        }
    }

    fn take_back_flops(&mut self, category: u8, phase: u8, scope: u32, flops: u64) {
        if flops == 0 {
            return;
        }
        if let Some(slot) = self.categories.get_mut(category as usize) {
            if *slot != u64::MAX {
                *slot = slot.saturating_sub(flops);
            }
        }
        self.total.flops = self.total.flops.saturating_sub(flops);
        if let Some(phase) = self.phases.get_mut(phase as usize) {
            phase.flops = phase.flops.saturating_sub(flops);
        }
        self.scopes.sub_flops(scope, flops);
    }

    /// An operator on a thread the session does not count: the report says work was missed
    /// when it does arithmetic. Nothing is pending (the shim reports no end).
    fn on_unfollowed(&mut self, op: usize, interposed: bool, phase: Phase) -> Decision {
        // Nothing is counted, nothing waits: the shim reports neither end nor abort.
        match self.ops[op].class {
            _ if interposed => Decision::DESCEND,
            Class::Transparent => Decision::DESCEND,
            Class::Formula(index) if !formulas::FORMULAS[index].category.is_flops() => {
                *self.unfollowed.entry(op).or_insert(0) += 1;
                self.integer.incomplete = true;
                if formulas::FORMULAS[index].float.is_some() {
                    self.total.incomplete = true;
                    self.phases[phase as usize].incomplete = true;
                }
                Decision::SKIP
            }
            Class::Formula(_) | Class::Custom | Class::Uncounted => {
                *self.unfollowed.entry(op).or_insert(0) += 1;
                self.total.incomplete = true;
                self.phases[phase as usize].incomplete = true;
                Decision::SKIP
            }
            Class::Collective(_) => {
                self.collectives.record_unfollowed();
                Decision::SKIP
            }
            Class::Ignored(_) | Class::Internal | Class::CompiledBegin | Class::CompiledEnd | Class::Unlabelled => {
                Decision::SKIP
            }
        }
    }

    /// A claimed call (one that got a skipping [`Decision`]) returns on the thread `token`
    /// names: `completed` when it returned normally, not when it raised. Only a completed call
    /// is counted: its kernel's result was delivered.
    pub fn on_op_end(&mut self, token: usize, completed: bool, event: &dyn OpEvent) {
        // Ends arrive innermost first on each thread: the last pending call of this thread.
        let Some(at) = self.pending.iter().rposition(|p| p.token == token) else { return };
        let Pending { op, scope, phase, outcome, .. } = self.pending.remove(at);
        if !completed {
            return;
        }
        self.ops[op].calls += 1;
        match outcome {
            Outcome::Uncounted => self.mark_incomplete(scope, phase),
            Outcome::Overflow(category) => self.overflow(op, category, scope, phase),
            Outcome::Failed(error) => {
                let stats = &mut self.ops[op];
                stats.formula_errors += 1;
                stats.first_error.get_or_insert(error);
                match stats.class {
                    Class::Formula(index) if !formulas::FORMULAS[index].category.is_flops() => {
                        self.integer.incomplete = true;
                        // Its floating-point work (a dynamic quantized Linear's) is missing too.
                        if formulas::FORMULAS[index].float.is_some() {
                            self.mark_incomplete(scope, phase);
                        }
                    }
                    _ => self.mark_incomplete(scope, phase),
                }
            }
            Outcome::Collective(priced) => self.collectives.record(op, scope, phase, priced),
            Outcome::Custom(inputs) => {
                let mut outputs = Vec::new();
                event.read_outputs(&mut outputs);
                let next = self.signatures.len();
                let signature = Signature { op, inputs, outputs };
                let id = *self.signatures.entry(signature).or_insert(next);
                *self.custom_calls.entry((id, scope, phase as u8)).or_insert(0) += 1;
            }
        }
    }

    fn intern(&mut self, description: OpDescription) -> usize {
        let class = self.classify(&description);
        match self.op_by_name.get(&description.name) {
            // Overloads share their operator's entry unless they are classified differently
            // (a composite overload beside one with a kernel), or run a composite on other
            // routes; the report merges them by name.
            Some(&op)
                if self.ops[op].class == class && self.ops[op].composite_routes == description.composite_routes =>
            {
                op
            }
            _ => self.add_op(description, class),
        }
    }

    fn add_op(&mut self, description: OpDescription, class: Class) -> usize {
        let op = self.ops.len();
        let existing = self.op_by_name.get(&description.name).copied();
        // Calls made inside it with autograd live come from its autograd layer, not from a
        // decomposition: true of ATen operators with a backend kernel, or with a
        // CompositeExplicitAutograd one (mul.Scalar: its decomposition runs below its autograd
        // kernel), not of CompositeImplicitAutograd ones, whose decomposition runs with autograd
        // live (max_pool2d calling max_pool2d_with_indices).
        let aten = description.name.starts_with("aten::") || description.name.starts_with("prims::");
        self.ops.push(OpStats {
            name: description.name.clone(),
            class,
            kernel: aten && (description.has_own_kernel || description.explicit_composite),
            composite_routes: description.composite_routes,
            positional_args: description.positional_args,
            calls: 0,
            flops: 0,
            float_flops: 0,
            overflowed: false,
            formula_errors: 0,
            first_error: None,
        });
        if existing.is_none() {
            self.op_by_name.insert(description.name, op);
        }
        op
    }

    fn classify(&self, description: &OpDescription) -> Class {
        let name = description.name.as_str();
        if name == COMPILED_GRAPH_OPERATOR {
            return Class::Uncounted;
        }
        if name == UNLABELLED_GRAPH_OPERATOR {
            return Class::Unlabelled;
        }
        if name == COMPILED_BEGIN_OPERATOR {
            return Class::CompiledBegin;
        }
        if name == COMPILED_END_OPERATOR {
            return Class::CompiledEnd;
        }
        if name.starts_with("torchscan::") {
            return Class::Internal;
        }
        if self.config.custom_operators.iter().any(|c| c == name) {
            return Class::Custom;
        }
        if let Some(index) = formulas::collective::lookup(name) {
            return Class::Collective(index);
        }
        match formulas::lookup(name) {
            Some(Rule::Formula(i)) => Class::Formula(i),
            Some(Rule::Ignored(i)) => Class::Ignored(i),
            None if description.has_own_kernel => Class::Uncounted,
            None => Class::Transparent,
        }
    }

    fn count(&mut self, op: usize, category: Category, scope: u32, phase: Phase, flops: u64) {
        let stats = &mut self.ops[op];
        match stats.flops.checked_add(flops) {
            Some(v) => stats.flops = v,
            None => stats.overflowed = true,
        }
        if !category.is_flops() {
            self.integer.add(flops);
            return;
        }
        let slot = &mut self.categories[category as usize];
        *slot = slot.checked_add(flops).unwrap_or(u64::MAX);
        self.total.add(flops);
        self.phases[phase as usize].add(flops);
        self.scopes.add_flops(scope, flops);
    }

    /// A count that does not fit in 64 bits: everything that would have included it (the
    /// operator, its category, the phase, the scopes, the total) is unavailable, never wrapped.
    fn overflow(&mut self, op: usize, category: Category, scope: u32, phase: Phase) {
        self.ops[op].overflowed = true;
        if !category.is_flops() {
            self.integer.overflowed = true;
            return;
        }
        self.categories[category as usize] = u64::MAX;
        self.total.overflowed = true;
        self.phases[phase as usize].overflowed = true;
        self.scopes.mark_overflowed(scope);
    }

    /// An event the core failed to handle (see `registry::guarded_event`).
    pub fn record_internal_error(&mut self) {
        self.internal_errors += 1;
        self.total.incomplete = true;
    }

    fn mark_incomplete(&mut self, scope: u32, phase: Phase) {
        self.total.incomplete = true;
        self.phases[phase as usize].incomplete = true;
        self.scopes.mark_incomplete(scope);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::build::*;
    use crate::report::{FlopReport, MetricResult, Status};

    /// A dispatcher call in a test: name (None: not an operator), kernel, inputs, children.
    struct Call {
        name: Option<&'static str>,
        own_kernel: bool,
        inputs: Vec<i64>,
        outputs: Vec<i64>,
        children: Vec<Call>,
        /// What the shim's data read returns (`data_inputs`); empty: the plain inputs.
        data: Vec<i64>,
    }

    fn op(name: &'static str, own_kernel: bool, build: impl FnOnce(&mut Vec<i64>), children: Vec<Call>) -> Call {
        let mut inputs = Vec::new();
        build(&mut inputs);
        Call { name: Some(name), own_kernel, inputs, outputs: Vec::new(), children, data: Vec::new() }
    }

    impl OpEvent for Call {
        fn describe(&self) -> Option<OpDescription> {
            self.name.map(|n| OpDescription {
                name: n.to_string(),
                has_own_kernel: self.own_kernel,
                explicit_composite: false,
                positional_args: 2,
                composite_routes: 0,
            })
        }
        fn inputs(&self) -> &[i64] {
            &self.inputs
        }
        fn data_inputs(&self) -> &[i64] {
            if self.data.is_empty() {
                &self.inputs
            } else {
                &self.data
            }
        }
        fn read_outputs(&self, out: &mut Vec<i64>) {
            out.extend_from_slice(&self.outputs);
        }
    }

    /// Walks calls as `cpp/observer.cpp` does: children only after `Descend`. The key is the
    /// name's address for operators (stable), the call's address otherwise (varies).
    fn run(session: &mut Session, calls: &[Call], phase: Phase) {
        for call in calls {
            let key = match call.name {
                Some(n) => n.as_ptr() as usize,
                None => call as *const Call as usize,
            };
            let start = OpCall { key, token: 1, phase, sequence: -1, interposed: false, origin: Origin::Followed };
            if finish(session, start, call, true) == Decision::DESCEND {
                run(session, &call.children, phase);
            }
        }
    }

    /// A forward call of operator `name` on the session's own thread.
    /// The end of a priced compiled graph's run: `compiled_end(graph, completed)`.
    fn compiled_end(graph: i64, completed: bool) -> Call {
        op(
            COMPILED_END_OPERATOR,
            false,
            move |s| {
                int(s, graph);
                boolean(s, completed);
            },
            vec![],
        )
    }

    fn forward_call(name: &str) -> OpCall {
        OpCall {
            key: name.as_ptr() as usize,
            token: 1,
            phase: Phase::Forward,
            sequence: -1,
            interposed: false,
            origin: Origin::Followed,
        }
    }

    const SKIP_KERNEL: Decision = Decision(Decision::SKIP.0 | Decision::KERNEL);

    /// One call as the shim handles it: its start, then, for a claimed call, its end when the
    /// core waits for it, or its abort (`completed == false`) when the core counted it at once.
    fn finish(session: &mut Session, start: OpCall, event: &dyn OpEvent, completed: bool) -> Decision {
        let decision = session.on_op_start(start, event);
        let receipt = session.take_receipt();
        if decision.is_pending() {
            session.on_op_end(start.token, completed, event);
        } else if decision.skips() && !completed {
            session.undo(receipt);
        }
        decision
    }

    fn mm_args(s: &mut Vec<i64>) {
        tensor(s, &[3, 4]);
        tensor(s, &[4, 5]);
    }

    fn report(session: Session) -> FlopReport {
        session.into_report(&[]).unwrap()
    }

    /// `_fused_rms_norm(x [4, 64], [64], w [64], eps)` on a route: its composite runs on CPU
    /// through autograd and below it (routes 2 and 3), its own kernel on CUDA (4 and 5).
    struct RmsNormCall {
        route: u8,
        inputs: Vec<i64>,
    }

    impl OpEvent for RmsNormCall {
        fn describe(&self) -> Option<OpDescription> {
            Some(OpDescription {
                name: "aten::_fused_rms_norm".to_string(),
                has_own_kernel: true,
                explicit_composite: false,
                positional_args: 4,
                composite_routes: 0b1100,
            })
        }
        fn inputs(&self) -> &[i64] {
            &self.inputs
        }
        fn read_outputs(&self, _: &mut Vec<i64>) {}
        fn route(&self) -> u8 {
            self.route
        }
    }

    #[test]
    fn a_call_that_runs_the_composite_is_transparent_and_one_that_runs_the_kernel_is_priced() {
        let mut inputs = Vec::new();
        tensor(&mut inputs, &[4, 64]);
        ints(&mut inputs, &[64]);
        tensor(&mut inputs, &[64]);
        double(&mut inputs, 1e-6);
        let name = "aten::_fused_rms_norm";
        let mut s = Session::new(Config::default());
        // Each route is its own event key here (the shim's key is the operator's name: one entry).
        let cpu = RmsNormCall { route: 3, inputs: inputs.clone() };
        assert_eq!(finish(&mut s, forward_call(name), &cpu, true), Decision::DESCEND);
        let below = RmsNormCall { route: 2, inputs: inputs.clone() };
        assert_eq!(finish(&mut s, forward_call(name), &below, true), Decision::DESCEND);
        let unknown = RmsNormCall { route: UNKNOWN_ROUTE, inputs: inputs.clone() };
        assert_eq!(finish(&mut s, forward_call(name), &unknown, true), SKIP_KERNEL);
        let cuda = RmsNormCall { route: 5, inputs };
        assert_eq!(finish(&mut s, forward_call(name), &cuda, true), SKIP_KERNEL);
        let r = report(s);
        // Two priced calls, 4 x 256 + 2 x 4 = 1032 each; the composite's calls count nothing
        // themselves (their decomposition does, as calls of its own).
        assert_eq!(r.total, MetricResult::complete(2 * 1032, "workload"));
        assert_eq!(r.operator_calls["aten._fused_rms_norm"], 2);
    }

    #[test]
    fn a_claimed_call_counts_once_and_hides_its_children() {
        let mut s = Session::new(Config::default());
        // linear (composite) -> t (view), addmm (formula) -> mm-like internals (skipped).
        let calls = vec![op(
            "aten::linear",
            false,
            |_| {},
            vec![
                op("aten::t", true, |_| {}, vec![]),
                op(
                    "aten::addmm",
                    true,
                    |a| {
                        tensor(a, &[5]);
                        mm_args(a);
                    },
                    vec![op("aten::mm", true, mm_args, vec![])],
                ),
            ],
        )];
        run(&mut s, &calls, Phase::Forward);
        let r = report(s);
        // The [3,4] @ [4,5] product (120) and the bias added to its 15 outputs (the bias convention).
        assert_eq!(r.total, MetricResult::complete(135, "workload"));
        assert_eq!(r.by_operator.len(), 1);
        assert_eq!(r.by_operator["aten.addmm"], 135);
        assert_eq!(r.operator_calls["aten.addmm"], 1);
        assert_eq!(r.ignored_operators["aten.t"].reason, "view");
        assert!(r.diagnostics.is_empty());
        assert_eq!(r.by_category["matmul"], 135);
    }

    #[test]
    fn remembered_prices_match_the_formula_across_calls_and_sessions() {
        // mm(3x4, 4x5) = 120 FLOPs; the same shapes in complex64 = 480 (8 real FLOPs per
        // multiply-accumulate); 3x4 @ 4x6 = 144; then the first shapes again (a memo hit).
        let complex = |a: &mut Vec<i64>| {
            complex_tensor(a, &[3, 4]);
            complex_tensor(a, &[4, 5]);
        };
        let wider = |a: &mut Vec<i64>| {
            tensor(a, &[3, 4]);
            tensor(a, &[4, 6]);
        };
        let calls = || {
            vec![
                op("aten::mm", true, mm_args, vec![]),
                op("aten::mm", true, complex, vec![]),
                op("aten::mm", true, wider, vec![]),
                op("aten::mm", true, mm_args, vec![]),
            ]
        };
        let mut first = Session::new(Config::default());
        run(&mut first, &calls(), Phase::Forward);
        let memos = first.take_memos();
        assert_eq!(report(first).total, MetricResult::complete(120 + 480 + 144 + 120, "workload"));
        // The next session starts from the first one's prices: the same counts.
        let mut second = Session::new(Config::default());
        second.adopt_memos(memos);
        run(&mut second, &calls(), Phase::Forward);
        let r = report(second);
        assert_eq!(r.total, MetricResult::complete(864, "workload"));
        assert_eq!(r.operator_calls["aten.mm"], 4);
    }

    #[test]
    fn data_dependent_calls_are_priced_from_the_data_read_and_never_remembered() {
        // _embedding_bag(weight [50, 16], ids [20], offsets [4], ..., padding_idx 0): the shape
        // alone does not say how many ids are padding. The shim's data read says 13, then 20,
        // for two calls of the same shapes: 13 x 16 + 20 x 16 = 208 + 320; a third call whose
        // ids cannot be read is a formula error (partial), not the last price.
        let bag = |kept: Option<i64>| {
            let build = |s: &mut Vec<i64>| {
                tensor(s, &[50, 16]);
                tensor(s, &[20]);
                tensor(s, &[4]);
                boolean(s, false);
                int(s, 1);
                boolean(s, false);
                none(s);
                boolean(s, false);
                int(s, 0);
            };
            let mut call = op("aten::_embedding_bag", true, build, vec![]);
            if let Some(kept) = kept {
                build(&mut call.data);
                data(&mut call.data, kept);
            }
            call
        };
        let mut s = Session::new(Config::default());
        run(&mut s, &[bag(Some(13)), bag(Some(20))], Phase::Forward);
        run(&mut s, &[bag(None)], Phase::Forward);
        let r = report(s);
        assert_eq!(r.by_operator["aten._embedding_bag"], 528);
        assert_eq!(r.total.known_value, Some(528));
        assert_eq!(r.total.status, Status::Partial);
        assert!(r.diagnostics.iter().any(|d| d.message.contains("depends on the data")));
    }

    #[test]
    fn a_dynamic_quantized_linear_counts_its_floating_point_work_as_flops() {
        let mut s = Session::new(Config::default());
        let linear = |a: &mut Vec<i64>| {
            tensor(a, &[4, 16]);
            crate::args::build::packed(a, &[8, 16], &[1]);
            crate::args::build::boolean(a, false);
        };
        // X[4, 16], W[8, 16] with a bias: 2 x 4 x 16 x 8 = 1,024 integer operations; FLOPs: the
        // input's quantization 64 x 6 = 384, the output's dequantization and bias 2 x 32 = 64.
        let calls = vec![op("quantized::linear_dynamic", true, linear, vec![])];
        run(&mut s, &calls, Phase::Forward);
        // A call that raises is taken back, its integer operations and its FLOPs.
        let start = forward_call("quantized::linear_dynamic");
        let raised = op("quantized::linear_dynamic", true, linear, vec![]);
        let start = OpCall { key: calls[0].name.unwrap().as_ptr() as usize, ..start };
        finish(&mut s, start, &raised, false);
        let r = report(s);
        assert_eq!(r.total, MetricResult::complete(448, "workload"));
        assert_eq!(r.by_phase["forward"], MetricResult::complete(448, "phase"));
        assert_eq!(r.by_category, BTreeMap::from([("pointwise".to_string(), 448)]));
        assert_eq!(r.by_operator, BTreeMap::from([("quantized.linear_dynamic".to_string(), 448)]));
        assert_eq!(r.operator_calls["quantized.linear_dynamic"], 1);
        let integer = r.integer_ops.expect("an integer kernel ran");
        assert_eq!((integer.status, integer.value), (Status::Complete, Some(1024)));
        assert_eq!(integer.by_operator, BTreeMap::from([("quantized.linear_dynamic".to_string(), 1024)]));
        assert!(r.diagnostics.is_empty());
    }

    #[test]
    fn integer_kernels_are_counted_apart_from_flops() {
        let mut s = Session::new(Config::default());
        let int_mm = |a: &mut Vec<i64>| {
            tensor(a, &[8, 16]);
            tensor(a, &[16, 4]);
        };
        // _int_mm(8x16, 16x4): 512 multiply-accumulates = 1,024 integer operations; beside a
        // floating-point mm of 120 FLOPs.
        let calls = vec![op("aten::_int_mm", true, int_mm, vec![]), op("aten::mm", true, mm_args, vec![])];
        run(&mut s, &calls, Phase::Forward);
        // A call that raises is taken back from the integer count as from FLOPs.
        let start = forward_call("aten::_int_mm");
        let raised = op("aten::_int_mm", true, int_mm, vec![]);
        let start = OpCall { key: calls[0].name.unwrap().as_ptr() as usize, ..start };
        finish(&mut s, start, &raised, false);
        let r = report(s);
        assert_eq!(r.total, MetricResult::complete(120, "workload"));
        assert_eq!(r.by_phase["forward"], MetricResult::complete(120, "phase"));
        assert_eq!(r.by_category, BTreeMap::from([("matmul".to_string(), 120)]));
        assert_eq!(r.by_operator, BTreeMap::from([("aten.mm".to_string(), 120)]));
        assert_eq!(r.operator_calls["aten._int_mm"], 1);
        let integer = r.integer_ops.expect("an integer kernel ran");
        assert_eq!(
            (integer.status, integer.value, integer.unit.as_str()),
            (Status::Complete, Some(1024), "integer_ops")
        );
        assert_eq!(integer.by_operator, BTreeMap::from([("aten._int_mm".to_string(), 1024)]));
        assert!(r.diagnostics.is_empty());
    }

    #[test]
    fn an_integer_kernel_that_cannot_be_priced_leaves_the_flops_complete() {
        let mut s = Session::new(Config::default());
        let calls =
            vec![op("aten::_int_mm", true, |a| tensor(a, &[8, 16]), vec![]), op("aten::mm", true, mm_args, vec![])];
        run(&mut s, &calls, Phase::Forward);
        let r = report(s);
        assert_eq!(r.total, MetricResult::complete(120, "workload"));
        let integer = r.integer_ops.expect("an integer kernel ran");
        assert_eq!((integer.status, integer.known_value), (Status::Partial, Some(0)));
        assert_eq!(r.diagnostics.len(), 1);
        assert_eq!(
            (r.diagnostics[0].code.as_str(), r.diagnostics[0].metric.as_str()),
            ("formula_error", "integer_ops")
        );
    }

    #[test]
    fn a_report_without_integer_kernels_has_no_integer_ops() {
        let mut s = Session::new(Config::default());
        run(&mut s, &[op("aten::mm", true, mm_args, vec![])], Phase::Forward);
        assert!(report(s).integer_ops.is_none());
    }

    #[test]
    fn an_op_with_a_kernel_and_no_formula_is_uncounted_even_if_its_children_are_counted() {
        let mut s = Session::new(Config::default());
        let calls = vec![
            op("aten::mm", true, mm_args, vec![]),
            op("mylib::fused", true, |_| {}, vec![op("aten::mm", true, mm_args, vec![])]),
            op("mylib::fused", true, |_| {}, vec![]),
        ];
        run(&mut s, &calls, Phase::Forward);
        let r = report(s);
        assert_eq!(r.total.status, Status::Partial);
        assert_eq!(r.total.value, None);
        assert_eq!(r.total.known_value, Some(120));
        assert_eq!(r.diagnostics.len(), 1);
        let d = &r.diagnostics[0];
        assert_eq!((d.code.as_str(), d.operator.as_deref()), ("uncounted_operator", Some("mylib.fused")));
        assert_eq!(
            d.message,
            "mylib.fused ran 2 time(s) and has no FLOP formula; its work is missing from the total (to count it, \
             pass custom_mapping={torch.ops.mylib.fused: formula}, a function of the input and output shapes)"
        );
        assert_eq!(r.by_phase["forward"].status, Status::Partial);
    }

    #[test]
    fn non_operator_events_are_transparent_and_never_cached() {
        let mut s = Session::new(Config::default());
        let calls = vec![Call {
            name: None,
            own_kernel: false,
            inputs: vec![],
            outputs: vec![],
            children: vec![op("aten::mm", true, mm_args, vec![])],
            data: vec![],
        }];
        run(&mut s, &calls, Phase::Forward);
        assert!(s.cache.len() == 1, "only aten::mm is cached");
        assert_eq!(report(s).total.value, Some(120));
    }

    #[test]
    fn an_optimizer_step_is_its_own_phase() {
        // Forward mm (120), an optimizer step (a nested one inside it: one step) with two mm
        // (240) and an uncounted kernel, a backward mm inside it (a closure's: stays backward),
        // then forward again (120).
        let mut s = Session::new(Config::default());
        run(&mut s, &[op("aten::mm", true, mm_args, vec![])], Phase::Forward);
        s.end_optimizer_step(); // an end without a begin changes nothing
        s.begin_optimizer_step();
        run(&mut s, &[op("aten::mm", true, mm_args, vec![])], Phase::Forward);
        s.begin_optimizer_step();
        run(&mut s, &[op("aten::mm", true, mm_args, vec![]), op("mylib::fused", true, |_| {}, vec![])], Phase::Forward);
        run(&mut s, &[op("aten::mm", true, mm_args, vec![])], Phase::Backward);
        s.end_optimizer_step();
        s.end_optimizer_step();
        run(&mut s, &[op("aten::mm", true, mm_args, vec![])], Phase::Forward);
        let r = report(s);
        assert_eq!(r.by_phase["forward"], MetricResult::complete(240, "phase"));
        assert_eq!(r.by_phase["backward"], MetricResult::complete(120, "phase"));
        assert_eq!((r.by_phase["optimizer"].status, r.by_phase["optimizer"].known_value), (Status::Partial, Some(240)));
        assert_eq!((r.total.status, r.total.known_value), (Status::Partial, Some(600)));
        // A session without a step reports no optimizer phase.
        let mut plain = Session::new(Config::default());
        run(&mut plain, &[op("aten::mm", true, mm_args, vec![])], Phase::Forward);
        assert!(!report(plain).by_phase.contains_key("optimizer"));
    }

    #[test]
    fn phases_and_zero_work() {
        let mut s = Session::new(Config::default());
        run(&mut s, &[op("aten::mm", true, mm_args, vec![])], Phase::Forward);
        run(&mut s, &[op("aten::mm", true, mm_args, vec![]), op("aten::mm", true, mm_args, vec![])], Phase::Backward);
        let r = report(s);
        assert_eq!(r.by_phase["forward"].value, Some(120));
        assert_eq!(r.by_phase["backward"].value, Some(240));
        assert_eq!(r.total.value, Some(360));
        assert_eq!(r.operator_calls["aten.mm"], 3);

        let empty = report(Session::new(Config::default()));
        assert_eq!(empty.total, MetricResult::complete(0, "workload"), "a true zero is complete");
        assert!(!empty.by_phase.contains_key("backward"));
    }

    #[test]
    fn formula_errors_make_the_total_partial_with_a_diagnostic() {
        let mut s = Session::new(Config::default());
        run(
            &mut s,
            &[op("aten::mm", true, |a| tensor(a, &[3, 4]), vec![]), op("aten::mm", true, mm_args, vec![])],
            Phase::Forward,
        );
        let r = report(s);
        assert_eq!((r.total.status, r.total.known_value), (Status::Partial, Some(120)));
        assert_eq!(r.diagnostics[0].code, "formula_error");
        assert_eq!(r.diagnostics[0].message, "aten.mm: 1 call(s) could not be counted: tensor argument 1 is missing");
        assert_eq!(r.operator_calls["aten.mm"], 1);
    }

    #[test]
    fn overflowing_totals_are_unavailable_not_wrapped() {
        let mut s = Session::new(Config::default());
        let huge = |a: &mut Vec<i64>| {
            tensor(a, &[1 << 20, 1 << 21]);
            tensor(a, &[1 << 21, 1 << 20]);
        };
        // 2 * 2^20 * 2^21 * 2^20 = 2^62 per call; four calls exceed 2^64.
        let calls: Vec<Call> = (0..4).map(|_| op("aten::mm", true, huge, vec![])).collect();
        run(&mut s, &calls, Phase::Forward);
        let r = report(s);
        assert_eq!(r.total.status, Status::Unavailable);
        assert!(r.diagnostics.iter().any(|d| d.code == "flop_overflow"));
    }

    #[test]
    fn one_call_whose_count_exceeds_2_pow_64_is_unavailable_everywhere() {
        let mut s = Session::new(Config::default());
        // 2 * 2^22 * 2^22 * 2^22 = 2^67: the formula itself overflows.
        let huge = |a: &mut Vec<i64>| {
            tensor(a, &[1 << 22, 1 << 22]);
            tensor(a, &[1 << 22, 1 << 22]);
        };
        let small = |a: &mut Vec<i64>| {
            tensor(a, &[2, 3]);
            tensor(a, &[3, 4]);
        };
        run(&mut s, &[op("aten::mm", true, huge, vec![]), op("aten::mm", true, small, vec![])], Phase::Forward);
        let r = report(s);
        assert_eq!((r.total.status, r.total.value, r.total.known_value), (Status::Unavailable, None, None));
        assert_eq!(r.by_phase["forward"].status, Status::Unavailable);
        assert!(!r.by_category.contains_key("matmul"), "no wrapped or partial category sum");
        assert!(!r.by_operator.contains_key("aten.mm"));
        let codes: Vec<(&str, Option<&str>)> =
            r.diagnostics.iter().map(|d| (d.code.as_str(), d.operator.as_deref())).collect();
        assert!(codes.contains(&("flop_overflow", Some("aten.mm"))), "{codes:?}");
        assert!(!codes.iter().any(|(c, _)| *c == "formula_error"), "{codes:?}");
    }

    #[test]
    fn custom_formulas_claim_their_operator_and_are_priced_afterwards() {
        let config = Config {
            torch_version: "x".into(),
            custom_operators: vec!["aten::mm".into(), "mylib::fused".into()],
            ..Config::default()
        };
        let mut s = Session::new(config);
        assert!(s.needs_outputs());
        let mut fused = op("mylib::fused", true, mm_args, vec![op("aten::mm", true, mm_args, vec![])]);
        tensor(&mut fused.outputs, &[3, 5]);
        run(&mut s, &[fused], Phase::Forward);
        run(&mut s, &[op("mylib::fused", true, mm_args, vec![])], Phase::Forward);
        let pending: serde_json::Value = serde_json::from_str(&s.pending_custom_json()).unwrap();
        assert_eq!(pending.as_array().unwrap().len(), 2, "two distinct signatures (outputs differ)");
        assert_eq!(pending[0]["operator"], "mylib.fused");
        assert_eq!(pending[0]["inputs"], serde_json::json!([{"shape": [3, 4]}, {"shape": [4, 5]}]));
        assert_eq!(pending[0]["outputs"], serde_json::json!([{"shape": [3, 5]}]));
        let r = s.into_report(&[CustomResult::Flops(7), CustomResult::Raised("ZeroDivisionError".into())]).unwrap();
        assert_eq!((r.total.status, r.total.known_value), (Status::Partial, Some(7)));
        assert_eq!(r.by_category["custom"], 7);
        assert_eq!(r.diagnostics[0].code, "custom_formula_error");
        assert!(r.diagnostics[0].message.contains("raised ZeroDivisionError on 1 call(s)"));
    }

    #[test]
    fn formulas_registered_with_pytorch_are_their_own_category() {
        let config = Config {
            torch_version: "x".into(),
            custom_operators: vec!["mylib::fused".into(), "mylib::other".into()],
            registered_operators: vec!["mylib::fused".into()],
            ..Config::default()
        };
        let mut s = Session::new(config);
        run(&mut s, &[op("mylib::fused", true, mm_args, vec![])], Phase::Forward);
        run(&mut s, &[op("mylib::other", true, mm_args, vec![])], Phase::Forward);
        let r = s.into_report(&[CustomResult::Flops(11), CustomResult::Flops(5)]).unwrap();
        assert_eq!((r.by_category["registered"], r.by_category["custom"]), (11, 5));
        assert_eq!(r.by_category.len(), 2);
        assert_eq!(r.total.value, Some(16));
    }

    #[test]
    fn custom_results_are_validated() {
        let s = Session::new(Config::default());
        assert!(matches!(s.into_report(&[CustomResult::Flops(1)]), Err(crate::error::Error::BadCustomResults(_))));
        assert_eq!(
            parse_custom_results("[3, {\"error\": \"TypeError\"}, 18446744073709551615, 18446744073709551616]")
                .unwrap(),
            vec![
                CustomResult::Flops(3),
                CustomResult::Raised("TypeError".into()),
                CustomResult::Flops(u64::MAX),
                CustomResult::Overflow
            ]
        );
        assert!(parse_custom_results("[1.5]").is_err());
        assert!(parse_custom_results("[-1]").is_err());
        assert!(parse_custom_results("{}").is_err());
        assert_eq!(parse_custom_results("").unwrap(), vec![]);
    }

    #[test]
    fn config_parsing() {
        let c = Config::from_json(r#"{"torch_version": "2.13.0", "custom_operators": ["aten::sin"]}"#).unwrap();
        assert_eq!(c.custom_operators, vec!["aten::sin".to_string()]);
        assert!(Config::from_json(r#"{"custom_operators": ["aten.sin.default"]}"#).is_err());
        assert!(Config::from_json(r#"{"bogus": 1}"#).is_err());
        assert!(Config::from_json("[").is_err());
        assert_eq!(Config::from_json("").unwrap().torch_version, BUILT_AGAINST_TORCH);
        assert!(Config::from_json("{}").unwrap().custom_operators.is_empty());
        let registered = r#"{"custom_operators": ["mylib::a"], "registered_operators": ["mylib::a"]}"#;
        assert_eq!(Config::from_json(registered).unwrap().registered_operators, vec!["mylib::a".to_string()]);
        let stray = Config::from_json(r#"{"registered_operators": ["mylib::b"]}"#).unwrap_err();
        assert!(stray.to_string().contains("mylib::b is not among the custom_operators"), "{stray}");
    }

    #[test]
    fn overloads_with_different_kernels_are_classified_separately() {
        let mut s = Session::new(Config::default());
        let composite = "mylib::thing";
        let with_kernel = String::from("mylib::thing"); // another overload: another address
        let a = op(composite, false, |_| {}, vec![op("aten::mm", true, mm_args, vec![])]);
        let at = |key: &str| forward_call(key);
        s.on_op_start(at(composite), &a);
        let b = Call {
            name: Some("mylib::thing"),
            own_kernel: true,
            inputs: vec![],
            outputs: vec![],
            children: vec![],
            data: vec![],
        };
        assert_eq!(finish(&mut s, at(&with_kernel), &b, true), Decision(Decision::SKIP.0 | Decision::PENDING));
        let r = report(s);
        assert_eq!(r.total.status, Status::Partial);
    }

    #[test]
    fn backward_work_is_attributed_to_the_module_that_created_the_node() {
        let mut s = Session::new(Config::default());
        let mm = op("aten::mm", true, mm_args, vec![]);
        let key = "aten::mm".as_ptr() as usize;
        s.scopes_mut().push("Net");
        s.scopes_mut().push("Net.fc");
        let call = |s: &mut Session, phase, sequence| {
            let start = OpCall { key, token: 1, phase, sequence, interposed: false, origin: Origin::Followed };
            assert_eq!(s.on_op_start(start, &mm), SKIP_KERNEL);
            s.on_op_end(1, true, &mm);
        };
        call(&mut s, Phase::Forward, 7);
        s.scopes_mut().pop();
        call(&mut s, Phase::Forward, 9);
        s.scopes_mut().pop();
        // Backward runs outside every module call: nodes 7 and 9 find their modules again; node 8,
        // which no call announced (made after node 7, before Net's call with 9), is Net.fc's;
        // node 3, made before any module call, and -1 (no node) are the root's.
        call(&mut s, Phase::Backward, 9);
        call(&mut s, Phase::Backward, 7);
        call(&mut s, Phase::Backward, 8);
        call(&mut s, Phase::Backward, 3);
        call(&mut s, Phase::Backward, -1);
        let r = report(s);
        assert_eq!(r.by_module["Net.fc"], 360);
        assert_eq!(r.by_module["Net"], 600);
        assert_eq!(r.total.value, Some(840));
    }

    #[test]
    fn reports_are_deterministic() {
        let build = || {
            let mut s = Session::new(Config::default());
            s.scopes_mut().push("Net");
            run(
                &mut s,
                &[op("aten::mm", true, mm_args, vec![]), op("aten::view", true, |_| {}, vec![])],
                Phase::Forward,
            );
            serde_json::to_string(&report(s)).unwrap()
        };
        assert_eq!(build(), build());
        assert!(build().contains(r#""by_module":{"Net":120},"by_module_status":{"Net":"complete"}"#));
    }

    #[test]
    fn a_call_that_raises_is_not_counted() {
        let mut s = Session::new(Config::default());
        let mm = op("aten::mm", true, mm_args, vec![]);
        let key = "aten::mm".as_ptr() as usize;
        let start = |token| OpCall {
            key,
            token,
            phase: Phase::Forward,
            sequence: -1,
            interposed: false,
            origin: Origin::Followed,
        };
        // Thread 1's call raises after thread 2's started: counted at their starts, the raising
        // one is taken back by its receipt.
        s.scopes_mut().push("Net");
        assert_eq!(s.on_op_start(start(1), &mm), SKIP_KERNEL);
        let raised = s.take_receipt();
        assert_eq!(s.on_op_start(start(2), &mm), SKIP_KERNEL);
        assert!(raised.valid && raised.flops == 120);
        s.undo(raised);
        // An end with no pending call, or an invalid receipt, changes nothing.
        s.on_op_end(3, true, &mm);
        s.undo(Receipt::default());
        // An ignored call that raises is not a call either.
        let view = OpCall { key: "aten::view".as_ptr() as usize, ..start(1) };
        assert_eq!(finish(&mut s, view, &op("aten::view", true, |_| {}, vec![]), false), SKIP_KERNEL);
        let r = report(s);
        assert_eq!(r.total, MetricResult::complete(120, "workload"));
        assert_eq!(r.operator_calls["aten.mm"], 1);
        assert_eq!((r.by_module["Net"], r.by_category["matmul"], r.by_phase["forward"].value), (120, 120, Some(120)));
        assert!(r.ignored_operators.is_empty());
    }

    #[test]
    fn a_raising_uncounted_or_failing_call_leaves_the_total_complete() {
        let mut s = Session::new(Config::default());
        let fused = op("mylib::fused", true, |_| {}, vec![]);
        let bad_mm = op("aten::mm", true, |a| tensor(a, &[3]), vec![]);
        for (name, event) in [("mylib::fused", &fused), ("aten::mm", &bad_mm)] {
            let start = forward_call(name);
            assert_ne!(s.on_op_start(start, event), Decision::DESCEND);
            s.on_op_end(1, false, event);
        }
        let r = report(s);
        assert_eq!(r.total, MetricResult::complete(0, "workload"));
        assert!(r.diagnostics.is_empty());
    }

    #[test]
    fn an_interposed_call_is_transparent_and_its_inner_kernel_counts() {
        // vmap(mm) over 10 examples: the call on batched tensors shows one example's shapes; the
        // batching rule's bmm has the real ones.
        let mut s = Session::new(Config::default());
        let mm = op("aten::mm", true, mm_args, vec![]);
        let bmm = op(
            "aten::bmm",
            true,
            |a| {
                tensor(a, &[10, 3, 4]);
                tensor(a, &[10, 4, 5]);
            },
            vec![],
        );
        let start = |name: &str, interposed| OpCall {
            key: name.as_ptr() as usize,
            token: 1,
            phase: Phase::Forward,
            sequence: -1,
            interposed,
            origin: Origin::Followed,
        };
        assert_eq!(s.on_op_start(start("aten::mm", true), &mm), Decision::DESCEND);
        assert_eq!(s.on_op_start(start("aten::bmm", false), &bmm), SKIP_KERNEL);
        s.on_op_end(1, true, &bmm);
        // A cache hit: the wrapper answers without a kernel.
        assert_eq!(s.on_op_start(start("aten::mm", true), &mm), Decision::DESCEND);
        let r = report(s);
        assert_eq!(r.total, MetricResult::complete(1200, "workload"));
        assert_eq!(r.operator_calls.get("aten.mm"), None);
        assert_eq!(r.operator_calls["aten.bmm"], 1);
    }

    #[test]
    fn only_aten_kernels_open_to_their_autograd_layer() {
        let cases = [
            ("aten::mm", true, SKIP_KERNEL),
            // A composite with a formula: what it calls are its decomposition.
            ("aten::mm", false, Decision::SKIP),
            // Uncounted: waits for its end before marking the total partial.
            ("mylib::fused", true, Decision(Decision::SKIP.0 | Decision::PENDING)),
            ("aten::view", true, SKIP_KERNEL),
        ];
        for (name, own_kernel, expected) in cases {
            let mut s = Session::new(Config::default());
            let event = op(name, own_kernel, mm_args, vec![]);
            let start = forward_call(name);
            assert_eq!(finish(&mut s, start, &event, true), expected, "{name}");
        }
    }

    #[test]
    fn an_inductor_graph_run_is_uncounted_compiled_code() {
        let mut s = Session::new(Config::default());
        run(
            &mut s,
            &[op("aten::mm", true, mm_args, vec![]), op(COMPILED_GRAPH_OPERATOR, false, |_| {}, vec![])],
            Phase::Forward,
        );
        let r = report(s);
        assert_eq!((r.total.status, r.total.known_value), (Status::Partial, Some(120)));
        assert_eq!(r.diagnostics.len(), 1);
        assert_eq!(r.diagnostics[0].code, "uncounted_compiled_code");
        assert!(r.diagnostics[0].message.contains("ran 1 time(s)"), "{}", r.diagnostics[0].message);
    }

    #[test]
    fn an_unlabelled_graph_run_is_counted_and_its_module_marked_partial() {
        // Labelling modules: the work stays in the total, the module around the run is partial.
        let mut s = Session::new(Config { modules: Labelling::Named, ..Config::default() });
        s.scopes_mut().push("Net");
        run(
            &mut s,
            &[op(UNLABELLED_GRAPH_OPERATOR, false, |_| {}, vec![]), op("aten::mm", true, mm_args, vec![])],
            Phase::Forward,
        );
        let r = report(s);
        assert_eq!((r.total.status, r.total.value), (Status::Complete, Some(120)));
        assert_eq!(r.by_module.get("Net"), Some(&120));
        assert_eq!(r.by_module_status.get("Net"), Some(&Status::Partial));
        assert_eq!(r.diagnostics.len(), 1);
        assert_eq!(r.diagnostics[0].code, "unlabelled_compiled_code");
        assert!(r.diagnostics[0].message.contains("ran 1 time(s)"), "{}", r.diagnostics[0].message);
        // Not labelling modules: nothing is missing, nothing to say.
        let mut s = Session::new(Config { modules: Labelling::Off, ..Config::default() });
        run(&mut s, &[op(UNLABELLED_GRAPH_OPERATOR, false, |_| {}, vec![])], Phase::Forward);
        assert!(report(s).diagnostics.is_empty());
    }

    #[test]
    fn a_priced_graph_run_adds_its_recorded_counts_below_the_module_that_ran_it() {
        // The recording: mm [3,4] @ [4,5] (120) in module 7 called by module 5 (the graph's
        // root module, by identity), another in module 5 itself.
        let mut recording = Session::new(Config::default());
        recording.scopes_mut().push("5");
        recording.scopes_mut().push("7");
        run(&mut recording, &[op("aten::mm", true, mm_args, vec![])], Phase::Forward);
        recording.scopes_mut().pop();
        run(&mut recording, &[op("aten::mm", true, mm_args, vec![])], Phase::Forward);
        let id = priced::register(recording.into_priced());

        let mut live = Session::new(Config::default());
        live.name_modules([(5, "Net"), (7, "Net.0")]);
        let end = |completed: bool| compiled_end(id, completed);
        let begin = op(COMPILED_BEGIN_OPERATOR, false, |_| {}, vec![]);
        let at = |call: &Call| forward_call(call.name.unwrap());
        live.scopes_mut().push("Net");
        assert_eq!(live.on_op_start(at(&begin), &begin).0, Decision::SKIP.0 | Decision::SUPPRESS);
        let completed = end(true);
        assert_eq!(live.on_op_start(at(&completed), &completed).0, Decision::SKIP.0 | Decision::RESUME);
        // A run that raised adds nothing; a second completed run adds the price again.
        run(&mut live, &[begin, end(false), end(true)], Phase::Forward);
        live.scopes_mut().pop();
        let r = report(live);
        assert_eq!(r.total.value, Some(480));
        assert_eq!(r.by_module, BTreeMap::from([("Net".to_string(), 480), ("Net.0".to_string(), 240)]));
        assert_eq!(r.by_operator, BTreeMap::from([("aten.mm".to_string(), 480)]));
        assert_eq!(r.operator_calls, BTreeMap::from([("aten.mm".to_string(), 4)]));
        assert_eq!(r.by_category, BTreeMap::from([("matmul".to_string(), 480)]));
        assert!(r.diagnostics.is_empty());
    }

    #[test]
    fn a_priced_graphs_collectives_are_added_at_each_run() {
        // The recording: a functional all_reduce of 8 float32 over 2 ranks in module 5.
        let mut recording = Session::new(Config::default());
        recording.scopes_mut().push("5");
        let all_reduce = || {
            op(
                "_c10d_functional::all_reduce",
                true,
                |s| {
                    tensor(s, &[8]);
                    other(s);
                    group(s, 2, 0);
                },
                vec![],
            )
        };
        run(&mut recording, &[all_reduce()], Phase::Forward);
        let id = priced::register(recording.into_priced());
        let mut live = Session::new(Config::default());
        live.name_modules([(5, "Net")]);
        let begin = op(COMPILED_BEGIN_OPERATOR, false, |_| {}, vec![]);
        run(&mut live, &[begin, compiled_end(id, true), compiled_end(id, true)], Phase::Backward);
        let c = report(live).communication.expect("the graph's collectives");
        assert_eq!((c.status, c.calls, c.bytes_sent), (Status::Complete, 2, 64));
        assert_eq!(c.by_operator["_c10d_functional.all_reduce"].calls, 2);
        assert_eq!(c.by_phase["backward"].bytes_received, 64);
        assert_eq!(c.by_module["Net"].calls, 2);
    }

    #[test]
    fn a_priced_graph_run_of_modules_the_session_never_named_goes_to_no_label() {
        // Module 7 was never named by the session (outside its roots): no label.
        let mut recording = Session::new(Config::default());
        recording.scopes_mut().push("7");
        run(&mut recording, &[op("aten::mm", true, mm_args, vec![])], Phase::Forward);
        let id = priced::register(recording.into_priced());
        let mut live = Session::new(Config::default());
        run(&mut live, &[compiled_end(id, true)], Phase::Backward);
        let r = report(live);
        assert_eq!(r.total.value, Some(120));
        assert!(r.by_module.is_empty());
        // A module the session names later is labelled from then on (in-place compiled modules
        // are named when their graph first runs).
        let mut live = Session::new(Config::default());
        run(&mut live, &[compiled_end(id, true)], Phase::Forward);
        live.name_modules([(7, "Head")]);
        run(&mut live, &[compiled_end(id, true)], Phase::Forward);
        assert_eq!(report(live).by_module, BTreeMap::from([("Head".to_string(), 120)]));
        assert_eq!(r.by_phase["backward"].value, Some(120));
    }

    #[test]
    fn work_on_unfollowed_threads_is_reported_missing() {
        let mut s = Session::new(Config::default());
        let mm = op("aten::mm", true, mm_args, vec![]);
        let view = op("aten::view", true, |_| {}, vec![]);
        let start = |name: &str, origin| OpCall {
            key: name.as_ptr() as usize,
            token: 1,
            phase: Phase::Forward,
            sequence: -1,
            interposed: false,
            origin,
        };
        assert_eq!(s.on_op_start(start("aten::mm", Origin::Followed), &mm), SKIP_KERNEL);
        s.on_op_end(1, true, &mm);
        // A thread pool's mm twice and a view: nothing pending, the mm calls reported.
        assert_eq!(s.on_op_start(start("aten::mm", Origin::Unfollowed), &mm), Decision::SKIP);
        assert_eq!(s.on_op_start(start("aten::mm", Origin::Unfollowed), &mm), Decision::SKIP);
        assert_eq!(s.on_op_start(start("aten::view", Origin::Unfollowed), &view), Decision::SKIP);
        // Counted on another thread (threads="all"): in no module.
        s.scopes_mut().push("Net");
        assert_eq!(s.on_op_start(start("aten::mm", Origin::Foreign), &mm), SKIP_KERNEL);
        s.on_op_end(1, true, &mm);
        let r = report(s);
        assert_eq!((r.total.status, r.total.known_value), (Status::Partial, Some(240)));
        assert_eq!(r.by_phase["forward"].status, Status::Partial);
        assert_eq!(r.operator_calls["aten.mm"], 2);
        assert_eq!(r.by_module.get("Net").copied().unwrap_or(0), 0);
        let d: Vec<_> = r.diagnostics.iter().filter(|d| d.code == "unfollowed_threads").collect();
        assert_eq!(d.len(), 1);
        assert!(d[0].message.starts_with("2 operator call(s) that do arithmetic (aten.mm)"), "{}", d[0].message);
    }

    #[test]
    fn collectives_are_bytes_not_flops_counted_when_they_return_in_their_module_and_phase() {
        let config = Config::from_json(r#"{"distributed": {"rank": 1, "world_size": 2, "backend": "gloo"}}"#).unwrap();
        let mut s = Session::new(config);
        // all_reduce of 8 float32 over 2 ranks: 2 (32 - 16) bytes each way; its nested copy is
        // the collective's own (skipped).
        let allreduce = || {
            op(
                "c10d::allreduce_",
                true,
                |s| {
                    tensors(s, &[&[8]]);
                    group(s, 2, 1);
                },
                vec![op("aten::mm", true, mm_args, vec![])],
            )
        };
        s.scopes_mut().push("Net");
        run(&mut s, &[allreduce()], Phase::Forward);
        s.scopes_mut().pop();
        run(&mut s, &[allreduce()], Phase::Backward);
        // One that raised moves nothing (it is not counted).
        finish(&mut s, forward_call("c10d::allreduce_"), &allreduce(), false);
        let r = report(s);
        assert_eq!(r.total, MetricResult::complete(0, "workload"));
        assert!(r.by_operator.is_empty() && r.diagnostics.is_empty());
        let c = r.communication.expect("a collective ran");
        assert_eq!((c.status, c.calls, c.bytes_sent, c.bytes_received), (Status::Complete, 2, 64, 64));
        assert_eq!(
            c.by_operator["c10d.allreduce_"],
            crate::report::Traffic { calls: 2, bytes_sent: 64, bytes_received: 64 }
        );
        assert_eq!((c.by_phase["forward"].calls, c.by_phase["backward"].bytes_sent), (1, 32));
        assert_eq!(c.by_module["Net"], crate::report::Traffic { calls: 1, bytes_sent: 32, bytes_received: 32 });
        let place = r.context.distributed.expect("distributed context");
        assert_eq!((place.rank, place.world_size, place.backend.as_str()), (1, 2, "gloo"));
    }

    #[test]
    fn a_collective_that_cannot_be_priced_makes_communication_partial_not_flops() {
        let mut s = Session::new(Config::default());
        // No process group among its arguments (an unknown group name).
        let orphan = op("c10d::allreduce_", true, |s| tensors(s, &[&[8]]), vec![]);
        run(&mut s, &[orphan], Phase::Forward);
        let unfollowed = OpCall { origin: Origin::Unfollowed, ..forward_call("c10d::broadcast_") };
        let bcast = op("c10d::broadcast_", true, |s| tensors(s, &[&[8]]), vec![]);
        assert_eq!(s.on_op_start(unfollowed, &bcast), Decision::SKIP);
        let r = report(s);
        assert_eq!(r.total.status, Status::Complete);
        let c = r.communication.expect("collectives ran");
        assert_eq!((c.status, c.calls, c.bytes_sent), (Status::Partial, 1, 0));
        let codes: Vec<_> = r.diagnostics.iter().map(|d| (d.code.as_str(), d.metric.as_str())).collect();
        assert_eq!(codes, [("collective_error", "communication"), ("unfollowed_threads", "communication")]);
        assert!(Config::from_json(r#"{"distributed": {"rank": 2, "world_size": 2, "backend": "gloo"}}"#).is_err());
    }

    #[test]
    fn no_collective_no_communication_section() {
        let mut s = Session::new(Config::default());
        run(&mut s, &[op("aten::mm", true, mm_args, vec![])], Phase::Forward);
        assert!(report(s).communication.is_none());
    }

    #[test]
    fn threads_config() {
        assert!(!Config::from_json("{}").unwrap().all_threads);
        assert!(Config::from_json(r#"{"threads": "all"}"#).unwrap().all_threads);
        assert!(!Config::from_json(r#"{"threads": "current"}"#).unwrap().all_threads);
        assert!(Config::from_json(r#"{"threads": "some"}"#).is_err());
    }

    #[test]
    fn a_node_created_by_a_function_event_belongs_to_its_module() {
        // A custom autograd Function's forward event (not an operator) creates node 17 in
        // Net; the node's backward work is Net's.
        let mut s = Session::new(Config::default());
        let function =
            Call { name: None, own_kernel: false, inputs: vec![], outputs: vec![], children: vec![], data: vec![] };
        s.scopes_mut().push("Net");
        let start = OpCall {
            key: 1,
            token: 1,
            phase: Phase::Forward,
            sequence: 17,
            interposed: false,
            origin: Origin::Followed,
        };
        assert_eq!(s.on_op_start(start, &function), Decision::DESCEND);
        s.scopes_mut().pop();
        let mm = op("aten::mm", true, mm_args, vec![]);
        let backward = OpCall { key: "aten::mm".as_ptr() as usize, phase: Phase::Backward, ..start };
        finish(&mut s, backward, &mm, true);
        assert_eq!(report(s).by_module["Net"], 120);
    }
}

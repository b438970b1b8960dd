//! The one edge between the core and C++ (`cpp/`). Everything crossing it is plain data.
//!
//! Nothing here may unwind into C++: a panic in an `extern "Rust"` function aborts the process.
//! The per-event entry points catch panics and fall back to a safe decision; the session-level
//! ones return `Result`: the message travels in cxx's `rust::Error`, and the error's kind (the
//! shared enum `ErrorKind`) is read right after by `last_error_kind`, which `cpp/ops.cpp` maps to
//! the `c10` error class Python turns into `ValueError`, `TypeError` or `RuntimeError`.

use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::args;
use crate::host_frames;
use crate::memory::MemoryTracker;
use crate::registry;
use crate::session::{self, Config, Decision, OpCall, OpDescription, Origin, Phase};

#[cxx::bridge(namespace = "torchscan::ffi")]
mod bridge {
    /// Argument encoding tags; must equal `args::TAG_*` (checked below at compile time).
    #[repr(i64)]
    enum ArgTag {
        None = 0,
        Tensor = 1,
        Int = 2,
        Double = 3,
        Bool = 4,
        IntList = 5,
        BoolList = 6,
        TensorList = 7,
        Other = 8,
        Sparse = 9,
        Packed = 10,
        Group = 11,
        Data = 12,
        Choice = 13,
    }

    /// The codes of `Choice` records: the string arguments formulas read; must equal
    /// `args::choice::*` (checked below at compile time).
    #[repr(i64)]
    enum StringChoice {
        Reduced = 1,
        Complete = 2,
        R = 3,
        Gels = 4,
        Gelsy = 5,
        Gelsd = 6,
        Gelss = 7,
    }

    /// How many sessions can be open at once (`registry::MAX_SESSIONS`): the shim keeps one
    /// slot of callbacks and thread state per session (checked below at compile time).
    #[repr(u8)]
    enum Limits {
        Sessions = 64,
    }

    /// How a failed call surfaces (`crate::error::ErrorKind`): the `c10` error class C++ throws.
    enum ErrorKind {
        Value,
        Type,
        Runtime,
    }

    /// The bits of `session::Decision` the shim reads (checked below at compile time).
    #[repr(u8)]
    enum DecisionBit {
        Skip = 1,
        Capture = 2,
        Kernel = 4,
        Pending = 8,
        Suppress = 16,
        Resume = 32,
    }

    struct EventDescription {
        is_op: bool,
        name: String,
        has_own_kernel: bool,
        /// A CompositeExplicitAutograd kernel: a decomposition that runs below autograd.
        explicit_composite: bool,
        positional_args: usize,
        /// The routes (`call_route`'s values, as bits) on which a call runs the operator's
        /// CompositeImplicitAutograd kernel although it has kernels of its own elsewhere.
        composite_routes: u64,
    }

    /// What a claimed call counted at its start (`session::Receipt`); the shim keeps it while
    /// the call runs and hands it back only if the call raises.
    struct Receipt {
        valid: bool,
        op: u32,
        scope: u32,
        phase: u8,
        category: u8,
        flops: u64,
        /// The floating-point work of an integer kernel, counted as FLOPs (`Formula::float`).
        float_flops: u64,
    }

    /// Where an operator event comes from (`session::OpCall`, with the session's slot).
    struct OpStart {
        slot: usize,
        generation: u64,
        /// The operator: the address of its schema's name.
        key: usize,
        /// The calling thread's frame.
        token: usize,
        backward: bool,
        sequence: i64,
        interposed: bool,
        /// `session::Origin`.
        origin: u8,
    }

    /// The registry's class of one operator (`formulas::Class`): `kind` is `counted`,
    /// `ignored`, `uncounted`, `communication` or `unclassified`; `detail` the category, the
    /// reason or the convention.
    struct OperatorClass {
        kind: String,
        detail: String,
    }

    struct OpenedSession {
        handle: i64,
        slot: usize,
        generation: u64,
        capture_outputs: bool,
        all_threads: bool,
    }

    extern "Rust" {
        /// The kind of the error this thread's last failed call returned (`Runtime` if none).
        fn last_error_kind() -> ErrorKind;
        fn open_session(config: &str) -> Result<OpenedSession>;
        fn close_session(handle: i64) -> Result<String>;
        fn finish_session(handle: i64, custom_flops: &str) -> Result<String>;
        fn discard_session(handle: i64);
        /// Moves a closed session without custom formulas out of its slot, its report unbuilt;
        /// returns its id among the kept sessions.
        fn keep_session(handle: i64) -> Result<i64>;
        /// The FlopReport (JSON) of a kept session, which is freed.
        fn kept_report(id: i64) -> Result<String>;
        /// Frees a kept session unread; never fails.
        fn drop_kept(id: i64);
        fn kept_sessions() -> usize;
        /// A closed recording session, kept as a priced compiled graph; returns the graph's id.
        fn price_session(handle: i64) -> Result<i64>;
        fn push_scope(handle: i64, label: &str) -> Result<()>;
        fn pop_scope(handle: i64) -> Result<()>;
        /// Labels modules by identity (`labels`: one per module, newline-separated) for the
        /// module paths of priced compiled graphs.
        fn name_modules(handle: i64, modules: &[i64], labels: &str) -> Result<()>;
        /// A module call starts on the calling thread (its forward pre-hook): the sessions
        /// labelling it push its label. Returns how many have not named it, their handles in
        /// `unnamed` (as many as fit). Never panics.
        fn enter_module(module: u64, unnamed: &mut [i64]) -> usize;
        /// The same for one session, after Python named the module; whether it pushed a label.
        /// Never panics.
        fn enter_module_in(handle: i64, module: u64) -> bool;
        /// A module call ends on the calling thread (its forward hook). Never panics.
        fn exit_module(module: u64);
        /// One node of a graph run node by node enters the calls of its modules (identities,
        /// outermost first) that are not open already; returns how many it entered.
        fn enter_modules(handle: i64, modules: &[i64]) -> Result<usize>;
        fn exit_modules(handle: i64, count: usize) -> Result<()>;
        fn open_module_calls(handle: i64) -> Result<usize>;
        /// The session labels its work by the module calls the host's frames show open on the
        /// thread `owner` names, instead of module hooks; whether it does (a host registered
        /// its frame walker).
        fn label_by_frames(handle: i64, owner: u64) -> Result<bool>;
        /// The host's frame walker and namer (addresses of `host_frames::WalkFn` and
        /// `host_frames::NameFn`; 0 removes them).
        fn register_host_frames(walk: usize, name: usize);
        fn live_sessions() -> usize;
        /// How the formula registry treats an operator (qualified name, `aten::mm`).
        fn classify_operator(name: &str) -> OperatorClass;
        /// Every operator the registry names.
        fn registry_operators() -> Vec<String>;
        /// This package's version (`Cargo.toml`: the one version source).
        fn torchscan_version() -> &'static str;
        /// An operator starts; returns the `session::Decision` bits.
        fn on_op_start(start: &OpStart, event: &OpEvent, receipt: &mut Receipt) -> u8;
        /// The end of a call `on_op_start` left pending; `completed`: it returned, it did not raise.
        fn on_op_end(slot: usize, generation: u64, token: usize, completed: bool, event: &OpEvent);
        /// A call counted at its start raised: take its count back.
        fn on_op_abort(slot: usize, generation: u64, receipt: &Receipt);

        /// Module formulas for a JSON list of module-call descriptors (see `modules/`).
        fn module_metrics(calls: &str) -> Result<String>;

        /// `crawl_module`'s report from its document (see `analysis.rs`), finishing the closed
        /// session `handle` into its operator FLOPs (0: no session, structure mode).
        fn analysis_report(handle: i64, document: &str) -> Result<String>;
        fn push_scopes(handle: i64, module_label: &str, call_label: &str) -> Result<()>;
        fn pop_scopes(handle: i64, count: usize) -> Result<()>;

        /// The table of a report; `wrap_mode` is "mid", "end" or "" (no wrapping). `max_width`
        /// 0: as wide as the content needs; `max_depth` -1: every layer.
        fn format_info(
            report: &str,
            wrap_mode: &str,
            receptive_field: bool,
            effective_rf_stats: bool,
            max_width: usize,
            max_depth: i64,
        ) -> Result<String>;

        /// The FLOPs table of a FlopReport (`flops_table.rs`): `by` "module", "operator" or
        /// "category"; `max_depth` -1: the whole module tree; `max_width` 0: as wide as needed;
        /// `order` a JSON list of module labels in call order ("": none).
        fn format_flops(report: &str, by: &str, max_depth: i64, max_width: usize, order: &str) -> Result<String>;

        /// The module tree of an AnalysisReport (`module_tree.rs`), a JSON list of its rows.
        fn module_tree(report: &str) -> Result<String>;

        /// The ThroughputReport of timed steps (a JSON list of `StepTiming`); `peak` 0: none.
        fn throughput_report(steps: &str, peak: f64, keep_steps: bool) -> Result<String>;

        /// The ReportDiff of two reports (JSON, encoded as `compare.rs` describes).
        fn compare_reports(before: &str, after: &str) -> Result<String>;

        /// The MergedReport of a job's ranks (JSON, as `merge.rs` describes).
        fn merge_reports(reports: &str) -> Result<String>;

        type MemoryTracker;
        fn new_memory_tracker() -> Box<MemoryTracker>;
        /// One CPU allocator event for the block at `address`: +bytes allocated, -bytes freed.
        /// Never panics.
        fn record(self: &MemoryTracker, address: usize, bytes: i64);
        fn memory_report_json(tracker: &MemoryTracker) -> String;
    }

    unsafe extern "C++" {
        include!("torchscan/cpp/bridge.h");
        type OpEvent;
        fn describe(event: &OpEvent) -> EventDescription;
        /// The call's route: `2 * backend + through_autograd`, 255 when unknown.
        fn call_route(event: &OpEvent) -> u8;
        /// The encoded inputs, in a thread-local buffer valid until the next read on this thread.
        fn read_inputs(event: &OpEvent) -> &[i64];
        fn read_outputs(event: &OpEvent) -> &[i64];
        /// A collective's inputs: as `read_inputs`, with its process group (a ProcessGroup
        /// object, or a registered group's name) as a `Group` record.
        fn read_collective_inputs(event: &OpEvent) -> &[i64];
        /// As `read_inputs`, then a `Data` record of what a data-dependent formula needs from the
        /// tensors' values (read only after its formula said so).
        fn read_data_inputs(event: &OpEvent) -> &[i64];

        /// The Rust API (`crate::api`): a session observing the calling thread, its close, its
        /// discard (any state, never fails), and a CPU peak-memory measurement.
        fn begin_counting() -> Result<i64>;
        fn end_counting(handle: i64) -> Result<()>;
        fn end_counting_discard(handle: i64);
        fn begin_memory() -> Result<i64>;
        fn end_memory(id: i64) -> Result<String>;
    }
}

use bridge::{
    ArgTag, DecisionBit, EventDescription, Limits, OpEvent, OpStart, OpenedSession, OperatorClass, Receipt,
    StringChoice,
};

const _: () = {
    assert!(ArgTag::None.repr == args::TAG_NONE);
    assert!(ArgTag::Tensor.repr == args::TAG_TENSOR);
    assert!(ArgTag::Int.repr == args::TAG_INT);
    assert!(ArgTag::Double.repr == args::TAG_DOUBLE);
    assert!(ArgTag::Bool.repr == args::TAG_BOOL);
    assert!(ArgTag::IntList.repr == args::TAG_INT_LIST);
    assert!(ArgTag::BoolList.repr == args::TAG_BOOL_LIST);
    assert!(ArgTag::TensorList.repr == args::TAG_TENSOR_LIST);
    assert!(ArgTag::Other.repr == args::TAG_OTHER);
    assert!(ArgTag::Sparse.repr == args::TAG_SPARSE);
    assert!(ArgTag::Packed.repr == args::TAG_PACKED);
    assert!(ArgTag::Group.repr == args::TAG_GROUP);
    assert!(ArgTag::Data.repr == args::TAG_DATA);
    assert!(ArgTag::Choice.repr == args::TAG_CHOICE);
    assert!(StringChoice::Reduced.repr == args::choice::REDUCED);
    assert!(StringChoice::Complete.repr == args::choice::COMPLETE);
    assert!(StringChoice::R.repr == args::choice::R);
    assert!(StringChoice::Gels.repr == args::choice::GELS);
    assert!(StringChoice::Gelsy.repr == args::choice::GELSY);
    assert!(StringChoice::Gelsd.repr == args::choice::GELSD);
    assert!(StringChoice::Gelss.repr == args::choice::GELSS);
    assert!(Limits::Sessions.repr as usize == registry::MAX_SESSIONS);
    assert!(DecisionBit::Skip.repr == Decision::SKIP.0);
    assert!(DecisionBit::Capture.repr == Decision::CAPTURE);
    assert!(DecisionBit::Kernel.repr == Decision::KERNEL);
    assert!(DecisionBit::Pending.repr == Decision::PENDING);
    assert!(DecisionBit::Suppress.repr == Decision::SUPPRESS);
    assert!(DecisionBit::Resume.repr == Decision::RESUME);
};

thread_local! {
    /// The kind of this thread's last error: C++ reads it as soon as the call returns.
    static LAST_ERROR_KIND: std::cell::Cell<bridge::ErrorKind> = const { std::cell::Cell::new(bridge::ErrorKind::Runtime) };
}

fn last_error_kind() -> bridge::ErrorKind {
    LAST_ERROR_KIND.with(|k| k.get())
}

/// The one mapping from the core's error kinds to the bridge's.
fn bridge_kind(kind: crate::error::ErrorKind) -> bridge::ErrorKind {
    match kind {
        crate::error::ErrorKind::Value => bridge::ErrorKind::Value,
        crate::error::ErrorKind::Type => bridge::ErrorKind::Type,
        crate::error::ErrorKind::Runtime => bridge::ErrorKind::Runtime,
    }
}

/// Runs `f`; a panic becomes a runtime error instead of an abort. An error's kind is left for
/// `last_error_kind`, its message goes in cxx's `rust::Error`.
fn guarded<T>(f: impl FnOnce() -> crate::Result<T>) -> Result<T, String> {
    let (kind, message) = match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => return Ok(v),
        Ok(Err(e)) => (bridge_kind(e.kind()), e.to_string()),
        Err(_) => {
            (bridge::ErrorKind::Runtime, "internal error in torchscan's native core (a bug: please report it)".into())
        }
    };
    LAST_ERROR_KIND.with(|k| k.set(kind));
    Err(message)
}

fn open_session(config: &str) -> Result<OpenedSession, String> {
    guarded(|| {
        let (handle, observation) = registry::open(Config::from_json_cached(config)?)?;
        Ok(OpenedSession {
            handle: handle.pack(),
            slot: handle.slot,
            generation: handle.generation,
            capture_outputs: observation.capture_outputs,
            all_threads: observation.all_threads,
        })
    })
}

fn close_session(handle: i64) -> Result<String, String> {
    guarded(|| registry::close(handle))
}

fn finish_session(handle: i64, custom_flops: &str) -> Result<String, String> {
    guarded(|| {
        let results = crate::session::parse_custom_results(custom_flops)?;
        let report = registry::finish(handle, &results)?;
        Ok(serde_json::to_string(&report).unwrap_or_default())
    })
}

fn keep_session(handle: i64) -> Result<i64, String> {
    guarded(|| registry::keep(handle))
}

fn kept_report(id: i64) -> Result<String, String> {
    guarded(|| Ok(serde_json::to_string(&registry::kept_report(id)?).unwrap_or_default()))
}

fn drop_kept(id: i64) {
    let _ = catch_unwind(|| registry::drop_kept(id));
}

fn kept_sessions() -> usize {
    catch_unwind(registry::kept_sessions).unwrap_or(0)
}

fn price_session(handle: i64) -> Result<i64, String> {
    guarded(|| registry::price(handle))
}

fn discard_session(handle: i64) {
    let _ = catch_unwind(|| registry::discard(handle));
}

fn push_scope(handle: i64, label: &str) -> Result<(), String> {
    guarded(|| registry::push_scope(handle, label))
}

fn name_modules(handle: i64, modules: &[i64], labels: &str) -> Result<(), String> {
    guarded(|| {
        let labels: Vec<&str> = if labels.is_empty() { Vec::new() } else { labels.split('\n').collect() };
        registry::name_modules(handle, modules, &labels)
    })
}

fn pop_scope(handle: i64) -> Result<(), String> {
    guarded(|| registry::pop_scope(handle))
}

fn enter_module(module: u64, unnamed: &mut [i64]) -> usize {
    catch_unwind(AssertUnwindSafe(|| registry::enter_module(module, unnamed))).unwrap_or(0)
}

fn enter_module_in(handle: i64, module: u64) -> bool {
    catch_unwind(|| registry::enter_module_in(handle, module)).unwrap_or(false)
}

fn exit_module(module: u64) {
    let _ = catch_unwind(|| registry::exit_module(module));
}

fn enter_modules(handle: i64, modules: &[i64]) -> Result<usize, String> {
    guarded(|| registry::enter_modules(handle, modules))
}

fn exit_modules(handle: i64, count: usize) -> Result<(), String> {
    guarded(|| registry::exit_modules(handle, count))
}

fn open_module_calls(handle: i64) -> Result<usize, String> {
    guarded(|| registry::open_module_calls(handle))
}

fn label_by_frames(handle: i64, owner: u64) -> Result<bool, String> {
    guarded(|| registry::label_by_frames(handle, owner))
}

fn register_host_frames(walk: usize, name: usize) {
    host_frames::register(walk, name);
}

fn classify_operator(name: &str) -> OperatorClass {
    use crate::formulas::Class;
    let (kind, detail) = match catch_unwind(|| crate::formulas::classify(name)).unwrap_or(Class::Unclassified) {
        Class::Counted(category) => ("counted", category),
        Class::Ignored(reason) => ("ignored", reason),
        Class::Uncounted(reason) => ("uncounted", reason),
        Class::Communication(convention) => ("communication", convention),
        Class::Unclassified => ("unclassified", ""),
    };
    OperatorClass { kind: kind.into(), detail: detail.into() }
}

fn registry_operators() -> Vec<String> {
    catch_unwind(|| crate::formulas::registry_operators().map(String::from).collect()).unwrap_or_default()
}

fn torchscan_version() -> &'static str {
    crate::report::TORCHSCAN_VERSION
}

fn live_sessions() -> usize {
    catch_unwind(registry::live_sessions).unwrap_or(0)
}

/// Adapts the C++ event to the core's [`crate::session::OpEvent`].
struct Event<'a>(&'a OpEvent);

impl crate::session::OpEvent for Event<'_> {
    fn describe(&self) -> Option<OpDescription> {
        let EventDescription { is_op, name, has_own_kernel, explicit_composite, positional_args, composite_routes } =
            bridge::describe(self.0);
        is_op.then_some(OpDescription { name, has_own_kernel, explicit_composite, positional_args, composite_routes })
    }

    fn route(&self) -> u8 {
        bridge::call_route(self.0)
    }

    fn inputs(&self) -> &[i64] {
        bridge::read_inputs(self.0)
    }

    fn collective_inputs(&self) -> &[i64] {
        bridge::read_collective_inputs(self.0)
    }

    fn data_inputs(&self) -> &[i64] {
        bridge::read_data_inputs(self.0)
    }

    fn read_outputs(&self, out: &mut Vec<i64>) {
        out.extend_from_slice(bridge::read_outputs(self.0));
    }
}

fn on_op_start(start: &OpStart, event: &OpEvent, receipt: &mut Receipt) -> u8 {
    let &OpStart { slot, generation, key, token, backward, sequence, interposed, origin } = start;
    let phase = if backward { Phase::Backward } else { Phase::Forward };
    let call = OpCall { key, token, phase, sequence, interposed, origin: Origin::from_u8(origin) };
    let mut counted = session::Receipt::default();
    // A panic (a bug) is recorded against the session, and the event's children are skipped;
    // nothing unwinds out of guarded_event, so nothing may unwind into C++.
    let decision = registry::guarded_event(slot, generation, || {
        registry::on_op_start(slot, generation, call, &Event(event), &mut counted)
    });
    let session::Receipt { valid, op, scope, phase, category, flops, float_flops } = counted;
    *receipt = Receipt { valid, op, scope, phase, category, flops, float_flops };
    decision.0
}

fn on_op_abort(slot: usize, generation: u64, receipt: &Receipt) {
    let &Receipt { valid, op, scope, phase, category, flops, float_flops } = receipt;
    let receipt = session::Receipt { valid, op, scope, phase, category, flops, float_flops };
    let _ = catch_unwind(AssertUnwindSafe(|| registry::on_op_abort(slot, generation, receipt)));
}

fn on_op_end(slot: usize, generation: u64, token: usize, completed: bool, event: &OpEvent) {
    let _ = catch_unwind(AssertUnwindSafe(|| registry::on_op_end(slot, generation, token, completed, &Event(event))));
}

fn new_memory_tracker() -> Box<MemoryTracker> {
    Box::new(MemoryTracker::new())
}

fn memory_report_json(tracker: &MemoryTracker) -> String {
    serde_json::to_string(&tracker.report()).unwrap_or_default()
}

fn module_metrics(calls: &str) -> Result<String, String> {
    guarded(|| crate::modules::metrics_json(calls))
}

fn analysis_report(handle: i64, document: &str) -> Result<String, String> {
    guarded(|| {
        let flops = if handle == 0 { None } else { Some(registry::finish(handle, &[])?) };
        crate::analysis::assemble_json(document, flops)
    })
}

fn push_scopes(handle: i64, module_label: &str, call_label: &str) -> Result<(), String> {
    guarded(|| registry::push_scopes(handle, &[module_label, call_label]))
}

fn pop_scopes(handle: i64, count: usize) -> Result<(), String> {
    guarded(|| registry::pop_scopes(handle, count))
}

fn format_info(
    report: &str,
    wrap_mode: &str,
    receptive_field: bool,
    effective_rf_stats: bool,
    max_width: usize,
    max_depth: i64,
) -> Result<String, String> {
    guarded(|| {
        let report: crate::report::AnalysisReport = serde_json::from_str(report).map_err(|e| {
            crate::error::Error::ReportValue(format!("the report does not match the AnalysisReport schema ({e})"))
        })?;
        let wrap = crate::summary::Wrap::parse((!wrap_mode.is_empty()).then_some(wrap_mode))?;
        crate::summary::format_info(
            &report,
            wrap,
            receptive_field,
            effective_rf_stats,
            (max_width > 0).then_some(max_width),
            u64::try_from(max_depth).ok(),
        )
    })
}

fn format_flops(report: &str, by: &str, max_depth: i64, max_width: usize, order: &str) -> Result<String, String> {
    guarded(|| {
        let report: crate::report::FlopReport = serde_json::from_str(report).map_err(|e| {
            crate::error::Error::ReportValue(format!("the report does not match the FlopReport schema ({e})"))
        })?;
        let by = crate::flops_table::By::parse(by)?;
        let max_depth = usize::try_from(max_depth).ok();
        let order: Vec<String> = if order.is_empty() {
            Vec::new()
        } else {
            serde_json::from_str(order).map_err(|e| {
                crate::error::Error::BadArgument(format!("the call order must be a list of module labels ({e})"))
            })?
        };
        crate::flops_table::format_flops(&report, by, max_depth, (max_width > 0).then_some(max_width), &order)
    })
}

fn module_tree(report: &str) -> Result<String, String> {
    guarded(|| {
        let report: crate::report::AnalysisReport = serde_json::from_str(report).map_err(|e| {
            crate::error::Error::ReportValue(format!("the report does not match the AnalysisReport schema ({e})"))
        })?;
        crate::module_tree::tree_json(&report)
    })
}

fn throughput_report(steps: &str, peak: f64, keep_steps: bool) -> Result<String, String> {
    guarded(|| {
        let steps: Vec<crate::report::StepTiming> = serde_json::from_str(steps)
            .map_err(|e| crate::error::Error::ReportValue(format!("the steps are not step timings ({e})")))?;
        let report = crate::throughput::throughput_report(steps, (peak != 0.0).then_some(peak), keep_steps)?;
        serde_json::to_string(&report)
            .map_err(|e| crate::error::Error::ReportValue(format!("the throughput report is not JSON ({e})")))
    })
}

fn compare_reports(before: &str, after: &str) -> Result<String, String> {
    guarded(|| crate::compare::compare_json(before, after))
}

fn merge_reports(reports: &str) -> Result<String, String> {
    guarded(|| crate::merge::merge_json(reports))
}

/// The C++ entry points of the Rust API ([`crate::api`]), with their exceptions as [`crate::Error`].
pub(crate) mod native {
    use super::bridge;
    use crate::error::{Error, Result};

    fn native(e: cxx::Exception) -> Error {
        Error::Native(e.what().to_string())
    }

    pub fn begin_counting() -> Result<i64> {
        bridge::begin_counting().map_err(native)
    }

    pub fn end_counting(handle: i64) -> Result<()> {
        bridge::end_counting(handle).map_err(native)
    }

    pub fn discard_counting(handle: i64) {
        bridge::end_counting_discard(handle)
    }

    pub fn begin_memory() -> Result<i64> {
        bridge::begin_memory().map_err(native)
    }

    pub fn end_memory(id: i64) -> Result<String> {
        bridge::end_memory(id).map_err(native)
    }
}

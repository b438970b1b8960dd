//! The table of live sessions. A session lives in one of [`MAX_SESSIONS`] slots; its handle
//! packs the slot and a generation number, so a stale handle (or a late event from a thread
//! that still carries a closed session's callback) can never reach the slot's next occupant.
//!
//! Each slot has its own lock (`slot_lock.rs`): sessions on different threads never contend. The
//! shim calls [`on_op_start`] for every operator event; it never panics out (see `ffi.rs`).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::slot_lock::{SlotGuard, SlotLock};

use crate::error::{Error, Result};
use crate::host_frames;
use crate::report::FlopReport;
use crate::session::{
    Config, CustomResult, Decision, Entered, OpCall, OpEvent, PriceMemos, Receipt, Session, OPTIMIZER_STEP_BEGIN,
    OPTIMIZER_STEP_END,
};

pub const MAX_SESSIONS: usize = 64;
const SLOT_BITS: u32 = 6;
// The shim takes a handle's slot as its low bits (`cpp/ops.cpp`, `slot_of`).
const _: () = assert!(MAX_SESSIONS == 1 << SLOT_BITS);

enum State {
    Open(Session),
    /// Closed: no more events; waiting for the custom-formula results.
    Closed(Session),
}

struct Slot {
    generation: u64,
    state: Option<State>,
    /// Formula prices the slot's last session remembered, for its next (`session/memo.rs`).
    memos: Option<PriceMemos>,
}

static SLOTS: [SlotLock<Slot>; MAX_SESSIONS] =
    [const { SlotLock::new(Slot { generation: 0, state: None, memos: None }) }; MAX_SESSIONS];
static NEXT_GENERATION: AtomicU64 = AtomicU64::new(1);

/// A handle split into its parts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Handle {
    pub slot: usize,
    pub generation: u64,
}

impl Handle {
    pub fn pack(self) -> i64 {
        ((self.generation << SLOT_BITS) | self.slot as u64) as i64
    }

    pub fn unpack(handle: i64) -> Result<Handle> {
        if handle <= 0 {
            return Err(Error::UnknownSession(handle));
        }
        let raw = handle as u64;
        Ok(Handle { slot: (raw & ((1 << SLOT_BITS) - 1)) as usize, generation: raw >> SLOT_BITS })
    }
}

fn lock(slot: usize) -> SlotGuard<'static, Slot> {
    // A panic while holding the lock is caught at the FFI edge; the slot's data stays usable.
    SLOTS[slot].lock()
}

/// How the shim must observe a session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Observation {
    /// Capture operator outputs (custom formulas need them).
    pub capture_outputs: bool,
    /// Count every thread's operators, not only the session's thread's.
    pub all_threads: bool,
}

/// Opens a session; returns its handle and how the shim must observe it.
pub fn open(config: Config) -> Result<(Handle, Observation)> {
    let mut session = Session::new(config);
    let observation = Observation { capture_outputs: session.needs_outputs(), all_threads: session.all_threads() };
    let labels_modules = session.labels_modules();
    let generation = NEXT_GENERATION.fetch_add(1, Ordering::Relaxed);
    for slot in 0..MAX_SESSIONS {
        let mut guard = lock(slot);
        if guard.state.is_none() {
            guard.generation = generation;
            if let Some(memos) = guard.memos.take() {
                session.adopt_memos(memos);
            }
            guard.state = Some(State::Open(session));
            let handle = Handle { slot, generation };
            drop(guard);
            if labels_modules {
                // The module hooks of this thread reach the session from now until it closes.
                // Sessions that were closed on another thread (which cannot reach this thread's
                // list) are dropped from it here.
                let _ = LABELLING.try_with(|sessions| {
                    let mut sessions = sessions.borrow_mut();
                    sessions.retain(|&h| with_slot(h, |_, _| Ok(())).is_ok());
                    sessions.push(handle.pack());
                });
            }
            return Ok((handle, observation));
        }
    }
    Err(Error::TooManySessions(MAX_SESSIONS))
}

fn with_slot<T>(handle: i64, f: impl FnOnce(&mut Slot, i64) -> Result<T>) -> Result<T> {
    let h = Handle::unpack(handle)?;
    if h.slot >= MAX_SESSIONS {
        return Err(Error::UnknownSession(handle));
    }
    let mut guard = lock(h.slot);
    if guard.generation != h.generation || guard.state.is_none() {
        return Err(Error::UnknownSession(handle));
    }
    f(&mut guard, handle)
}

/// Stops counting; returns the custom-formula calls to price (JSON, see `Session`).
pub fn close(handle: i64) -> Result<String> {
    stop_labelling(handle);
    with_slot(handle, |slot, handle| match slot.state.take() {
        Some(State::Open(mut session)) => {
            let pending = session.pending_custom_json();
            slot.memos = Some(session.take_memos());
            slot.state = Some(State::Closed(session));
            Ok(pending)
        }
        other => {
            slot.state = other;
            Err(Error::SessionClosed(handle))
        }
    })
}

/// Builds the report of a closed session and frees its slot.
pub fn finish(handle: i64, custom: &[CustomResult]) -> Result<FlopReport> {
    with_slot(handle, |slot, handle| match slot.state.take() {
        Some(State::Closed(session)) => session.into_report(custom),
        other => {
            slot.state = other;
            Err(Error::SessionStillOpen(handle))
        }
    })
}

/// Closed sessions kept for a report nobody has asked for yet (`keep`): a `count_flops` per
/// training step builds its report only if the step's counter is read. They hold no slot, so
/// that counters kept unread do not use up the sessions that can be open at once.
static KEPT: Mutex<BTreeMap<i64, Session>> = Mutex::new(BTreeMap::new());
static NEXT_KEPT: AtomicI64 = AtomicI64::new(1);

fn kept() -> MutexGuard<'static, BTreeMap<i64, Session>> {
    KEPT.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Moves a closed session out of its slot (freed) into the kept ones; returns its id there.
pub fn keep(handle: i64) -> Result<i64> {
    let session = with_slot(handle, |slot, handle| match slot.state.take() {
        Some(State::Closed(session)) => Ok(session),
        other => {
            slot.state = other;
            Err(Error::SessionStillOpen(handle))
        }
    })?;
    let id = NEXT_KEPT.fetch_add(1, Ordering::Relaxed);
    kept().insert(id, session);
    Ok(id)
}

/// The report of a kept session (without custom formulas), which is freed.
pub fn kept_report(id: i64) -> Result<FlopReport> {
    let session = kept().remove(&id).ok_or(Error::UnknownSession(id))?;
    session.into_report(&[])
}

/// Frees a kept session unread. Unknown ids are ignored.
pub fn drop_kept(id: i64) {
    let session = kept().remove(&id);
    drop(session); // after the lock is released
}

/// Kept sessions not yet read or dropped (for leak checks in tests).
pub fn kept_sessions() -> usize {
    kept().len()
}

/// Turns a closed recording session into a priced compiled graph (`session::priced`) and frees
/// its slot; returns the graph's id.
pub fn price(handle: i64) -> Result<i64> {
    with_slot(handle, |slot, handle| match slot.state.take() {
        Some(State::Closed(session)) => Ok(crate::session::priced::register(session.into_priced())),
        other => {
            slot.state = other;
            Err(Error::SessionStillOpen(handle))
        }
    })
}

/// Frees a session's slot whatever its state (error paths). Unknown handles are ignored.
pub fn discard(handle: i64) {
    stop_labelling(handle);
    let _ = with_slot(handle, |slot, _| {
        slot.state = None;
        Ok(())
    });
}

/// Pushes `labels` in order (a module label and its call label in one FFI call, say).
pub fn push_scopes(handle: i64, labels: &[&str]) -> Result<()> {
    with_slot(handle, |slot, handle| match &mut slot.state {
        Some(State::Open(session)) => {
            for label in labels {
                session.scopes_mut().push(label);
            }
            Ok(())
        }
        _ => Err(Error::SessionClosed(handle)),
    })
}

/// Pushes the scope `label`, or marks an optimizer step's start or end (the two reserved labels
/// of `session::OPTIMIZER_STEP_BEGIN`/`_END`).
pub fn push_scope(handle: i64, label: &str) -> Result<()> {
    match label {
        OPTIMIZER_STEP_BEGIN => with_open(handle, Session::begin_optimizer_step),
        OPTIMIZER_STEP_END => with_open(handle, Session::end_optimizer_step),
        _ => push_scopes(handle, &[label]),
    }
}

/// Pops `count` scopes; an underflow pops nothing.
pub fn pop_scopes(handle: i64, count: usize) -> Result<()> {
    with_slot(handle, |slot, handle| match &mut slot.state {
        Some(State::Open(session)) => {
            if session.scopes_mut().depth() < count {
                return Err(Error::ScopeUnderflow(handle));
            }
            for _ in 0..count {
                session.scopes_mut().pop();
            }
            Ok(())
        }
        _ => Err(Error::SessionClosed(handle)),
    })
}

pub fn pop_scope(handle: i64) -> Result<()> {
    pop_scopes(handle, 1)
}

/// Names modules for the session: `modules[i]` (a module's identity, Python's `id`) is labelled
/// `labels[i]` when it is called (the module hooks) and wherever a priced compiled graph ran it.
pub fn name_modules(handle: i64, modules: &[i64], labels: &[&str]) -> Result<()> {
    if modules.len() != labels.len() {
        return Err(Error::BadModuleNames(format!("{} modules but {} labels", modules.len(), labels.len())));
    }
    with_open(handle, |session| session.name_modules(modules.iter().map(|&m| m as u64).zip(labels.iter().copied())))
}

fn with_open<T>(handle: i64, f: impl FnOnce(&mut Session) -> T) -> Result<T> {
    with_slot(handle, |slot, handle| match &mut slot.state {
        Some(State::Open(session)) => Ok(f(session)),
        _ => Err(Error::SessionClosed(handle)),
    })
}

thread_local! {
    /// The sessions that label the module calls of this thread, in the order they started.
    /// Reserved once: entering and leaving a module allocates nothing.
    static LABELLING: RefCell<Vec<i64>> = RefCell::new(Vec::with_capacity(MAX_SESSIONS));
}

/// The session labels module calls no more (on the calling thread; a no-op elsewhere).
fn stop_labelling(handle: i64) {
    let _ = LABELLING.try_with(|sessions| sessions.borrow_mut().retain(|&h| h != handle));
}

/// A module call starts on the calling thread: each session labelling it pushes the module's
/// label. Returns how many sessions have not named the module (their handles are written to
/// `unnamed`, as many as fit); Python names it for them and enters it with
/// [`enter_module_in`].
pub fn enter_module(module: u64, unnamed: &mut [i64]) -> usize {
    let mut count = 0;
    let _ = LABELLING.try_with(|sessions| {
        let Ok(sessions) = sessions.try_borrow() else { return };
        for &handle in sessions.iter() {
            if matches!(with_open(handle, |session| session.enter_module(module)), Ok(Entered::Unnamed)) {
                if let Some(out) = unnamed.get_mut(count) {
                    *out = handle;
                }
                count += 1;
            }
        }
    });
    count
}

/// A module call starts, for one session (after Python named the module); whether a label was
/// pushed.
pub fn enter_module_in(handle: i64, module: u64) -> bool {
    matches!(with_open(handle, |session| session.enter_module(module)), Ok(Entered::Pushed))
}

/// A module call ends on the calling thread: the sessions labelling it pop its label (the last
/// to start first).
pub fn exit_module(module: u64) {
    let _ = LABELLING.try_with(|sessions| {
        let Ok(sessions) = sessions.try_borrow() else { return };
        for &handle in sessions.iter().rev() {
            let _ = with_open(handle, |session| session.exit_module(module));
        }
    });
}

/// See `Session::enter_modules_once`.
pub fn enter_modules(handle: i64, modules: &[i64]) -> Result<usize> {
    with_open(handle, |session| session.enter_modules_once(modules.iter().map(|&m| m as u64)))
}

pub fn exit_modules(handle: i64, count: usize) -> Result<()> {
    with_open(handle, |session| session.exit_modules(count))
}

pub fn open_module_calls(handle: i64) -> Result<usize> {
    with_open(handle, |session| session.open_module_calls())
}

/// How many times one event may ask the host to name the module calls open around it.
const NAMING_ROUNDS: usize = 8;

/// An operator event for the session in `slot`, if it is still `generation`'s and open;
/// `receipt` receives what it counted at once (see [`Receipt`]).
pub fn on_op_start(slot: usize, generation: u64, call: OpCall, event: &dyn OpEvent, receipt: &mut Receipt) -> Decision {
    let Some(cell) = SLOTS.get(slot) else { return Decision::DESCEND };
    match start_in(cell, generation, call, event, receipt, true) {
        Started::Decided(decision) => decision,
        Started::Unnamed(unnamed) => name_then_start(cell, Handle { slot, generation }, call, event, receipt, unnamed),
    }
}

/// What the session made of an operator's start: a decision, or the module calls it needs
/// named first (labelling by frames, the first operator in a call nobody named).
enum Started {
    Decided(Decision),
    Unnamed(Vec<(u64, bool)>),
}

/// Hands an event to the session in `cell` if it is still `generation`'s and open (else it is
/// skipped). A session that needs module calls named hands them over when `naming`; otherwise
/// the event descends without labels.
#[inline]
fn start_in(
    cell: &SlotLock<Slot>,
    generation: u64,
    call: OpCall,
    event: &dyn OpEvent,
    receipt: &mut Receipt,
    naming: bool,
) -> Started {
    let mut guard = cell.lock();
    let slot = &mut *guard;
    let (Some(State::Open(session)), true) = (&mut slot.state, slot.generation == generation) else {
        return Started::Decided(Decision::SKIP);
    };
    let decision = session.on_op_start(call, event);
    *receipt = session.take_receipt();
    match decision {
        Decision::NAME if naming => Started::Unnamed(session.take_unnamed()),
        Decision::NAME => Started::Decided(Decision::DESCEND),
        decision => Started::Decided(decision),
    }
}

/// The rest of [`on_op_start`] for an event in module calls nobody named (rare: the first
/// operator in such a call), kept out of the common path. The host names them with the slot
/// unlocked (naming calls back into `name_modules`); then the event is looked at again. The
/// host names the outermost unnamed call first, as the hooks' pre-hook would, and the frames
/// are read again: naming a module names its submodules, so the calls inside it are usually
/// named by then (naming each in turn named the same tree once per nesting level). The
/// next-to-last round names all that are left; the last passes over whatever is still unnamed,
/// so that the loop ends whatever the host does, and the event is looked at one last time.
#[cold]
#[inline(never)]
fn name_then_start(
    cell: &SlotLock<Slot>,
    handle: Handle,
    call: OpCall,
    event: &dyn OpEvent,
    receipt: &mut Receipt,
    mut unnamed: Vec<(u64, bool)>,
) -> Decision {
    let packed = handle.pack();
    for round in 0..NAMING_ROUNDS {
        let all_at_once = round + 2 >= NAMING_ROUNDS;
        let last = round + 1 == NAMING_ROUNDS;
        let asked = if all_at_once { unnamed.len() } else { 1 };
        let passed: Vec<u64> = unnamed
            .into_iter()
            .take(asked)
            .filter(|&(module, inside)| last || !host_frames::name_unnamed(packed, module, inside))
            .map(|(module, _)| module)
            .collect();
        if with_open(packed, |session| session.named(&passed)).is_err() {
            return Decision::SKIP;
        }
        match start_in(cell, handle.generation, call, event, receipt, !last) {
            Started::Decided(decision) => return decision,
            Started::Unnamed(more) => unnamed = more,
        }
    }
    Decision::DESCEND
}

/// The session labels its work by the module calls the host's frames show open on the thread
/// `owner` names (see `Session::label_by_frames`), and no longer by this thread's module hooks.
/// Whether it does (false: no host registered its frame walker).
pub fn label_by_frames(handle: i64, owner: u64) -> Result<bool> {
    let by_frames = with_open(handle, |session| session.label_by_frames(owner))?;
    if by_frames {
        stop_labelling(handle);
    }
    Ok(by_frames)
}

/// A call counted at its start raised: its count is taken back.
pub fn on_op_abort(slot: usize, generation: u64, receipt: Receipt) {
    let Some(cell) = SLOTS.get(slot) else { return };
    let mut guard = cell.lock();
    if guard.generation == generation {
        if let Some(State::Open(session)) = &mut guard.state {
            session.undo(receipt);
        }
    }
}

/// Handles one operator event with `handle_event`. A panic there is a bug in the core; it must
/// not unwind into C++ (that aborts the process) and must not vanish either: the session
/// records it (its total becomes partial, with an `internal_error` diagnostic) and the event's
/// children are skipped, so that nothing is counted twice.
///
/// Nothing unwinds out of it: what handles the panic (dropping its payload included) runs under
/// a catch of its own, so callers need none.
#[inline]
pub fn guarded_event(slot: usize, generation: u64, handle_event: impl FnOnce() -> Decision) -> Decision {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(handle_event)) {
        Ok(decision) => decision,
        Err(payload) => {
            // A payload may panic as it drops: each step is caught on its own, the drop first so
            // that nothing is dropped while a panic unwinds (which would abort).
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(payload)));
            let _ = std::panic::catch_unwind(|| record_internal_error(slot, generation));
            Decision::SKIP
        }
    }
}

#[cold]
fn record_internal_error(slot: usize, generation: u64) {
    if let Some(cell) = SLOTS.get(slot) {
        let mut guard = cell.lock();
        if guard.generation == generation {
            if let Some(State::Open(session)) = &mut guard.state {
                session.record_internal_error();
            }
        }
    }
}

/// The end of a claimed call: counted if `completed` (it returned instead of raising).
pub fn on_op_end(slot: usize, generation: u64, token: usize, completed: bool, event: &dyn OpEvent) {
    let Some(cell) = SLOTS.get(slot) else { return };
    let mut guard = cell.lock();
    if guard.generation == generation {
        if let Some(State::Open(session)) = &mut guard.state {
            session.on_op_end(token, completed, event);
        }
    }
}

/// Sessions currently holding a slot (for leak checks in tests).
pub fn live_sessions() -> usize {
    (0..MAX_SESSIONS).filter(|&s| lock(s).state.is_some()).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labelling(modules: &str) -> i64 {
        let config = Config::from_json(&format!(r#"{{"modules": "{modules}"}}"#)).unwrap();
        open(config).unwrap().0.pack()
    }

    fn by_module(handle: i64) -> Vec<String> {
        close(handle).unwrap();
        finish(handle, &[]).unwrap().by_module.keys().cloned().collect()
    }

    #[test]
    fn module_calls_reach_the_sessions_of_their_thread_until_they_close() {
        let named = labelling("named");
        let all = labelling("all");
        name_modules(named, &[1, 2], &["Net", "Net.fc"]).unwrap();
        let mut unnamed = [0i64; 4];
        // `all` has not named module 1: the hook names it in Python, then enters it there.
        assert_eq!(enter_module(1, &mut unnamed), 1);
        assert_eq!(unnamed[0], all);
        name_modules(all, &[1], &["Other"]).unwrap();
        assert!(enter_module_in(all, 1));
        assert_eq!(enter_module(2, &mut unnamed), 1); // `all` has not named 2 either
                                                      // Another thread's module calls reach neither session.
        std::thread::spawn(|| {
            let mut unnamed = [0i64; 4];
            assert_eq!(enter_module(1, &mut unnamed), 0);
            exit_module(1);
        })
        .join()
        .unwrap();
        assert_eq!(open_module_calls(named).unwrap(), 2);
        assert_eq!(open_module_calls(all).unwrap(), 1);
        exit_module(2);
        exit_module(1);
        assert_eq!(open_module_calls(named).unwrap(), 0);
        assert_eq!(open_module_calls(all).unwrap(), 0);
        // A closed session is no longer reached (nor is an unknown handle an error here).
        assert_eq!(by_module(all), vec!["Other".to_string()]);
        assert_eq!(enter_module(1, &mut unnamed), 0);
        exit_module(1);
        assert!(!enter_module_in(all, 1));
        discard(named);
        LABELLING.with_borrow(|sessions| assert!(sessions.is_empty(), "{sessions:?}"));
    }

    #[test]
    fn a_kept_session_leaves_its_slot_and_reports_as_finish_would() {
        // Two sessions labelled alike, one finished at once, one kept and reported later.
        let finished = labelling("named");
        let kept_handle = labelling("named");
        for handle in [finished, kept_handle] {
            name_modules(handle, &[7], &["Net"]).unwrap();
            close(handle).unwrap();
        }
        let expected = finish(finished, &[]).unwrap();
        let id = keep(kept_handle).unwrap();
        // Its slot is free: the handle is unknown there now.
        assert!(matches!(keep(kept_handle), Err(Error::UnknownSession(_))));
        assert!(kept().contains_key(&id));
        let report = kept_report(id).unwrap();
        assert_eq!(serde_json::to_string(&report).unwrap(), serde_json::to_string(&expected).unwrap());
        // Read once: the kept session is gone; dropping it again is harmless.
        assert!(matches!(kept_report(id), Err(Error::UnknownSession(_))));
        drop_kept(id);
        // An open session cannot be kept (it must be closed first), and stays open.
        let open_handle = labelling("named");
        assert!(matches!(keep(open_handle), Err(Error::SessionStillOpen(_))));
        discard(open_handle);
        // One dropped unread is freed.
        let dropped = labelling("named");
        close(dropped).unwrap();
        let dropped_id = keep(dropped).unwrap();
        drop_kept(dropped_id);
        assert!(!kept().contains_key(&dropped_id));
    }

    #[test]
    fn a_session_without_labelling_is_not_reached_by_module_calls() {
        let (handle, _) = open(Config::default()).unwrap();
        let handle = handle.pack();
        name_modules(handle, &[7], &["Net"]).unwrap();
        assert_eq!(enter_module(7, &mut []), 0);
        assert_eq!(open_module_calls(handle).unwrap(), 0);
        discard(handle);
    }

    #[test]
    fn a_panic_whose_payload_panics_as_it_drops_is_still_caught_and_recorded() {
        struct PanicsOnDrop;
        impl Drop for PanicsOnDrop {
            fn drop(&mut self) {
                panic!("a payload that panics as it drops");
            }
        }
        let (handle, _) = open(Config::default()).unwrap();
        let decision = guarded_event(handle.slot, handle.generation, || std::panic::panic_any(PanicsOnDrop));
        assert_eq!(decision, Decision::SKIP);
        let packed = handle.pack();
        close(packed).unwrap();
        let report = finish(packed, &[]).unwrap();
        assert_eq!(report.total.status, crate::report::Status::Partial);
        assert!(report.diagnostics.iter().any(|d| d.code == "internal_error"));
    }

    #[test]
    fn a_panic_while_handling_an_event_is_a_diagnostic_not_an_abort() {
        let (handle, _) = open(Config::default()).unwrap();
        let decision = guarded_event(handle.slot, handle.generation, || panic!("a bug in a formula"));
        assert_eq!(decision, Decision::SKIP);
        let packed = handle.pack();
        close(packed).unwrap();
        let report = finish(packed, &[]).unwrap();
        assert_eq!(report.total.status, crate::report::Status::Partial);
        let internal: Vec<_> = report.diagnostics.iter().filter(|d| d.code == "internal_error").collect();
        assert_eq!(internal.len(), 1);
        assert!(internal[0].message.contains("1 operator event"), "{}", internal[0].message);
    }
}

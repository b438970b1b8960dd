//! Module calls, labelled by module identity: the native half of the module hooks
//! (`python/torchscan/_hooks.c` calls these through `registry::enter_module`).
//!
//! Python names a module once per session (`Net.layer1.0.conv1`, interned in the scope tree);
//! every call after that is a hash lookup and a push, with no string built and nothing allocated
//! once the call ran at that place of the tree. The same names place the work of priced compiled
//! graphs (`priced.rs`), whose ATen nodes carry module identities instead of hooks.

use std::collections::{HashMap, HashSet};
use std::hash::BuildHasherDefault;

use super::{AddressHasher, Labelling, Session};
use crate::host_frames;
use crate::scopes::ScopeTree;

/// What a module call's start did in one session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entered {
    /// Its label was pushed.
    Pushed,
    /// The session labels every module it meets and has not named this one: Python names it
    /// (and its submodules), then enters it again.
    Unnamed,
    /// Not one of the session's modules: nothing pushed.
    Passed,
}

/// The modules a session labels and the calls of them that are open.
#[derive(Default)]
pub struct ModuleCalls {
    /// Module identity -> interned label.
    labels: HashMap<u64, u32, BuildHasherDefault<AddressHasher>>,
    /// The open calls that pushed a label, innermost last.
    open: Vec<u64>,
    /// Every module called is labelled (no roots given): an unnamed one is [`Entered::Unnamed`].
    open_roots: bool,
    /// Labelled by the host's frames ([`Session::label_by_frames`]): the token of the thread
    /// whose frames count; `None`: by module hooks.
    frames: Option<u64>,
    /// The module calls the last walk of the frames found open (innermost first) and the node
    /// they map to, valid while `walked` holds (names given since may map them elsewhere).
    walk: Vec<u64>,
    walked: bool,
    walk_node: u32,
    /// The walk being read (kept to reuse its allocation).
    reading: Vec<u64>,
    /// Modules the host passed over (not one of the user's: a compiler's graph module).
    passed: HashSet<u64, BuildHasherDefault<AddressHasher>>,
    /// Open calls of modules this session (with open roots) has not named, and whether a call
    /// it labels is open around each: the host names them before the event is counted.
    unnamed: Vec<(u64, bool)>,
    /// The host is naming modules (its own events must not ask again).
    naming: bool,
}

impl ModuleCalls {
    pub fn new(labelling: Labelling) -> ModuleCalls {
        ModuleCalls { open_roots: labelling == Labelling::All, ..ModuleCalls::default() }
    }
}

/// Opening and reading frame walks: room for this many module calls, grown for deeper nestings.
const WALK_CAPACITY: usize = 64;

impl Session {
    /// Whether the session labels the module calls of the thread that opened it.
    pub fn labels_modules(&self) -> bool {
        self.config.modules != Labelling::Off
    }

    /// Labels modules by identity; `labels` are their full paths (`Net.layer1`).
    pub fn name_modules<'a>(&mut self, modules: impl IntoIterator<Item = (u64, &'a str)>) {
        for (module, label) in modules {
            let label = self.scopes.label_id(label);
            self.modules.labels.insert(module, label);
        }
        self.modules.walked = false;
        // Graphs already placed may now reach modules they passed over.
        self.priced_scopes.clear();
    }

    /// The interned label of `module`, if the session named it.
    pub fn module_label(&self, module: u64) -> Option<u32> {
        self.modules.labels.get(&module).copied()
    }

    /// A call of `module` starts (its forward pre-hook).
    pub fn enter_module(&mut self, module: u64) -> Entered {
        match self.modules.labels.get(&module) {
            Some(&label) => {
                self.scopes.push_label(label);
                self.modules.open.push(module);
                Entered::Pushed
            }
            None if self.modules.open_roots => Entered::Unnamed,
            None => Entered::Passed,
        }
    }

    /// A call of `module` ends (its forward hook, also when the forward raised): its label is
    /// popped if its start pushed one and every call opened inside it has ended.
    pub fn exit_module(&mut self, module: u64) {
        if self.modules.open.last() == Some(&module) {
            self.modules.open.pop();
            self.scopes.pop();
        }
    }

    /// Labels this session's work by the module calls the host's frames show open on the
    /// thread `owner` names (`host_frames`), from now on, instead of module hooks: a forward
    /// operator's work goes to the calls open when it runs. Whether the host can (it registered
    /// its frame walker).
    pub fn label_by_frames(&mut self, owner: u64) -> bool {
        if !host_frames::available() || self.config.modules == Labelling::Off {
            return false;
        }
        self.modules.frames = Some(owner);
        self.modules.walk = Vec::with_capacity(WALK_CAPACITY);
        self.modules.reading = Vec::with_capacity(WALK_CAPACITY);
        self.modules.walked = false;
        true
    }

    /// Whether the session labels by frames.
    pub fn labels_by_frames(&self) -> bool {
        self.modules.frames.is_some()
    }

    /// Reads the module calls open now (labelling by frames) and stands the scope stack on
    /// them: the node of the innermost call the session labels, below the labels of the calls
    /// around it, as hooks would have pushed them. A repeated walk (the operators of one call)
    /// maps to its node with no lookup. False when the session, which labels every module, met
    /// calls of modules it has not named ([`Self::take_unnamed`]): nothing was changed.
    pub fn resolve_frames(&mut self) -> bool {
        let Some(owner) = self.modules.frames else { return true };
        if self.modules.naming || self.scopes.depth() > 0 {
            // The host's own events while it names a module; or a graph run node by node has
            // pushed its calls (`enter_modules_once`) on the walk it started from.
            return true;
        }
        self.modules.unnamed.clear(); // a walk asked about before and not named since
        let mut reading = std::mem::take(&mut self.modules.reading);
        host_frames::open_modules(owner, &mut reading);
        if self.modules.walked && reading == self.modules.walk {
            self.modules.reading = reading;
            self.scopes.set_base(self.modules.walk_node);
            return true;
        }
        let mut node = ScopeTree::ROOT;
        let mut inside = false;
        for &module in reading.iter().rev() {
            match self.modules.labels.get(&module) {
                Some(&label) => {
                    node = self.scopes.child_labelled(node, label);
                    inside = true;
                }
                None if self.modules.open_roots && !self.modules.passed.contains(&module) => {
                    self.modules.unnamed.push((module, inside));
                }
                None => {}
            }
        }
        if !self.modules.unnamed.is_empty() {
            self.modules.reading = reading;
            return false;
        }
        self.modules.reading = std::mem::replace(&mut self.modules.walk, reading);
        self.modules.walked = true;
        self.modules.walk_node = node;
        self.scopes.set_base(node);
        true
    }

    /// The unnamed module calls the last [`Self::resolve_frames`] met (outermost first), with
    /// whether a labelled call is open around each; the host names them (the session marks
    /// itself as naming until [`Self::named`]).
    pub fn take_unnamed(&mut self) -> Vec<(u64, bool)> {
        self.modules.naming = true;
        std::mem::take(&mut self.modules.unnamed)
    }

    /// The host is done naming; `passed` are the modules it passed over.
    pub fn named(&mut self, passed: &[u64]) {
        self.modules.naming = false;
        self.modules.passed.extend(passed.iter().copied());
        self.modules.walked = false;
    }

    /// Enters each of `modules` (outermost first) that the session named and whose call is not
    /// open already: the module path of one node of a graph that runs node by node (the eager
    /// backend, `python/torchscan/_compiled.py`). Returns how many were entered.
    pub fn enter_modules_once(&mut self, modules: impl IntoIterator<Item = u64>) -> usize {
        // Labelling by frames, the calls open are the frames' (the stack stands on them).
        let by_frames = self.modules.frames.is_some();
        if by_frames {
            // Modules it has not named are named at the next operator.
            self.resolve_frames();
        }
        let mut entered = 0;
        for module in modules {
            let open_in_frames = by_frames && self.modules.walked && self.modules.walk.contains(&module);
            if !open_in_frames && !self.modules.open.contains(&module) && self.enter_module(module) == Entered::Pushed {
                entered += 1;
            }
        }
        entered
    }

    /// Ends the `count` innermost calls [`Self::enter_modules_once`] entered.
    pub fn exit_modules(&mut self, count: usize) {
        for _ in 0..count.min(self.modules.open.len()) {
            self.modules.open.pop();
            self.scopes.pop();
        }
    }

    /// How many module calls are open.
    pub fn open_module_calls(&self) -> usize {
        self.modules.open.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::Config;

    fn session() -> Session {
        let mut s = Session::new(Config { modules: Labelling::Named, ..Config::default() });
        s.name_modules([(10, "Net"), (11, "Net.fc"), (12, "Net.act")]);
        s
    }

    #[test]
    fn a_named_module_call_pushes_its_label_until_it_ends() {
        let mut s = session();
        assert_eq!(s.enter_module(10), Entered::Pushed);
        assert_eq!(s.enter_module(11), Entered::Pushed);
        assert_eq!(s.scopes.label_of(s.scopes.current()), Some("Net.fc"));
        s.exit_module(11);
        assert_eq!(s.scopes.label_of(s.scopes.current()), Some("Net"));
        s.exit_module(10);
        assert_eq!(s.scopes.current(), crate::scopes::ScopeTree::ROOT);
        assert_eq!(s.open_module_calls(), 0);
    }

    #[test]
    fn unnamed_modules_are_named_by_python_only_with_open_roots() {
        let mut s = session();
        assert_eq!(s.enter_module(99), Entered::Passed);
        let mut all = Session::new(Config { modules: Labelling::All, ..Config::default() });
        assert_eq!(all.enter_module(99), Entered::Unnamed);
        assert_eq!(all.open_module_calls(), 0);
    }

    #[test]
    fn the_end_of_a_call_that_pushed_nothing_pops_nothing() {
        let mut s = session();
        s.enter_module(10);
        s.enter_module(99); // not the session's: passed over
        s.exit_module(99);
        assert_eq!(s.scopes.label_of(s.scopes.current()), Some("Net"));
        // An inner call whose end never came (its forward raised, caught inside Net): Net's own
        // end pops nothing until the inner one is closed.
        s.enter_module(11);
        s.exit_module(10);
        assert_eq!(s.scopes.label_of(s.scopes.current()), Some("Net.fc"));
    }

    #[test]
    fn a_graph_node_enters_only_the_modules_not_open_already() {
        let mut s = session();
        s.enter_module(10);
        assert_eq!(s.enter_modules_once([10, 11, 99]), 1);
        assert_eq!(s.scopes.label_of(s.scopes.current()), Some("Net.fc"));
        s.exit_modules(1);
        assert_eq!(s.scopes.label_of(s.scopes.current()), Some("Net"));
        s.exit_modules(5); // never below what is open
        assert_eq!(s.open_module_calls(), 0);
    }

    #[test]
    fn a_repeated_call_reuses_its_node() {
        let mut s = session();
        s.enter_module(10);
        let first = s.scopes.current();
        s.exit_module(10);
        s.enter_module(10);
        assert_eq!(s.scopes.current(), first);
    }

    // ---- labelling by frames, with a host whose stack a test sets (per test thread) ----

    thread_local! {
        static OPEN: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    const OWNER: u64 = 7;

    unsafe extern "C" fn walk(owner: u64, out: *mut u64, capacity: usize) -> usize {
        if owner != OWNER {
            return 0;
        }
        OPEN.with(|open| {
            let open = open.borrow();
            for (i, &module) in open.iter().rev().take(capacity).enumerate() {
                unsafe { *out.add(i) = module };
            }
            open.len()
        })
    }

    unsafe extern "C" fn pass_over(_session: i64, _module: u64, _inside: i32) -> i32 {
        0
    }

    /// The calls open on this thread, outermost first.
    fn open_calls(modules: &[u64]) {
        OPEN.with(|open| *open.borrow_mut() = modules.to_vec());
    }

    fn by_frames(labelling: Labelling) -> Session {
        host_frames::register(walk as *const () as usize, pass_over as *const () as usize);
        let mut s = Session::new(Config { modules: labelling, ..Config::default() });
        s.name_modules([(10, "Net"), (11, "Net.fc"), (12, "Net.act")]);
        assert!(s.label_by_frames(OWNER));
        s
    }

    #[test]
    fn frames_stand_the_stack_on_the_open_calls_the_session_named() {
        let mut s = by_frames(Labelling::Named);
        open_calls(&[10, 99, 11]); // Net, a module outside the roots, Net.fc
        assert!(s.resolve_frames());
        let fc = s.scopes.current();
        assert_eq!(s.scopes.label_of(fc), Some("Net.fc"));
        assert_eq!(s.scopes.label_of(s.scopes.parent_of(fc)), Some("Net"));
        // The same walk again maps to the same node; a shorter one to its own.
        assert!(s.resolve_frames());
        assert_eq!(s.scopes.current(), fc);
        open_calls(&[10]);
        assert!(s.resolve_frames());
        assert_eq!(s.scopes.label_of(s.scopes.current()), Some("Net"));
        open_calls(&[]);
        assert!(s.resolve_frames());
        assert_eq!(s.scopes.current(), ScopeTree::ROOT);
        // Hooks reach a session labelling by frames no more than its frames show.
        assert_eq!(s.open_module_calls(), 0);
    }

    #[test]
    fn a_deep_nesting_grows_the_walk() {
        let mut s = by_frames(Labelling::Named);
        let deep: Vec<u64> = (0..200).map(|i| 1000 + i).collect();
        s.name_modules(deep.iter().map(|&m| (m, "Deep")).collect::<Vec<_>>().iter().map(|(m, l)| (*m, *l)));
        open_calls(&deep);
        assert!(s.resolve_frames());
        let mut depth = 0;
        let mut node = s.scopes.current();
        while node != ScopeTree::ROOT {
            depth += 1;
            node = s.scopes.parent_of(node);
        }
        assert_eq!(depth, 200);
    }

    #[test]
    fn with_open_roots_an_unnamed_call_waits_for_the_host_to_name_it() {
        let mut s = by_frames(Labelling::All);
        open_calls(&[10, 50, 11]);
        assert!(!s.resolve_frames());
        // Outermost first, each with whether a labelled call is open around it.
        assert_eq!(s.take_unnamed(), vec![(50, true)]);
        // While the host names, its own events do not ask again.
        assert!(s.resolve_frames());
        s.name_modules([(50, "Helper")]);
        s.named(&[]);
        assert!(s.resolve_frames());
        assert_eq!(s.scopes.label_of(s.scopes.current()), Some("Net.fc"));
        // A module the host passed over is not asked about again.
        open_calls(&[60]);
        assert!(!s.resolve_frames());
        assert_eq!(s.take_unnamed(), vec![(60, false)]);
        s.named(&[60]);
        assert!(s.resolve_frames());
        assert_eq!(s.scopes.current(), ScopeTree::ROOT);
    }

    #[test]
    fn unnamed_calls_come_outermost_first() {
        // The host names the outermost first: naming it names the calls inside it, so that a
        // model met at its first operator is named once, not once per nesting level.
        let mut s = by_frames(Labelling::All);
        open_calls(&[70, 71, 72]);
        assert!(!s.resolve_frames());
        assert_eq!(s.take_unnamed(), vec![(70, false), (71, false), (72, false)]);
        s.name_modules([(70, "Model"), (71, "Model.body"), (72, "Model.body.0")]);
        s.named(&[]);
        assert!(s.resolve_frames());
        assert_eq!(s.scopes.label_of(s.scopes.current()), Some("Model.body.0"));
    }

    #[test]
    fn a_graph_run_node_by_node_enters_only_what_the_frames_do_not_show() {
        let mut s = by_frames(Labelling::Named);
        open_calls(&[10]);
        assert_eq!(s.enter_modules_once([10, 11]), 1);
        assert_eq!(s.scopes.label_of(s.scopes.current()), Some("Net.fc"));
        assert_eq!(s.scopes.label_of(s.scopes.parent_of(s.scopes.current())), Some("Net"));
        // Its pushes stand on the walk it started from until they are popped.
        open_calls(&[]);
        assert!(s.resolve_frames());
        assert_eq!(s.scopes.label_of(s.scopes.current()), Some("Net.fc"));
        s.exit_modules(1);
        assert!(s.resolve_frames());
        assert_eq!(s.scopes.current(), ScopeTree::ROOT);
    }

    #[test]
    fn another_threads_walk_shows_no_call() {
        let mut s = by_frames(Labelling::Named);
        s.modules.frames = Some(OWNER + 1); // as if opened on another thread
        open_calls(&[10, 11]);
        assert!(s.resolve_frames());
        assert_eq!(s.scopes.current(), ScopeTree::ROOT);
    }

    #[test]
    fn without_a_host_a_session_labels_by_hooks() {
        let mut s = Session::new(Config { modules: Labelling::Off, ..Config::default() });
        host_frames::register(walk as *const () as usize, pass_over as *const () as usize);
        assert!(!s.label_by_frames(OWNER)); // it labels no module
        assert!(!s.labels_by_frames());
    }
}

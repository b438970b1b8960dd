//! Module calls, labelled by module identity: the native half of the module hooks
//! (`python/torchscan/_hooks.c` calls these through `registry::enter_module`).
//!
//! Python names a module once per session (`Net.layer1.0.conv1`, interned in the scope tree);
//! every call after that is a hash lookup and a push, with no string built and nothing allocated
//! once the call ran at that place of the tree. The same names place the work of priced compiled
//! graphs (`priced.rs`), whose ATen nodes carry module identities instead of hooks.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;

use super::{AddressHasher, Labelling, Session};

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
}

impl ModuleCalls {
    pub fn new(labelling: Labelling) -> ModuleCalls {
        ModuleCalls { open_roots: labelling == Labelling::All, ..ModuleCalls::default() }
    }
}

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

    /// Enters each of `modules` (outermost first) that the session named and whose call is not
    /// open already: the module path of one node of a graph that runs node by node (the eager
    /// backend, `python/torchscan/_compiled.py`). Returns how many were entered.
    pub fn enter_modules_once(&mut self, modules: impl IntoIterator<Item = u64>) -> usize {
        let mut entered = 0;
        for module in modules {
            if !self.modules.open.contains(&module) && self.enter_module(module) == Entered::Pushed {
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
}

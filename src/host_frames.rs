//! The module calls open on a thread, as the host language reports them: the second way to
//! label work by module (`Session::label_by_frames`), which costs nothing per module call.
//!
//! Module hooks make every module call pay for the label (PyTorch's hooked call path alone costs
//! about a microsecond per call, several in a real forward). A host that can read its own call
//! stack (`python/torchscan/_hooks.c` reads CPython's frames: each `nn.Module._call_impl` frame
//! is a module call) instead answers, when an operator is counted, which module calls are open
//! on the operator's thread. The host registers two plain C functions once per process; until it
//! does, no session can label by frames.

use std::sync::atomic::{AtomicUsize, Ordering};

/// `walk(owner, out, capacity) -> count`: the identities of the module calls open on the calling
/// thread, innermost first, written to `out` (as many as fit; the count is of all of them). 0
/// when the calling thread is not the one `owner` names (the token the host gave when the
/// session started labelling). Must not unwind, must not block.
pub type WalkFn = unsafe extern "C" fn(owner: u64, out: *mut u64, capacity: usize) -> usize;

/// `name(session, module, inside) -> named`: asks the host to name `module` (a module call open
/// on the calling thread that the session, which labels every module, has not named) for
/// `session`; `inside` is 1 when a call the session labels is open around it. Returns 1 when the
/// host named it (and its submodules: `registry::name_modules`), 0 when it passes it over. Runs
/// with no session lock held. Must not unwind.
pub type NameFn = unsafe extern "C" fn(session: i64, module: u64, inside: i32) -> i32;

static WALK: AtomicUsize = AtomicUsize::new(0);
static NAME: AtomicUsize = AtomicUsize::new(0);

/// Registers the host's functions (addresses of [`WalkFn`] and [`NameFn`]); 0 for either removes
/// both.
pub fn register(walk: usize, name: usize) {
    let (walk, name) = if walk == 0 || name == 0 { (0, 0) } else { (walk, name) };
    NAME.store(name, Ordering::Release);
    WALK.store(walk, Ordering::Release);
}

/// Whether a host registered its functions.
pub fn available() -> bool {
    WALK.load(Ordering::Acquire) != 0
}

/// The module calls open on this thread for `owner`, innermost first, in `out` (grown when
/// they do not fit, which costs an allocation only for deeper nestings than any before).
pub fn open_modules(owner: u64, out: &mut Vec<u64>) {
    let walk = WALK.load(Ordering::Acquire);
    out.clear();
    if walk == 0 {
        return;
    }
    // SAFETY: `walk` is the address of a `WalkFn` the host registered (`register`).
    let walk: WalkFn = unsafe { std::mem::transmute::<usize, WalkFn>(walk) };
    loop {
        let capacity = out.capacity();
        // SAFETY: `out` has room for `capacity` values; the host writes at most that many, and
        // each of them is initialized before the length is set.
        let count = unsafe { walk(owner, out.as_mut_ptr(), capacity) };
        if count <= capacity {
            unsafe { out.set_len(count) };
            return;
        }
        out.reserve(count);
    }
}

/// Asks the host to name `module` for `session` (see [`NameFn`]); false when no host is
/// registered.
pub fn name_unnamed(session: i64, module: u64, inside: bool) -> bool {
    let name = NAME.load(Ordering::Acquire);
    if name == 0 {
        return false;
    }
    // SAFETY: `name` is the address of a `NameFn` the host registered.
    unsafe {
        let name: NameFn = std::mem::transmute::<usize, NameFn>(name);
        name(session, module, i32::from(inside)) != 0
    }
}

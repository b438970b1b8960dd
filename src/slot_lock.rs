//! The lock of a session slot (`registry.rs`): one atomic operation to take it, a plain store to
//! release it.
//!
//! Every operator event takes its session's slot once, and nearly always finds it free: a
//! session's events come from one thread at a time, but for autograd's device threads and a
//! session that counts every thread. `std::sync::Mutex` releases with an atomic swap as well (to
//! learn whether a sleeper must be woken), a second locked instruction per event on the
//! per-operator path. Here a waiter spins briefly, then yields the processor until the slot is
//! free: a slot is held for one event's bookkeeping (well under a microsecond) or a module
//! call's, and the long holds (building a report) are of closed sessions, which no event waits
//! on. A panic while the lock is held releases it (the guard's drop), and the slot's data stays
//! usable, as the registry used `Mutex` before (ignoring poisoning).

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};

/// Spins before a waiter starts yielding the processor.
const SPINS: u32 = 64;

pub struct SlotLock<T> {
    locked: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the value is reached only through a guard, and one guard exists at a time (the flag,
// taken with Acquire and released with Release, orders each holder's accesses after the last's).
unsafe impl<T: Send> Sync for SlotLock<T> {}

impl<T> SlotLock<T> {
    pub const fn new(value: T) -> Self {
        SlotLock { locked: AtomicBool::new(false), value: UnsafeCell::new(value) }
    }

    #[inline]
    pub fn lock(&self) -> SlotGuard<'_, T> {
        if self.locked.compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
            self.wait();
        }
        SlotGuard { lock: self }
    }

    #[cold]
    #[inline(never)]
    fn wait(&self) {
        let mut spins = 0;
        loop {
            while self.locked.load(Ordering::Relaxed) {
                if spins < SPINS {
                    spins += 1;
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
            if self.locked.compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                return;
            }
        }
    }
}

pub struct SlotGuard<'a, T> {
    lock: &'a SlotLock<T>,
}

impl<T> Deref for SlotGuard<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        // SAFETY: this guard holds the lock (see `Sync` above).
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for SlotGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: this guard holds the lock, and `&mut self` makes this the only reference.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for SlotGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        self.lock.locked.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::SlotLock;

    #[test]
    fn threads_taking_turns_lose_no_update() {
        static COUNTER: SlotLock<u64> = SlotLock::new(0);
        let threads: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(|| {
                    for _ in 0..50_000 {
                        *COUNTER.lock() += 1;
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        assert_eq!(*COUNTER.lock(), 200_000);
    }

    #[test]
    fn a_panic_while_holding_it_releases_it() {
        let lock = SlotLock::new(vec![1]);
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut guard = lock.lock();
            guard.push(2);
            panic!("inside");
        }));
        assert!(caught.is_err());
        assert_eq!(*lock.lock(), vec![1, 2]);
    }
}

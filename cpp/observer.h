// Installs and removes the RecordFunction callbacks of one session (observer.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

namespace torchscan::observer {

// The RecordFunction callbacks of one session (0: none).
struct Callbacks {
  uint64_t counting = 0;  // global: counts the threads the session follows, notes the others
  uint64_t marker = 0;    // thread-local, disabled: marks the threads it follows (0: every thread)
};

// Starts observing the calling thread (and the autograd threads it hands work to) for the
// session in `slot` with `generation`, or every thread with `all_threads`.
Callbacks start(std::size_t slot, uint64_t generation, bool capture_outputs, bool all_threads);

// Stops observing for `slot`: later events of that slot are dropped, and the callbacks are
// removed. Must run on the thread that called start().
void stop(std::size_t slot, Callbacks callbacks);

// Stops observing for `slot` from another thread than the one that called start(): later
// events of that slot are dropped; the global callback is removed, and the opening thread's
// thread-local marker is removed by that thread later (it is ignored until then).
void orphan(std::size_t slot, Callbacks callbacks);

// The thread id (RecordFunction's logical id) of the calling thread.
uint64_t current_thread();

// Whether the calling thread is executing an autograd graph task (a backward).
bool in_backward();

}  // namespace torchscan::observer

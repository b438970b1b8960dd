// Installs and removes the RecordFunction callbacks of one session (observer.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

namespace torchscan::observer {

// Starts observing the calling thread (and the autograd threads it hands work to) for the
// session in `slot` with `generation`. Returns the RecordFunction callback handle.
uint64_t start(std::size_t slot, uint64_t generation, bool capture_outputs);

// Stops observing for `slot`: later events of that slot are dropped, and the callback is
// removed. Must run on the thread that called start().
void stop(std::size_t slot, uint64_t callback);

// The thread id (RecordFunction's logical id) of the calling thread.
uint64_t current_thread();

}  // namespace torchscan::observer

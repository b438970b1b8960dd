// Session and measurement entry points shared by the torch.ops.torchscan.* operators
// (ops.cpp, memory.cpp), the public C++ API (api.cpp) and the Rust API (through the cxx bridge).
// They throw c10::Error with the message the core gave; callers outside the dispatcher translate.
#pragma once

#include <cstdint>
#include <string>

namespace torchscan::sessions {

// Opens a counting session and starts observing the calling thread (and the autograd threads it
// hands backward work to). Returns the session handle.
int64_t open(const std::string& config);
// Stops observing and closes the session; returns the pending custom-formula calls (JSON).
std::string close(int64_t handle);
// The FlopReport (JSON) of a closed session, given the custom formulas' results (JSON list).
std::string finish(int64_t handle, const std::string& custom_flops);
// Closes a session without custom formulas and returns its FlopReport (JSON): close and finish
// in one call.
std::string end(int64_t handle);
// Closes a session without custom formulas and keeps it with its report unbuilt (its slot is
// freed); returns the id its report is built by (`kept_report`, which frees it) or it is freed
// unread by (`drop_kept`).
int64_t end_kept(int64_t handle);
std::string kept_report(int64_t id);
void drop_kept(int64_t id) noexcept;
// Frees a session in any state without a report; never throws.
void discard(int64_t handle);
void push_scope(int64_t handle, const std::string& label);
void pop_scope(int64_t handle);

// Starts measuring the calling thread's CPU allocations; refused while a profiler holds the slot.
int64_t memory_start();
// Stops the measurement and returns its MemoryStats (JSON).
std::string memory_stop(int64_t id);

}  // namespace torchscan::sessions

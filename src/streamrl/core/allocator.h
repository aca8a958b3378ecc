// The process's malloc settings. glibc's defaults made colocated training about twice as slow as
// the same step in a disaggregated trainer (bench allocator keeps the measurement).
#pragma once

#include <string>

namespace streamrl::core {

// Fixes glibc's mmap threshold at 32 MiB and its trim threshold at 256 MiB, unless the environment
// sets STREAMRL_MALLOC=default. With glibc's dynamic defaults, a block above 128 KiB gets fresh
// mmap'd pages until a block that large has been freed once, and a free heap top above 128 KiB goes
// back to the kernel: the trainer's activations (MiBs per tensor) were page-faulted and zero-filled
// anew at every step. Call first in main(), before any thread starts.
void tune_allocator();

// "fixed thresholds (mmap 32 MiB, trim 256 MiB)" or "glibc default", for reports.
std::string allocator_setting();

}  // namespace streamrl::core

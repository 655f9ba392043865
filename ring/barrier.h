// Barrier: returns on every rank only after every rank has entered it. Dissemination
// algorithm: ceil(log2 n) rounds of empty messages to rank + 2^k.
#pragma once

#include <string_view>

#include "ring/communicator.h"

namespace aiacc::ring {

// Blocks until all ranks have called barrier (same number of calls on each). TimeoutError at
// the communicator's timeout names the rank that did not arrive and `what`.
void barrier(Communicator& comm, std::string_view what = "barrier");

}  // namespace aiacc::ring

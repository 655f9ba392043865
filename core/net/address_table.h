// AddressTable: what each rank published at rendezvous, indexed by rank (table[r] is rank r's
// list of address strings; their meaning belongs to whoever published them).
#pragma once

#include <string>
#include <vector>

namespace aiacc::net {

using AddressTable = std::vector<std::vector<std::string>>;

}  // namespace aiacc::net

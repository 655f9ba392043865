// Which keys two YAML documents (e.g. two resolved job configs) give different values, for
// messages that must say what differs rather than only that something does.
#pragma once

#include <string>
#include <vector>

namespace aiacc::config {

struct ValueDifference {
  std::string key;     // dotted path; items of a list of maps as key[i]
  std::string first;   // the value in the first document, "(absent)" when it has none
  std::string second;  // likewise in the second
};

// The keys whose values differ: the first document's keys in their order, then the keys only
// the second has. A list of plain values compares as one value ("[5, 6]"). Text that is not
// YAML compares as one value under the key "(document)".
std::vector<ValueDifference> yaml_differences(const std::string& first, const std::string& second);

// "key: a -> b; key2: c -> d" for the first `limit` differences, with "and N more" after.
std::string format_differences(const std::vector<ValueDifference>& differences, std::size_t limit = 5);

}  // namespace aiacc::config

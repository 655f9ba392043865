// "Did you mean" for unknown names: the closest known name by edit distance, when close enough.
#pragma once

#include <string>
#include <vector>

namespace aiacc::config {

// Levenshtein distance (insert, delete, substitute, and swap of neighbours count 1).
std::size_t edit_distance(const std::string& a, const std::string& b);

// The known name closest to `unknown`, or "" when none is within max(2, |unknown| / 3) edits.
std::string closest_name(const std::string& unknown, const std::vector<std::string>& known);

// "a, b, c"
std::string join_names(const std::vector<std::string>& names);
// The first `shown` names joined, then how many were left out: "a, b and 3 more" ("5 names"
// with none shown). For log lines that would otherwise grow with a model's table count.
std::string join_names(const std::vector<std::string>& names, std::size_t shown);

}  // namespace aiacc::config

// Spelling values as TOML text, shared by the renderer (which must produce valid TOML)
// and by error messages (which show values the way the user would write them).
// Thread safety: pure functions.
#pragma once

#include <string>
#include <string_view>

namespace troupe {

/// A TOML basic string: "text" with quotes, backslashes and control characters escaped.
std::string toml_string(std::string_view text);

/// The shortest text that reads back as the same double, spelt as a TOML float: "1.0"
/// rather than "1", "1e-08", "inf", "nan".
std::string toml_float(double value);

}  // namespace troupe

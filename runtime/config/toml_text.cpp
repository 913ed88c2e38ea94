#include "runtime/config/toml_text.hpp"

#include <fmt/format.h>

namespace troupe {

std::string toml_string(std::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
          out += fmt::format("\\u{:04X}", static_cast<unsigned char>(c));
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string toml_float(double value) {
  std::string text = fmt::format("{}", value);
  if (text.find_first_of(".eni") == std::string::npos) text += ".0";  // "1" -> "1.0"
  return text;
}

}  // namespace troupe

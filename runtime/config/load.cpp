#include "runtime/config/load.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "runtime/config/convert.hpp"
#include "runtime/config/deepspeed.hpp"
#include "runtime/config/origins.hpp"
#include "runtime/config/override.hpp"
#include "runtime/config/resolve.hpp"

namespace troupe {

Result<JobConfig> load_config_file(const std::string& path, const std::vector<std::string>& overrides) {
  std::error_code ignored;
  if (std::filesystem::is_directory(path, ignored)) {
    return make_error(fmt::format("cannot read config file {}: it is a directory", path));
  }
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    return make_error(fmt::format("cannot read config file {}: {}", path, std::strerror(errno)));
  }
  std::ostringstream text;
  text << file.rdbuf();
  if (file.bad()) {
    return make_error(fmt::format("cannot read config file {}: {}", path, std::strerror(errno)));
  }
  if (is_deepspeed_config(path)) return load_deepspeed_string(text.str(), path, overrides);
  return load_config_string(text.str(), path, overrides);
}

Result<JobConfig> load_config_string(std::string_view toml_text, const std::string& source_name,
                                     const std::vector<std::string>& overrides) {
  Result<toml::table> root = parse_toml(toml_text, source_name);
  if (!root.ok()) return root.error();
  ConfigOrigins origins;
  origins.source = source_name;
  std::vector<std::string> warnings;
  TROUPE_TRY(merge_deepspeed_config(*root, source_name, origins, warnings));
  TROUPE_TRY(apply_overrides(*root, overrides, origins));
  Result<JobConfig> raw = table_to_config(*root, origins);
  if (!raw.ok()) return raw.error();
  auto resolved = resolve_config(std::move(raw).value(), origins);
  if (resolved) resolved->warnings.insert(resolved->warnings.begin(), warnings.begin(), warnings.end());
  return resolved;
}

}  // namespace troupe

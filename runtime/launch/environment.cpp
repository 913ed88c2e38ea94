#include "runtime/launch/environment.hpp"

#include <charconv>
#include <cstdlib>
#include <string_view>

#include <fmt/format.h>

namespace troupe {
namespace {

constexpr int64_t kPortMax = 65535;

/// The variable names one launcher uses.
struct Family {
  const char* rank;
  const char* world_size;
  const char* local_rank;
  const char* local_world_size;
};

constexpr Family kTroupe{"TROUPE_RANK", "TROUPE_WORLD_SIZE", "TROUPE_LOCAL_RANK", "TROUPE_LOCAL_WORLD_SIZE"};
constexpr Family kTorchrun{"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"};
constexpr Family kOpenMpi{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                          "OMPI_COMM_WORLD_LOCAL_SIZE"};
constexpr Family kSlurm{"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"};

/// SLURM_NTASKS_PER_NODE may be a list such as "2(x3)"; only a plain integer is used.
enum class LocalWorldSizeForm { integer, integer_or_ignored };

/// Looks a variable up; the empty string counts as unset.
std::optional<std::string> get(const EnvLookup& lookup, const char* name) {
  auto value = lookup(name);
  if (value && value->empty()) return std::nullopt;
  return value;
}

bool is_plain_integer(std::string_view text) {
  if (text.empty()) return false;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

/// Parses `value` of variable `name` as an integer that is at least `minimum`.
Result<int64_t> parse_integer(const char* name, const std::string& value, int64_t minimum) {
  int64_t parsed = 0;
  const char* end = value.data() + value.size();
  auto [ptr, ec] = std::from_chars(value.data(), end, parsed);
  if (ec != std::errc() || ptr != end) {
    return make_error(
        fmt::format("{} is '{}', which is not an integer; it must be a whole "
                    "number of at least {}.",
                    name, value, minimum));
  }
  if (parsed < minimum) {
    return make_error(fmt::format("{} is {}, but it must be at least {}.", name, parsed, minimum));
  }
  return parsed;
}

Result<int64_t> parse_port(const char* name, const std::string& value) {
  int64_t port = 0;
  const char* end = value.data() + value.size();
  auto [ptr, ec] = std::from_chars(value.data(), end, port);
  if (ec != std::errc() || ptr != end || port < 1 || port > kPortMax) {
    return make_error(
        fmt::format("{} is '{}', which is not a port; it must be an integer from 1 "
                    "to {}.",
                    name, value, kPortMax));
  }
  return port;
}

/// Joins host and port, bracketing a bare IPv6 address.
std::string join_host_port(const std::string& host, int64_t port) {
  bool bare_ipv6 = host.find(':') != std::string::npos && host.front() != '[';
  return bare_ipv6 ? fmt::format("[{}]:{}", host, port) : fmt::format("{}:{}", host, port);
}

/// Reads rank, world size and their local counterparts for one family; nullopt when the
/// family's rank and world variables are both unset.
Result<std::optional<RankEnvironment>> read_family(const EnvLookup& lookup, const Family& family,
                                                   LocalWorldSizeForm form) {
  auto rank_text = get(lookup, family.rank);
  auto world_text = get(lookup, family.world_size);
  if (!rank_text && !world_text) return std::optional<RankEnvironment>();
  if (!world_text) {
    return make_error(fmt::format("{} is set ({}) but {} is not; a launcher must set both.", family.rank,
                                  *rank_text, family.world_size));
  }
  if (!rank_text) {
    return make_error(fmt::format("{} is set ({}) but {} is not; a launcher must set both.",
                                  family.world_size, *world_text, family.rank));
  }
  RankEnvironment env;
  env.source = fmt::format("{}/{}", family.rank, family.world_size);
  auto rank = parse_integer(family.rank, *rank_text, 0);
  if (!rank) return rank.error();
  auto world_size = parse_integer(family.world_size, *world_text, 1);
  if (!world_size) return world_size.error();
  env.rank = *rank;
  env.world_size = *world_size;
  if (env.rank >= env.world_size) {
    return make_error(fmt::format("{} is {}, but it must be less than {} ({}).", family.rank, env.rank,
                                  family.world_size, env.world_size));
  }

  env.local_rank = env.rank;
  if (auto text = get(lookup, family.local_rank)) {
    auto local_rank = parse_integer(family.local_rank, *text, 0);
    if (!local_rank) return local_rank.error();
    env.local_rank = *local_rank;
  }
  env.local_world_size = env.world_size;
  auto local_world_text = get(lookup, family.local_world_size);
  if (local_world_text && (form == LocalWorldSizeForm::integer || is_plain_integer(*local_world_text))) {
    auto local_world_size = parse_integer(family.local_world_size, *local_world_text, 1);
    if (!local_world_size) return local_world_size.error();
    env.local_world_size = *local_world_size;
  }
  if (env.local_world_size > env.world_size) {
    return make_error(fmt::format("{} is {}, but it must be at most {} ({}).", family.local_world_size,
                                  env.local_world_size, family.world_size, env.world_size));
  }
  if (env.local_rank >= env.local_world_size) {
    return make_error(fmt::format(
        "{} is {}, but it must be less than the local world size {} "
        "({}, or {} when that is unset).",
        family.local_rank, env.local_rank, env.local_world_size, family.local_world_size, family.world_size));
  }
  return std::optional<RankEnvironment>(std::move(env));
}

/// TROUPE_COORDINATOR must be host:port (the port after the last colon).
Result<std::string> read_troupe_coordinator(const EnvLookup& lookup) {
  constexpr const char* kName = "TROUPE_COORDINATOR";
  auto text = get(lookup, kName);
  if (!text) return std::string();
  auto colon = text->rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return make_error(
        fmt::format("{} is '{}', which is not host:port (for example "
                    "127.0.0.1:29500).",
                    kName, *text));
  }
  auto port = parse_port(kName, text->substr(colon + 1));
  if (!port) {
    return make_error(
        fmt::format("{} is '{}', whose port is not an integer from 1 to {}.", kName, *text, kPortMax));
  }
  return *text;
}

/// torchrun's MASTER_ADDR and MASTER_PORT: both or neither.
Result<std::string> read_master_address(const EnvLookup& lookup) {
  auto address = get(lookup, "MASTER_ADDR");
  auto port_text = get(lookup, "MASTER_PORT");
  if (!address && !port_text) return std::string();
  if (!port_text) {
    return make_error(
        fmt::format("MASTER_ADDR is set ({}) but MASTER_PORT is not; set both or "
                    "neither.",
                    *address));
  }
  if (!address) {
    return make_error(
        fmt::format("MASTER_PORT is set ({}) but MASTER_ADDR is not; set both or "
                    "neither.",
                    *port_text));
  }
  auto port = parse_port("MASTER_PORT", *port_text);
  if (!port) return port.error();
  return join_host_port(*address, *port);
}

/// Reads one family and, when it is present, its coordinator.
Result<std::optional<RankEnvironment>> read_with_coordinator(
    const EnvLookup& lookup, const Family& family, LocalWorldSizeForm form,
    Result<std::string> (*read_coordinator)(const EnvLookup&)) {
  auto env = read_family(lookup, family, form);
  if (!env || !env->has_value() || read_coordinator == nullptr) return env;
  auto coordinator = read_coordinator(lookup);
  if (!coordinator) return coordinator.error();
  (*env)->coordinator = std::move(*coordinator);
  return env;
}

}  // namespace

EnvLookup process_environment() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

Result<std::optional<RankEnvironment>> detect_rank_environment(const EnvLookup& lookup) {
  struct Candidate {
    const Family* family;
    LocalWorldSizeForm form;
    Result<std::string> (*read_coordinator)(const EnvLookup&);
  };
  const Candidate candidates[] = {
      {&kTroupe, LocalWorldSizeForm::integer, &read_troupe_coordinator},
      {&kTorchrun, LocalWorldSizeForm::integer, &read_master_address},
      {&kOpenMpi, LocalWorldSizeForm::integer, nullptr},
      {&kSlurm, LocalWorldSizeForm::integer_or_ignored, nullptr},
  };
  for (const Candidate& candidate : candidates) {
    auto env = read_with_coordinator(lookup, *candidate.family, candidate.form, candidate.read_coordinator);
    if (!env || env->has_value()) return env;
  }
  return std::optional<RankEnvironment>();
}

}  // namespace troupe

#include "runtime/launch/environment.hpp"

#include <charconv>
#include <cstdlib>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "base/socket_address.hpp"

namespace troupe {
namespace {

constexpr int64_t kPortMax = 65535;

/// The variable names one launcher uses.
struct Family {
  const char* rank;
  const char* world_size;
  const char* local_rank;
  const char* local_world_size;
  const char* local_world_size_alias = nullptr;  ///< read when local_world_size is unset
};

constexpr Family kTroupe{"TROUPE_RANK", "TROUPE_WORLD_SIZE", "TROUPE_LOCAL_RANK", "TROUPE_LOCAL_WORLD_SIZE"};
// DeepSpeed's launcher sets LOCAL_SIZE where torchrun sets LOCAL_WORLD_SIZE.
constexpr Family kTorchrun{"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "LOCAL_SIZE"};
constexpr Family kOpenMpi{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                          "OMPI_COMM_WORLD_LOCAL_SIZE"};
constexpr Family kSlurm{"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"};

/// SLURM's tasks per node may be a list such as "2(x3)" (slurm_tasks_on_this_node reads
/// it); the family's own variable is used only when it is a plain integer.
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
  const char* local_world_name = family.local_world_size;
  auto local_world_text = get(lookup, local_world_name);
  if (!local_world_text && family.local_world_size_alias) {
    local_world_name = family.local_world_size_alias;
    local_world_text = get(lookup, local_world_name);
  }
  if (local_world_text && (form == LocalWorldSizeForm::integer || is_plain_integer(*local_world_text))) {
    auto local_world_size = parse_integer(local_world_name, *local_world_text, 1);
    if (!local_world_size) return local_world_size.error();
    env.local_world_size = *local_world_size;
  }
  if (env.local_world_size > env.world_size) {
    return make_error(fmt::format("{} is {}, but it must be at most {} ({}).", local_world_name,
                                  env.local_world_size, family.world_size, env.world_size));
  }
  if (env.local_rank >= env.local_world_size) {
    return make_error(fmt::format(
        "{} is {}, but it must be less than the local world size {} "
        "({}, or {} when that is unset).",
        family.local_rank, env.local_rank, env.local_world_size, local_world_name, family.world_size));
  }
  return std::optional<RankEnvironment>(std::move(env));
}

/// Where rank 0 listens, and which variables said so.
struct Coordinator {
  std::string address;  ///< empty: the launcher gave none (the config's is used)
  std::string source;
};
using CoordinatorReader = Result<Coordinator> (*)(const EnvLookup&, const RankEnvironment&);

/// TROUPE_COORDINATOR must be host:port (the port after the last colon).
Result<Coordinator> read_troupe_coordinator(const EnvLookup& lookup, const RankEnvironment&) {
  constexpr const char* kName = "TROUPE_COORDINATOR";
  auto text = get(lookup, kName);
  if (!text) return Coordinator{};
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
  return Coordinator{*text, kName};
}

/// MASTER_ADDR and MASTER_PORT: both or neither; `port_offset` added to the port.
Result<Coordinator> read_master_address(const EnvLookup& lookup, int64_t port_offset = 0) {
  auto address = get(lookup, "MASTER_ADDR");
  auto port_text = get(lookup, "MASTER_PORT");
  if (!address && !port_text) return Coordinator{};
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
  if (*port + port_offset > kPortMax)
    return make_error(
        fmt::format("MASTER_PORT is {}, but troupe's coordinator takes the port after it, which "
                    "must be at most {}.",
                    *port, kPortMax));
  return Coordinator{host_port_text(*address, *port + port_offset), "MASTER_ADDR and MASTER_PORT"};
}

/// torchrun's agent serves its own store on MASTER_PORT when it tells its workers
/// TORCHELASTIC_USE_AGENT_STORE=True: rank 0 then listens on the port after it.
Result<Coordinator> read_torchrun_coordinator(const EnvLookup& lookup, const RankEnvironment&) {
  const bool agent_listens =
      get(lookup, "TORCHELASTIC_USE_AGENT_STORE") == std::optional<std::string>("True");
  auto coordinator = read_master_address(lookup, agent_listens ? 1 : 0);
  if (coordinator && agent_listens && !coordinator->address.empty())
    coordinator->source = "MASTER_ADDR and MASTER_PORT + 1 (torchrun's agent listens on MASTER_PORT)";
  return coordinator;
}

/// A port for a job's coordinator from an identifier every rank of the job sees alike:
/// 20000-29999, below Linux's ephemeral ports.
int64_t derived_port(const std::string& job) {
  uint64_t hash = 14695981039346656037ull;  // FNV-1a
  for (unsigned char c : job) hash = (hash ^ c) * 1099511628211ull;
  return 20000 + static_cast<int64_t>(hash % 10000);
}

/// Open MPI has no address variable of its own: MASTER_ADDR and MASTER_PORT as `mpirun -x`
/// passes them, else, with every rank on this host, 127.0.0.1 at a port derived from the
/// job's identity (mpirun's own address, the same for every rank it started).
Result<Coordinator> read_open_mpi_coordinator(const EnvLookup& lookup, const RankEnvironment& env) {
  auto given = read_master_address(lookup);
  if (!given || !given->address.empty()) return given;
  if (env.local_world_size != env.world_size) return Coordinator{};
  for (const char* job : {"OMPI_MCA_orte_hnp_uri", "PMIX_SERVER_URI41", "PMIX_SERVER_URI4", "PMIX_NAMESPACE",
                          "OMPI_MCA_ess_base_jobid"})
    if (auto id = get(lookup, job))
      return Coordinator{fmt::format("127.0.0.1:{}", derived_port(*id)),
                         fmt::format("127.0.0.1 (every rank on one host) and a port derived from {}", job)};
  return Coordinator{};
}

/// The first host of a SLURM host list: "node[03-05,9],gpu1" -> "node03".
std::string first_slurm_host(const std::string& list) {
  const auto open = list.find('[');
  const auto comma = list.find(',');
  if (open == std::string::npos || (comma != std::string::npos && comma < open)) return list.substr(0, comma);
  const auto close = list.find(']', open);
  const std::string inside =
      list.substr(open + 1, close == std::string::npos ? std::string::npos : close - open - 1);
  const std::string first = inside.substr(0, inside.find_first_of(",-"));
  std::string suffix;
  if (close != std::string::npos) suffix = list.substr(close + 1, list.find(',', close) - close - 1);
  return list.substr(0, open) + first + suffix;
}

/// SLURM: the first host of the job at MASTER_PORT when set, else at a port derived from
/// SLURM_JOB_ID, so every rank of the job finds rank 0 with nothing passed by hand.
Result<Coordinator> read_slurm_coordinator(const EnvLookup& lookup, const RankEnvironment&) {
  if (get(lookup, "MASTER_ADDR")) return read_master_address(lookup);  // a batch script's own choice
  const char* list_name = get(lookup, "SLURM_JOB_NODELIST") ? "SLURM_JOB_NODELIST" : "SLURM_NODELIST";
  auto list = get(lookup, list_name);
  auto job = get(lookup, "SLURM_JOB_ID");
  if (!list || !job) return Coordinator{};
  const std::string host = first_slurm_host(*list);
  if (auto port_text = get(lookup, "MASTER_PORT")) {
    auto port = parse_port("MASTER_PORT", *port_text);
    if (!port) return port.error();
    return Coordinator{host_port_text(host, *port),
                       fmt::format("the first host of {} and MASTER_PORT", list_name)};
  }
  return Coordinator{host_port_text(host, derived_port(*job)),
                     fmt::format("the first host of {} and a port derived from SLURM_JOB_ID", list_name)};
}

/// SLURM's tasks per node as a list of "N" and "N(xM)" ("2(x3),1": 2, 2, 2, 1); the
/// entry of this node (SLURM_NODEID), or the common one. nullopt when neither is known.
std::optional<int64_t> slurm_tasks_on_this_node(const EnvLookup& lookup) {
  auto text = get(lookup, "SLURM_STEP_TASKS_PER_NODE");
  if (!text) text = get(lookup, "SLURM_TASKS_PER_NODE");
  if (!text) return std::nullopt;
  std::vector<int64_t> per_node;
  std::size_t at = 0;
  while (at < text->size()) {
    std::size_t end = text->find(',', at);
    if (end == std::string::npos) end = text->size();
    const std::string entry = text->substr(at, end - at);
    const auto paren = entry.find("(x");
    const std::string count = entry.substr(0, paren);
    std::string times = paren == std::string::npos ? "1" : entry.substr(paren + 2);
    if (!times.empty() && times.back() == ')') times.pop_back();
    if (!is_plain_integer(count) || !is_plain_integer(times)) return std::nullopt;
    per_node.insert(per_node.end(), static_cast<std::size_t>(std::stoll(times)), std::stoll(count));
    at = end + 1;
  }
  if (per_node.empty()) return std::nullopt;
  if (auto node = get(lookup, "SLURM_NODEID"); node && is_plain_integer(*node)) {
    const auto index = static_cast<std::size_t>(std::stoll(*node));
    if (index < per_node.size()) return per_node[index];
  }
  for (int64_t n : per_node)
    if (n != per_node.front()) return std::nullopt;
  return per_node.front();
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
    CoordinatorReader read_coordinator;
  };
  const Candidate candidates[] = {
      {&kTroupe, LocalWorldSizeForm::integer, &read_troupe_coordinator},
      {&kTorchrun, LocalWorldSizeForm::integer, &read_torchrun_coordinator},
      {&kOpenMpi, LocalWorldSizeForm::integer, &read_open_mpi_coordinator},
      {&kSlurm, LocalWorldSizeForm::integer_or_ignored, &read_slurm_coordinator},
  };
  for (const Candidate& candidate : candidates) {
    auto env = read_family(lookup, *candidate.family, candidate.form);
    if (!env) return env;
    if (!env->has_value()) continue;
    RankEnvironment& found = **env;
    if (candidate.family == &kSlurm && !get(lookup, kSlurm.local_world_size))
      if (auto tasks = slurm_tasks_on_this_node(lookup)) {
        if (*tasks < 1 || *tasks > found.world_size || found.local_rank >= *tasks)
          return make_error(
              fmt::format("SLURM says this node runs {} tasks, but SLURM_LOCALID is {} of "
                          "SLURM_NTASKS {}.",
                          *tasks, found.local_rank, found.world_size));
        found.local_world_size = *tasks;
      }
    // TROUPE_COORDINATOR, when set, wins over what the launcher's variables say.
    auto own = read_troupe_coordinator(lookup, found);
    if (!own) return own.error();
    auto coordinator = own->address.empty() ? candidate.read_coordinator(lookup, found) : std::move(own);
    if (!coordinator) return coordinator.error();
    found.coordinator = std::move(coordinator->address);
    found.coordinator_source = std::move(coordinator->source);
    return env;
  }
  return std::optional<RankEnvironment>();
}

}  // namespace troupe

#include "sim/cluster.hpp"

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <toml++/toml.h>

#include "runtime/config/convert.hpp"
#include "runtime/config/suggest.hpp"
#include "runtime/data/splitmix.hpp"

namespace troupe::sim {
namespace {

// Reads one table of the file: each key once, typed, with its position in every message.
class TableReader {
 public:
  TableReader(const toml::table& table, std::string source, std::string section)
      : table_(table), source_(std::move(source)), section_(std::move(section)) {}

  std::string where(const toml::node& node) const {
    const auto& begin = node.source().begin;
    return begin.line == 0 ? source_ : fmt::format("{}:{}:{}", source_, begin.line, begin.column);
  }
  std::string where_table() const { return where(table_); }

  /// Every key is one of `known`; an error names the first other one, with a did-you-mean.
  Status only(const std::vector<std::string>& known) const {
    for (auto&& [key, node] : table_) {
      std::string name(key.str());
      bool found = false;
      for (const auto& k : known) found = found || k == name;
      if (found) continue;
      auto near = suggest(name, known);
      return make_error(fmt::format("{}: [{}] has no key \"{}\"{}; its keys are {}", where(node), section_,
                                    name, near ? fmt::format(" (did you mean \"{}\"?)", *near) : "",
                                    fmt::join(known, ", ")));
    }
    return {};
  }

  Status number(const char* key, double& out, double low, double high) const {
    const toml::node* node = table_.get(key);
    if (!node) return {};
    std::optional<double> v = node->is_integer()
                                  ? std::optional<double>(static_cast<double>(*node->value<int64_t>()))
                                  : node->value<double>();
    if (!v || *v < low || *v > high)
      return make_error(fmt::format("{}: [{}] {} = {}; allowed: a number from {} to {}", where(*node),
                                    section_, key, describe_value(*node), low, high));
    out = *v;
    return {};
  }

  Status integer(const char* key, int64_t& out, int64_t low, int64_t high) const {
    const toml::node* node = table_.get(key);
    if (!node) return {};
    std::optional<int64_t> v = node->value_exact<int64_t>();
    if (!v || *v < low || *v > high)
      return make_error(fmt::format("{}: [{}] {} = {}; allowed: an integer from {} to {}", where(*node),
                                    section_, key, describe_value(*node), low, high));
    out = *v;
    return {};
  }

  Status text(const char* key, std::string& out, const std::vector<std::string>& allowed = {}) const {
    const toml::node* node = table_.get(key);
    if (!node) return {};
    std::optional<std::string> v = node->value_exact<std::string>();
    bool listed = allowed.empty();
    for (const auto& a : allowed) listed = listed || (v && *v == a);
    if (!v || !listed)
      return make_error(fmt::format(
          "{}: [{}] {} = {}; allowed: {}", where(*node), section_, key, describe_value(*node),
          allowed.empty() ? std::string("a string") : fmt::format("\"{}\"", fmt::join(allowed, "\", \""))));
    out = *v;
    return {};
  }

  bool has(const char* key) const { return table_.get(key) != nullptr; }

 private:
  const toml::table& table_;
  std::string source_;
  std::string section_;
};

Status read_cluster_table(const TableReader& r, ClusterSpec& c, std::string& device,
                          const std::string& folder) {
  TROUPE_TRY(r.only(
      {"hosts", "ranks_per_host", "device", "compute", "efficiency", "seed", "jitter", "peer_timeout_s"}));
  TROUPE_TRY(r.integer("hosts", c.hosts, 1, 1 << 20));
  TROUPE_TRY(r.integer("ranks_per_host", c.ranks_per_host, 1, 1024));
  TROUPE_TRY(r.text("device", device));
  TROUPE_TRY(r.text("compute", c.compute, {"flops", "measured"}));
  TROUPE_TRY(r.number("efficiency", c.efficiency, 1e-3, 1));
  int64_t seed = 1;
  TROUPE_TRY(r.integer("seed", seed, 0, std::numeric_limits<int64_t>::max()));
  c.seed = static_cast<uint64_t>(seed);
  TROUPE_TRY(r.number("jitter", c.jitter, 0, 0.9));
  TROUPE_TRY(r.number("peer_timeout_s", c.peer_timeout_s, 1e-3, 3600));
  if (device.empty())
    return make_error(
        fmt::format("{}: [cluster] device is missing; name a preset ({}) or a "
                    "device file from troupe profile-device --json",
                    r.where_table(), fmt::join(device_preset_names(), ", ")));
  auto preset = device_preset(device);
  if (preset) {
    c.device = std::move(*preset);
    return {};
  }
  std::filesystem::path file(device);
  if (file.is_relative()) file = std::filesystem::path(folder) / file;
  if (!std::filesystem::exists(file))
    return make_error(fmt::format("{}: [cluster] device = \"{}\" is neither a preset ({}) nor a file",
                                  r.where_table(), device, fmt::join(device_preset_names(), ", ")));
  auto loaded = load_device_file(file.string());
  if (!loaded) return loaded.error();
  c.device = std::move(*loaded);
  return {};
}

Status read_link(const TableReader& r, LinkSpec& link, int64_t* rails) {
  std::vector<std::string> keys{"bandwidth_gbs", "latency_us"};
  if (rails) keys.push_back("rails");
  TROUPE_TRY(r.only(keys));
  double gbs = link.bandwidth / 1e9, us = link.latency_s * 1e6;
  TROUPE_TRY(r.number("bandwidth_gbs", gbs, 0, 1e6));
  TROUPE_TRY(r.number("latency_us", us, 0, 1e6));
  link.bandwidth = gbs * 1e9;
  link.latency_s = us * 1e-6;
  if (rails) TROUPE_TRY(r.integer("rails", *rails, 1, 64));
  return {};
}

Status read_fault(const TableReader& r, ClusterSpec& c, int64_t& random_count, double& random_factor) {
  TROUPE_TRY(r.only({"kind", "rank", "peer", "factor", "at_ms", "count"}));
  std::string kind;
  TROUPE_TRY(r.text("kind", kind, {"slow_rank", "lost_link", "dead_rank", "random_slow"}));
  if (kind.empty())
    return make_error(
        fmt::format("{}: [[faults]] needs kind = \"slow_rank\", \"lost_link\", \"dead_rank\" or "
                    "\"random_slow\"",
                    r.where_table()));
  Fault f;
  f.origin = r.where_table();
  const int64_t last = c.world() - 1;
  TROUPE_TRY(r.integer("rank", f.rank, 0, last));
  TROUPE_TRY(r.integer("peer", f.peer, 0, last));
  TROUPE_TRY(r.number("factor", f.factor, 1, 1000));
  double at_ms = 0;
  TROUPE_TRY(r.number("at_ms", at_ms, 0, 1e12));
  f.at_s = at_ms / 1e3;
  if (kind == "random_slow") {
    TROUPE_TRY(r.integer("count", random_count, 1, c.world()));
    random_factor = f.factor;
    return {};
  }
  if (kind == "lost_link" && (!r.has("peer") || f.peer == f.rank))
    return make_error(fmt::format("{}: a lost_link fault needs rank and a different peer", r.where_table()));
  f.kind = kind == "slow_rank"   ? FaultKind::slow_rank
           : kind == "lost_link" ? FaultKind::lost_link
                                 : FaultKind::dead_rank;
  c.faults.push_back(f);
  return {};
}

// `count` distinct ranks drawn from the seed's stream, slowed by `factor`.
void draw_random_slow(ClusterSpec& c, int64_t count, double factor) {
  std::set<int64_t> picked;
  for (uint64_t i = 0; static_cast<int64_t>(picked.size()) < count; ++i)
    picked.insert(static_cast<int64_t>(splitmix_at(c.seed, i) % static_cast<uint64_t>(c.world())));
  for (int64_t rank : picked)
    c.faults.push_back(Fault{FaultKind::slow_rank, rank, -1, factor, 0, "random_slow"});
}

}  // namespace

Result<ClusterSpec> parse_cluster(const std::string& text, const std::string& source,
                                  const std::string& folder) {
  auto parsed = parse_toml(text, source);
  if (!parsed) return parsed.error();
  const toml::table& root = *parsed;
  ClusterSpec c;
  c.source = source;
  TableReader top(root, source, "top level");
  TROUPE_TRY(top.only({"cluster", "links", "faults"}));
  const toml::table* cluster = root["cluster"].as_table();
  if (!cluster)
    return make_error(
        fmt::format("{}: a cluster file needs a [cluster] section (hosts, ranks_per_host, device)", source));
  std::string device;
  TROUPE_TRY(read_cluster_table(TableReader(*cluster, source, "cluster"), c, device, folder));
  // A measured CPU host's transport and collectives: the defaults of its links.
  c.host = LinkSpec{c.device.transport_bandwidth,
                    c.device.transport_latency_s,
                    c.device.collective_busbw,
                    c.device.collective_busbw_by_ranks,
                    c.device.kind == "cpu" ? c.device.cores : 0,
                    c.device.transport_hop_latency_by_ranks,
                    c.device.collective_busbw_beside_compute};
  c.network = c.host;
  if (const toml::table* links = root["links"].as_table()) {
    TROUPE_TRY(TableReader(*links, source, "links").only({"host", "network"}));
    if (const toml::table* host = (*links)["host"].as_table())
      TROUPE_TRY(read_link(TableReader(*host, source, "links.host"), c.host, nullptr));
    if (const toml::table* net = (*links)["network"].as_table())
      TROUPE_TRY(read_link(TableReader(*net, source, "links.network"), c.network, &c.rails));
  }
  if (c.host.bandwidth <= 0 || (c.hosts > 1 && c.network.bandwidth <= 0))
    return make_error(
        fmt::format("{}: [links.host]{} bandwidth_gbs is not set and device {} has no measured "
                    "transport bandwidth",
                    source, c.hosts > 1 ? " or [links.network]" : "", c.device.name));
  int64_t random_count = 0;
  double random_factor = 1;
  if (const toml::node* faults = root.get("faults")) {
    const toml::array* list = faults->as_array();
    if (!list) return make_error(fmt::format("{}: faults is a list of tables: write [[faults]]", source));
    for (const toml::node& entry : *list) {
      const toml::table* f = entry.as_table();
      if (!f) return make_error(fmt::format("{}: faults is a list of tables: write [[faults]]", source));
      TROUPE_TRY(read_fault(TableReader(*f, source, "faults"), c, random_count, random_factor));
    }
  }
  if (random_count > 0) draw_random_slow(c, random_count, random_factor);
  return c;
}

Result<ClusterSpec> load_cluster_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return make_error(fmt::format("{}: cannot read the cluster file", path));
  std::stringstream text;
  text << in.rdbuf();
  return parse_cluster(text.str(), path, std::filesystem::path(path).parent_path().string());
}

}  // namespace troupe::sim

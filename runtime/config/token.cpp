#include "runtime/config/token.hpp"

#include <arpa/inet.h>
#include <sys/random.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include <fmt/format.h>

namespace troupe {
namespace {

Result<std::string> checked(std::string token, const std::string& where) {
  if (token.empty())
    return make_error(fmt::format("{} is empty; a token must have at least one byte", where));
  if (token.size() > kTokenBytesMax)
    return make_error(
        fmt::format("{} is {} bytes; a token may have at most {}", where, token.size(), kTokenBytesMax));
  return token;
}

Result<std::string> token_from_file(const std::string& path, const std::string& where) {
  std::ifstream file(path, std::ios::binary);
  if (!file)
    return make_error(
        fmt::format("{}: [cluster] token_file {} cannot be read: {}", where, path, std::strerror(errno)));
  std::string line;
  std::getline(file, line);
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.pop_back();
  return checked(std::move(line), fmt::format("{}: the first line of [cluster] token_file {}", where, path));
}

}  // namespace

Result<std::string> resolve_token(const ClusterConfig& cluster, const ConfigOrigins& origins) {
  const bool in_config = !cluster.token.empty();
  const bool in_file = !cluster.token_file.empty();
  if (in_config && in_file)
    return make_error(fmt::format("{}: [cluster] token and token_file are both set; set one of them",
                                  origins.where("cluster", "token_file")));
  if (in_config) return checked(cluster.token, origins.where("cluster", "token") + ": [cluster] token");
  if (in_file) return token_from_file(cluster.token_file, origins.where("cluster", "token_file"));
  const char* variable = std::getenv(kTokenVariable);
  if (variable && *variable)
    return checked(variable, fmt::format("the environment variable {}", kTokenVariable));
  return std::string();
}

Result<std::string> rank_token(const ClusterConfig& cluster, const std::string& host) {
  if (!cluster.secret.empty()) return cluster.secret;
  if (is_loopback_host(host)) return std::string(kLoopbackToken);
  return make_error(fmt::format(
      "this rank refuses to start: the coordinator's host {} is not a loopback address and the job has "
      "no token, so anyone who can reach that port could join it; set [cluster] token_file (a file "
      "only you can read), [cluster] token, or the environment variable {} on every rank (troupe run "
      "and troupe launch make one per job)",
      host, kTokenVariable));
}

bool is_loopback_host(const std::string& host) {
  std::string bare = host;
  if (bare.size() > 2 && bare.front() == '[' && bare.back() == ']') bare = bare.substr(1, bare.size() - 2);
  if (bare == "localhost") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, bare.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (inet_pton(AF_INET6, bare.c_str(), &v6) == 1) return IN6_IS_ADDR_LOOPBACK(&v6);
  return false;
}

Result<std::string> random_token() {
  unsigned char bytes[32];
  std::size_t filled = 0;
  while (filled < sizeof bytes) {
    ssize_t n = getrandom(bytes + filled, sizeof bytes - filled, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      return make_error(fmt::format("cannot make a job token: getrandom: {}", std::strerror(errno)));
    filled += static_cast<std::size_t>(n);
  }
  std::string hex;
  for (unsigned char b : bytes) hex += fmt::format("{:02x}", b);
  return hex;
}

}  // namespace troupe

// The job token: the shared secret every rank presents to rank 0 at bootstrap.
//
// Where it comes from, first found: [cluster] token, the first line of [cluster] token_file
// (only one of the two may be set), the environment variable TROUPE_TOKEN. `troupe run`
// and `troupe launch` put a fresh random token in TROUPE_TOKEN for their ranks when it is
// unset, so a job started by them always has one. Without any, a rank may still start
// when its coordinator is a loopback address (only this machine can reach it), with a
// fixed token; on any other address it refuses, since anyone who can reach the port
// could otherwise join. The token is never printed: not by `troupe check`, not in an
// error message, not in a log line.
// Thread safety: pure functions except that the file and the environment are read.
#pragma once

#include <string>

#include "base/result.hpp"
#include "runtime/config/config.hpp"
#include "runtime/config/origins.hpp"
#include "transport/wire.hpp"

namespace troupe {

/// The environment variable a token may come from, and that `troupe run` sets.
inline constexpr const char* kTokenVariable = "TROUPE_TOKEN";

/// The token of a job with none, allowed only on a loopback coordinator.
inline constexpr const char* kLoopbackToken = "troupe-loopback";

/// The most bytes a token may have: the bootstrap frame's limit, so a longer one is refused
/// at load instead of being cut off on the wire.
inline constexpr std::size_t kTokenBytesMax = wire::token_bytes_max;

/// The job's token from [cluster] token, token_file or $TROUPE_TOKEN; "" when none is set.
/// Errors name the key or the file, never the token.
Result<std::string> resolve_token(const ClusterConfig& cluster, const ConfigOrigins& origins);

/// The token a rank presents: the resolved one, else kLoopbackToken when `host` is a
/// loopback address, else an error saying why the rank refuses to start.
Result<std::string> rank_token(const ClusterConfig& cluster, const std::string& host);

/// True for localhost, 127.0.0.0/8 and ::1.
bool is_loopback_host(const std::string& host);

/// 32 random bytes from the kernel, as 64 hex digits.
Result<std::string> random_token();

}  // namespace troupe

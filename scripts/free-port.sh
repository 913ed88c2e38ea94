# Sourced by scripts that start jobs: hold_free_port sets $port to a TCP port nothing has
# bound and no test holds, the same way tests/support/free_port.hpp picks one (20000-32767,
# below Linux's ephemeral range, an flock on /tmp/troupe-test-ports/PORT held until this
# shell exits), so a script run beside ctest cannot collide with a test's coordinator.

# Whether anything has bound local TCP port $1 (IPv4 or IPv6).
port_bound() {
  local hex
  hex=$(printf '%04X' "$1")
  awk -v p="$hex" 'FNR > 1 { split($2, a, ":"); if (a[length(a)] == p) found = 1 } END { exit !found }' \
    /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

hold_free_port() {
  local dir=/tmp/troupe-test-ports candidate fd
  mkdir -p "$dir" && chmod 1777 "$dir" 2>/dev/null
  for _ in $(seq 10000); do
    candidate=$((20000 + RANDOM % 12768))
    exec {fd}>>"$dir/$candidate" || continue
    if flock -n "$fd" && ! port_bound "$candidate"; then
      port=$candidate  # the lock stays held through $fd until this shell exits
      return 0
    fi
    exec {fd}>&-
  done
  echo "hold_free_port: no free port in 20000-32767" >&2
  return 1
}

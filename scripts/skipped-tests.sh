#!/usr/bin/env bash
# Says why each test ctest just skipped did not run: ctest's summary lists skipped tests
# by name only; their reasons are the "troupe-skip:" lines their programs printed
# (tests/support/gtest_main.cpp), kept in ctest's log of the last run.
# Usage: scripts/skipped-tests.sh [BUILD_DIR]
set -euo pipefail
log="${1:-build}/Testing/Temporary/LastTest.log"
[[ -f "$log" ]] || exit 0
# One line per test program and reason, with how many of its tests it kept from running.
awk '
  /^[0-9]+\/[0-9]+ Testing: / { test = $3 }
  /^troupe-skip: / && !/^troupe-skip: all [0-9]+ tests skipped$/ {
    line = $0
    sub(/^troupe-skip: [^ ]+: /, "", line)
    key = test ": " line
    if (!(key in count)) order[n++] = key
    count[key]++
  }
  END {
    if (n) print "Why tests were skipped:"
    for (i = 0; i < n; i++) printf "  %s (%d test%s)\n", order[i], count[order[i]], (count[order[i]] > 1 ? "s" : "")
  }
' "$log"

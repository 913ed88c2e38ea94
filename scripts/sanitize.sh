#!/usr/bin/env bash
# Builds and runs tests under a sanitizer, in a build directory of its own:
#   scripts/sanitize.sh asan [--all]   AddressSanitizer + UndefinedBehaviorSanitizer, in build-asan/
#   scripts/sanitize.sh tsan [--all]   ThreadSanitizer, in build-tsan/
# Without --all: the set CI runs (`make sanitize`), the tests labelled asan or tsan in
# tests/CMakeLists.txt, building only them and the programs they start. With --all: every
# target and the whole ctest suite, for a developer before resolving an issue (LibTorch's
# layers under the sanitizer: much longer).
# LibTorch, CAF and UCX are not instrumented; what they are known to report is suppressed,
# each with its reason, in scripts/lsan.supp, ubsan.supp and tsan.supp. BUILD and JOBS
# override the build directory and the compile jobs (default: one per core).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

usage() {
  echo "usage: scripts/sanitize.sh asan|tsan [--all]" >&2
  exit 2
}
kind=${1:-}
all=${2:-}
case "$kind" in
  asan) sanitize=address ;;
  tsan) sanitize=thread ;;
  *) usage ;;
esac
[[ -z "$all" || "$all" == --all ]] || usage
build=${BUILD:-$root/build-$kind}
jobs=${JOBS:-$(nproc)}
start=$SECONDS

# As the Makefile configures build/ (Ninja, and ccache through CMakeLists.txt), plus the
# sanitizer. No CUDA: device code is not instrumented and the gpu tests are
# scripts/gpu-check.sh's. The front need not build troupe-core: collectives_test runs only
# `troupe launch`, and --all builds everything anyway.
mkdir -p "$build"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTROUPE_SANITIZE=$sanitize \
  -DTROUPE_CUDA=OFF -DTROUPE_FRONT_BUILDS_CORE=OFF >"$build/configure.log" 2>&1 ||
  {
    cat "$build/configure.log"
    exit 1
  }
if [[ "$all" == --all ]]; then
  cmake --build "$build" --parallel "$jobs"
  select=()
else
  cmake --build "$build" --parallel "$jobs" --target "${kind}_tests"
  select=(-L "^${kind}\$")
fi
echo "sanitize.sh $kind: built in $((SECONDS - start)) s"

# Options first, so that the caller's own ASAN_OPTIONS (...) override them. The ranks that
# integration tests start inherit them. Leak checking stays on for our code; the leaks of
# uninstrumented libraries are suppressed by name in lsan.supp.
export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:check_initialization_order=1:strict_init_order=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$root/scripts/ubsan.supp${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export LSAN_OPTIONS="suppressions=$root/scripts/lsan.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
# TSan reports every race of a run (a test with any fails at exit, status 66), not only the first.
export TSAN_OPTIONS="suppressions=$root/scripts/tsan.supp:second_deadlock_stack=1:print_suppressions=0${TSAN_OPTIONS:+:$TSAN_OPTIONS}"
# UCX patches madvise and mmap to watch memory; glibc calls madvise while a thread exits,
# after TSan has let go of the thread, and TSan's lock interceptor then crashes. The tests'
# transports (shared memory and TCP on one host) need no such events.
if [[ "$kind" == tsan ]]; then export UCX_MEM_MMAP_HOOK_MODE=${UCX_MEM_MMAP_HOOK_MODE:-none}; fi

status=0
(cd "$build" && ctest --output-on-failure --parallel 2 "${select[@]}") || status=$?
bash "$root/scripts/skipped-tests.sh" "$build"
echo "sanitize.sh $kind: $([[ $status == 0 ]] && echo passed || echo FAILED) in $((SECONDS - start)) s"
exit $status

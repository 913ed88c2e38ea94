// Memory given up on purpose (pages a device may still write into): never freed, and kept
// out of LeakSanitizer's report, which is for the leaks nobody meant (scripts/sanitize.sh).
// Thread safety: none needed; each call leaks its own object.
#pragma once

#include <memory>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

namespace troupe {

/// Leaks `owned` and whatever only it reaches: never destroyed, never reported as a leak.
template <class T>
void leak_on_purpose(std::unique_ptr<T> owned) {
  T* leaked = owned.release();
#if defined(__SANITIZE_ADDRESS__)
  __lsan_ignore_object(leaked);  // LeakSanitizer also skips what is reachable from it
#else
  (void)leaked;
#endif
}

}  // namespace troupe

#include "memory/buffer.hpp"

#include <string>

namespace troupe {

std::string describe(Placement placement) {
  switch (placement.space) {
    case MemorySpace::host:
      return "host";
    case MemorySpace::pinned_host:
      return "pinned host";
    case MemorySpace::device:
      return "device " + std::to_string(placement.device);
  }
  return "unknown memory";
}

}  // namespace troupe

// Pictures of a simulated schedule (simulate.hpp): one row per stage, one cell per time
// slot, as in the pipeline papers' figures. As text for a terminal ("F3" a forward of
// micro-batch 3, "B3" its backward, "." idle) and as an SVG (forwards blue, backwards
// orange, numbered by micro-batch, idle slots left blank).
// Thread safety: pure functions.
#pragma once

#include <string>

#include "pipeline/simulate.hpp"

namespace troupe::pipeline {

std::string timeline_text(const Simulation& simulation);

/// `title` is drawn above the rows.
std::string timeline_svg(const Simulation& simulation, const std::string& title);

}  // namespace troupe::pipeline

// Pictures of a simulated schedule (simulate.hpp): one row per rank, one cell per time
// slot, as in the pipeline papers' figures. As text for a terminal (each slot shows the
// short name of the action running in it, action.hpp: "F3" a forward of micro-batch 3,
// "I3" and "W3" its backward's halves, "B3" its whole backward, "F3.1" chunk 1's; "."
// idle) and as an SVG (one box per action as long as it runs: forwards blue, backwards
// orange, weight halves green, a second chunk lighter; idle slots blank).
// Thread safety: pure functions.
#pragma once

#include <string>

#include "pipeline/simulate.hpp"

namespace troupe::pipeline {

std::string timeline_text(const Simulation& simulation);

/// `title` is drawn above the rows.
std::string timeline_svg(const Simulation& simulation, const std::string& title);

}  // namespace troupe::pipeline

#include "pipeline/picture.hpp"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

namespace troupe::pipeline {
namespace {

// By rank, by slot: the compute action running in it, or none.
std::vector<std::vector<const TimedAction*>> grid(const Simulation& s) {
  std::vector<std::vector<const TimedAction*>> cells(
      s.timeline.size(), std::vector<const TimedAction*>(static_cast<std::size_t>(s.slots), nullptr));
  for (std::size_t stage = 0; stage < s.timeline.size(); ++stage)
    for (const TimedAction& t : s.timeline[stage])
      for (int64_t slot = std::max<int64_t>(t.start, 0); slot < std::min(t.start + t.duration, s.slots);
           ++slot)
        cells[stage][static_cast<std::size_t>(slot)] = &t;
  return cells;
}

std::string label(const Simulation& s, const TimedAction& t) {
  return short_name(t.action, s.chunks > 1);
}

// Forwards blue, whole and input-half backwards orange, weight halves green; a rank's
// second chunk in a lighter shade of the same colour.
const char* colour(const TimedAction& t) {
  const bool later = t.action.chunk % 2 == 1;
  switch (t.action.op) {
    case Op::forward:
      return later ? "#7fa6db" : "#3b6fb6";
    case Op::backward_weight:
      return later ? "#7cc48a" : "#2e8b45";
    default:
      return later ? "#f0ad72" : "#e07b28";
  }
}

// XML text needs only these escaped.
std::string escaped(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '&')
      out += "&amp;";
    else if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else
      out += c;
  }
  return out;
}

}  // namespace

std::string timeline_text(const Simulation& s) {
  const auto cells = grid(s);
  std::size_t width = 1;
  for (const auto& row : cells)
    for (const TimedAction* t : row)
      if (t) width = std::max(width, label(s, *t).size());
  std::string out;
  for (std::size_t stage = 0; stage < cells.size(); ++stage) {
    out += fmt::format("stage {:>2} |", stage);
    for (const TimedAction* t : cells[stage]) out += fmt::format(" {:>{}}", t ? label(s, *t) : ".", width);
    out += "\n";
  }
  return out;
}

std::string timeline_svg(const Simulation& s, const std::string& title) {
  constexpr int cell = 28, row = 30, left = 70, top = 40;
  const int width = left + cell * static_cast<int>(s.slots) + 10;
  const int height = top + row * static_cast<int>(s.timeline.size()) + 10;
  std::string out = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" "
      "font-size=\"11\">\n<text x=\"{}\" y=\"20\" font-size=\"13\">{}</text>\n",
      width, height, left, escaped(title));
  for (std::size_t stage = 0; stage < s.timeline.size(); ++stage) {
    const int y = top + row * static_cast<int>(stage);
    out += fmt::format("<text x=\"8\" y=\"{}\">stage {}</text>\n", y + 18, stage);
    for (const TimedAction& t : s.timeline[stage]) {
      const int x = left + cell * static_cast<int>(t.start);
      const int w = cell * static_cast<int>(t.duration);
      const std::string text = s.chunks > 1 ? label(s, t) : std::to_string(t.action.micro);
      out += fmt::format(
          "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\" stroke=\"white\"/>"
          "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"white\">{}</text>\n",
          x, y, w, row - 4, colour(t), x + w / 2, y + 17, text);
    }
  }
  return out + "</svg>\n";
}

}  // namespace troupe::pipeline

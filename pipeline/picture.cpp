#include "pipeline/picture.hpp"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

namespace troupe::pipeline {
namespace {

// By stage, by slot: the compute action in it, or none.
std::vector<std::vector<const TimedAction*>> grid(const Simulation& s) {
  std::vector<std::vector<const TimedAction*>> cells(
      s.timeline.size(), std::vector<const TimedAction*>(static_cast<std::size_t>(s.slots), nullptr));
  for (std::size_t stage = 0; stage < s.timeline.size(); ++stage)
    for (const TimedAction& t : s.timeline[stage])
      if (t.start >= 0 && t.start < s.slots) cells[stage][static_cast<std::size_t>(t.start)] = &t;
  return cells;
}

std::string label(const TimedAction& t) {
  return fmt::format("{}{}", t.action.op == Op::forward ? 'F' : 'B', t.action.micro);
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
      if (t) width = std::max(width, label(*t).size());
  std::string out;
  for (std::size_t stage = 0; stage < cells.size(); ++stage) {
    out += fmt::format("stage {:>2} |", stage);
    for (const TimedAction* t : cells[stage]) out += fmt::format(" {:>{}}", t ? label(*t) : ".", width);
    out += "\n";
  }
  return out;
}

std::string timeline_svg(const Simulation& s, const std::string& title) {
  constexpr int cell = 28, row = 30, left = 70, top = 40;
  const auto cells = grid(s);
  const int width = left + cell * static_cast<int>(s.slots) + 10;
  const int height = top + row * static_cast<int>(cells.size()) + 10;
  std::string out = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" "
      "font-size=\"11\">\n<text x=\"{}\" y=\"20\" font-size=\"13\">{}</text>\n",
      width, height, left, escaped(title));
  for (std::size_t stage = 0; stage < cells.size(); ++stage) {
    const int y = top + row * static_cast<int>(stage);
    out += fmt::format("<text x=\"8\" y=\"{}\">stage {}</text>\n", y + 18, stage);
    for (std::size_t slot = 0; slot < cells[stage].size(); ++slot) {
      const TimedAction* t = cells[stage][slot];
      if (!t) continue;
      const int x = left + cell * static_cast<int>(slot);
      out += fmt::format(
          "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\" stroke=\"white\"/>"
          "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"white\">{}</text>\n",
          x, y, cell, row - 4, t->action.op == Op::forward ? "#3b6fb6" : "#e07b28", x + cell / 2, y + 17,
          t->action.micro);
    }
  }
  return out + "</svg>\n";
}

}  // namespace troupe::pipeline

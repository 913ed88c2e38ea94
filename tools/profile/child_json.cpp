#include "tools/profile/child_json.hpp"

#include <cstdio>
#include <memory>

namespace troupe {
namespace {

using Pipe = std::unique_ptr<FILE, int (*)(FILE*)>;

std::vector<nlohmann::json> read_objects(FILE* pipe) {
  std::vector<nlohmann::json> objects;
  std::string line;
  char buffer[4096];
  auto take = [&] {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.is_object()) objects.push_back(std::move(j));
    line.clear();
  };
  while (pipe && std::fgets(buffer, sizeof buffer, pipe)) {  // a line may span several reads
    line += buffer;
    if (!line.empty() && line.back() == '\n') take();
  }
  if (!line.empty()) take();
  return objects;
}

}  // namespace

std::string shell_quoted(const std::string& word) {
  std::string out = "'";
  for (char c : word) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::vector<std::vector<nlohmann::json>> json_lines_of_all(const std::vector<std::string>& commands) {
  std::vector<Pipe> pipes;
  for (const std::string& command : commands) pipes.emplace_back(::popen(command.c_str(), "r"), ::pclose);
  std::vector<std::vector<nlohmann::json>> out;
  for (Pipe& pipe : pipes) out.push_back(read_objects(pipe.get()));
  return out;
}

std::vector<nlohmann::json> json_lines_of(const std::string& command) {
  return json_lines_of_all({command}).front();
}

}  // namespace troupe

#include "tests/proc_memory.h"

#include <dirent.h>

#include <cctype>
#include <fstream>
#include <map>
#include <sstream>

namespace elastic::tests {
namespace {

// pid -> parent pid of every process now.
std::multimap<pid_t, pid_t> ChildrenByParent() {
  std::multimap<pid_t, pid_t> children;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return children;
  while (const dirent* entry = ::readdir(proc)) {
    if (!std::isdigit(static_cast<unsigned char>(entry->d_name[0]))) continue;
    std::ifstream in(std::string("/proc/") + entry->d_name + "/stat");
    std::string stat;
    if (!std::getline(in, stat)) continue;  // gone meanwhile
    // "pid (comm) state ppid ...": comm may hold spaces and ')', so split after the last ')'.
    const size_t paren = stat.rfind(')');
    if (paren == std::string::npos) continue;
    std::istringstream fields(stat.substr(paren + 1));
    char state = 0;
    pid_t parent = 0;
    if (fields >> state >> parent) children.emplace(parent, std::stoi(entry->d_name));
  }
  ::closedir(proc);
  return children;
}

}  // namespace

std::vector<pid_t> DescendantsOf(pid_t root) {
  const std::multimap<pid_t, pid_t> children = ChildrenByParent();
  std::vector<pid_t> found;
  std::vector<pid_t> frontier = {root};
  while (!frontier.empty()) {
    const pid_t pid = frontier.back();
    frontier.pop_back();
    const auto [begin, end] = children.equal_range(pid);
    for (auto it = begin; it != end; ++it) {
      found.push_back(it->second);
      frontier.push_back(it->second);
    }
  }
  return found;
}

std::string CommandLineOf(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
  std::string line((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (char& c : line) {
    if (c == '\0') c = ' ';
  }
  return line;
}

std::optional<MemoryUse> MemoryOf(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/smaps_rollup");
  std::string line;
  MemoryUse use;
  int fields = 0;
  while (std::getline(in, line)) {
    std::istringstream parts(line);
    std::string name;
    int64_t kib = 0;
    if (!(parts >> name >> kib)) continue;
    const int64_t bytes = kib * 1024;
    if (name == "Rss:") {
      use.rss = bytes;
    } else if (name == "Pss:") {
      use.pss = bytes;
    } else if (name == "Private_Clean:" || name == "Private_Dirty:") {
      use.private_bytes += bytes;
    } else {
      continue;
    }
    ++fields;
  }
  if (fields != 4) return std::nullopt;
  return use;
}

}  // namespace elastic::tests

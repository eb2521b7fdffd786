#include "trainer/elastic/worker/controller_link.h"

#include <unistd.h>

#include <cstdarg>
#include <cstdio>

namespace elastic::trainer {

void ControllerLink::Log(const char* format, ...) const {
  char text[1024];
  va_list args;
  va_start(args, format);
  std::vsnprintf(text, sizeof(text), format, args);
  va_end(args);
  std::fprintf(stderr, "[worker %llu pid %d] %s\n", static_cast<unsigned long long>(member_id_),
               static_cast<int>(::getpid()), text);
  std::fflush(stderr);
}

}  // namespace elastic::trainer

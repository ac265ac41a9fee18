#include "core/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

namespace ember {

void init_logging(bool verbose) {
  auto logger = spdlog::stderr_color_mt("ember");
  logger->set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
  logger->set_level(verbose ? spdlog::level::debug : spdlog::level::info);
  spdlog::set_default_logger(logger);
}

}  // namespace ember

#pragma once
// Logging through spdlog (stderr). Library code logs; it never prints to stdout, which
// belongs to generated text and command output.
#include <spdlog/spdlog.h>

namespace ember {
void init_logging(bool verbose);
}

#define EMBER_LOG_INFO(...) ::spdlog::info(__VA_ARGS__)
#define EMBER_LOG_WARN(...) ::spdlog::warn(__VA_ARGS__)
#define EMBER_LOG_DEBUG(...) ::spdlog::debug(__VA_ARGS__)
#define EMBER_LOG_ERROR(...) ::spdlog::error(__VA_ARGS__)

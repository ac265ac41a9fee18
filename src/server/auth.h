#pragma once
// API key check for --api-key: "Authorization: Bearer <key>", compared in constant time so the
// key cannot be guessed byte by byte from response timings.
#include <string>
#include <string_view>

namespace ember::server {

bool bearer_token_matches(std::string_view authorization_header, std::string_view key);

}  // namespace ember::server

#pragma once
// The chat page served at GET /: one self-contained HTML document (inline CSS and JavaScript,
// no build step, no external resources) that chats with the model through
// /v1/chat/completions with streaming. `/?q=TEXT` sends TEXT on load, for scripted checks.
#include <string_view>

namespace ember::server {

std::string_view chat_page_html();

}  // namespace ember::server

#pragma once
// The end of every HTTP request: one structured access-log line (logfmt: key=value pairs, values
// with spaces quoted) and the per-request metrics of generation requests.
#include "server/server_state.h"

#include <string>

namespace ember::server {

// id, method, path, status, and for generation requests: stream, prompt / completion / cached
// tokens, TTFT, total time, finish reasons, why it ended early, user.
std::string format_access_log(const httplib::Request& req, const httplib::Response& res, const AccessRecord& rec);

// Observes end-to-end latency and token counts of a finished generation request.
void observe_finished_job(ServerMetrics& metrics, const GenerationJob& job);

}  // namespace ember::server

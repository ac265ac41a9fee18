#pragma once
// Where a checkpoint keeps its chat template: GGUF metadata "tokenizer.chat_template"; in a
// Hugging Face directory chat_template.jinja, chat_template.json, or tokenizer_config.json's
// "chat_template" (a string, or a list of named templates of which "default" is the one).
#include "core/status.h"
#include "loader/weight_source.h"

#include <string>

namespace ember::server {

Result<std::string> find_chat_template(const WeightSource& source);
// Reads a template file given on the command line (.jinja text, or a JSON file as above).
Result<std::string> read_chat_template_file(const std::string& path);

}  // namespace ember::server

#pragma once
// Post-processors of HF tokenizer.json ("post_processor"), reduced to what a single sequence
// needs: the special ids put before and after it when special tokens are added.
#include "core/status.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <vector>

namespace ember::tok {

struct PostProcessor {
  std::vector<int32_t> prefix, suffix;

  // null -> nothing added. TemplateProcessing, RobertaProcessing, BertProcessing, ByteLevel (no
  // ids) and Sequences of them.
  static Result<PostProcessor> from_json(const nlohmann::json& j);
  void apply(std::vector<int32_t>& ids) const;
};

}  // namespace ember::tok

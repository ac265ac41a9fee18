#pragma once
// Format-specific openers behind WeightSource::open (internal to ember_loader).
#include "loader/weight_source.h"

namespace ember::loader {

Result<std::unique_ptr<WeightSource>> open_gguf(const std::string& path);
Result<std::unique_ptr<WeightSource>> open_hf_directory(const std::string& dir);

}  // namespace ember::loader

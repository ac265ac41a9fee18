// WeightSource::open: a directory is a Hugging Face checkpoint, a file must be GGUF.
#include "loader/weight_source.h"

#include "loader/sources.h"

#include <filesystem>

namespace ember {

Result<std::unique_ptr<WeightSource>> WeightSource::open(const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status)) return Status::errorf("{}: no such file or directory", path);
  if (std::filesystem::is_directory(status)) return loader::open_hf_directory(path);
  if (path.size() >= 12 && path.ends_with(".safetensors")) {
    return Status::errorf("{}: a bare safetensors file; pass its Hugging Face directory "
                          "(with config.json) instead", path);
  }
  return loader::open_gguf(path);
}

}  // namespace ember

#pragma once
// WeightSource: tensor name -> zero-copy view into a memory-mapped checkpoint, plus the
// checkpoint's metadata. Opens a GGUF file or a Hugging Face directory (config.json +
// model.safetensors or sharded model.safetensors.index.json).
#include "core/mmap_file.h"
#include "core/status.h"
#include "core/tensor.h"

#include <nlohmann/json.hpp>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace ember {

enum class CheckpointFormat { GGUF, HuggingFace };

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  // Opens path: a .gguf file or an HF directory. Every structural problem (truncation, bad
  // offsets, absurd shapes, unknown dtypes) is an error naming the file and the tensor.
  static Result<std::unique_ptr<WeightSource>> open(const std::string& path);

  virtual CheckpointFormat format() const = 0;
  virtual const std::string& path() const = 0;
  // Names of all tensors, sorted.
  virtual std::vector<std::string> tensor_names() const = 0;
  virtual bool has_tensor(const std::string& name) const = 0;
  // View of a tensor's bytes in the mapped file; shape outermost first (GGUF's ne order is
  // reversed into this). Error if missing.
  virtual Result<Tensor> tensor(const std::string& name) const = 0;
  // HF: config.json (and, when present, tokenizer_config.json under "tokenizer_config",
  // generation_config.json under "generation_config").
  // GGUF: every metadata key -> value (arrays as JSON arrays; large token arrays included).
  virtual const nlohmann::json& metadata() const = 0;
  // Frees the metadata once the config, tokenizer and chat template have been read from it (a
  // GGUF vocabulary held as JSON costs ~80 bytes a token: 21 MiB for a 262k vocabulary);
  // metadata() is an empty object afterwards. Tensors stay valid.
  virtual void release_metadata() = 0;
  // Moves the bytes of every file into huge-page memory at the same addresses (core/
  // mmap_file.h); tensors stay valid. progress(done, total) in bytes.
  virtual Status make_resident(const std::function<void(size_t, size_t)>& progress = {}) = 0;
  // Bytes of all tensor data (for `ember info` and memory reports).
  virtual size_t total_tensor_bytes() const = 0;
};

}  // namespace ember

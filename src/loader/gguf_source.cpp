// WeightSource over a GGUF file: parse, then one zero-copy view per tensor.
#include "loader/gguf_parser.h"
#include "loader/mapped_source.h"
#include "loader/sources.h"

#include <algorithm>

namespace ember::loader {

Result<std::unique_ptr<WeightSource>> open_gguf(const std::string& path) {
  EMBER_ASSIGN_OR_RETURN(auto file, MmapFile::open(path));
  EMBER_ASSIGN_OR_RETURN(GgufFile gguf, parse_gguf(file->data(), file->size(), path));
  auto source = std::make_unique<MappedWeightSource>(CheckpointFormat::GGUF, path);
  for (const auto& info : gguf.tensors) {
    Tensor t;
    // The mapping is read-only; views are non-const only because Tensor is.
    t.data = const_cast<uint8_t*>(file->data() + info.file_offset);
    t.dtype = info.dtype;
    t.n_dims = info.n_dims;
    for (int d = 0; d < info.n_dims; ++d) {  // GGML's ne is innermost first; ours outermost
      t.shape[static_cast<size_t>(d)] = info.ne[static_cast<size_t>(info.n_dims - 1 - d)];
    }
    EMBER_RETURN_IF_ERROR(source->add_tensor(info.name, t));
  }
  source->mutable_metadata() = std::move(gguf.metadata);
  source->keep_alive(std::move(file));
  return std::unique_ptr<WeightSource>(std::move(source));
}

}  // namespace ember::loader

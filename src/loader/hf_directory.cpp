// WeightSource over a Hugging Face directory: config.json (required), the weights in
// model.safetensors or in the shards named by model.safetensors.index.json, and
// tokenizer_config.json / generation_config.json attached to the metadata when present.
#include "loader/mapped_source.h"
#include "loader/safetensors_parser.h"
#include "loader/sources.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

namespace ember::loader {

namespace {

namespace fs = std::filesystem;

Result<nlohmann::json> read_json_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return Status::errorf("{}: cannot open", p.string());
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::exception& e) {
    return Status::errorf("{}: invalid JSON: {}", p.string(), e.what());
  }
}

// Adds every tensor of one safetensors file to the source.
Status add_safetensors_file(const fs::path& p, MappedWeightSource* source,
                            std::map<std::string, std::string>* owner) {
  EMBER_ASSIGN_OR_RETURN(auto file, MmapFile::open(p.string()));
  EMBER_ASSIGN_OR_RETURN(SafetensorsFile st,
                         parse_safetensors(file->data(), file->size(), p.string()));
  for (const auto& info : st.tensors) {
    auto [it, inserted] = owner->emplace(info.name, p.filename().string());
    if (!inserted) {
      return Status::errorf("{}: tensor '{}' also appears in {}", p.string(), info.name,
                            it->second);
    }
    Tensor t;
    // The mapping is read-only; views are non-const only because Tensor is.
    t.data = const_cast<uint8_t*>(file->data() + info.file_offset);
    t.dtype = info.dtype;
    t.n_dims = info.n_dims;
    t.shape = info.shape;
    EMBER_RETURN_IF_ERROR(source->add_tensor(info.name, t));
  }
  source->keep_alive(std::move(file));
  return Status::ok();
}

// A shard name from an index must name a file inside the directory.
bool is_plain_file_name(const std::string& s) {
  return !s.empty() && s.find('/') == std::string::npos && s.find('\\') == std::string::npos &&
         s != "." && s != "..";
}

Status add_sharded(const fs::path& index_path, MappedWeightSource* source) {
  EMBER_ASSIGN_OR_RETURN(nlohmann::json index, read_json_file(index_path));
  const std::string where = index_path.string();
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    return Status::errorf("{}: no \"weight_map\" object", where);
  }
  std::map<std::string, std::vector<std::string>> by_shard;  // shard -> tensors it must hold
  for (const auto& [tensor, shard] : index["weight_map"].items()) {
    if (!shard.is_string() || !is_plain_file_name(shard.get<std::string>())) {
      return Status::errorf("{}: tensor '{}': bad shard name {}", where, tensor, shard.dump());
    }
    by_shard[shard.get<std::string>()].push_back(tensor);
  }
  if (by_shard.empty()) return Status::errorf("{}: empty weight_map", where);
  std::map<std::string, std::string> owner;
  for (const auto& [shard, tensors] : by_shard) {
    const fs::path p = index_path.parent_path() / shard;
    std::error_code ec;
    if (!fs::is_regular_file(p, ec)) {
      return Status::errorf("{}: shard {} (holding '{}') is missing", where, shard,
                            tensors.front());
    }
    EMBER_RETURN_IF_ERROR(add_safetensors_file(p, source, &owner));
    for (const auto& t : tensors) {
      auto it = owner.find(t);
      if (it == owner.end() || it->second != shard) {
        return Status::errorf("{}: tensor '{}' is not in its shard {}", where, t, shard);
      }
    }
  }
  return Status::ok();
}

}  // namespace

Result<std::unique_ptr<WeightSource>> open_hf_directory(const std::string& dir) {
  const fs::path root(dir);
  std::error_code ec;
  const fs::path config_path = root / "config.json";
  if (!fs::is_regular_file(config_path, ec)) {
    return Status::errorf("{}: no config.json (not a Hugging Face model directory)", dir);
  }
  EMBER_ASSIGN_OR_RETURN(nlohmann::json config, read_json_file(config_path));
  if (!config.is_object()) return Status::errorf("{}: not a JSON object", config_path.string());

  auto source = std::make_unique<MappedWeightSource>(CheckpointFormat::HuggingFace, dir);
  const fs::path index = root / "model.safetensors.index.json";
  const fs::path single = root / "model.safetensors";
  if (fs::is_regular_file(index, ec)) {
    EMBER_RETURN_IF_ERROR(add_sharded(index, source.get()));
  } else if (fs::is_regular_file(single, ec)) {
    std::map<std::string, std::string> owner;
    EMBER_RETURN_IF_ERROR(add_safetensors_file(single, source.get(), &owner));
  } else {
    return Status::errorf("{}: no model.safetensors or model.safetensors.index.json", dir);
  }

  for (const char* extra : {"tokenizer_config", "generation_config"}) {
    const fs::path p = root / (std::string(extra) + ".json");
    if (!fs::is_regular_file(p, ec)) continue;
    EMBER_ASSIGN_OR_RETURN(nlohmann::json j, read_json_file(p));
    config[extra] = std::move(j);
  }
  source->mutable_metadata() = std::move(config);
  return std::unique_ptr<WeightSource>(std::move(source));
}

}  // namespace ember::loader

#include "loader/mapped_source.h"

namespace ember::loader {

std::vector<std::string> MappedWeightSource::tensor_names() const {
  std::vector<std::string> names;
  names.reserve(tensors_.size());
  for (const auto& [name, t] : tensors_) names.push_back(name);  // std::map: already sorted
  return names;
}

Result<Tensor> MappedWeightSource::tensor(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) return Status::errorf("{}: no tensor '{}'", path_, name);
  return it->second;
}

Status MappedWeightSource::add_tensor(const std::string& name, const Tensor& t) {
  if (!tensors_.emplace(name, t).second) {
    return Status::errorf("{}: duplicate tensor '{}'", path_, name);
  }
  total_bytes_ += t.nbytes();
  return Status::ok();
}

Status MappedWeightSource::make_resident(const std::function<void(size_t, size_t)>& progress) {
  size_t total = 0, before = 0;
  for (const auto& f : files_) total += f->size();
  for (const auto& f : files_) {
    EMBER_RETURN_IF_ERROR(f->make_resident([&](size_t done, size_t) {
      if (progress) progress(before + done, total);
    }));
    before += f->size();
  }
  return Status::ok();
}

}  // namespace ember::loader

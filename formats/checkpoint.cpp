// Checkpoints: atomic folder writes (temporary name, fsync of every file and of the parent, rename).
#include "formats/checkpoint.h"

#include <cmath>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <fmt/format.h>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <vector>

#include "formats/safetensors.h"
#include "formats/weights.h"

namespace ferry::formats {
namespace {

void fsync_path(const std::filesystem::path& p, bool directory) {
  const int fd = ::open(p.c_str(), directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  if (fd < 0) throw std::runtime_error("checkpoint: cannot open '" + p.string() + "' to sync it");
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) throw std::runtime_error("checkpoint: fsync of '" + p.string() + "' failed");
}

// The slice of a flat buffer laid out like the ParameterStore's values.
std::span<const float> slice(std::span<const float> flat, const models::ParameterStore& params, int i) {
  return flat.subspan(static_cast<size_t>(params.value(i).data() - params.values().data()), params.value(i).size());
}

std::vector<std::filesystem::path> step_folders(const std::filesystem::path& root) {
  std::vector<std::filesystem::path> out;
  if (!std::filesystem::is_directory(root)) return out;
  for (const auto& e : std::filesystem::directory_iterator(root)) {
    const std::string name = e.path().filename().string();
    if (e.is_directory() && name.rfind("step-", 0) == 0 && name.find(".tmp") == std::string::npos) out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());  // zero-padded step numbers sort in order
  return out;
}

}  // namespace

std::filesystem::path save_checkpoint(const std::filesystem::path& root, const models::ModelSpec& spec,
                                      const models::ParameterStore& params, std::span<const float> m,
                                      std::span<const float> v, const TrainState& state, int keep) {
  const std::filesystem::path final_dir = root / fmt::format("step-{:08d}", state.step);
  const std::filesystem::path tmp = root / fmt::format("step-{:08d}.tmp", state.step);
  std::filesystem::create_directories(root);
  std::filesystem::remove_all(tmp);
  std::filesystem::create_directories(tmp);

  std::vector<SafetensorsTensorRef> weights, moments;
  for (int i = 0; i < params.count(); ++i) {
    weights.push_back({spec.params[i].name, spec.params[i].shape, params.value(i).data()});
    moments.push_back({"exp_avg." + spec.params[i].name, spec.params[i].shape, slice(m, params, i).data()});
    moments.push_back({"exp_avg_sq." + spec.params[i].name, spec.params[i].shape, slice(v, params, i).data()});
  }
  write_safetensors(tmp / "model.safetensors", weights, {{"format", "pt"}});
  write_safetensors(tmp / "optimizer.safetensors", moments);
  if (state.pending) {
    std::vector<SafetensorsTensorRef> grads;
    for (int i = 0; i < params.count(); ++i)
      grads.push_back({"pending_grad." + spec.params[i].name, spec.params[i].shape, params.grad(i).data()});
    write_safetensors(tmp / "pending_update.safetensors", grads);
  }
  {
    std::ofstream out(tmp / "state.json");
    const models::ModelConfig& m = state.model;
    nlohmann::json j{{"step", state.step},
                          {"optimizer_steps", state.optimizer_steps},
                          {"val_loss_start", state.val_loss_start},
                          {"loss_scale", state.loss_scale},
                          {"loss_scale_good_steps", state.loss_scale_good_steps},
                          {"config_hash", state.config_hash},
                          {"model", {{"kind", m.kind}, {"n_layer", m.n_layer}, {"n_head", m.n_head}, {"n_embd", m.n_embd},
                                     {"vocab_size", m.vocab_size}, {"seq_len", m.seq_len}}},
                          {"tokenizer", state.tokenizer}};
    if (state.pending) {
      const auto& u = *state.pending;
      j["pending_update"] = {{"adam_step", u.adam_step}, {"lr", u.lr}, {"grad_scale", u.grad_scale}, {"skipped", u.skipped}};
      if (std::isfinite(u.grad_norm)) j["pending_update"]["grad_norm"] = u.grad_norm;
    }
    out << j.dump(2) << '\n';
    if (!out) throw std::runtime_error("checkpoint: cannot write '" + (tmp / "state.json").string() + "' (disk full?)");
  }
  for (const char* f : {"model.safetensors", "optimizer.safetensors", "state.json"}) fsync_path(tmp / f, false);
  if (state.pending) fsync_path(tmp / "pending_update.safetensors", false);
  fsync_path(tmp, true);
  std::filesystem::remove_all(final_dir);
  std::filesystem::rename(tmp, final_dir);
  fsync_path(root, true);

  auto all = step_folders(root);
  for (size_t i = 0; keep > 0 && i + keep < all.size(); ++i) std::filesystem::remove_all(all[i]);
  return final_dir;
}

std::pair<TrainState, std::filesystem::path> read_checkpoint_state(const std::filesystem::path& path) {
  std::filesystem::path dir = path;
  if (!std::filesystem::exists(dir / "state.json")) {
    const auto all = step_folders(path);
    if (all.empty()) throw std::runtime_error("'" + path.string() + "' holds no checkpoint (no step-* folder with state.json)");
    dir = all.back();
  }
  std::ifstream in(dir / "state.json");
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.contains("step") || !j.contains("config_hash"))
    throw std::runtime_error("'" + (dir / "state.json").string() + "' is damaged");
  TrainState s;
  s.step = j["step"].get<int64_t>();
  s.optimizer_steps = j.value("optimizer_steps", int64_t(0));
  s.val_loss_start = j.value("val_loss_start", 0.0);
  s.loss_scale = j.value("loss_scale", 1.0);
  s.loss_scale_good_steps = j.value("loss_scale_good_steps", 0);
  s.config_hash = j["config_hash"].get<std::string>();
  s.tokenizer = j.value("tokenizer", std::string("byte"));
  if (j.contains("pending_update")) {
    const auto& u = j["pending_update"];
    s.pending = TrainState::PendingUpdate{u.value("adam_step", int64_t(0)), u.value("lr", 0.0), u.value("grad_norm", 0.0),
                                          u.value("grad_scale", 1.0f), u.value("skipped", false)};
    if (s.pending->adam_step < 1) throw std::runtime_error("'" + (dir / "state.json").string() + "' is damaged (pending_update)");
  }
  s.model.n_layer = 0;  // unknown unless the state says (checkpoints of older builds do not)
  if (j.contains("model")) {
    const auto& m = j["model"];
    s.model = {m.value("kind", std::string("gpt2")), m.value("n_layer", 0), m.value("n_head", 0), m.value("n_embd", 0),
               m.value("vocab_size", 0), m.value("seq_len", 0), {}};
  }
  return {s, dir};
}

TrainState load_checkpoint(const std::filesystem::path& path, const models::ModelSpec& spec,
                           models::ParameterStore& params, std::span<float> m, std::span<float> v,
                           const std::string& expected_config_hash) {
  auto [s, dir] = read_checkpoint_state(path);
  if (s.config_hash != expected_config_hash)
    throw std::runtime_error("--resume: '" + dir.string() + "' was written by a run with another model, data, optimizer "
                             "or step settings (config hash " + s.config_hash + ", this config " + expected_config_hash + ")");
  load_weights(SafetensorsFile::open(dir / "model.safetensors"), spec, params);
  const SafetensorsFile opt = SafetensorsFile::open(dir / "optimizer.safetensors");
  for (int i = 0; i < params.count(); ++i) {
    const size_t offset = static_cast<size_t>(params.value(i).data() - params.values().data());
    for (auto [prefix, flat] : {std::pair{"exp_avg.", m}, std::pair{"exp_avg_sq.", v}}) {
      const std::string name = prefix + spec.params[i].name;
      const auto* e = opt.find(name);
      if (!e || e->shape != spec.params[i].shape)
        throw std::runtime_error("--resume: '" + (dir / "optimizer.safetensors").string() + "' lacks " + name + " or has another shape");
      const auto values = opt.read_f32(name);
      std::copy(values.begin(), values.end(), flat.begin() + static_cast<std::ptrdiff_t>(offset));
    }
  }
  if (s.pending) {
    const SafetensorsFile pending = SafetensorsFile::open(dir / "pending_update.safetensors");
    for (int i = 0; i < params.count(); ++i) {
      const std::string name = "pending_grad." + spec.params[i].name;
      const auto* e = pending.find(name);
      if (!e || e->shape != spec.params[i].shape)
        throw std::runtime_error("--resume: '" + (dir / "pending_update.safetensors").string() + "' lacks " + name + " or has another shape");
      const auto values = pending.read_f32(name);
      std::copy(values.begin(), values.end(), params.grad(i).begin());
    }
  }
  return s;
}

}  // namespace ferry::formats

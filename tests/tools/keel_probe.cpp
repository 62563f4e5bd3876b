// keel-probe: dumps what the PyTorch oracle (tests/python/test_gpt_vs_torch.py) compares —
// initial weights, inference logits, one batch's loss and gradients, and S AdamW steps' losses —
// into one safetensors file. It forces a constant learning rate and no clipping so the
// reference needs no schedule.
#include <cstring>
#include <iostream>

#include "host/errors.h"
#include "host/param_init.h"
#include "io/safetensors.h"
#include "interop/huggingface.h"
#include "train/trainer.h"

int main(int argc, char** argv) {
  std::string config_path, out_path, init_from;  // init_from: model.init_from, a Hugging Face-layout file
  int steps = 10;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--config")) config_path = argv[i + 1];
    else if (!std::strcmp(argv[i], "--out")) out_path = argv[i + 1];
    else if (!std::strcmp(argv[i], "--steps")) steps = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--init-from")) init_from = argv[i + 1];
  }
  if (config_path.empty() || out_path.empty() || steps < 1) {
    std::cerr << "usage: keel-probe --config CONFIG --out FILE.safetensors [--steps S] [--init-from HF.safetensors]\n";
    return 2;
  }
  try {
    std::vector<std::string> overrides = {"lr_schedule.decay=\"constant\"", "lr_schedule.warmup_steps=0", "train.grad_clip=0"};
    if (!init_from.empty()) overrides.push_back("model.init_from=" + nlohmann::json(init_from).dump());
    keel::Trainer trainer(keel::RunConfig::from_file(config_path, overrides), keel::TrainerData::open,
                          keel::import_huggingface);
    const keel_model_info& info = trainer.model_info();
    const int32_t B = trainer.config().data.micro_batch, T = trainer.seq_len();

    // S batches of pseudo-random tokens and targets, a pure function of (step, position).
    std::vector<int32_t> all_tokens, all_targets;
    std::vector<keel::Batch> batches(steps);
    for (int s = 0; s < steps; ++s) {
      keel::Batch& b = batches[s];
      b.batch = B, b.seq_len = T;
      for (int64_t i = 0; i < int64_t(B) * T; ++i) {
        b.tokens.push_back(int32_t(keel::mix64(uint64_t(s) * 1000003 + i) % uint64_t(info.vocab_size)));
        b.targets.push_back(int32_t(keel::mix64(uint64_t(s) * 1000003 + i + 7777777) % uint64_t(info.vocab_size)));
      }
      all_tokens.insert(all_tokens.end(), b.tokens.begin(), b.tokens.end());
      all_targets.insert(all_targets.end(), b.targets.begin(), b.targets.end());
    }

    std::vector<std::vector<float>> params, grads;
    std::vector<keel::SafetensorsEntry> entries;
    nlohmann::json no_decay = nlohmann::json::array();
    auto shape_of = [](const keel_param_spec& spec) {
      return std::vector<int64_t>(spec.global_shape, spec.global_shape + spec.ndim);
    };
    for (size_t i = 0; i < info.n_params; ++i) params.push_back(trainer.parameters().read_param(i));
    std::vector<float> logits = trainer.logits(batches[0].tokens, B, T);
    float loss0 = float(trainer.forward_backward(batches[0]));
    for (size_t i = 0; i < info.n_params; ++i) grads.push_back(trainer.parameters().read_grad(i));
    std::vector<float> losses;
    // Each step's model metrics (model.h step_metrics), by name. The first step's also tallies
    // forward_backward's micro-batch above: the same batch at the same weights.
    nlohmann::json model_metrics = nlohmann::json::array();
    for (int s = 0; s < steps; ++s) {
      const keel::StepResult step = trainer.train_step_on({batches[s]});
      losses.push_back(float(step.loss));
      nlohmann::json named = nlohmann::json::object();
      for (const keel::ModelMetric& m : step.model_metrics) named[m.name] = m.value;
      model_metrics.push_back(named);
    }

    for (size_t i = 0; i < info.n_params; ++i) {
      const keel_param_spec& spec = info.params[i];
      entries.push_back({std::string("param/") + spec.name, "F32", shape_of(spec), params[i].data(), params[i].size() * 4});
      entries.push_back({std::string("grad/") + spec.name, "F32", shape_of(spec), grads[i].data(), grads[i].size() * 4});
      if (spec.flags & trainer.optimizer_info().decay_flags) no_decay.push_back(spec.name);
    }
    entries.push_back({"logits", "F32", {B, T, info.padded_vocab_size}, logits.data(), logits.size() * 4});
    entries.push_back({"tokens", "I32", {steps, B, T}, all_tokens.data(), all_tokens.size() * 4});
    entries.push_back({"targets", "I32", {steps, B, T}, all_targets.data(), all_targets.size() * 4});
    entries.push_back({"losses", "F32", {steps}, losses.data(), losses.size() * 4});
    entries.push_back({"loss0", "F32", {1}, &loss0, 4});
    nlohmann::json optimizer = trainer.config().optimizer.json;
    optimizer["lr"] = trainer.optimizer_info().base_lr;
    keel::write_safetensors(out_path, entries,
                            {{"model_config", trainer.config().model.json.dump()},
                             {"optimizer", optimizer.dump()},
                             {"no_decay", no_decay.dump()},
                             {"model_metrics", model_metrics.dump()}});
    std::cout << "wrote " << out_path << ": " << info.n_params << " parameters, " << steps << " steps, loss0 " << loss0
              << std::endl;
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "keel-probe: " << e.what() << std::endl;
    return 1;
  }
}

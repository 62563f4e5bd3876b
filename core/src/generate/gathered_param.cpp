// A whole parameter on every rank, whatever the layout (embed.h keel_trainer_gather_param): each
// rank sends what it holds of the tensor (the owned range of its tensor-parallel piece; nothing
// when the tensor lives on another pipeline stage, is a later stage's tied copy, or is replicated
// over tensor-parallel ranks and this is not tp rank 0), and every rank places every part into
// the whole, checking that the parts cover it. Collective over the world: every rank calls it
// with the same name. Data-parallel replicas all send what they hold (a rank cannot tell a
// replica from a shard alone), placed last rank first so the lowest rank's values stand where
// replicas differ between syncs (diloco, edit).
#include "generate/gathered_param.h"

#include <keel_support/common/piece_box.hpp>

#include <algorithm>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "host/errors.h"
#include "mesh/collectives.h"

namespace keel {
namespace {

// One rank's part: a JSON line (the tensor's shape, the piece's box, the range), then the floats.
std::string part_of(const keel_param_spec& spec, int64_t begin, int64_t end, const std::vector<float>& values) {
  const nlohmann::json header = {{"shape", std::vector<int64_t>(spec.global_shape, spec.global_shape + spec.ndim)},
                                 {"offset", std::vector<int64_t>(spec.local_offset, spec.local_offset + spec.ndim)},
                                 {"piece", std::vector<int64_t>(spec.local_shape, spec.local_shape + spec.ndim)},
                                 {"begin", begin}, {"end", end}};
  std::string text = header.dump() + "\n";
  const size_t at = text.size();
  text.resize(at + values.size() * sizeof(float));
  if (!values.empty()) std::memcpy(text.data() + at, values.data(), values.size() * sizeof(float));
  return text;
}

keel_support::PieceBox box_of(const nlohmann::json& header) {
  const auto shape = header.at("shape").get<std::vector<int64_t>>();
  keel_support::PieceBox box = keel_support::PieceBox::whole(int32_t(shape.size()), shape.data());
  const auto offset = header.at("offset").get<std::vector<int64_t>>();
  const auto piece = header.at("piece").get<std::vector<int64_t>>();
  for (size_t d = 0; d < shape.size(); ++d) {
    box.offset[d] = offset[d];
    box.shape[d] = piece[d];
  }
  return box;
}

}  // namespace

GatheredParam gather_param(Trainer& trainer, const std::string& name, bool with_values) {
  std::string mine;
  std::string not_here;  // this rank's "no such parameter", with its suggestion
  std::exception_ptr failure;
  try {
    const size_t index = trainer.parameters().param_index(name);
    const keel_param_spec& spec = trainer.model_info().params[index];
    const auto [begin, end] = trainer.strategy_state().owned_range(-1, index);
    const bool same_as_tp0 = spec.tp_dim < 0 && trainer.mesh().position().tp != 0;
    if (with_values && !(spec.flags & KEEL_PARAM_STAGE_COPY) && !same_as_tp0 && end > begin)
      mine = part_of(spec, begin, end, trainer.strategy_state().read_range(-1, index, begin, end));
    else
      mine = part_of(spec, 0, 0, {});  // the shape, for ranks that hold nothing of it
  } catch (const KeelError& e) {
    if (e.code != KEEL_ERR_NOT_FOUND) failure = std::current_exception();
    not_here = e.what();
  } catch (...) {
    failure = std::current_exception();
  }
  rethrow_if_any_failed(trainer.mesh().world, failure, KEEL_ERR_IO,
                        "parameter " + name + ": another rank could not read its part (its message says why)");
  const std::vector<std::string> parts = gather_strings(trainer.mesh().world, mine);
  GatheredParam out;
  bool found = false;
  std::vector<float> covered;
  int64_t numel = 0;
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
    const std::string& part = *it;
    if (part.empty()) continue;
    const size_t line_end = part.find('\n');
    const nlohmann::json header = nlohmann::json::parse(part.substr(0, line_end));
    const auto shape = header.at("shape").get<std::vector<int64_t>>();
    if (!found) {
      found = true;
      out.shape = shape;
      numel = 1;
      for (int64_t d : shape) numel *= d;
      if (with_values) out.values.assign(size_t(numel), 0.0f), covered.assign(size_t(numel), 0.0f);
    } else if (shape != out.shape) {
      throw KeelError(KEEL_ERR_INTERNAL, "parameter " + name + ": the ranks disagree on its shape");
    }
    const int64_t begin = header.at("begin"), end = header.at("end");
    if (!with_values || end <= begin) continue;
    const keel_support::PieceBox piece = box_of(header), whole = keel_support::PieceBox::whole(int32_t(shape.size()), shape.data());
    std::vector<float> values(size_t(end - begin));
    if (part.size() != line_end + 1 + values.size() * sizeof(float))  // a rank that asked for the shape alone
      throw KeelError(KEEL_ERR_INVALID_ARGUMENT, "parameter " + name + ": the ranks disagree on whether to read its "
                                                                      "values (every rank passes dst, or none)");
    std::memcpy(values.data(), part.data() + line_end + 1, values.size() * sizeof(float));
    keel_support::copy_overlap(piece, begin, end, values.data(), whole, 0, numel, out.values.data());
    const std::vector<float> ones(values.size(), 1.0f);
    keel_support::copy_overlap(piece, begin, end, ones.data(), whole, 0, numel, covered.data());
  }
  if (!found) throw KeelError(KEEL_ERR_NOT_FOUND, not_here);  // on no rank: every rank says so
  if (with_values && std::find(covered.begin(), covered.end(), 0.0f) != covered.end())
    throw KeelError(KEEL_ERR_INTERNAL, "parameter " + name + ": the ranks' parts do not cover the whole tensor");
  return out;
}

}  // namespace keel

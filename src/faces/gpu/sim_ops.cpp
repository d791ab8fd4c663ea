/// @file
/// The simulated kOpFacesRun (sim_ops.h): the CPU interpreter behind the device op's wire contract.
#include "gpu/sim_ops.h"

#include <cstring>
#include <memory>

#include "facetrace/faces/net.h"
#include "gpu/faces_ops.h"
#include "gpu/program_codec.h"

namespace facetrace::faces::gpu {
namespace {

Blob blob_from(std::span<const std::byte> bytes) {
  auto v = std::make_shared<std::vector<float>>(bytes.size() / sizeof(float));
  std::memcpy(v->data(), bytes.data(), v->size() * sizeof(float));
  return v;
}

Status sim_run(runtime::SimDevice& dev, const runtime::OpArgs& a, const SimFacesOptions& o) {
  FacesRunArgs args;
  FT_TRY(a.args_as(args));
  if (o.fail)
    if (Status st = o.fail(); !st.ok()) return st;
  auto program_bytes = dev.resident(program_resident_name(args.key));
  if (!program_bytes) return program_bytes.status();
  auto decoded = decode_program(*program_bytes);
  if (!decoded) return decoded.status();
  Program& p = decoded->program;
  auto in = parse_input(args, a.in, decoded->blob_floats);
  if (!in) return in.status();
  std::vector<Blob> blobs;
  for (std::size_t i = 0; i < decoded->blob_floats.size(); ++i) {
    std::span<const std::byte> bytes = in->inline_blobs[i];
    if (bytes.empty() && decoded->blob_floats[i] > 0) {
      auto r = dev.resident(const_resident_name(args.key, i));
      if (!r) return r.status();
      bytes = *r;
    }
    if (bytes.size() != decoded->blob_floats[i] * sizeof(float))
      return invalid_argument("faces_run: constant " + std::to_string(i) + " has " +
                              std::to_string(bytes.size()) + " bytes, expected " +
                              std::to_string(decoded->blob_floats[i] * sizeof(float)));
    blobs.push_back(blob_from(bytes));
  }
  FT_TRY(bind_blobs(p, blobs));
  const auto per_image = static_cast<std::uint64_t>(p.lens[0]) * sizeof(float);
  if (args.batch < 1 || args.input_bytes != per_image * args.batch)
    return invalid_argument("faces_run: input of " + std::to_string(args.input_bytes) + " bytes for batch " +
                            std::to_string(args.batch));
  const Blob batch = blob_from(in->batch);
  std::vector<std::span<const float>> inputs;
  for (std::uint32_t i = 0; i < args.batch; ++i)
    inputs.push_back(std::span<const float>(*batch).subspan(i * static_cast<std::size_t>(p.lens[0]),
                                                            static_cast<std::size_t>(p.lens[0])));
  auto r = run_program_cpu(p, inputs, 1);
  if (!r) return r.status();
  std::vector<float> packed;
  for (std::size_t out = 0; out < p.outputs.size(); ++out)
    for (std::size_t i = 0; i < r->size(); ++i)
      packed.insert(packed.end(), (*r)[i][out].begin(), (*r)[i][out].end());
  if (packed.size() * sizeof(float) != args.output_bytes)
    return invalid_argument("faces_run: outputs hold " + std::to_string(packed.size() * sizeof(float)) +
                            " bytes, the caller expects " + std::to_string(args.output_bytes));
  if (o.tamper) o.tamper(packed);
  auto ticket = dev.emit(std::as_bytes(std::span(packed)));
  if (!ticket) return ticket.status();
  a.reply.tickets.push_back(*ticket);
  return {};
}

}  // namespace

void add_faces_sim_op(runtime::SimulatedExecutor& ex, SimFacesOptions options) {
  ex.add_op(kOpFacesRun, [o = std::move(options)](runtime::SimDevice& dev, const runtime::OpArgs& a) {
    return sim_run(dev, a, o);
  });
}

}  // namespace facetrace::faces::gpu

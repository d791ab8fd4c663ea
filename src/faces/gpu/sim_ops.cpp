/// @file
/// The simulated kOpFacesRun and kOpFacesDetect (sim_ops.h): the CPU interpreter (and, for detect, the CPU's
/// letterbox and decode) behind the device ops' wire contract.
#include "gpu/sim_ops.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include "facetrace/faces/detector.h"
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

/// What both simulated ops share: the resident program with every constant bound (from its resident or the
/// input region) and the input region's first part.
struct SimModel {
  Program program;
  std::span<const std::byte> batch;
};

Expected<SimModel> sim_model(runtime::SimDevice& dev, const FacesRunArgs& args,
                             std::span<const std::byte> region) {
  auto program_bytes = dev.resident(program_resident_name(args.key));
  if (!program_bytes) return program_bytes.status();
  auto decoded = decode_program(*program_bytes);
  if (!decoded) return decoded.status();
  auto in = parse_input(args, region, decoded->blob_floats);
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
  FT_TRY(bind_blobs(decoded->program, blobs));
  if (args.batch < 1) return invalid_argument("faces_run: batch 0");
  return SimModel{std::move(decoded->program), in->batch};
}

Status sim_run(runtime::SimDevice& dev, const runtime::OpArgs& a, const SimFacesOptions& o) {
  FacesRunArgs args;
  std::span<const std::byte> carried;
  FT_TRY(read_op_args(a.args, args, carried));
  if (o.seen) o.seen(kOpFacesRun);
  if (o.fail)
    if (Status st = o.fail(); !st.ok()) return st;
  auto m = sim_model(dev, args, a.in);
  if (!m) return m.status();
  const Program& p = m->program;
  const auto per_image = static_cast<std::uint64_t>(p.lens[0]) * sizeof(float);
  if (args.input_bytes != per_image * args.batch)
    return invalid_argument("faces_run: input of " + std::to_string(args.input_bytes) + " bytes for batch " +
                            std::to_string(args.batch));
  const Blob batch = blob_from(m->batch);
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
  if (o.plan_choices) a.reply.bytes = o.plan_choices(carried);
  return {};
}

/// kOpFacesDetect with the CPU's functions: letterbox_bgr, the interpreter, decode_yunet.
Status sim_detect(runtime::SimDevice& dev, const runtime::OpArgs& a, const SimFacesOptions& o) {
  FacesDetectArgs d;
  std::span<const std::byte> carried;
  FT_TRY(read_op_args(a.args, d, carried));
  const FacesRunArgs& args = d.run;
  if (o.seen) o.seen(kOpFacesDetect);
  if (o.fail)
    if (Status st = o.fail(); !st.ok()) return st;
  auto m = sim_model(dev, args, a.in);
  if (!m) return m.status();
  const Program& p = m->program;
  const int n = static_cast<int>(d.n);
  if (p.input_shape != Shape{1, 3, n, n} || d.capacity < 1)
    return invalid_argument("faces_detect: the program's input is not [1,3," + std::to_string(n) + "," +
                            std::to_string(n) + "] or no capacity");
  const std::uint32_t b = args.batch;
  const std::span<const std::byte> region = m->batch;
  if (region.size() < std::uint64_t{b} * sizeof(FrameHeader))
    return invalid_argument("faces_detect: input region shorter than its headers");
  std::vector<FrameHeader> headers(b);
  std::memcpy(headers.data(), region.data(), b * sizeof(FrameHeader));
  std::vector<std::vector<float>> inputs(b, std::vector<float>(static_cast<std::size_t>(p.lens[0])));
  std::vector<float> scales(b);
  for (std::uint32_t i = 0; i < b; ++i) {
    const FrameHeader& h = headers[i];
    const std::uint64_t bytes = std::uint64_t{h.width} * h.height * 3;
    if (h.width < 1 || h.height < 1 || h.offset > region.size() || region.size() - h.offset < bytes)
      return invalid_argument("faces_detect: frame " + std::to_string(i) + " outside the input region");
    const std::span<const std::uint8_t> rgb(reinterpret_cast<const std::uint8_t*>(region.data() + h.offset),
                                            static_cast<std::size_t>(bytes));
    scales[i] = letterbox_bgr(rgb, static_cast<int>(h.width), static_cast<int>(h.height), n, inputs[i]);
  }
  auto r = run_program_cpu(p, std::vector<std::span<const float>>(inputs.begin(), inputs.end()), 1);
  if (!r) return r.status();
  DetectOptions opts;
  opts.score = d.score;
  opts.nms_iou = d.nms_iou;
  opts.max_faces = d.max_faces;
  std::vector<std::byte> reply(static_cast<std::size_t>(detect_reply_bytes(b, d.capacity)));
  if (reply.size() != args.output_bytes)
    return invalid_argument("faces_detect: the reply holds " + std::to_string(reply.size()) +
                            " bytes, the caller expects " + std::to_string(args.output_bytes));
  for (std::uint32_t i = 0; i < b; ++i) {
    if (o.tamper) o.tamper((*r)[i][0]);
    std::vector<NamedTensor> outs;
    for (std::size_t k = 0; k < p.outputs.size(); ++k)
      outs.push_back(NamedTensor{p.outputs[k].name, p.outputs[k].shape, std::move((*r)[i][k])});
    const auto dets = decode_yunet(outs, n, scales[i], static_cast<int>(headers[i].width),
                                   static_cast<int>(headers[i].height), opts);
    const auto count = static_cast<std::int32_t>(std::min<std::size_t>(dets.size(), d.capacity));
    std::memcpy(reply.data() + i * sizeof count, &count, sizeof count);
    std::byte* rec =
        reply.data() + detect_records_offset(b) + std::uint64_t{i} * d.capacity * kDetectionFloats * 4;
    for (std::int32_t j = 0; j < count; ++j) {
      const Detection& x = dets[static_cast<std::size_t>(j)];
      float f[kDetectionFloats] = {x.x0, x.y0, x.x1, x.y1, x.score};
      for (std::size_t l = 0; l < 5; ++l) f[5 + 2 * l] = x.landmarks[l].x, f[6 + 2 * l] = x.landmarks[l].y;
      std::memcpy(rec + static_cast<std::size_t>(j) * sizeof f, f, sizeof f);
    }
  }
  auto ticket = dev.emit(reply);
  if (!ticket) return ticket.status();
  a.reply.tickets.push_back(*ticket);
  if (o.plan_choices) a.reply.bytes = o.plan_choices(carried);
  return {};
}

}  // namespace

void add_faces_sim_op(runtime::SimulatedExecutor& ex, SimFacesOptions options) {
  auto o = std::make_shared<const SimFacesOptions>(std::move(options));
  ex.add_op(kOpFacesRun,
            [o](runtime::SimDevice& dev, const runtime::OpArgs& a) { return sim_run(dev, a, *o); });
  ex.add_op(kOpFacesDetect,
            [o](runtime::SimDevice& dev, const runtime::OpArgs& a) { return sim_detect(dev, a, *o); });
}

}  // namespace facetrace::faces::gpu

/// @file
/// The host-side halves of kOpFacesRun (faces_ops.h) that the parent and every handler share: resident names and
/// the input region's layout, the op arguments with their plan choices.
#include <cstdio>
#include <cstring>

#include "gpu/faces_ops.h"

namespace facetrace::faces::gpu {

std::string program_resident_name(std::uint64_t key) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "faces/%016llx/program", static_cast<unsigned long long>(key));
  return buf;
}

std::string const_resident_name(std::uint64_t key, std::size_t index) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "faces/%016llx/c%zu", static_cast<unsigned long long>(key), index);
  return buf;
}

InputLayout input_layout(std::uint64_t input_bytes, std::span<const std::uint64_t> inline_floats) {
  InputLayout l;
  l.table_offset = align_up(input_bytes);
  std::uint64_t at = align_up(l.table_offset + inline_floats.size() * sizeof(std::uint32_t));
  for (auto f : inline_floats) {
    l.blob_offsets.push_back(at);
    at = align_up(at + f * sizeof(float));
  }
  l.total = inline_floats.empty() ? input_bytes : at;
  return l;
}

Status read_op_args(std::span<const std::byte> args, std::size_t own_bytes, void* own,
                    std::span<const std::byte>& choices) {
  choices = {};
  if (args.size() < own_bytes)
    return invalid_argument("faces op args are " + std::to_string(args.size()) +
                            " bytes, expected at least " + std::to_string(own_bytes));
  std::memcpy(own, args.data(), own_bytes);
  FacesRunArgs run;
  std::memcpy(&run, args.data(), sizeof run);  // the first member of every faces op's args
  if ((run.flags & ~kRunFlagPlanChoices) != 0)
    return invalid_argument("faces op args: unknown flags " + std::to_string(run.flags));
  const std::span<const std::byte> rest = args.subspan(own_bytes);
  if ((run.flags & kRunFlagPlanChoices) == 0) {
    if (!rest.empty())
      return invalid_argument("faces op args are " + std::to_string(args.size()) + " bytes, expected " +
                              std::to_string(own_bytes));
    return {};
  }
  if (rest.size() > kMaxPlanChoiceBytes)
    return invalid_argument("faces op args: plan choices of " + std::to_string(rest.size()) +
                            " bytes (at most " + std::to_string(kMaxPlanChoiceBytes) + ")");
  choices = rest;
  return {};
}

Expected<ParsedInput> parse_input(const FacesRunArgs& args, std::span<const std::byte> in,
                                  std::span<const std::uint64_t> blob_floats) {
  if (args.input_bytes > in.size())
    return invalid_argument("faces_run: input region of " + std::to_string(in.size()) +
                            " bytes, the batch needs " + std::to_string(args.input_bytes));
  ParsedInput p;
  p.batch = in.first(static_cast<std::size_t>(args.input_bytes));
  p.inline_blobs.assign(blob_floats.size(), {});
  if (args.inline_count == 0) return p;
  if (args.inline_count > blob_floats.size())
    return invalid_argument("faces_run: " + std::to_string(args.inline_count) +
                            " inline constants, the model has " + std::to_string(blob_floats.size()));
  const std::uint64_t table = align_up(args.input_bytes);
  const std::uint64_t table_bytes = std::uint64_t{args.inline_count} * sizeof(std::uint32_t);
  if (table > in.size() || in.size() - table < table_bytes)
    return invalid_argument("faces_run: input region too short for the inline table");
  std::vector<std::uint32_t> index(args.inline_count);
  std::memcpy(index.data(), in.data() + table, table_bytes);
  std::vector<std::uint64_t> floats;
  for (std::size_t i = 0; i < index.size(); ++i) {
    if (index[i] >= blob_floats.size() || (i > 0 && index[i] <= index[i - 1]))
      return invalid_argument("faces_run: inline table entry " + std::to_string(i) + " (" +
                              std::to_string(index[i]) + ") out of range or not ascending");
    floats.push_back(blob_floats[index[i]]);
  }
  const InputLayout l = input_layout(args.input_bytes, floats);
  if (l.total > in.size())
    return invalid_argument("faces_run: input region of " + std::to_string(in.size()) +
                            " bytes, the inline "
                            "constants need " +
                            std::to_string(l.total));
  for (std::size_t i = 0; i < index.size(); ++i)
    p.inline_blobs[index[i]] = in.subspan(static_cast<std::size_t>(l.blob_offsets[i]),
                                          static_cast<std::size_t>(floats[i] * sizeof(float)));
  return p;
}

}  // namespace facetrace::faces::gpu

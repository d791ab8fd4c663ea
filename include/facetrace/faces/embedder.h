/// @file
/// Face embedders (docs/design/faces.md §7): the model table, preprocessing, unit-norm embeddings, cosine similarity.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "facetrace/core/status.h"
#include "facetrace/faces/detector.h"
#include "facetrace/core/image.h"
#include "facetrace/faces/net.h"

namespace facetrace::faces {

enum class ChannelOrder : std::uint8_t { kRgb, kBgr };

/// How a model wants its input and what it returns.
struct ModelInfo {
  std::string name;
  std::string sha256;      ///< empty for an unknown model
  std::int64_t bytes = 0;  ///< 0 for an unknown model
  int input = 112;         ///< square input side
  ChannelOrder order = ChannelOrder::kRgb;
  float mean[3] = {127.5f, 127.5f, 127.5f};
  float std[3] = {127.5f, 127.5f, 127.5f};
  int dim = 0;         ///< embedding length (0: taken from the model)
  float match = 0.0f;  ///< cosine threshold for "same person" (0: none)
};

namespace known {
/// The table entry for a file's sha256 (SFace 2021dec, AuraFace v1, MobileFaceNet foamliu); nullopt if unknown.
std::optional<ModelInfo> lookup(std::string_view sha256);
/// The default for unknown models: ArcFace style, 112² RGB, (x−127.5)/127.5.
ModelInfo arcface_default();
}  // namespace known

/// A loaded embedder. Immutable; `embed` is thread-safe and deterministic.
class Embedder {
 public:
  /// Loads a model, identifies it by sha256 (unknown → ArcFace defaults) and checks input [1,3,S,S] with
  /// S in 16..4096 and exactly one output of 1..4096 values. kIo, kInvalidArgument, kNotSupported.
  static Expected<Embedder> load(const std::string& path, int threads = 0);
  static Expected<Embedder> create(std::span<const std::uint8_t> bytes, int threads = 0);

  const ModelInfo& info() const { return info_; }
  const Net& net() const { return net_; }

  /// Planar [1,3,S,S] input for an aligned S×S RGB face, per the model's preprocessing.
  Expected<std::vector<float>> preprocess(const core::Image& aligned) const;
  /// Unit-norm embedding (norm in f64) of an aligned S×S RGB face. kInvalidArgument for a wrong size or an
  /// all-zero output ("all-zero face").
  Expected<std::vector<float>> embed(const core::Image& aligned) const;
  /// Aligns a detection (landmarks) to the template and embeds it.
  Expected<std::vector<float>> embed_face(const core::Image& photo, const Detection& face) const;
  /// Embeddings of many aligned faces, in order, in one Net::run_batch; each equals embed(aligned[i]) exactly. A
  /// face of the wrong size (or an all-zero one) gets its own error and the others are still embedded; a failed
  /// run gives its error to every face in it.
  std::vector<Expected<std::vector<float>>> embed_batch(std::span<const core::Image> aligned) const;
  /// Aligns every detection of `photo` and embeds them in one run; each equals embed_face(photo, faces[i]).
  std::vector<Expected<std::vector<float>>> embed_faces(const core::Image& photo,
                                                        std::span<const Detection> faces) const;

 private:
  Embedder(Net net, ModelInfo info) : net_(std::move(net)), info_(std::move(info)) {}
  Net net_;
  ModelInfo info_;
};

/// Dot product of two unit vectors; nullopt when lengths differ, are zero, or a value is non-finite.
std::optional<float> cosine_similarity(std::span<const float> a, std::span<const float> b);

}  // namespace facetrace::faces

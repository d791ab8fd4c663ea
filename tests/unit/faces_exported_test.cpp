// The face networks exported with PyTorch's own ONNX exporter (tests/models/README.md): each committed model loads
// with Net::load and its CPU outputs at batch 1 (Net::run) and batch 4 (Net::run_batch) are within
// 1e-4 + 1e-4·max|ref| of PyTorch's (issue 11; docs/design/faces.md §2 lists the operators they use).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "facetrace/faces/net.h"
#include "../models/exported_models.h"

namespace facetrace::faces {
namespace {

using ::facetrace::testing::check_exported_case;
using ::facetrace::testing::exported_model_names;
using ::facetrace::testing::ExportedModel;
using ::facetrace::testing::load_exported_model;

const std::vector<std::string>& kCommitted = ::facetrace::testing::kCommittedExportedModels;

TEST(FacesExported, EveryCommittedModelIsPresent) {
  const auto names = exported_model_names();
  for (const auto& n : kCommitted)
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n << " missing from tests/models";
}

class FacesExported : public ::testing::TestWithParam<std::string> {};

// Every file of the model (opset 17 and, for some, opset 11: make_models.py EXTRA_OPSETS) against the same references.
void check_model_on_cpu(const ExportedModel& m) {
  for (const auto& f : m.files) {
    SCOPED_TRACE(m.name + " opset " + std::to_string(f.opset));
    auto net = Net::load(f.path);
    ASSERT_TRUE(net) << m.name << " (opset " << f.opset
                     << "): Net::load refused it: " << net.status().to_string();
    for (const auto& c : m.cases) EXPECT_TRUE(check_exported_case(*net, m, c)) << "opset " << f.opset;
  }
}

TEST_P(FacesExported, CpuMatchesPyTorch) {
  ExportedModel m;
  ASSERT_TRUE(load_exported_model(GetParam(), m));
  const std::vector<std::string> with_opset11 = {"iresnet18_w8", "retinaface_mnet025", "scrfd_small",
                                                 "yunet_style"};
  const bool two = std::find(with_opset11.begin(), with_opset11.end(), m.name) != with_opset11.end();
  EXPECT_EQ(m.files.size(), two ? 2u : 1u) << m.name << ": the manifest lists another set of opsets";
  check_model_on_cpu(m);
}

// Models generated on demand (`make_models.py --only iresnet100 --out DIR`): FACETRACE_EXPORTED_MODELS=DIR runs every
// model folder in DIR through the same check; skipped when the variable is unset.
TEST(FacesExported, OnDemandModelsFromEnvironment) {
  const char* root = std::getenv("FACETRACE_EXPORTED_MODELS");
  if (root == nullptr || *root == '\0') GTEST_SKIP() << "FACETRACE_EXPORTED_MODELS is not set";
  const auto names = exported_model_names(root);
  ASSERT_FALSE(names.empty()) << "no model folder (with manifest.json) in " << root;
  for (const auto& n : names) {
    SCOPED_TRACE(n);
    ExportedModel m;
    ASSERT_TRUE(load_exported_model(n, m, root));
    check_model_on_cpu(m);
  }
}

INSTANTIATE_TEST_SUITE_P(Committed, FacesExported, ::testing::ValuesIn(kCommitted),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace facetrace::faces

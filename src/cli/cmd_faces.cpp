/// @file
/// `facetrace faces` (placeholder until its area lands).
#include "cli/commands.h"

namespace facetrace::cli {

void register_faces(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("faces", "not built yet");
  cmd->callback([&exit_code] { exit_code = 1; });
}

}  // namespace facetrace::cli

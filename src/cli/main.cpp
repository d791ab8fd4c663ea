/// @file
/// The `facetrace` command-line tool: dispatches to the subcommands of each area.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

#include "commands.h"
#include "exit_codes.h"
#include "facetrace/core/logging.h"

int main(int argc, char** argv) {
  facetrace::core::init_logging_from_env();
  CLI::App app{"facetrace: spectral gem path tracer, face networks and GPU runtime"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "facetrace 0.1");
  int exit_code = facetrace::cli::kExitOk;
#ifdef FT_HAVE_TRACER
  facetrace::cli::register_render(app, exit_code);
#endif
#ifdef FT_HAVE_RUNTIME
  facetrace::cli::register_info(app, exit_code);
#endif
#ifdef FT_HAVE_FARM
  facetrace::cli::register_worker(app, exit_code);
  facetrace::cli::register_merge(app, exit_code);
#endif
#ifdef FT_HAVE_FACES
  facetrace::cli::register_faces(app, exit_code);
#endif
#ifdef FT_HAVE_RUNTIME
  facetrace::cli::add_gpu_device_option(app);  // after the subcommands: each of them takes it too
#endif
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help / --version exit 0; every usage error is the one bad-input code (exit_codes.h), not CLI11's own
    return app.exit(e) == 0 ? facetrace::cli::kExitOk : facetrace::cli::kExitBadInput;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "facetrace: %s\n", e.what());
    return facetrace::cli::kExitFailure;
  }
  return exit_code;
}

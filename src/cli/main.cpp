/// @file
/// The `facetrace` command-line tool: dispatches to the subcommands of each area. Every command-line error
/// exits kExitBadInput (docs/cli.md "Exit codes"); the codes are listed at the end of every `--help`.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

#include "commands.h"
#include "exit_codes.h"
#include "facetrace/core/logging.h"
#include "facetrace/core/text.h"
#include "version.h"

int main(int argc, char** argv) {
  namespace cli = facetrace::cli;
  facetrace::core::init_logging_from_env();
  CLI::App app{"facetrace: spectral gem path tracer, face networks and GPU runtime"};
  app.require_subcommand(1);
  app.footer(cli::exit_code_help());  // before the subcommands: they copy it into their own --help
  app.set_version_flag(
      "--version", [] { return cli::version_text(); },
      "print the version, git commit, CUDA runtime and GPU architectures, and exit");
  int exit_code = cli::kExitOk;
#ifdef FT_HAVE_TRACER
  cli::register_render(app, exit_code);
#endif
#ifdef FT_HAVE_RUNTIME
  cli::register_info(app, exit_code);
#endif
#ifdef FT_HAVE_FARM
  cli::register_worker(app, exit_code);
  cli::register_merge(app, exit_code);
#endif
#ifdef FT_HAVE_FACES
  cli::register_faces(app, exit_code);
#endif
#ifdef FT_HAVE_RUNTIME
  cli::add_gpu_device_option(app);  // after the subcommands: each of them takes it too
#endif
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);  // 0, help on stdout
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // Every other CLI11 error (unknown flag, missing or extra argument, bad value, …) is bad usage: the message
    // on stderr, then the one bad-input code, never CLI11's own numbers (106, 109, …). CLI11 quotes the bad
    // value whole and raw: printed through core::printable (cut, escaped; docs/limits.md).
    std::fprintf(stderr, "%s\nRun with --help for more information.\n",
                 facetrace::core::printable(e.what(), 4 * facetrace::core::kEchoBytes).c_str());
    return cli::kExitBadInput;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "facetrace: %s\n", facetrace::core::printable(e.what()).c_str());
    return cli::kExitFailure;
  }
  return exit_code;
}

/// @file
/// Untrusted text in messages: the one helper that every error, warning or note quoting input (scene and job
/// fields, ONNX names, CLI values, file names) passes it through, so that a message stays short, cannot drive the
/// terminal and is valid UTF-8 (a `--json` record holding it stays valid JSON). docs/limits.md, "Echoed input".
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace facetrace::core {

/// Bytes of an untrusted value a message quotes before it is cut (docs/limits.md, "Echoed input").
inline constexpr std::size_t kEchoBytes = 200;

/// `text` made safe to quote in a message. At most `max_bytes` bytes of it are shown (never half of a UTF-8
/// character); a longer text ends in "… (N bytes)", N its full size. Inside what is shown:
/// - a backslash becomes "\\"; tab, newline and carriage return "\t", "\n", "\r";
/// - every other control byte (0x00–0x1f, 0x7f; ESC too) and every byte that is not part of a well-formed
///   UTF-8 character (stray continuation bytes, overlong forms, surrogates, past U+10FFFF, a cut sequence)
///   becomes "\xNN" (two lowercase hex digits);
/// - the C1 controls U+0080–U+009F, the bidirectional overrides and isolates (U+200E, U+200F, U+202A–U+202E,
///   U+2066–U+2069) and the line and paragraph separators (U+2028, U+2029) become "\u{XXXX}";
/// - everything else (printable ASCII, well-formed UTF-8) is kept as it is.
/// The result is valid UTF-8 with no control character; a text that needs none of this is returned unchanged.
/// Thread-safe (no state).
std::string printable(std::string_view text, std::size_t max_bytes = kEchoBytes);

/// printable() in single quotes: 'text'.
std::string quoted(std::string_view text, std::size_t max_bytes = kEchoBytes);

/// Whether `text` is well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing past U+10FFFF).
bool is_valid_utf8(std::string_view text) noexcept;

}  // namespace facetrace::core

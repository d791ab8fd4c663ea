/// @file
/// printable(): one pass over the bytes, decoding UTF-8 (RFC 3629) to tell well-formed characters from stray
/// bytes; docs/limits.md, "Echoed input".
#include "facetrace/core/text.h"

#include <cstdint>
#include <cstdio>

namespace facetrace::core {
namespace {

/// The length (1–4) of the well-formed UTF-8 character at text[i] and its code point, or 0 when the bytes there
/// are not one (a stray continuation byte, an overlong form, a surrogate, past U+10FFFF, cut short).
std::size_t utf8_char(std::string_view text, std::size_t i, std::uint32_t* cp) noexcept {
  const auto b0 = static_cast<unsigned char>(text[i]);
  if (b0 < 0x80) {
    *cp = b0;
    return 1;
  }
  std::size_t len = 0;
  std::uint32_t c = 0, min = 0;
  if (b0 >= 0xc2 && b0 <= 0xdf) len = 2, c = b0 & 0x1fu, min = 0x80;
  else if (b0 >= 0xe0 && b0 <= 0xef) len = 3, c = b0 & 0x0fu, min = 0x800;
  else if (b0 >= 0xf0 && b0 <= 0xf4) len = 4, c = b0 & 0x07u, min = 0x10000;
  else return 0;
  if (text.size() - i < len) return 0;
  for (std::size_t k = 1; k < len; ++k) {
    const auto b = static_cast<unsigned char>(text[i + k]);
    if ((b & 0xc0u) != 0x80u) return 0;
    c = (c << 6) | (b & 0x3fu);
  }
  if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)) return 0;
  *cp = c;
  return len;
}

/// Code points above U+007F that are shown as "\u{XXXX}": C1 controls, bidirectional controls, separators.
bool escaped_code_point(std::uint32_t c) noexcept {
  return (c >= 0x80 && c <= 0x9f) || c == 0x200e || c == 0x200f || (c >= 0x202a && c <= 0x202e) ||
         (c >= 0x2066 && c <= 0x2069) || c == 0x2028 || c == 0x2029;
}

void append_hex_byte(std::string& out, unsigned char b) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(b));
  out += buf;
}

}  // namespace

bool is_valid_utf8(std::string_view text) noexcept {
  std::uint32_t cp = 0;
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t n = utf8_char(text, i, &cp);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string printable(std::string_view text, std::size_t max_bytes) {
  // The part shown: at most max_bytes, backed off so that a well-formed character is never split.
  std::size_t end = text.size() <= max_bytes ? text.size() : max_bytes;
  std::string out;
  out.reserve(end + 16);
  std::uint32_t cp = 0;
  std::size_t i = 0;
  while (i < end) {
    const std::size_t n = utf8_char(text, i, &cp);
    if (n > 1 && i + n > end) break;  // a character across the cut: leave it out whole
    const auto b = static_cast<unsigned char>(text[i]);
    if (n == 0) {
      append_hex_byte(out, b);
      ++i;
      continue;
    }
    if (n == 1) {
      if (b == '\\') out += "\\\\";
      else if (b == '\t') out += "\\t";
      else if (b == '\n') out += "\\n";
      else if (b == '\r') out += "\\r";
      else if (b < 0x20 || b == 0x7f) append_hex_byte(out, b);
      else out.push_back(static_cast<char>(b));
    } else if (escaped_code_point(cp)) {
      char buf[16];
      std::snprintf(buf, sizeof buf, "\\u{%04x}", static_cast<unsigned>(cp));
      out += buf;
    } else {
      out.append(text.substr(i, n));
    }
    i += n;
  }
  if (i < text.size()) out += "\xe2\x80\xa6 (" + std::to_string(text.size()) + " bytes)";  // "… (N bytes)"
  return out;
}

std::string quoted(std::string_view text, std::size_t max_bytes) {
  std::string out = "'";
  out += printable(text, max_bytes);
  out += '\'';
  return out;
}

}  // namespace facetrace::core

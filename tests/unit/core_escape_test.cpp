/// @file
/// core/text.h: printable() cuts and escapes untrusted text (docs/limits.md, "Echoed input"); expected strings
/// are written out by hand from the rules in text.h, and the validity checks use an independent byte-level
/// UTF-8 reader (naive_valid_utf8) rather than the code under test.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "facetrace/core/text.h"

namespace facetrace {
namespace {

using core::printable;

// Independent UTF-8 check, written from the RFC 3629 table of well-formed byte sequences.
bool naive_valid_utf8(const std::string& s) {
  std::size_t i = 0;
  auto in = [&](std::size_t k, int lo, int hi) {
    if (i + k >= s.size()) return false;
    const int b = static_cast<unsigned char>(s[i + k]);
    return b >= lo && b <= hi;
  };
  while (i < s.size()) {
    const int b = static_cast<unsigned char>(s[i]);
    if (b <= 0x7f) i += 1;
    else if (b >= 0xc2 && b <= 0xdf && in(1, 0x80, 0xbf)) i += 2;
    else if (b == 0xe0 && in(1, 0xa0, 0xbf) && in(2, 0x80, 0xbf)) i += 3;
    else if (((b >= 0xe1 && b <= 0xec) || b == 0xee || b == 0xef) && in(1, 0x80, 0xbf) && in(2, 0x80, 0xbf))
      i += 3;
    else if (b == 0xed && in(1, 0x80, 0x9f) && in(2, 0x80, 0xbf)) i += 3;
    else if (b == 0xf0 && in(1, 0x90, 0xbf) && in(2, 0x80, 0xbf) && in(3, 0x80, 0xbf)) i += 4;
    else if (b >= 0xf1 && b <= 0xf3 && in(1, 0x80, 0xbf) && in(2, 0x80, 0xbf) && in(3, 0x80, 0xbf)) i += 4;
    else if (b == 0xf4 && in(1, 0x80, 0x8f) && in(2, 0x80, 0xbf) && in(3, 0x80, 0xbf)) i += 4;
    else return false;
  }
  return true;
}

bool has_control_byte(const std::string& s) {
  for (unsigned char c : s)
    if (c < 0x20 || c == 0x7f) return true;
  return false;
}

TEST(Printable, keeps_plain_text_and_utf8_unchanged) {
  EXPECT_EQ(printable("diamond.json"), "diamond.json");
  EXPECT_EQ(printable(""), "");
  EXPECT_EQ(printable("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x92\x8e"), "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x92\x8e");
}

TEST(Printable, escapes_terminal_escape_sequences_and_control_bytes) {
  EXPECT_EQ(printable("\x1b[31mred\x1b[0m"), "\\x1b[31mred\\x1b[0m");
  EXPECT_EQ(printable("a\tb\nc\rd"), "a\\tb\\nc\\rd");
  EXPECT_EQ(printable(std::string("nul\0bel\a del\x7f", 13)), "nul\\x00bel\\x07 del\\x7f");
  EXPECT_EQ(printable("back\\slash"), "back\\\\slash");  // so that "\x1b" typed literally stays apart
  EXPECT_EQ(printable("\\x1b"), "\\\\x1b");
}

TEST(Printable, escapes_c1_controls_and_bidirectional_overrides) {
  EXPECT_EQ(printable("\xc2\x9b" "2J"), "\\u{009b}2J");          // U+009B CSI
  EXPECT_EQ(printable("abc\xe2\x80\xae" "fed"), "abc\\u{202e}fed");  // U+202E RIGHT-TO-LEFT OVERRIDE
  EXPECT_EQ(printable("\xe2\x81\xa6x\xe2\x81\xa9"), "\\u{2066}x\\u{2069}");
  EXPECT_EQ(printable("a\xe2\x80\xa8" "b"), "a\\u{2028}b");
  EXPECT_EQ(printable("\xc2\xa0"), "\xc2\xa0");  // U+00A0 is printable: kept
}

TEST(Printable, shows_each_byte_of_invalid_utf8_as_hex) {
  EXPECT_EQ(printable("\xff\xfe"), "\\xff\\xfe");
  EXPECT_EQ(printable("a\x80z"), "a\\x80z");                  // stray continuation byte
  EXPECT_EQ(printable("\xc0\xaf"), "\\xc0\\xaf");             // overlong '/'
  EXPECT_EQ(printable("\xed\xa0\x80"), "\\xed\\xa0\\x80");    // a UTF-16 surrogate
  EXPECT_EQ(printable("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");  // past U+10FFFF
  EXPECT_EQ(printable("ok\xe2\x82"), "ok\\xe2\\x82");        // cut short at the end
  EXPECT_EQ(printable("\xe2\x82x"), "\\xe2\\x82x");
}

TEST(Printable, cuts_long_text_and_names_its_size) {
  const std::string big(10u << 20, 'A');  // a 10 MB field
  const std::string p = printable(big);
  EXPECT_EQ(p, std::string(200, 'A') + "\xe2\x80\xa6 (10485760 bytes)");
  EXPECT_EQ(printable(std::string(200, 'b')), std::string(200, 'b'));  // exactly the limit: not cut
  EXPECT_EQ(printable("abcdef", 3), "abc\xe2\x80\xa6 (6 bytes)");
  EXPECT_EQ(printable("abcdef", 0), "\xe2\x80\xa6 (6 bytes)");
}

TEST(Printable, never_splits_a_character_at_the_cut) {
  // "é" is two bytes; a cut after 3 bytes of "aéé" would split the second one: it is left out whole.
  EXPECT_EQ(printable("a\xc3\xa9\xc3\xa9", 4), "a\xc3\xa9\xe2\x80\xa6 (5 bytes)");
  EXPECT_EQ(printable("\xf0\x9f\x92\x8e!", 2), "\xe2\x80\xa6 (5 bytes)");
  // The limit counts input bytes: escaping may make the shown part longer, never the input taken.
  EXPECT_EQ(printable("\x1b\x1b\x1b", 2), "\\x1b\\x1b\xe2\x80\xa6 (3 bytes)");
}

TEST(Printable, result_is_valid_utf8_without_control_bytes_for_every_byte_pair) {
  // Every two-byte input plus a trailing continuation byte: the output must be clean whatever came in.
  for (int a = 0; a < 256; ++a)
    for (int b = 0; b < 256; ++b) {
      const std::string in{static_cast<char>(a), static_cast<char>(b), '\x80', '\xe2', '\x80', '\xae'};
      const std::string out = printable(in);
      ASSERT_TRUE(naive_valid_utf8(out)) << a << "," << b;
      ASSERT_FALSE(has_control_byte(out)) << a << "," << b;
      ASSERT_EQ(out.find("\xe2\x80\xae"), std::string::npos);
    }
}

TEST(Quoted, puts_the_printable_form_in_single_quotes) {
  EXPECT_EQ(core::quoted("a\x1b"), "'a\\x1b'");
  EXPECT_EQ(core::quoted("abcd", 2), "'ab\xe2\x80\xa6 (4 bytes)'");
}

TEST(IsValidUtf8, agrees_with_an_independent_reader) {
  for (int a = 0; a < 256; ++a)
    for (int b = 0; b < 256; ++b)
      for (int c : {0x41, 0x80, 0x9f, 0xa0, 0xbf, 0xc0}) {
        const std::string in{static_cast<char>(a), static_cast<char>(b), static_cast<char>(c)};
        ASSERT_EQ(core::is_valid_utf8(in), naive_valid_utf8(in)) << a << "," << b << "," << c;
      }
  EXPECT_TRUE(core::is_valid_utf8("\xf0\x9f\x92\x8e"));
  EXPECT_FALSE(core::is_valid_utf8("\xf0\x9f\x92"));
}

}  // namespace
}  // namespace facetrace

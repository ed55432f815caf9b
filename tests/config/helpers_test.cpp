// The loader's building blocks: strict number parsing, did-you-mean, raw text checks, arithmetic.
#include <catch2/catch.hpp>

#include "engine/config/arith.h"
#include "engine/config/loader.h"
#include "engine/config/scalar_parse.h"
#include "engine/config/suggest.h"
#include "engine/config/text.h"
#include "engine/config/text_checks.h"

namespace ptrain::config {

TEST_CASE("parse_integer takes only decimal integers and reports overflow", "[config][helpers]") {
  CHECK(parse_integer("42").value == 42);
  CHECK(parse_integer("+7").value == 7);
  CHECK(parse_integer("-3").value == -3);
  CHECK(parse_integer("9223372036854775807").status == ParseStatus::Ok);
  CHECK(parse_integer("9223372036854775808").status == ParseStatus::OutOfRange);
  CHECK(parse_integer("-9223372036854775809").status == ParseStatus::OutOfRange);
  for (const char* text : {"", "+", "-", "2.0", "1e3", "0x10", "1_000", " 1", "1 ", "one", "++1"}) {
    CAPTURE(text);
    CHECK(parse_integer(text).status == ParseStatus::NotANumber);
  }
}

TEST_CASE("parse_float takes YAML decimal floats, refuses inf/nan and partial matches", "[config][helpers]") {
  CHECK(parse_float("3.0e-4").value == 3.0e-4);
  CHECK(parse_float("1E-8").value == 1e-8);
  CHECK(parse_float(".5").value == 0.5);
  CHECK(parse_float("5.").value == 5.0);
  CHECK(parse_float("+2").value == 2.0);
  CHECK(parse_float("-0.25").value == -0.25);
  CHECK(parse_float("1e999").status == ParseStatus::OutOfRange);
  for (const char* text : {".inf", "-.inf", ".NaN", "+.Inf"}) {
    CAPTURE(text);
    CHECK(parse_float(text).status == ParseStatus::NotFinite);
  }
  for (const char* text : {"", ".", "e5", "1e", "1.5abc", "inf", "nan", "infinity", "0x1p3", "1,5", "- 1"}) {
    CAPTURE(text);
    CHECK(parse_float(text).status == ParseStatus::NotANumber);
  }
  CHECK(is_whole_int64(2.0));
  CHECK_FALSE(is_whole_int64(2.5));
  CHECK_FALSE(is_whole_int64(1e300));
}

TEST_CASE("edit distance counts swaps as one edit and ignores case", "[config][helpers]") {
  CHECK(edit_distance("hiden", "hidden") == 1);
  CHECK(edit_distance("haeds", "heads") == 1);
  CHECK(edit_distance("BF16", "bf16") == 0);
  CHECK(edit_distance("", "tp") == 2);
  CHECK(edit_distance("kitten", "sitting") == 3);
}

TEST_CASE("closest_match suggests only plausible typos", "[config][helpers]") {
  const std::vector<std::string> keys = {"tp", "pp", "cp", "ep", "dp", "order", "sequence_parallel", "zero"};
  CHECK(closest_match("sequence_paralel", keys) == "sequence_parallel");
  CHECK(closest_match("ordr", keys) == "order");
  CHECK(closest_match("tensor_parallel", keys) == std::nullopt);
  CHECK(closest_match("", keys) == std::nullopt);
  CHECK(closest_match(std::string(1000, 'x'), keys) == std::nullopt);
}

TEST_CASE("find_text_problem locates the first bad byte", "[config][helpers]") {
  CHECK_FALSE(find_text_problem("name: tiny\r\n\tmodel: {}\n"));
  auto nul = find_text_problem(std::string("ab\ncd\0", 6));
  REQUIRE(nul);
  CHECK(std::pair{nul->line, nul->column} == std::pair{2, 3});
  auto utf8 = find_text_problem("\xc3\xbc\xc3");  // a whole character, then a cut one
  REQUIRE(utf8);
  CHECK(std::pair{utf8->line, utf8->column} == std::pair{1, 2});
  CHECK_FALSE(find_text_problem(std::string(kMaxJobBytes, ' ')));
  CHECK(find_text_problem(std::string(kMaxJobBytes + 1, ' ')));
}

TEST_CASE("arithmetic helpers saturate and suggest", "[config][helpers]") {
  CHECK(saturating_product({2, 3, 4}) == 24);
  CHECK(saturating_product({2147483647, 2147483647, 2147483647}) == INT64_MAX);
  CHECK(round_up(50257, 8) == 50264);
  CHECK(round_up(16, 8) == 16);
  CHECK(divisors(12) == std::vector<std::int64_t>{1, 2, 3, 4, 6, 12});
  CHECK(divisors(1) == std::vector<std::int64_t>{1});
  CHECK(nearby_multiples(1000, 12) == "996 or 1008");
  CHECK(nearby_multiples(3, 8) == "8");
  CHECK(list_numbers({1, 2, 3}, 2) == "1, 2, ...");
  CHECK(spelled_product({2, 4, 1}) == "2*4*1 = 8");
}

TEST_CASE("text helpers", "[config][helpers]") {
  CHECK(cat("tp = ", 8, ", lr = ", 3e-4, ", ", std::string("x"), 'y') == "tp = 8, lr = 0.0003, xy");
  CHECK(format_number(1e-8) == "1e-08");
  CHECK(printable("a\x01\n") == "a\\x01\\x0a");
  CHECK(printable("abcdef", 3) == "abc...");
  CHECK(printable("\xc3\xbc\xc3\xbc", 1) == "\xc3\xbc...");  // never cuts a character in half
  CHECK(join({"a", "b"}, " | ") == "a | b");
}

}  // namespace ptrain::config

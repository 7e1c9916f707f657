// The one set of layout/pairing/direction/backend names: *_name prints what parse_* reads, in C++ and the C API.
#include <gtest/gtest.h>

#include <string>

#include "rotary/rotary.h"
#include "rotary/rotary_c.h"

namespace rotary {
namespace {

TEST(Names, EveryPrintedNameParsesBack) {
  for (Layout l : {Layout::kBSHD, Layout::kBHSD, Layout::kTHD}) EXPECT_EQ(parse_layout(layout_name(l)), l);
  for (Pairing p : {Pairing::kHalfSplit, Pairing::kInterleaved}) EXPECT_EQ(parse_pairing(pairing_name(p)), p);
  for (Direction d : {Direction::kForward, Direction::kInverse}) EXPECT_EQ(parse_direction(direction_name(d)), d);
  for (Backend b : {Backend::kAuto, Backend::kCpu, Backend::kReference, Backend::kCuda})
    EXPECT_EQ(parse_backend(backend_name(b)), b);
  EXPECT_STREQ(direction_name(Direction::kInverse), "inverse");  // one word for the backward rotation
}

TEST(Names, AliasesAndErrors) {
  EXPECT_EQ(parse_pairing("neox"), Pairing::kHalfSplit);
  EXPECT_EQ(parse_pairing("half_split"), Pairing::kHalfSplit);
  EXPECT_EQ(parse_pairing("gptj"), Pairing::kInterleaved);
  try {
    (void)parse_pairing("zigzag", "--pairing");
    ADD_FAILURE() << "zigzag accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), Error::Kind::kInvalidArgument);
    EXPECT_STREQ(e.what(), "[rotary] --pairing must be half or interleaved, got \"zigzag\"");
  }
  EXPECT_THROW((void)parse_layout("BSHD"), Error);  // names are lower case, as printed
  EXPECT_THROW((void)parse_direction("backward"), Error);
  EXPECT_THROW((void)parse_backend(""), Error);
}

TEST(Names, AParserNamesTheEntryPointItServes) {
  // The parsers said "[rotary] ..." whoever called them; the C API and the Python bindings reworded the prefix.
  const auto message = [](auto parse) -> std::string {
    try {
      parse();
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), Error::Kind::kInvalidArgument);
      return e.what();
    }
    return "accepted";
  };
  EXPECT_EQ(message([] { (void)parse_pairing("zigzag", "pairing", "my_entry"); }),
            "[my_entry] pairing must be half or interleaved, got \"zigzag\"");
  EXPECT_EQ(message([] { (void)parse_pairing("zigzag"); }),
            "[rotary] pairing must be half or interleaved, got \"zigzag\"");
  EXPECT_EQ(message([] { (void)parse_layout("bsdh", "layout", "my_entry"); }),
            "[my_entry] layout must be bshd, bhsd or thd, got \"bsdh\"");
  EXPECT_EQ(message([] { (void)parse_direction("backward", "direction", "my_entry"); }),
            "[my_entry] direction must be forward or inverse, got \"backward\"");
  EXPECT_EQ(message([] { (void)parse_backend("gpu", "backend", "my_entry"); }),
            "[my_entry] backend must be auto, cpu, reference or cuda, got \"gpu\"");
  EXPECT_EQ(message([] { (void)parse_cache_layout("paged", "cache_layout", "my_entry"); }),
            "[my_entry] cache_layout must be nhd, hnd, bshd or bhsd, got \"paged\"");
  EXPECT_EQ(message([] { (void)parse_cache_layout("paged"); }),
            "[rotary] cache_layout must be nhd, hnd, bshd or bhsd, got \"paged\"");
}

TEST(Names, TheCApiReadsTheSameNames) {
  int32_t v = -1;
  const struct {
    rotary_status_t (*parse)(const char*, int32_t*);
    const char* name;
    int32_t want;
  } cases[] = {{rotary_layout_from_name, "thd", ROTARY_LAYOUT_THD},
               {rotary_pairing_from_name, "neox", ROTARY_PAIRING_HALF},
               {rotary_direction_from_name, "inverse", ROTARY_DIRECTION_INVERSE},
               {rotary_backend_from_name, "reference", ROTARY_BACKEND_REFERENCE}};
  for (const auto& c : cases) {
    ASSERT_EQ(c.parse(c.name, &v), ROTARY_OK) << c.name << ": " << rotary_last_error();
    EXPECT_EQ(v, c.want) << c.name;
  }
  rotary_layout_t l = ROTARY_LAYOUT_THD;
  EXPECT_EQ(rotary_layout_from_name("bsdh", &l), ROTARY_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(rotary_last_error(), "[rotary_layout_from_name] layout must be bshd, bhsd or thd, got \"bsdh\"");
  EXPECT_EQ(l, ROTARY_LAYOUT_THD);  // untouched on error
  EXPECT_EQ(rotary_backend_from_name(nullptr, &v), ROTARY_ERROR_INVALID_ARGUMENT);
}

}  // namespace
}  // namespace rotary

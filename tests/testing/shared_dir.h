// Locating ../shared (models, vocabularies, goldens) for tests. The data is read in place, never
// copied into the repository. Tests that need it call STRATA_REQUIRE_SHARED(path) which skips the
// test with a visible message when the data is absent.
#pragma once

#include <gtest/gtest.h>

#include <string>

namespace strata::testing {

// The shared directory: $STRATA_SHARED_DIR, else the path configured at build time, else
// /work/shared. Empty string if none exists.
std::string SharedDir();
// SharedDir() + "/" + rel, or "" when the shared dir or the file is missing.
std::string SharedPath(const std::string& rel);

}  // namespace strata::testing

// Skips the current test (visibly) if `rel` is not present under the shared directory.
#define STRATA_REQUIRE_SHARED(var, rel)                   \
  std::string var = ::strata::testing::SharedPath(rel);   \
  if (var.empty())                                        \
  GTEST_SKIP() << "shared test data not found: " << (rel) \
               << " (set STRATA_SHARED_DIR to the shared/ directory)"

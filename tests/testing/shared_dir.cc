#include "testing/shared_dir.h"

#include <cstdlib>
#include <filesystem>

namespace strata::testing {

std::string SharedDir() {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (const char* env = std::getenv("STRATA_SHARED_DIR"); env && *env && fs::is_directory(env, ec))
    return env;
  if (fs::is_directory(STRATA_SHARED_DIR_DEFAULT, ec)) return STRATA_SHARED_DIR_DEFAULT;
  if (fs::is_directory("/work/shared", ec)) return "/work/shared";
  return "";
}

std::string SharedPath(const std::string& rel) {
  std::string dir = SharedDir();
  if (dir.empty()) return "";
  std::string p = dir + "/" + rel;
  std::error_code ec;
  return std::filesystem::exists(p, ec) ? p : "";
}

}  // namespace strata::testing

#include "control/up_state.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>

namespace strata::control::up {

ChildMap ChildrenByName(const Supervisor& sup) {
  ChildMap children;
  for (ChildStatus& c : sup.Children()) children.emplace(c.name, std::move(c));
  return children;
}

bool IsReady(const ChildMap& children, const std::string& name) {
  auto it = children.find(name);
  return it != children.end() && it->second.state == ChildState::kReady;
}

Status WriteFileAtomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return Status::IoError("cannot write " + tmp);
    f << text;
    if (!f.flush()) return Status::IoError("cannot write " + tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return Status::IoError("cannot rename " + tmp + ": " + ec.message());
  return Status::Ok();
}

std::string Context::StatusUrl() const { return fmt::format("http://127.0.0.1:{}", status_port); }

std::string Context::PrometheusUrl() const {
  return prom_port > 0 ? fmt::format("http://127.0.0.1:{}", prom_port) : "";
}

}  // namespace strata::control::up

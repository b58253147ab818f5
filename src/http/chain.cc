#include "http/chain.h"

#include <fmt/format.h>

#include "http/auth.h"
#include "http/openai_error.h"

namespace strata::http {

using nlohmann::json;

HttpResponse Readiness::Probe() const {
  if (draining()) return ErrorResponse(503, "draining");
  if (!ready()) return ErrorResponse(503, "loading");
  HttpResponse r;
  r.body = R"({"status":"ready"})";
  return r;
}

Step RequireBearer(std::vector<std::string> keys) {
  return [keys = std::move(keys)](Exchange& ex) -> std::optional<HttpResponse> {
    if (!ex.route->auth || BearerKeyAccepted(ex.request.Header("authorization"), keys))
      return std::nullopt;
    HttpResponse r = ErrorResponse(401, "missing or invalid API key (Authorization: Bearer <key>)");
    r.headers.emplace_back("WWW-Authenticate", "Bearer");  // RFC 6750
    return r;
  };
}

Step RequireReady(const Readiness* r) {
  return [r](Exchange& ex) -> std::optional<HttpResponse> {
    if (!ex.route->ready) return std::nullopt;
    if (r->draining()) return ErrorResponse(503, "the server is shutting down");
    if (!r->ready()) return ErrorResponse(503, "the server is loading");
    return std::nullopt;
  };
}

bool JsonNestingExceeds(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return true;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return false;
}

Step ParseJsonBody() {
  return [](Exchange& ex) -> std::optional<HttpResponse> {
    if (!ex.route->json_body) return std::nullopt;
    if (JsonNestingExceeds(ex.request.body, kMaxJsonDepth))
      return ErrorResponse(
          400, fmt::format("body: nested deeper than {} arrays/objects", kMaxJsonDepth), "body");
    ex.body = json::parse(ex.request.body, nullptr, /*allow_exceptions=*/false);
    if (ex.body.is_discarded()) return ErrorResponse(400, "body: not valid JSON", "body");
    if (!ex.body.is_object()) return ErrorResponse(400, "body: must be a JSON object", "body");
    return std::nullopt;
  };
}

Step RequireModel(std::string served) {
  return [served = std::move(served)](Exchange& ex) -> std::optional<HttpResponse> {
    if (!ex.route->json_body) return std::nullopt;
    auto it = ex.body.find("model");
    if (it == ex.body.end() || it->is_null()) return std::nullopt;
    if (!it->is_string()) return ErrorResponse(400, "model: must be a string", "model");
    const auto& m = it->get_ref<const std::string&>();  // json-access: is_string checked
    if (m.empty() || m == served) return std::nullopt;
    return ErrorResponse(
        404, fmt::format("model '{}' does not exist (this server serves '{}')", m, served),
        "model");
  };
}

const Route* Chain::Find(std::string_view path) const {
  for (const Route& r : routes_) {
    if (!r.prefix && path == r.path) return &r;
    if (r.prefix && path.size() > r.path.size() && path.substr(0, r.path.size()) == r.path)
      return &r;
  }
  return nullptr;
}

HttpResponse Chain::Run(Exchange& ex) const {
  const HttpRequest& req = ex.request;
  ex.route = Find(req.path);
  if (ex.route == nullptr)
    return ErrorResponse(404, fmt::format("no route for {} {}", req.method, req.path));
  if (req.method != ex.route->method)
    return ErrorResponse(
        405, fmt::format("{} {} is not supported; use {}", req.method, req.path, ex.route->method));
  for (const Step& step : steps_)
    if (auto stop = step(ex)) return std::move(*stop);
  return ex.route->handler(ex);
}

}  // namespace strata::http

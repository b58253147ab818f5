#include "control/prom_client.h"

// clang-format off
#include <utility>  // before Boost 1.74's awaitable.hpp (see http/client.h)
// clang-format on

#include <fmt/format.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "http/json_fields.h"

namespace strata::control {
namespace {

constexpr size_t kMaxBodyBytes = 16 << 20;

// "1.5", "NaN", "+Inf", "-Inf" -> double.
Result<double> ParseValue(const std::string& s) {
  if (s == "NaN") return std::nan("");
  if (s == "+Inf" || s == "Inf") return HUGE_VAL;
  if (s == "-Inf") return -HUGE_VAL;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size())
    return Status::InvalidArgument(fmt::format("prometheus: bad sample value '{}'", s));
  return v;
}

// [timestamp, "value"] -> value.
Result<double> PairValue(const nlohmann::json& pair) {
  if (!pair.is_array() || pair.size() != 2)
    return Status::InvalidArgument("prometheus: a sample value is not [time, \"value\"]");
  auto text = http::AsString(pair.at(1), "value[1]");
  if (!text.ok()) return Status::InvalidArgument("prometheus: " + text.error().message());
  return ParseValue(*text);
}

Result<PromSample> ParseSample(const nlohmann::json& item) {
  const http::Fields f(item, "result[]");
  if (!f.IsObject()) return Status::InvalidArgument("prometheus: a result is not an object");
  PromSample out;
  const nlohmann::json* metric = nullptr;
  const nlohmann::json* value = nullptr;
  if (auto e = f.Object("metric", &metric); !e.ok()) return Status::InvalidArgument(e.message());
  if (auto e = f.Array("value", &value); !e.ok()) return Status::InvalidArgument(e.message());
  if (value == nullptr) return Status::InvalidArgument("prometheus: a result has no value");
  if (metric != nullptr) {
    const http::Fields m(*metric, "metric");
    for (const auto& [k, v] : metric->items()) {
      std::string s;
      if (auto e = m.String(k, &s); !e.ok()) return Status::InvalidArgument(e.message());
      out.labels[k] = std::move(s);
    }
  }
  ASSIGN_OR_RETURN(out.value, PairValue(*value));
  return out;
}

}  // namespace

// ParseQueryResponse, telling whether the answer was Prometheus's own error ("status": "error").
Result<std::vector<PromSample>> ParseAnswer(std::string_view body, bool* prometheus_error);

std::string UrlEncode(std::string_view s) {
  std::string out;
  out.reserve(s.size() * 3);
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += ch;
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  return out;
}

Result<std::vector<PromSample>> ParseQueryResponse(std::string_view body) {
  return ParseAnswer(body, nullptr);
}

Result<std::vector<PromSample>> ParseAnswer(std::string_view body, bool* prometheus_error) {
  const nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::InvalidArgument("prometheus: the answer is not JSON");
  const http::Fields f(j);
  std::string status, error, error_type;
  if (auto e = f.String("status", &status); !e.ok()) return Status::InvalidArgument(e.message());
  if (auto e = f.String("error", &error); !e.ok()) return Status::InvalidArgument(e.message());
  if (auto e = f.String("errorType", &error_type); !e.ok())
    return Status::InvalidArgument(e.message());
  if (prometheus_error != nullptr) *prometheus_error = status == "error";
  if (status != "success")
    return Status::InvalidArgument(fmt::format("prometheus: {}: {}", error_type, error));
  const nlohmann::json* data = nullptr;
  if (auto e = f.Object("data", &data); !e.ok() || data == nullptr)
    return Status::InvalidArgument("prometheus: the answer has no data object");
  const http::Fields d(*data, "data");
  std::string type;
  if (auto e = d.String("resultType", &type); !e.ok()) return Status::InvalidArgument(e.message());
  const nlohmann::json* result = nullptr;
  std::vector<PromSample> out;
  if (type == "scalar") {
    if (auto e = d.Array("result", &result); !e.ok() || result == nullptr)
      return Status::InvalidArgument("prometheus: a scalar without result");
    ASSIGN_OR_RETURN(double v, PairValue(*result));
    out.push_back({{}, v});
    return out;
  }
  if (type != "vector")
    return Status::InvalidArgument(fmt::format("prometheus: result type '{}' (want vector)", type));
  if (auto e = d.Array("result", &result); !e.ok() || result == nullptr)
    return Status::InvalidArgument("prometheus: a vector without result");
  out.reserve(result->size());
  for (const nlohmann::json& item : *result) {
    ASSIGN_OR_RETURN(PromSample s, ParseSample(item));
    out.push_back(std::move(s));
  }
  return out;
}

Result<PromClient> PromClient::Create(std::string_view url) {
  ASSIGN_OR_RETURN(http::Url u, http::ParseUrl(url));
  return PromClient(std::move(u));
}

Result<std::vector<PromSample>> PromClient::Query(std::string_view expr,
                                                  std::chrono::milliseconds timeout) {
  boost::asio::io_context io;
  http::HttpClient client(io, url_, "");
  std::string body;
  http::HttpResult result;
  const auto deadline = http::HttpClient::Clock::now() + timeout;
  http::HttpClient::RequestOptions options;
  options.deliver_error_body = true;  // Prometheus explains a 400 in its JSON body
  boost::asio::co_spawn(
      io,
      [&]() -> boost::asio::awaitable<void> {
        result = co_await client.Request(
            "GET", "/api/v1/query?query=" + UrlEncode(expr), "", deadline,
            [&body](std::string_view piece) {
              if (body.size() + piece.size() > kMaxBodyBytes)
                return Status::OutOfRange("prometheus: answer above 16 MiB");
              body.append(piece);
              return Status::Ok();
            },
            options);
      },
      boost::asio::detached);
  io.run();
  if (!result.status.ok())
    return Status::Unavailable(
        fmt::format("prometheus {}: {}", url_.ToString(), result.status.message()));
  bool prometheus_error = false;
  auto parsed = ParseAnswer(body, &prometheus_error);
  if (!parsed.ok() && !prometheus_error && result.http_status / 100 != 2)
    return Status::Unavailable(
        fmt::format("prometheus {}: HTTP {}", url_.ToString(), result.http_status));
  return parsed;
}

Result<std::map<std::string, double>> PromClient::QueryBy(std::string_view expr,
                                                          std::string_view label,
                                                          std::chrono::milliseconds timeout) {
  ASSIGN_OR_RETURN(std::vector<PromSample> samples, Query(expr, timeout));
  std::map<std::string, double> out;
  for (const PromSample& s : samples) {
    auto it = s.labels.find(std::string(label));
    if (it != s.labels.end()) out[it->second] = s.value;
  }
  return out;
}

}  // namespace strata::control

#include "control/fetch.h"

// clang-format off
#include <utility>  // before Boost 1.74's awaitable.hpp (http/client.h)
// clang-format on

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <optional>

#include "http/client.h"

namespace strata::control {

Result<FetchReply> FetchHttp(const std::string& method, const std::string& url,
                             const std::string& path, std::chrono::milliseconds timeout,
                             const std::string& body, const std::string& bearer) {
  ASSIGN_OR_RETURN(http::Url u, http::ParseUrl(url));
  boost::asio::io_context io;
  http::HttpClient client(io, u, bearer);
  FetchReply reply;
  std::optional<http::HttpResult> result;
  auto run = [&]() -> boost::asio::awaitable<void> {
    result = co_await client.Request(method, path, body, http::HttpClient::Clock::now() + timeout,
                                     [&reply](std::string_view b) {
                                       reply.body.append(b);
                                       return Status::Ok();
                                     });
  };
  boost::asio::co_spawn(io, run(), boost::asio::detached);
  io.run();
  if (!result) return Status::Internal("request did not complete");
  if (!result->status.ok() && result->http_status == 0) return result->status;
  reply.status = result->http_status;
  if (reply.status < 200 || reply.status >= 300) reply.body = result->error_body;
  return reply;
}

}  // namespace strata::control

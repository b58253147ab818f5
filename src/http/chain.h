// The route chain: a request is matched to a Route, then passes a short list of Steps (auth ->
// readiness -> JSON body -> model) and reaches the route's handler. The server and the gateway
// build their chains from the same pieces.
//
// A Step returns nullopt to pass the exchange on, or a response that ends the chain (an error).
// A handler returns its response, or one with status kDeferred when it answers later through
// Exchange::out (streaming, engine work). The body of a `json_body` route is parsed once, by
// ParseJsonBody, into Exchange::body; handlers read it from there.
//
// Thread contract: a Chain is immutable after construction and may be run concurrently from any
// number of I/O threads; the Steps and handlers it holds must be thread-safe. Readiness is atomic.
// Errors: OpenAI error responses (openai_error.h): 404 no route, 405 wrong method, 401 bad key,
// 503 loading/draining, 400 bad JSON body (or nested deeper than kMaxJsonDepth), 404 unknown model.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "http/server.h"

namespace strata::http {

// HttpResponse::status of a handler that answers later through Exchange::out.
inline constexpr int kDeferred = 0;

struct Route;

// One request on its way through the chain. (bugprone-exception-escape: the implicit constructor
// of nlohmann::json, which does not throw for a null value.)
struct Exchange {  // NOLINT(bugprone-exception-escape)
  HttpRequest request;
  std::shared_ptr<Responder> out;
  const Route* route = nullptr;  // set once matched (also for a 405)
  nlohmann::json body;           // the parsed object of a json_body route
};

using RouteHandler = std::function<HttpResponse(Exchange&)>;

struct Route {
  std::string method;  // "GET", "POST"
  std::string path;    // exact path, or with `prefix` a prefix that a non-empty rest follows
  std::string label;   // the route's name in metrics (defaults to `path`)
  bool prefix = false;
  bool auth = true;        // RequireBearer applies
  bool ready = true;       // RequireReady applies
  bool json_body = false;  // ParseJsonBody and RequireModel apply
  RouteHandler handler;
};

using Step = std::function<std::optional<HttpResponse>(Exchange&)>;

// Whether a replica is ready (model loaded) and whether it is draining (shutting down).
class Readiness {
 public:
  void SetReady(bool ready) { ready_.store(ready); }
  void StartDraining() { draining_.store(true); }
  bool ready() const { return ready_.load(); }
  bool draining() const { return draining_.load(); }
  // /ready: 200 {"status":"ready"}, else 503 "draining" / "loading".
  HttpResponse Probe() const;

 private:
  std::atomic<bool> ready_{false};
  std::atomic<bool> draining_{false};
};

// 401 (with `WWW-Authenticate: Bearer`) unless the Authorization header carries one of `keys`
// (routes with auth only; no keys: open).
Step RequireBearer(std::vector<std::string> keys);
// 503 while draining or not yet ready (routes with ready only). `r` must outlive the chain.
Step RequireReady(const Readiness* r);
// Deepest nesting of arrays/objects a request body may have: deeper bodies are refused before
// parsing, so no recursive walk over a body (dump, copies, our readers) can exhaust the stack.
inline constexpr int kMaxJsonDepth = 64;
// Whether `text` nests arrays/objects deeper than `max_depth` (a linear scan that skips strings;
// exact for valid JSON, conservative for the rest).
bool JsonNestingExceeds(std::string_view text, int max_depth);
// Parses the body of json_body routes into Exchange::body: 400 "body: ..." unless a JSON object
// nested at most kMaxJsonDepth deep.
Step ParseJsonBody();
// json_body routes: a non-empty string `model` other than `served` is 404; a non-string is 400.
Step RequireModel(std::string served);

class Chain {
 public:
  Chain(std::vector<Route> routes, std::vector<Step> steps)
      : routes_(std::move(routes)), steps_(std::move(steps)) {}
  // Matches, runs the steps in order, then the handler. Returns its response (kDeferred: the
  // handler answers through ex.out).
  HttpResponse Run(Exchange& ex) const;
  // The route for `path` whatever the method, or null.
  const Route* Find(std::string_view path) const;

 private:
  std::vector<Route> routes_;
  std::vector<Step> steps_;
};

}  // namespace strata::http

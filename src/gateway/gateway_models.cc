#include "gateway/gateway_models.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "http/client.h"
#include "http/json_fields.h"

namespace strata::gateway {

namespace asio = boost::asio;
using nlohmann::json;

http::HttpResponse ModelsList::Answer() const {
  MutexLock lock(&mu_);
  http::HttpResponse r;
  r.body = body_.empty() ? R"({"object":"list","data":[]})" : body_;
  return r;
}

// The union keeps, per id, the first object seen. Runs on the upstream thread.
void ModelsList::Refresh(std::shared_ptr<const Snapshot> snap) {
  asio::co_spawn(
      sv_->upstreams->io(),
      [this, snap]() -> asio::awaitable<void> {
        json data = json::array();
        std::set<std::string> seen;
        for (const auto& [pool, set] : snap->pools) {
          const PoolConfig* pc = snap->cfg->FindPool(pool);
          for (const ReplicaView& v : set->Snapshot()) {
            if (!v.eligible) continue;
            auto url = http::ParseUrl(v.url);
            if (!url.ok()) continue;
            http::HttpClient client(sv_->upstreams->io(), *url, pc ? pc->api_key : "");
            std::string body;
            auto res = co_await client.Request(
                "GET", "/v1/models", "", Clock::now() + std::chrono::seconds(2),
                [&body](std::string_view piece) {
                  if (body.size() + piece.size() > (1u << 20))
                    return Status::OutOfRange("models list too large");
                  body.append(piece);
                  return Status::Ok();
                });
            if (!res.status.ok() || res.http_status != 200) continue;
            json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
            const json* list = http::Fields(j).Find("data");
            if (!list || !list->is_array()) continue;
            for (const json& m : *list) {
              const json* id = http::Fields(m).Find("id");
              if (!m.is_object() || !id || !id->is_string()) continue;
              const std::string& name =
                  id->get_ref<const std::string&>();  // json-access: is_string
              if (!seen.insert(name).second) continue;
              json copy = m;
              copy["strata_pool"] = pool;
              data.push_back(std::move(copy));
            }
            break;  // one replica answers for its pool
          }
        }
        MutexLock lock(&mu_);
        body_ = json{{"object", "list"}, {"data", std::move(data)}}.dump();
      },
      asio::detached);
}

}  // namespace strata::gateway

// Server-Sent Events, both sides: the writer a server streams with, and the incremental parser a
// client reads with (the `data:` field only, as OpenAI streams use it).
//
// Writer: SseEvent frames one event ("data: <line>\n" per line of the payload, then a blank line);
// SseWriter sends a text/event-stream response through a Responder (Begin, Event..., Done).
// Thread-safety of the writer: as the Responder's (any thread; calls keep their order per thread).
//
// Parser:
// Bytes may arrive split anywhere (inside a field name, a CRLF, a UTF-8 sequence); Feed() keeps the
// unfinished line. Lines end with LF, CRLF or CR; an empty line dispatches the event; several
// `data:` lines of one event are joined with '\n'; comments (":...") and other fields are ignored.
// Errors: a single line longer than max_line_bytes makes Feed() return an error (hostile server).
// Thread-safety: none (one parser per response).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "http/server.h"

namespace strata::http {

// One event carrying `data` (split into one `data:` line per line of it).
std::string SseEvent(std::string_view data);
// The OpenAI end-of-stream event.
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

class SseWriter {
 public:
  explicit SseWriter(std::shared_ptr<Responder> out) : out_(std::move(out)) {}
  // Starts the response: 200, text/event-stream, Cache-Control: no-cache.
  void Begin();
  void Event(std::string_view data);
  // Sends [DONE] and ends the response.
  void Done();

 private:
  std::shared_ptr<Responder> out_;
};

class SseParser {
 public:
  explicit SseParser(size_t max_line_bytes = 16u << 20) : max_line_(max_line_bytes) {}
  // Appends the data payloads of events completed by `bytes` to *events.
  Status Feed(std::string_view bytes, std::vector<std::string>* events);
  // True when an event has started (a data line seen) but not been dispatched yet.
  bool pending() const { return has_data_ || !line_.empty(); }

 private:
  void Line(std::string_view line, std::vector<std::string>* events);
  size_t max_line_;
  std::string line_;
  std::string data_;
  bool has_data_ = false;
  bool last_cr_ = false;  // previous byte was CR: a following LF belongs to the same line end
};

}  // namespace strata::http

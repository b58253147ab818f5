// Incremental Server-Sent Events parser (the `data:` field only, as OpenAI streams use it).
//
// Bytes may arrive split anywhere (inside a field name, a CRLF, a UTF-8 sequence); Feed() keeps the
// unfinished line. Lines end with LF, CRLF or CR; an empty line dispatches the event; several
// `data:` lines of one event are joined with '\n'; comments (":...") and other fields are ignored.
// Errors: a single line longer than max_line_bytes makes Feed() return an error (hostile server).
// Thread-safety: none (one parser per response).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace strata::bench {

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

}  // namespace strata::bench

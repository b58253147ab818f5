#include "http/sse.h"

namespace strata::http {

std::string SseEvent(std::string_view data) {
  std::string out;
  out.reserve(data.size() + 8);
  size_t start = 0;
  while (true) {
    size_t nl = data.find('\n', start);
    out += "data: ";
    out.append(
        data.substr(start, nl == std::string_view::npos ? std::string_view::npos : nl - start));
    out += '\n';
    if (nl == std::string_view::npos) break;
    start = nl + 1;
  }
  out += '\n';
  return out;
}

void SseWriter::Begin() { out_->Begin("text/event-stream", {{"Cache-Control", "no-cache"}}); }

void SseWriter::Event(std::string_view data) { out_->Write(SseEvent(data)); }

void SseWriter::Done() {
  out_->Write(std::string(kSseDone));
  out_->End();
}

Status SseParser::Feed(std::string_view bytes, std::vector<std::string>* events) {
  for (char c : bytes) {
    if (c == '\n' && last_cr_) {
      last_cr_ = false;
      continue;
    }
    last_cr_ = (c == '\r');
    if (c == '\n' || c == '\r') {
      Line(line_, events);
      line_.clear();
      continue;
    }
    if (line_.size() >= max_line_)
      return Status::ResourceExhausted("SSE line longer than " + std::to_string(max_line_) +
                                       " bytes");
    line_.push_back(c);
  }
  return Status::Ok();
}

void SseParser::Line(std::string_view line, std::vector<std::string>* events) {
  if (line.empty()) {
    if (has_data_) events->push_back(std::move(data_));
    data_.clear();
    has_data_ = false;
    return;
  }
  if (line.front() == ':') return;  // comment
  size_t colon = line.find(':');
  std::string_view field = line.substr(0, colon);
  std::string_view value =
      colon == std::string_view::npos ? std::string_view() : line.substr(colon + 1);
  if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  if (field != "data") return;
  if (has_data_) data_.push_back('\n');
  data_.append(value);
  has_data_ = true;
}

}  // namespace strata::http

// CappedCopy: a copy of a byte stream kept up to a cap. Past the cap the copy is dropped (emptied)
// and stays dropped, so the owner can tell a whole copy from none (the gateway's Fetch capture and
// the shadow's tee of the client's response). Header-only.
//
// Thread contract: a plain value; guard it as its owner's other state.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace strata {

struct CappedCopy {
  std::string bytes;  // what was kept; empty once `over`
  bool over = false;  // the stream went past the cap: `bytes` were dropped

  // Appends `piece`, or drops the copy when it would take it past `max` bytes.
  void Append(std::string_view piece, size_t max) {
    if (over) return;
    if (bytes.size() + piece.size() > max) {
      over = true;
      bytes.clear();
      return;
    }
    bytes.append(piece);
  }
};

}  // namespace strata

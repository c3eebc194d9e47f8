// libFuzzer target: the TCPStore frame decoder must accept or reject any bytes without
// crashing, hanging or leaking, and re-encode what it accepts to the same bytes.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "distrun/core/error.hpp"
#include "distrun/store/protocol.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  try {
    auto r = distrun::wire::decode_request(in);
    if (distrun::wire::encode(r) != in) std::abort();  // decode and encode must agree
  } catch (const distrun::StoreError&) {
  }
  return 0;
}

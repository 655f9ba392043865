// Fuzz target: the table configuration a parameter-server shard accepts in a create_table
// request and finds in a shard checkpoint's metadata (ps/protocol.h decode_table_config, YAML).
//
// Input: the YAML text of the frame.
// Property: a config that decodes encodes to YAML that decodes to the same config (shards
// compare the encoded text to tell a re-registration from a conflicting one).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "ps/protocol.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace aiacc;
  fuzz::quiet_logs();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  fuzz::expect_input_errors([&] {
    const ps::TableConfig config = ps::decode_table_config(text, "create_table from fuzz");
    const std::string encoded = ps::encode_table_config(config);
    ps::TableConfig again;
    try {
      again = ps::decode_table_config(encoded, "encoded");
    } catch (const Error& e) {
      throw fuzz::PropertyViolation("an encoded table config does not decode: " + std::string(e.what()) +
                                    "\n--- encoded ---\n" + encoded);
    }
    if (ps::encode_table_config(again) != encoded) {
      throw fuzz::PropertyViolation("a table config changes through encode + decode:\n" + encoded);
    }
  });
  return 0;
}

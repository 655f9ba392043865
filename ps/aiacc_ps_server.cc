// aiacc-ps-server: one parameter-server shard as its own process (see ps/server_process.h).
#include "core/net/message_memory.h"
#include "ps/server_process.h"

int main(int argc, char** argv) {
  aiacc::net::keep_freed_message_memory();  // as every program of ours that moves large messages
  return aiacc::ps::run_server_process(argc, argv);
}

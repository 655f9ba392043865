// aiacc-ps-server: one parameter-server shard as its own process (see ps/server_process.h).
#include "ps/server_process.h"

int main(int argc, char** argv) { return aiacc::ps::run_server_process(argc, argv); }

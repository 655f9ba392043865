// A parameter-server shard as its own process: the body of the aiacc-ps-server program and of
// the benchmark's server processes, for ps::PsClient users (aiacc-train jobs run their shards
// as their own ranks). Usage:
//   aiacc-ps-server --shard K --num-shards N [--bind tcp://127.0.0.1:0] [--endpoint-file F]
//                   [--load CHECKPOINT] [--partitions P] [--threads T] [--log-interval-s S]
//                   [--wait-timeout-s S]
// It checks its arguments (the --bind form, the endpoint file's folder, that --load names this
// shard's file), reads the checkpoint, binds, restores it, logs "serving", writes the bound
// endpoint to F atomically (so a launcher can wait for the file and read it), then serves until
// a client sends shutdown or the process gets SIGTERM/SIGINT.
#pragma once

namespace aiacc::ps {

// Returns the process exit status (0 after a clean shutdown, 2 for bad arguments, 1 for other
// errors, which are printed to stderr with their context).
int run_server_process(int argc, char** argv);

}  // namespace aiacc::ps

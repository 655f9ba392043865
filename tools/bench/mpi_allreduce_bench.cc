// aiacc-bench-mpi-allreduce MIN_BYTES MAX_BYTES SECONDS: the OpenMPI side of aiacc-bench
// allreduce, run under mpirun by it. Same sizes (x4 steps), same timing method (a barrier,
// one warm-up, iterations for ~SECONDS agreed through rank 0, mean per run on rank 0), fp32 sum;
// prints "RESULT {json}" lines.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const long long min_bytes = argc > 1 ? std::atoll(argv[1]) : 4;
  const long long max_bytes = argc > 2 ? std::atoll(argv[2]) : 1 << 28;
  const double seconds = argc > 3 ? std::atof(argv[3]) : 0.3;
  std::vector<float> data(static_cast<std::size_t>(max_bytes / 4 + 1), 1.0f);
  for (long long bytes = std::max(4LL, min_bytes); bytes <= max_bytes; bytes *= 4) {
    const int count = static_cast<int>(std::max(1LL, bytes / 4));
    MPI_Allreduce(MPI_IN_PLACE, data.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    double start = MPI_Wtime();
    MPI_Allreduce(MPI_IN_PLACE, data.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double iters = std::clamp(seconds / std::max(1e-7, MPI_Wtime() - start), 3.0, 10000.0);
    MPI_Bcast(&iters, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    const int n = static_cast<int>(iters);
    MPI_Barrier(MPI_COMM_WORLD);
    start = MPI_Wtime();
    for (int i = 0; i < n; ++i) MPI_Allreduce(MPI_IN_PLACE, data.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    const double per_run = (MPI_Wtime() - start) / n;
    if (rank == 0) std::printf("RESULT {\"bytes\": %lld, \"seconds\": %.9g}\n", bytes, per_run);
    // Values grow by x world each run: keep them finite.
    std::fill(data.begin(), data.begin() + count, 1.0f);
  }
  MPI_Finalize();
  return 0;
}

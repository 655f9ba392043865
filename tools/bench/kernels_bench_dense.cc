// Dense kernel benchmarks: GEMM (linear), conv2d forward and backward.

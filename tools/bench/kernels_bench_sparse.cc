// Sparse and other kernel benchmarks: embedding-bag forward and backward.

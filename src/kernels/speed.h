// A node's compute speed, measured: what a worker reports to the main node in its WorkerInfo
// (and what placement by speed will use).
//
// Thread safety: independent calls may run concurrently; each uses its own threads and buffers.
#pragma once

namespace tandem::kernels {

// GB/s of Q4_K weights that the best kernel table multiplies with a vector on `threads` threads,
// over a 36 MiB matrix (larger than most caches, so it measures memory as a decode step does).
// Takes about 0.1-0.3 s.
float MeasureMatVecSpeed(int threads);

// GB/s at which `threads` threads read a 2 GiB buffer held as the weights are (huge pages) with
// the widest loads (each thread its share; the best of 5 passes): the memory bandwidth a decode
// step is bound by, for rooflines. 0 if no buffer could be allocated. Takes about 1-2 s.
float MeasureReadBandwidth(int threads);

}  // namespace tandem::kernels

// How a real GPU shares itself between two processes' contexts (no MPS):
// one thread of a kernel reads the GPU's global timer in a loop and records
// every stretch when it did not run (its context was switched out). Two
// such probes side by side show the time slice each context gets and the
// cost of a switch; a probe beside a process launching short kernels shows
// whether the switch waits for kernel boundaries or for the slice's end.
//
//   timeslice_probe probe MS THRESHOLD_US     one probe kernel of MS, gaps > THRESHOLD_US (JSON)
//   timeslice_probe spinner KERNEL_US SECONDS SYNC_EVERY   spin kernels back to back (0: never sync)
//
// Build: nvcc -O2 -o timeslice_probe timeslice_probe.cu
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <chrono>
#include <cuda_runtime.h>

#define CHECK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    fprintf(stderr, "%s failed: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)

static const unsigned kMaxGaps = 100000;

__device__ __forceinline__ uint64_t global_ns() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__global__ void probe(uint64_t duration_ns, uint64_t threshold_ns, unsigned long long *gaps, unsigned *count,
                      unsigned long long *span) {
    if (threadIdx.x != 0) return;
    uint64_t start = global_ns(), prev = start;
    for (;;) {
        uint64_t t = global_ns();
        if (t - prev > threshold_ns) {
            unsigned i = *count;
            if (i < kMaxGaps) { gaps[2 * i] = prev; gaps[2 * i + 1] = t; *count = i + 1; }
        }
        prev = t;
        if (t - start > duration_ns) break;
    }
    span[0] = start;
    span[1] = prev;
}

__global__ void spin(uint64_t duration_ns) {
    uint64_t start = global_ns();
    while (global_ns() - start < duration_ns) {
    }
}

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "probe")) {
        uint64_t duration = (uint64_t)(atof(argv[2]) * 1e6), threshold = (uint64_t)(atof(argv[3]) * 1e3);
        unsigned long long *gaps, *span;
        unsigned *count;
        CHECK(cudaMallocManaged(&gaps, sizeof(unsigned long long) * 2 * kMaxGaps));
        CHECK(cudaMallocManaged(&span, sizeof(unsigned long long) * 2));
        CHECK(cudaMallocManaged(&count, sizeof(unsigned)));
        *count = 0;
        spin<<<1, 32>>>(1000000);  // warm up: context and module loaded before the probe
        CHECK(cudaDeviceSynchronize());
        probe<<<1, 32>>>(duration, threshold, gaps, count, span);
        CHECK(cudaDeviceSynchronize());
        printf("{\"start\": %llu, \"end\": %llu, \"gaps\": [", span[0], span[1]);
        for (unsigned i = 0; i < *count && i < kMaxGaps; i++)
            printf("%s[%llu, %llu]", i ? ", " : "", gaps[2 * i], gaps[2 * i + 1]);
        printf("]}\n");
        return 0;
    }
    if (argc == 5 && !strcmp(argv[1], "spinner")) {
        uint64_t kernel = (uint64_t)(atof(argv[2]) * 1e3);
        double seconds = atof(argv[3]);
        int sync_every = atoi(argv[4]);
        spin<<<1, 32>>>(1000);
        CHECK(cudaDeviceSynchronize());
        printf("ready\n");
        fflush(stdout);
        auto start = std::chrono::steady_clock::now();
        long launched = 0;
        while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < seconds) {
            spin<<<1, 32>>>(kernel);
            launched++;
            if (sync_every > 0 && launched % sync_every == 0) CHECK(cudaDeviceSynchronize());
        }
        CHECK(cudaDeviceSynchronize());
        printf("{\"kernels\": %ld}\n", launched);
        return 0;
    }
    fprintf(stderr, "usage: %s probe MS THRESHOLD_US | spinner KERNEL_US SECONDS SYNC_EVERY\n", argv[0]);
    return 2;
}

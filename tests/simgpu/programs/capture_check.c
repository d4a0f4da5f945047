/* Stream-capture rules of the simulated driver (cuda.h semantics): what a
 * call from this or another thread does to an active capture in each mode.
 * Prints "key=value" lines; exits 1 with "FAIL ..." on a setup error. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gslice_cuda_abi.h"
#include "gslice_cuda_driver_api.h"
#include "check.h"

static CUcontext ctx;
static CUfunction kernel;
static CUstream stream;
static CUevent plain_event, captured_event;

static void launch_some(int n) {
    for (int i = 0; i < n; i++) CHECK(cuLaunchKernel(kernel, 1, 1, 1, 1, 1, 1, 0, stream, NULL, NULL));
}

/* What another thread runs while the main thread's capture is active. */
typedef struct {
    int relaxed;          /* switch this thread to RELAXED first */
    int which;            /* 0: query a plain event, 1: query the captured event, 2: end the capture */
    CUresult rc;
} other_call;

static void *other_thread(void *arg) {
    other_call *c = arg;
    cuCtxSetCurrent(ctx);
    if (c->relaxed) {
        CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
        CHECK(cuThreadExchangeStreamCaptureMode(&mode));
    }
    if (c->which == 0) c->rc = cuEventQuery(plain_event);
    else if (c->which == 1) c->rc = cuEventQuery(captured_event);
    else {
        CUgraph g;
        c->rc = cuStreamEndCapture(stream, &g);
    }
    return NULL;
}

static CUresult from_other_thread(int relaxed, int which) {
    other_call c = {relaxed, which, CUDA_SUCCESS};
    pthread_t t;
    pthread_create(&t, NULL, other_thread, &c);
    pthread_join(t, NULL);
    return c.rc;
}

static const char *mode_name(int mode) {
    return mode == CU_STREAM_CAPTURE_MODE_GLOBAL ? "global" : mode == CU_STREAM_CAPTURE_MODE_THREAD_LOCAL ? "local" : "relaxed";
}

int main(void) {
    CUmodule module;
    ctx = check_primary_context(NULL);
    CHECK(cuModuleLoadData(&module, "sim"));
    CHECK(cuModuleGetFunction(&kernel, module, "any_kernel"));
    CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    CHECK(cuEventCreate(&plain_event, 0));
    CHECK(cuEventCreate(&captured_event, 0));
    CHECK(cuEventRecord(plain_event, stream));
    CHECK(cuCtxSynchronize());

    for (int mode = 0; mode <= 2; mode++) {
        CUgraph g = NULL;
        const char *m = mode_name(mode);
        /* Another (GLOBAL-mode) thread queries an unrelated event. */
        CHECK(cuStreamBeginCapture_v2(stream, mode));
        launch_some(3);
        printf("%s_other_query=%d\n", m, (int)from_other_thread(0, 0));
        CUstreamCaptureStatus status;
        cuuint64_t id = 0;
        CUgraph info_graph = NULL;
        CHECK(cuStreamGetCaptureInfo_v3(stream, &status, &id, &info_graph, NULL, NULL, NULL));
        printf("%s_status_after_other=%d\n", m, (int)status);
        printf("%s_end_after_other=%d\n", m, (int)cuStreamEndCapture(stream, &g));
        /* The same, from a RELAXED other thread. */
        CHECK(cuStreamBeginCapture_v2(stream, mode));
        printf("%s_relaxed_other_query=%d\n", m, (int)from_other_thread(1, 0));
        printf("%s_end_after_relaxed_other=%d\n", m, (int)cuStreamEndCapture(stream, &g));
        /* The capturing thread itself synchronises the context. */
        CHECK(cuStreamBeginCapture_v2(stream, mode));
        printf("%s_own_ctxsync=%d\n", m, (int)cuCtxSynchronize());
        printf("%s_own_alloc=%d\n", m, (int)cuMemAlloc_v2(&(CUdeviceptr){0}, 4096));
        printf("%s_end_after_own=%d\n", m, (int)cuStreamEndCapture(stream, &g));
        /* An event recorded into the capture, queried from a RELAXED thread. */
        CHECK(cuStreamBeginCapture_v2(stream, mode));
        CHECK(cuEventRecord(captured_event, stream));
        printf("%s_captured_event_query=%d\n", m, (int)from_other_thread(1, 1));
        CHECK(cuStreamIsCapturing(stream, &status));
        printf("%s_status_after_captured=%d\n", m, (int)status);
        printf("%s_end_after_captured=%d\n", m, (int)cuStreamEndCapture(stream, &g));
        printf("%s_graph_after_invalid_null=%d\n", m, g == NULL);
        /* Ending from another thread. */
        CHECK(cuStreamBeginCapture_v2(stream, mode));
        CUresult other_end = from_other_thread(0, 2);
        printf("%s_end_other_thread=%d\n", m, (int)other_end);
        if (other_end != CUDA_SUCCESS) CHECK(cuStreamEndCapture(stream, &g));
    }
    /* The captured event is usable again once its capture ended. */
    printf("captured_event_after_end=%d\n", (int)cuEventQuery(captured_event));

    /* Capture into an existing graph. */
    CUgraph mine, got = NULL;
    CHECK(cuGraphCreate(&mine, 0));
    CHECK(cuStreamBeginCaptureToGraph(stream, mine, NULL, NULL, 0, CU_STREAM_CAPTURE_MODE_GLOBAL));
    launch_some(4);
    CHECK(cuStreamEndCapture(stream, &got));
    size_t nodes = 0;
    CHECK(cuGraphGetNodes(got, NULL, &nodes));
    printf("to_graph_same=%d\nto_graph_nodes=%zu\n", got == mine, nodes);
    return 0;
}

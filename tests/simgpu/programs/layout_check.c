/* Prints the shared-segment layout as the C compiler sees it, for the
 * Python mirror's test. */
#include <stddef.h>
#include <stdio.h>

#include "sim_shared.h"

#define FIELD(type, name) printf("%s.%s %zu\n", #type, #name, offsetof(struct type, name))

int main(void) {
    printf("sizeof.sim_device_shared %zu\n", sizeof(struct sim_device_shared));
    printf("sizeof.sim_process_slot %zu\n", sizeof(struct sim_process_slot));
    FIELD(sim_device_shared, total_memory);
    FIELD(sim_device_shared, uuid);
    FIELD(sim_device_shared, memory_used);
    FIELD(sim_device_shared, busy_ns);
    FIELD(sim_device_shared, kernels);
    FIELD(sim_device_shared, engine_holder_pid);
    FIELD(sim_device_shared, engine_busy_since_ns);
    FIELD(sim_device_shared, teardown_ns);
    FIELD(sim_device_shared, timeline);
    FIELD(sim_device_shared, engine);
    FIELD(sim_device_shared, registry);
    FIELD(sim_device_shared, slots);
    FIELD(sim_device_shared, engine_last_pid);
    FIELD(sim_device_shared, engine_last_end_ns);
    FIELD(sim_device_shared, handoff_count);
    FIELD(sim_device_shared, handoffs);
    FIELD(sim_device_shared, ctx_owner);
    FIELD(sim_device_shared, sched_seq);
    FIELD(sim_device_shared, ctx_slice_end_ns);
    FIELD(sim_device_shared, ctx_switches);
    FIELD(sim_device_shared, ctx_preemptions);
    FIELD(sim_device_shared, ctx_timeslice_ns);
    FIELD(sim_device_shared, ctx_switch_ns);
    FIELD(sim_device_shared, ctx_preempt);
    printf("sizeof.sim_handoff %zu\n", sizeof(struct sim_handoff));
    FIELD(sim_handoff, from_end_ns);
    FIELD(sim_handoff, to_start_ns);
    FIELD(sim_process_slot, label);
    FIELD(sim_process_slot, busy_ns);
    FIELD(sim_process_slot, memory_used);
    FIELD(sim_process_slot, memory_peak);
    FIELD(sim_process_slot, exited_ns);
    FIELD(sim_process_slot, engine_waiting);
    FIELD(sim_process_slot, out_of_memory);
    FIELD(sim_process_slot, queued_work);
    FIELD(sim_process_slot, waiting_since_ns);
    FIELD(sim_process_slot, slices);
    FIELD(sim_process_slot, preempted);
    printf("version %u\n", SIM_LAYOUT_VERSION);
    return 0;
}

#!/bin/bash
# main 640edc8 as it is, restricted to the same metrics as D0.
export LUMEN_BENCH_ONLY='^(single_client_tasks_sync|1_1_actor_calls_sync|single_client_tasks_async|1_1_actor_calls_async|1_1_actor_calls_concurrent|multi_driver_tasks_async|single_client_wait_1k_refs)$'
exec /work/ab-bin/D/lumen "$@"

#!/bin/bash
# main 640edc8 with the worker's reply hand-off off (issue 13's old reply path),
# restricted to the synchronous metrics and the async ones the hand-off affects.
export LUMEN_DEFER_REPLIES_AT_QUEUED=16
export LUMEN_BENCH_ONLY='^(single_client_tasks_sync|1_1_actor_calls_sync|single_client_tasks_async|1_1_actor_calls_async|1_1_actor_calls_concurrent|multi_driver_tasks_async|single_client_wait_1k_refs)$'
exec /work/ab-bin/D/lumen "$@"

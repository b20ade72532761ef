#!/bin/bash
export LUMEN_BENCH_ONLY=\^\(init_seconds\|single_client_tasks_sync\|single_client_tasks_async\|multi_client_tasks_async\|multi_driver_tasks_async\|single_client_wait_1k_refs\|single_client_tasks_and_get_batch\|1_1_actor_calls_sync\|1_1_actor_calls_async\|1_1_actor_calls_concurrent\|actors_created_per_second\)\$
exec /work/ab-bin/Af/lumen "$@"

#!/bin/bash
export LUMEN_BENCH_ONLY='^(actors_created_per_second|init_seconds|multi_driver_tasks_async)$'
export LUMEN_OBJECT_STORE_RESERVE=object
exec /work/ab-bin/D/lumen "$@"

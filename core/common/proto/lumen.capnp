# Lumen's wire protocol: every message between processes is one Envelope,
# framed as described in doc/wire_format.md.
@0xc1d6a8b0e2f4a931;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("lumen::proto");

# 2: task events travel packed (TaskEventBatch.packed), which a version-1
# process would drop without a word; the Hello check refuses the mix instead.
const protocolVersion :UInt32 = 2;

enum Role {
  driver @0;
  worker @1;
  node @2;
  cli @3;
  peer @4;     # a driver or worker calling another one's owner service
  remoteOwner @5;  # a driver or worker of another node: leases here, frees its objects here
}

struct Resource {
  name @0 :Text;
  quantity @1 :Float64;
}

# First frame on every connection, from the side that connected.
struct Hello {
  protocolVersion @0 :UInt32;
  role @1 :Role;
  token @2 :Text;
  pid @3 :Int32;
  workerId @4 :Data;
  jobId @5 :Data;
  exePath @6 :Text;            # driver: the binary its workers re-execute
  listenAddress @7 :Text;      # driver/worker: its owner service address
  isDriver @8 :Bool;           # remoteOwner: the job's driver (its exit ends the job here)
  logToDriver @9 :Bool;        # driver (and remoteOwner driver): forward its workers' output to it
  nodeId @10 :Data;            # remoteOwner: the node it runs on (its death frees its objects there)
}

struct HelloReply {
  ok @0 :Bool;
  error @1 :Text;
  nodeId @2 :Data;
  storeSize @3 :UInt64;        # node: the segment's size; its fd travels with this frame
  sessionDir @4 :Text;
  jobId @5 :Data;
  nodeHost @6 :Text;           # the address the node's processes listen on (TCP)
  nodeAddress @7 :Text;        # the node daemon's own address (TCP and Unix)
  headPersistent @8 :Bool;     # the head's tables survive its restart (ClusterView.headPersistent)
}

# A value as it travels: inline bytes (codec-encoded) or a sealed object in the
# node's shared-memory store.
struct Value {
  union {
    inline @0 :Data;
    stored @1 :StoredObject;
    error @2 :TaskFailure;
  }
}

struct StoredObject {
  objectId @0 :Data;
  size @1 :UInt64;
  nodeId @2 :Data;         # where a copy is
  nodeAddress @3 :Text;    # that node daemon's address
  ownerAddress @4 :Text;   # who to tell of a new copy
}

enum FailureKind {
  taskError @0;          # user code threw
  workerCrashed @1;
  objectLost @2;
  functionNotFound @3;
  storeFull @4;
  typeMismatch @5;
  other @6;
  actorDied @7;
}

struct TaskFailure {
  kind @0 :FailureKind;
  exceptionType @1 :Text;
  message @2 :Text;
  location @3 :Text;     # "pid 1234 on node abcd (worker ef01)"
  cancelled @4 :Bool;    # lumen::Cancel ended the task (kind other): TaskCancelledError
}

struct ObjectRefData {
  objectId @0 :Data;
  ownerAddress @1 :Text;
}

enum TaskKind {
  normal @0;
  actorCreation @1;   # run the factory; the worker then holds the instance
  actorMethod @2;
}

struct TaskSpec {
  taskId @0 :Data;
  function @1 :Text;
  args @2 :List(Value);
  attempt @3 :UInt32;
  ownerAddress @4 :Text;
  jobId @5 :Data;
  kind @6 :TaskKind;
  actorId @7 :Data;
  maxConcurrency @8 :UInt32;   # actorCreation: threads running its calls
  actorName @9 :Text;          # actorCreation: its name, freed when it is killed directly
  gpuIds @10 :List(Int32);     # the GPUs of the lease it runs under
}

struct TaskReply {
  taskId @0 :Data;
  attempt @1 :UInt32;
  result @2 :Value;
  execMicros @3 :UInt64;   # time the function ran, for the submitter's pipelining
  requeued @4 :Bool;       # not run: the worker blocked in Get; submit it elsewhere
  actorExiting @5 :Bool;   # the actor called ExitActor: it ends after this reply
  # The executor's task events, carried to the owner's FINISHED/FAILED record
  # instead of a record of the worker's own (task_events.h): when it started
  # (system clock, microseconds since the epoch; 0: not carried, the worker
  # recorded them itself, or events are off) and how long its argument fetch,
  # execution and result store took, in microseconds; the worker's pid, and
  # for an actor call its node (a task's owner knows it from the lease).
  startedMicros @6 :Int64;
  argsFetchMicros @7 :UInt32;
  runMicros @8 :UInt32;
  storeMicros @9 :UInt32;
  workerPid @10 :Int32;
  nodeId @11 :Data;
}

enum SchedulingKind {
  default @0;
  spread @1;
  pack @2;
  nodeAffinity @3;
}

struct LeaseRequest {
  resources @0 :List(Resource);    # held while the lease lasts
  placement @1 :List(Resource);    # needed to grant it (actors: CPU 1, held 0)
  actor @2 :Bool;                  # a dedicated worker for an actor
  detached @3 :Bool;               # the actor outlives its owner and job
  strategy @4 :SchedulingKind;
  affinityNode @5 :Data;
  affinitySoft @6 :Bool;
  grantOrReject @7 :Bool;          # spilled here already: queue here, never spill again
  placementGroup @8 :Data;         # run inside this group's bundle
  bundleIndex @9 :Int32 = -1;      # -1: any bundle of the group on this node
  name @10 :Text;                  # what it is for (warnings, listings)
  retriable @11 :Bool;             # its tasks may be retried (max_retries != 0): memory-monitor victims first
  retryKey @12 :RetryKey;          # de-duplicated by the node (core/node/keyed_requests.h): a resend gets the first answer
}

struct LeaseReply {
  granted @0 :Bool;
  error @1 :Text;
  leaseId @2 :UInt64;
  workerId @3 :Data;
  workerAddress @4 :Text;
  workerPid @5 :Int32;
  gpuIds @6 :List(Int32);      # the GPUs the lease holds (its CUDA_VISIBLE_DEVICES)
  spillbackNode @7 :Data;      # not granted here: ask this node instead
  spillbackAddress @8 :Text;
  waiting @9 :Bool;            # a notice, not the answer: no node can run it yet (infeasible)
  nodeId @10 :Data;            # the granting node
  retry @11 :Bool;             # refused for now (e.g. stale view): ask the local node again
}

struct StoreRequest {
  objectId @0 :Data;
  size @1 :UInt64;
  retryKey @2 :RetryKey;  # create/seal/abort/get: de-duplicated by the store (a resend acts once)
}

struct StoreReply {
  ok @0 :Bool;
  code @1 :UInt32;       # absl::StatusCode
  error @2 :Text;
  offset @3 :UInt64;
  size @4 :UInt64;
}

struct NodeStats {
  nodeId @0 :Data;
  address @1 :Text;
  hostname @2 :Text;
  pid @3 :Int32;
  alive @4 :Bool;
  total @5 :List(Resource);
  available @6 :List(Resource);
  storeCapacity @7 :UInt64;
  storeUsed @8 :UInt64;
  storeObjects @9 :UInt64;
  workers @10 :UInt32;
  idleWorkers @11 :UInt32;
  queuedLeases @12 :UInt32;
  activeLeases @13 :UInt32;
  sessionDir @14 :Text;
  transferAddress @15 :Text;       # where other nodes pull objects from
  infeasible @16 :List(Demand);    # lease requests no node can run yet
  bundles @17 :List(Bundle);       # placement group bundles reserved here
  hostAddress @18 :Text;           # the IP its processes listen on
  drivers @19 :List(Data);         # jobs whose driver is attached here (they end if it dies)
  taskTotals @20 :TaskTotals;      # from the task events this node received (metrics)
  dashboard @21 :NodeDashboard;    # only in the answer to getNodeStats: for the head's dashboard
  storeSummary @22 :StoreSummary;  # pins and spilling of its object store (`lumen status`, `lumen memory`)
  gpus @23 :List(GpuStats);        # its GPUs as NVML samples them; empty without NVML (core/node/gpu_monitor.h)
  pending @24 :List(Demand);       # lease requests that fit here but wait for busy resources or a worker
}

# One GPU of a node, sampled through NVML when the node reports (NodeStats.gpus).
struct GpuStats {
  index @0 :UInt32;             # as the node's processes number it (position in CUDA_VISIBLE_DEVICES)
  name @1 :Text;                # NVML's product name ("NVIDIA H100 80GB HBM3")
  uuid @2 :Text;                # "GPU-..."
  utilizationKnown @3 :Bool;    # false where NVML does not sample it (e.g. MIG)
  utilization @4 :Float64;      # share of the last sample period a kernel ran, 0..1
  memoryUsedBytes @5 :UInt64;
  memoryTotalBytes @6 :UInt64;
}

# What a node's object store holds beyond used/capacity/objects (NodeStats).
struct StoreSummary {
  pinnedBytes @0 :UInt64;      # allocated bytes of objects held by at least one pin
  pinnedObjects @1 :UInt64;
  spilledBytes @2 :UInt64;     # live objects with a copy on disk now
  spilledObjects @3 :UInt64;
  restoredBytes @4 :UInt64;    # read back from disk (cumulative)
  restoredObjects @5 :UInt64;
  spilledTotalBytes @6 :UInt64;  # written to disk (cumulative)
  parkedCreates @7 :UInt32;    # creates waiting for room now
  repeatedRequests @8 :UInt64; # resent requests answered from the store's table (cumulative)
}

# What a node adds to its answer to getNodeStats for the head's dashboard
# (doc/observability.md); its periodic reports leave it out.
struct NodeDashboard {
  failures @0 :List(FailureRecord);  # the most recent, oldest first (at most 32)
}

# A task that failed for good (from its owner's FAILED event) or a worker
# process that died without being asked to.
struct FailureRecord {
  timeUs @0 :Int64;       # system clock, microseconds since the epoch
  kind @1 :Text;          # "task", "actor call" or "worker"
  taskId @2 :Data;        # tasks: the task's id; workers: empty
  message @3 :Text;       # the task's error, or how the worker ended
  pid @4 :Int32;          # tasks: the owner's pid; workers: the worker's pid
}

# A node's running totals over the task events it received since it started
# (core/node/task_event_buffer.h), for the head's /metrics.
struct TaskTotals {
  eventsByKind @0 :List(UInt64);    # indexed by lumen::TaskEventKind
  latencyBuckets @1 :List(UInt64);  # submission -> end, per bucket (not cumulative); last: +Inf
  latencySumSeconds @2 :Float64;
  pulledBytes @3 :UInt64;
  droppedEvents @4 :UInt64;
}

struct Demand {
  resources @0 :List(Resource);
  count @1 :UInt32;
  name @2 :Text;
}

enum PlacementStrategy {
  pack @0;
  spread @1;
  strictPack @2;
  strictSpread @3;
}

struct Bundle {
  groupId @0 :Data;
  index @1 :Int32;
  resources @2 :List(Resource);
  nodeId @3 :Data;
}

struct PlacementGroupSpec {
  groupId @0 :Data;
  name @1 :Text;
  strategy @2 :PlacementStrategy;
  bundles @3 :List(Bundle);
  jobId @4 :Data;
  retryKey @5 :RetryKey;  # de-duplicated by the head (a retried create makes one group)
}

struct PlacementGroupState {
  groupId @0 :Data;
  name @1 :Text;
  strategy @2 :PlacementStrategy;
  state @3 :Text;          # PENDING, CREATED, REMOVED, INFEASIBLE
  bundles @4 :List(Bundle);
  error @5 :Text;
}

struct WaitPlacementGroup {
  groupId @0 :Data;
  timeoutMs @1 :UInt64;
}

struct BundleBatch {
  groupId @0 :Data;
  bundles @1 :List(Bundle);
  retryKey @2 :RetryKey;   # (head, ticket): de-duplicated by the node; a resent cancel acts once
  commit @3 :Bool;         # prepareBundles only: commit at once too (every bundle of the group is on this node)
}

struct BundleReply {
  ok @0 :Bool;
  error @1 :Text;
}

# head -> node, as changes since that node's previous view: `nodes` are the
# nodes that joined, died or changed resources or addresses (upsert them).
struct ClusterView {
  nodes @0 :List(NodeStats);
  endedJobs @1 :List(Data);
  bundles @2 :List(Bundle);    # every committed bundle, for routing leases
  removedGroups @3 :List(Data);
  # True: the committed bundles are those of this node's previous view (the
  # list is empty, keep yours); false: `bundles` is every committed bundle.
  bundlesUnchanged @4 :Bool;
  # The head persists its tables (a write-ahead log or Redis): a node that
  # loses it retries until it is back; false: the node stops (doc/reliability.md).
  headPersistent @5 :Bool;
}

struct PullRequest {
  objectId @0 :Data;
  size @1 :UInt64;
  nodeId @2 :Data;          # where a copy is
  nodeAddress @3 :Text;
  jobId @4 :Data;           # who may free the local copy
}

struct StateRow {
  fields @0 :List(KeyValue);   # values are text
}

struct ObjectStatusReply {
  value @0 :Value;
}

# A reader whose pull of `objectId` from `nodeId` failed tells the owner: the
# owner forgets that copy, rebuilds the object from its lineage when no copy
# is left (doc/reliability.md, item 4), and answers with objectStatus once the
# object is ready again (a new location) or failed.
struct RecoverObject {
  objectId @0 :Data;
  nodeId @1 :Data;          # the copy that could not be read
  error @2 :Text;           # why (for the owner's log and the error it may raise)
}

struct Envelope {
  requestId @0 :UInt64;
  union {
    hello @1 :Hello;
    helloReply @2 :HelloReply;
    requestLease @3 :LeaseRequest;
    leaseReply @4 :LeaseReply;
    returnLease @5 :UInt64;              # lease id
    storeCreate @6 :StoreRequest;
    storeSeal @7 :StoreRequest;
    storeAbort @8 :StoreRequest;
    storeGet @9 :StoreRequest;
    storeRelease @10 :StoreRequest;
    storeDelete @11 :StoreRequest;
    storeReply @12 :StoreReply;
    workerBlocked @13 :Void;
    workerUnblocked @14 :Void;
    pushTask @15 :TaskSpec;
    taskReply @16 :TaskReply;
    waitObject @17 :Data;                # object id; answered when ready
    objectStatus @18 :ObjectStatusReply;
    registerNode @19 :NodeStats;
    reportNode @20 :NodeStats;
    getNodes @21 :Void;
    nodes @22 :List(NodeStats);
    getNodeStats @23 :Void;
    nodeStats @24 :NodeStats;
    kvPut @25 :KeyValue;
    kvGet @26 :Text;
    kvReply @27 :KeyValue;
    addBorrower @28 :Data;               # object id
    removeBorrower @29 :Data;
    ack @30 :Void;
    reclaimLeases @31 :Void;             # node -> lease holder: return idle leases
    killLease @32 :UInt64;               # holder lost its worker: end it, free the lease
    escapeRef @33 :Data;                 # borrower passed a ref on: owner pins it
    waitActor @34 :WaitActorRequest;     # caller -> owner: where is the actor now?
    actorState @35 :ActorState;
    killActor @36 :Data;                 # caller -> owner (actor id); noRestart in requestId
    registerActorName @37 :ActorName;    # owner -> head
    lookupActorName @38 :Text;           # anyone -> head
    actorNameReply @39 :ActorName;
    unregisterActorName @40 :ActorName;  # owner -> head
    actorExiting @41 :Void;              # actor process -> owner: ExitActor was called
    updateActorAddress @42 :ActorName;   # owner -> head (detached actors)
    lookupActorById @43 :Data;           # anyone -> head: a detached actor's address
    clusterView @44 :ClusterView;        # head -> node, after each report
    createPlacementGroup @45 :PlacementGroupSpec;   # driver -> head
    placementGroupState @46 :PlacementGroupState;
    waitPlacementGroup @47 :WaitPlacementGroup;     # answered when created or at the timeout
    removePlacementGroup @48 :Data;
    listPlacementGroups @49 :Void;
    placementGroups @50 :List(PlacementGroupState);
    prepareBundles @51 :BundleBatch;     # head -> node: reserve (phase 1)
    commitBundles @52 :BundleBatch;      # head -> node: make usable (phase 2)
    cancelBundles @53 :BundleBatch;      # head -> node: roll back or remove
    bundleReply @54 :BundleReply;
    pullObject @55 :PullRequest;         # worker/driver -> its node: copy it here
    addObjectLocation @56 :StoredObject; # reader -> owner: a copy is now also there
    jobEnded @57 :Data;                  # node -> head -> every node (in the view)
    listState @58 :Text;                 # cli -> node -> clients: actors | tasks | objects
    stateRows @59 :List(StateRow);
    markNodeDead @60 :Data;              # head -> node: you were declared dead; exit
    kv @61 :KvRequest;                   # anyone -> head: namespaced key-value store
    kvResult @62 :KvResult;              # head -> caller: the answer to one kv request
    getWorkerExit @63 :WorkerExitQuery;  # lease holder -> node: why did this worker die?
    workerExit @64 :WorkerExitInfo;      # node -> lease holder: once it is reaped, or at the deadline
    taskEvents @65 :TaskEventBatch;      # driver/worker -> its node (periodic flush); node -> cli
    getTaskEvents @66 :Void;             # cli -> node: its recent task events
    workerLogs @67 :WorkerLogBatch;      # node -> driver: worker output; driver -> node: flush; cli -> node -> cli: `lumen logs`
    recoverObject @68 :RecoverObject;    # reader -> owner: no copy could be read there; answered with objectStatus
    rejoinNode @69 :NodeStats;           # node -> head: register again as a node the head knows (persistence off); else markNodeDead
  }
}

# The identity of one control request its sender may retry (doc/reliability.md,
# item 9): every attempt carries the same key, and the head (or, for lease
# requests and bundle batches, the node daemon) answers a key it has seen with
# the reply it stored, without acting again. `client` is random
# per process (lumen/common/control_retry.h), `request` counts its requests.
struct RetryKey {
  client @0 :UInt64;
  request @1 :UInt64;
  attempt @2 :UInt32;        # 0 for the first send; for logs and tests only
}

# Worker output (doc/observability.md, "Logs"): lines a worker wrote to its
# stdout or stderr, as its node daemon read them from the worker's pipes.
struct WorkerLogLine {
  pid @0 :Int32;             # the worker process
  stderr @1 :Bool;           # false: stdout
  text @2 :Text;             # without the newline; a long line comes in pieces
  name @3 :Text;             # the task or actor that was running (may be empty)
}

struct WorkerLogBatch {
  nodeId @0 :Data;           # the node whose workers wrote the lines
  lines @1 :List(WorkerLogLine);
  dropped @2 :UInt64;        # node -> driver: lines dropped since the last batch (slow driver)
  query @3 :WorkerLogQuery;  # set on requests (driver -> node, cli -> node)
}

struct WorkerLogQuery {
  flush @0 :Bool;            # driver -> node: send what was read so far, then answer (empty batch)
  workerPid @1 :Int32;       # cli -> node: only this worker (0: all)
  actorName @2 :Text;        # cli -> node: only the workers of this actor
  maxBytes @3 :UInt64;       # cli -> node: at most this many bytes of each file (its end)
}

# Task events (lumen/common/task_events.h, doc/observability.md): what happened
# to a task and when. Fields a kind does not use stay at their defaults.
struct TaskEventRecord {
  kind @0 :UInt8;            # lumen::TaskEventKind
  actorCall @1 :Bool;
  attempt @2 :UInt32;
  pid @3 :Int32;             # the recording process
  timeUs @4 :Int64;          # system clock, microseconds since the epoch
  taskId @5 :Data;
  name @6 :Text;
  nodeId @7 :Data;
  workerId @8 :Data;
  workerPid @9 :Int32;
  bytes @10 :UInt64;
  durationUs @11 :Int64;
}

struct TaskEventBatch {
  nodeId @0 :Data;           # node -> cli: the answering node
  events @1 :List(TaskEventRecord);  # the old form: read, no longer sent (`packed` is)
  dropped @2 :UInt64;        # events lost to full buffers (process rings, node buffer)
  # The events in the packed binary form (lumen/common/task_event_packed.h): a
  # version byte, then one compact record per event. A reader refuses a
  # version it does not know, with an error naming both.
  packed @3 :Data;
}

# A lease holder lost its connection to a worker: it asks the worker's node
# daemon how the process ended, to put the cause in its error.
struct WorkerExitQuery {
  workerId @0 :Data;
  timeoutMs @1 :UInt32;     # how long the daemon waits for the exit (capped at 10 s)
}

struct WorkerExitInfo {
  known @0 :Bool;           # false: still running at the deadline, or not a worker of the job
  pid @1 :Int32;
  cause @2 :Text;           # "killed by signal 11 (SIGSEGV)", "exited with code 0", ...
  signal @3 :Int32;         # the terminating signal, or 0
  exitCode @4 :Int32;       # the exit status when it exited, or -1
  nodeId @5 :Data;
}

struct WaitActorRequest {
  actorId @0 :Data;
  failedAddress @1 :Text;   # answer only with a different address (or death)
}

struct ActorState {
  alive @0 :Bool;
  address @1 :Text;
  dead @2 :Bool;
  reason @3 :Text;
  maxTaskRetries @4 :Int32;
}

struct ActorName {
  name @0 :Text;
  actorId @1 :Data;
  ownerAddress @2 :Text;
  ok @3 :Bool;
  error @4 :Text;
  address @5 :Text;   # detached actors: where it runs, for callers whose owner is gone
  retryKey @6 :RetryKey;  # register/unregister/updateActorAddress: de-duplicated by the head
}

struct KeyValue {
  key @0 :Text;
  value @1 :Data;
  found @2 :Bool;
}

# The head's namespaced key-value store (doc/wire_format.md, "Key-value store").
enum KvOp {
  put @0;           # value under (namespace, key); kept if it exists and !overwrite
  get @1;
  delete @2;        # one key
  deletePrefix @3;  # every key of the namespace starting with `key`
  exists @4;
  keys @5;          # the keys starting with `key`
  wait @6;          # answered when the key exists, or after timeoutMs (found = false)
}

struct KvRequest {
  op @0 :KvOp;
  namespace @1 :Text;
  key @2 :Text;              # the prefix for deletePrefix and keys
  value @3 :Data;
  overwrite @4 :Bool = true;
  timeoutMs @5 :UInt64;      # wait
  retryKey @6 :RetryKey;     # put, delete, deletePrefix: de-duplicated by the head
}

struct KvResult {
  code @0 :UInt32;           # absl::StatusCode; 0: ok
  error @1 :Text;            # names the limit that was hit, with its value
  found @2 :Bool;            # get, exists, wait: the key is there; put: it was written
  value @3 :Data;            # get
  keys @4 :List(Text);       # keys
  count @5 :UInt64;          # delete, deletePrefix: how many keys went
}

//! Metric names, HELP texts and histogram buckets of the raft store (docs/METRICS.md).
//!
//! The `metrics` facade records; the application installs an exporter and should give every
//! histogram [`LATENCY_BUCKETS`] (Prometheus renders histograms without buckets as summaries).

pub use vellum_engine::metric_names::carrier::{
    DURABLE_WRITE_DURATION, FLUSH_DURATION, FLUSHES_TOTAL, WRITES_TOTAL, WRITTEN_BYTES_TOTAL,
};

/// Time from an append's submission to its durable write (histogram).
pub const APPEND_DURATION: &str = "vellum_log_append_duration_seconds";
/// Entries per durable log write (histogram).
pub const APPEND_BATCH_ENTRIES: &str = "vellum_log_append_batch_entries";
/// Entries appended to the log (counter).
pub const APPENDED_ENTRIES_TOTAL: &str = "vellum_log_appended_entries_total";
/// Duration of one write of the log writer (histogram).
pub const WRITER_BATCH_DURATION: &str = "vellum_log_writer_batch_duration_seconds";
/// Committed ids that rode on a log write (counter).
pub const COMMITTED_CARRIED_TOTAL: &str = "vellum_log_committed_carried_total";
/// Committed ids saved with a meta write of their own (counter).
pub const COMMITTED_SAVES_TOTAL: &str = "vellum_log_committed_saves_total";
/// Segments the log moved on from (counter).
pub const SEGMENTS_ROLLED_TOTAL: &str = "vellum_log_segments_rolled_total";
/// Segments freed by purges, deleted or kept for reuse (counter).
pub const SEGMENTS_PURGED_TOTAL: &str = "vellum_log_segments_purged_total";
/// Spare segments made from a purged segment instead of a new file (counter).
pub const SEGMENTS_RECYCLED_TOTAL: &str = "vellum_log_segments_recycled_total";
/// Failed attempts to prepare a spare segment (counter).
pub const SPARE_FAILURES_TOTAL: &str = "vellum_log_spare_failures_total";
/// 1 when a spare segment is ready (gauge).
pub const SPARE_READY: &str = "vellum_log_spare_ready";
/// Entry reads served from the volume rather than the hot window (counter).
pub const COLD_READS_TOTAL: &str = "vellum_log_cold_reads_total";
/// Entries copied forward by rewrites of laggard groups (counter).
pub const REWRITTEN_ENTRIES_TOTAL: &str = "vellum_log_rewritten_entries_total";
/// Groups the log asks the application to snapshot and purge (gauge).
pub const GROUPS_COMPACT_WANTED: &str = "vellum_log_groups_compact_wanted";
/// Gauge: raft groups the log hosts (group 0 included).
pub const GROUPS: &str = "vellum_log_groups";
/// Duration of the log's recovery at open (histogram).
pub const RECOVERY_DURATION: &str = "vellum_log_recovery_duration_seconds";
/// Bytes the recovery scanned (gauge).
pub const RECOVERY_SCANNED_BYTES: &str = "vellum_log_recovery_scanned_bytes";
/// Duration of one state machine apply call (histogram).
pub const APPLY_DURATION: &str = "vellum_raft_apply_duration_seconds";
/// Duration of a snapshot build (histogram).
pub const SNAPSHOT_BUILD_DURATION: &str = "vellum_snapshot_build_duration_seconds";
/// Size of the current snapshot (gauge).
pub const SNAPSHOT_BYTES: &str = "vellum_snapshot_bytes";
/// Client operations per proposed entry (histogram, the batcher).
pub const PROPOSAL_BATCH_ENTRIES: &str = "vellum_raft_proposal_batch_entries";
/// Client operations proposed, by label `result` (counter, the batcher).
pub const PROPOSALS_TOTAL: &str = "vellum_raft_proposals_total";
/// Entries a batcher lets be in flight now (gauge, the batcher's adaptive window).
pub const PROPOSALS_WINDOW: &str = "vellum_raft_proposals_window";
/// One stage of a client write's commit path, by label `stage` (docs/METRICS.md).
pub const STAGE_DURATION: &str = "vellum_commit_stage_duration_seconds";

/// Latency buckets from 50 us to 8 s, including etcd's edges (1 ms x 2^k, up to 8.192 s), so
/// etcd's dashboards and alert thresholds carry over.
pub const LATENCY_BUCKETS: &[f64] = &[
    0.000_05, 0.000_1, 0.000_2, 0.000_5, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128,
    0.256, 0.512, 1.024, 2.048, 4.096, 8.192,
];

/// Buckets for entry counts per batch.
pub const BATCH_BUCKETS: &[f64] =
    &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 4096.0];

/// Histograms and their buckets, for the exporter.
pub const HISTOGRAMS: &[(&str, &[f64])] = &[
    (DURABLE_WRITE_DURATION, LATENCY_BUCKETS),
    (FLUSH_DURATION, LATENCY_BUCKETS),
    (APPEND_DURATION, LATENCY_BUCKETS),
    (WRITER_BATCH_DURATION, LATENCY_BUCKETS),
    (SNAPSHOT_BUILD_DURATION, LATENCY_BUCKETS),
    (APPLY_DURATION, LATENCY_BUCKETS),
    (APPEND_BATCH_ENTRIES, BATCH_BUCKETS),
    (PROPOSAL_BATCH_ENTRIES, BATCH_BUCKETS),
    (STAGE_DURATION, LATENCY_BUCKETS),
];

/// Registers HELP text and units for every metric the engine and the store record.
pub fn describe() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    use vellum_engine::metric_names::cache as c;
    describe_counter!(c::HITS_TOTAL, "Page cache reads of a resident page.");
    describe_counter!(
        c::MISSES_TOTAL,
        "Page cache reads that went to the carrier (one read each, readahead included)."
    );
    describe_counter!(c::EVICTIONS_TOTAL, "Pages evicted from the page cache.");
    describe_counter!(
        c::READAHEAD_PAGES_TOTAL,
        "Pages read ahead along a file's extent, beyond what was asked."
    );
    describe_counter!(c::WRITEBACK_PAGES_TOTAL, "Dirty pages written back to the carrier.");
    describe_counter!(c::WRITEBACK_BYTES_TOTAL, Unit::Bytes, "Bytes written back.");
    describe_counter!(
        c::WRITEBACK_WRITES_TOTAL,
        "Carrier writes of writeback (contiguous dirty sectors go out as one)."
    );
    describe_gauge!(
        c::WRITEBACK_BUSY_SECONDS,
        Unit::Seconds,
        "Time spent in writeback carrier writes since open."
    );
    describe_counter!(
        c::BYPASSED_PAGES_TOTAL,
        "Pages read or written straight to the carrier because every frame was pinned or dirty."
    );
    describe_gauge!(c::DIRTY_PAGES, "Dirty pages in the page cache.");
    describe_gauge!(c::RESIDENT_PAGES, "Pages holding a block in the page cache.");
    describe_gauge!(c::CAPACITY_BYTES, Unit::Bytes, "The page cache's budget.");
    describe_histogram!(
        DURABLE_WRITE_DURATION,
        Unit::Seconds,
        "One write-through carrier write, until it is on stable storage (the store's fsync)."
    );
    describe_histogram!(
        FLUSH_DURATION,
        Unit::Seconds,
        "One carrier barrier (fdatasync), where any happen."
    );
    describe_counter!(WRITES_TOTAL, "Carrier writes, durable or not.");
    describe_counter!(WRITTEN_BYTES_TOTAL, Unit::Bytes, "Bytes written to the carrier.");
    describe_counter!(FLUSHES_TOTAL, "Carrier barriers (fdatasync calls) that reached the medium.");
    describe_histogram!(
        APPEND_DURATION,
        Unit::Seconds,
        "A raft log append, from the call until its entries are durable and its callback ran."
    );
    describe_histogram!(
        APPEND_BATCH_ENTRIES,
        "Entries made durable by one log write (group commit)."
    );
    describe_counter!(APPENDED_ENTRIES_TOTAL, "Log entries made durable.");
    describe_histogram!(
        WRITER_BATCH_DURATION,
        Unit::Seconds,
        "One pass of the log writer over everything queued."
    );
    describe_counter!(
        COMMITTED_CARRIED_TOTAL,
        "Committed log ids made durable as a frame of a log write that went out anyway."
    );
    describe_counter!(
        COMMITTED_SAVES_TOTAL,
        "Committed log ids that waited longer than the commit lag and got a meta write of their own."
    );
    describe_counter!(SEGMENTS_ROLLED_TOTAL, "Log segments activated.");
    describe_counter!(
        SEGMENTS_PURGED_TOTAL,
        "Log segments freed by purges (deleted, or kept for reuse)."
    );
    describe_counter!(
        SEGMENTS_RECYCLED_TOTAL,
        "Spare log segments made from a purged segment instead of a new zero-filled file."
    );
    describe_counter!(
        SPARE_FAILURES_TOTAL,
        "Failed attempts to prepare a spare log segment (each is retried)."
    );
    describe_gauge!(SPARE_READY, "1 while a spare log segment is ready for the next roll.");
    describe_counter!(
        COLD_READS_TOTAL,
        "Log entries read back from segments because they left the hot window."
    );
    describe_counter!(
        REWRITTEN_ENTRIES_TOTAL,
        "Log entries of laggard groups copied to the log's end so that old segments can be freed."
    );
    describe_gauge!(
        GROUPS_COMPACT_WANTED,
        "Raft groups that pin old log segments with too many live bytes to rewrite: snapshot and purge them."
    );
    describe_gauge!(
        GROUPS,
        "Raft groups the log hosts (group 0 included; created and dropped at run time)."
    );
    describe_gauge!(
        RECOVERY_DURATION,
        Unit::Seconds,
        "How long the last log recovery (open) took."
    );
    describe_gauge!(RECOVERY_SCANNED_BYTES, Unit::Bytes, "Bytes the last log recovery read.");
    describe_histogram!(
        SNAPSHOT_BUILD_DURATION,
        Unit::Seconds,
        "Building and committing one state-machine snapshot."
    );
    describe_gauge!(SNAPSHOT_BYTES, Unit::Bytes, "Size of the current snapshot.");
    describe_histogram!(
        APPLY_DURATION,
        Unit::Seconds,
        "Applying one batch of committed entries to the state machine."
    );
    describe_histogram!(
        PROPOSAL_BATCH_ENTRIES,
        "Client operations proposed together in one log entry (the proposal batcher)."
    );
    describe_counter!(
        PROPOSALS_TOTAL,
        "Client operations proposed, by result (committed, not_leader, failed, too_large: refused before it became an entry; unknown: appended, then lost to a new leader's log)."
    );
    describe_gauge!(
        PROPOSALS_WINDOW,
        "Entries the proposal batcher lets be in flight now: it adapts between 1 and its max_in_flight to the commit time (one where the disk bounds the commit, more where the CPU or network does)."
    );
    describe_histogram!(
        STAGE_DURATION,
        Unit::Seconds,
        "One stage of a client write's commit path, by stage: raft_write (client_write: leader append, replication, commit, apply), queued (waiting in an openraft 0.9 proposal batcher), replication_round_trip (leader: one AppendEntries with entries, until the follower answered), follower_append_rpc (follower: handling it)."
    );
}

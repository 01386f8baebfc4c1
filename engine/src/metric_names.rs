//! The names of the engine's metrics (Prometheus; docs/METRICS.md documents each).
//!
//! A name is a contract with dashboards and alerts, and with the crates above the engine,
//! which describe the metrics and give their histograms buckets. The names live here, apart
//! from the code that records them, so that naming a metric never means importing the layer
//! that records it (the raft store describes the carriers' metrics and never talks to a
//! carrier). Invariant: this module holds constants only and imports nothing.

/// The carriers' metrics: their writes, bytes and barriers, recorded by every carrier.
pub mod carrier {
    /// Metric name: histogram of durable (write-through) write latency, in seconds.
    pub const DURABLE_WRITE_DURATION: &str = "vellum_carrier_durable_write_duration_seconds";
    /// Metric name: histogram of cache-flush (barrier) latency, in seconds.
    pub const FLUSH_DURATION: &str = "vellum_carrier_flush_duration_seconds";
    /// Metric name: counter of carrier writes.
    pub const WRITES_TOTAL: &str = "vellum_carrier_writes_total";
    /// Metric name: counter of bytes written to the carrier.
    pub const WRITTEN_BYTES_TOTAL: &str = "vellum_carrier_written_bytes_total";
    /// Metric name: counter of cache flushes (barriers).
    pub const FLUSHES_TOTAL: &str = "vellum_carrier_flushes_total";
}

/// The page cache's metrics, published by `Volume::publish_metrics`.
pub mod cache {
    /// Metric name: counter of page reads served from the cache.
    pub const HITS_TOTAL: &str = "vellum_cache_hits_total";
    /// Metric name: counter of page reads that went to the carrier.
    pub const MISSES_TOTAL: &str = "vellum_cache_misses_total";
    /// Metric name: counter of pages evicted.
    pub const EVICTIONS_TOTAL: &str = "vellum_cache_evictions_total";
    /// Metric name: counter of pages read ahead of a request.
    pub const READAHEAD_PAGES_TOTAL: &str = "vellum_cache_readahead_pages_total";
    /// Metric name: counter of dirty pages written back.
    pub const WRITEBACK_PAGES_TOTAL: &str = "vellum_cache_writeback_pages_total";
    /// Metric name: counter of bytes written back.
    pub const WRITEBACK_BYTES_TOTAL: &str = "vellum_cache_writeback_bytes_total";
    /// Metric name: counter of carrier writes the writeback made.
    pub const WRITEBACK_WRITES_TOTAL: &str = "vellum_cache_writeback_writes_total";
    /// Metric name: counter of seconds spent in writeback carrier writes.
    pub const WRITEBACK_BUSY_SECONDS: &str = "vellum_cache_writeback_busy_seconds";
    /// Metric name: counter of pages that bypassed a full cache.
    pub const BYPASSED_PAGES_TOTAL: &str = "vellum_cache_bypassed_pages_total";
    /// Metric name: gauge of dirty pages.
    pub const DIRTY_PAGES: &str = "vellum_cache_dirty_pages";
    /// Metric name: gauge of resident pages.
    pub const RESIDENT_PAGES: &str = "vellum_cache_resident_pages";
    /// Metric name: gauge of the cache's budget in bytes.
    pub const CAPACITY_BYTES: &str = "vellum_cache_capacity_bytes";
}

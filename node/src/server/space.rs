//! The space guard: no Raft group may fill the node's volume.
//!
//! openraft builds a snapshot after a count of entries (`--snapshot-entries`) and keeps a
//! count behind it (`--snapshot-keep`). With large entries those counts are more bytes than a
//! volume holds (a batch of 64 writes of 4 KiB is one entry of 256 KiB: 1,000 of them are
//! 256 MiB), and a log append or a snapshot write that finds the volume full is fatal to the
//! Raft core: the node exits (code 4) and finds the same full volume when it restarts. Every
//! [`SPACE_EVERY`] the guard looks at the log and the volume:
//! - **Bytes, not counts.** While the log's segments take more than its share of the volume
//!   ([`log_budget`]: an eighth, at least two segments), each group with entries in it is
//!   asked for a snapshot, and once a snapshot covers entries still in its log, openraft
//!   purges the log up to it (`purge_log`, which ignores `--snapshot-keep`: a follower
//!   further behind is sent the snapshot instead). Segments, not the entries' bytes: every
//!   durable write takes whole blocks, so small writes one at a time fill segments many
//!   times faster than their bytes say.
//! - **Admission.** While the volume's free space is below what the next snapshots need (the
//!   applied state's bytes of every group, plus three log segments: [`reserve`]; not while
//!   a purge is about to free segments), this node refuses client puts (HTTP 507), compacts
//!   its log as if it had outgrown its share while more than the segment being written is
//!   active, and takes puts again once there is room: a segment above the reserve, or the
//!   reserve once compacting frees no more. Deletes pass (they free space) until less than one
//!   segment is left, and while a snapshot is being built, until the log has made a new
//!   segment since it was asked for: that segment was the build's slack, and a second one
//!   would take the room of the map it writes ([`slack_spent`]; this node's own deletes:
//!   the peers' appends to it wait for room beside its builds anyway). The room held for a
//!   build is not counted against deletes as such: refusing deletes while one is held
//!   refused nearly every delete on a full volume, the writes that free it. Deletes of keys
//!   that are not there write nothing while puts are refused ([`Space::puts_refused`]; a
//!   linearizable read answers them, `http/kv.rs`). Known limit: when the map has grown so
//!   that its next snapshot no longer fits, deletes can use up that room, and the node ends
//!   read-only (every write 507) until the volume has more space; it stays up and serves
//!   reads. The state a snapshot writes is the whole map, so a volume must hold the map
//!   twice: a full volume says so to the client instead of killing the node.
//! - **Room first.** The guard also takes over openraft's count policy (`--snapshot-entries`,
//!   openraft's own is `Never`): a snapshot is asked for only while the volume has room for
//!   it (the group's map and one segment, less than the puts' reserve, so that a snapshot
//!   still fits once puts stop; the room of snapshots asked for and not yet built is held
//!   back, so that several groups never share the same free bytes), since a snapshot write
//!   that finds the volume full is as fatal as an append.
//! - **A leader's snapshot too.** A snapshot a leader sends is installed only while the
//!   volume has room for it beside the snapshots being built ([`Space::hold_install`]);
//!   else the RPC gets 507 `no_space` and the leader tries again later. The node lags
//!   behind, and stays up.
//! - **A leader's appends too.** An append is taken only while the volume has room for it
//!   and a segment, and one of entries already committed (a follower catching up) only
//!   while the next snapshots still fit after it ([`Space::hold_append`]; none before the
//!   guard's first look); else 507, and the guard asks for snapshots at its next look and
//!   purges up to them. A follower behind more log than its volume holds takes it in steps.
//! - **The cluster's smallest volume.** Every Raft answer of a node says which client writes
//!   its volume takes ([`SPACE_HEADER`], [`Space::word`]), and a node that hears a peer
//!   refuse puts (or deletes) refuses them too, for [`PEER_WORD`] after the peer last said
//!   so ([`Space::heard`]): a leader sends every write to its followers, and an append that
//!   finds a follower's volume full stops that follower as surely as its own. As etcd's
//!   space alarm, one member's full volume stops the cluster's writes, not that member.
//!
//! Invariants: the guard only asks for what openraft does by itself (a snapshot; a purge of
//! entries a snapshot covers); a put is refused before it is proposed, never after; the
//! volume's free space is read off the async runtime (the volume's metadata lock may be held
//! across a commit); two snapshots (built, or installed) never count on the same free bytes,
//! and an append's bytes count against the free space until a look that began after it
//! was written.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use vellum_raft_store::log::LogCore;
use vellum_raft_store::v010::openraft::async_runtime::WatchReceiver;

use super::groups::Table;
use super::metrics::{VOLUME_FREE_BYTES, VOLUME_RESERVE_BYTES, WRITES_REFUSED_NO_SPACE};

/// How often the guard looks.
pub const SPACE_EVERY: Duration = Duration::from_millis(100);
/// The least time between two snapshot requests of one group (one builds meanwhile).
const SNAPSHOT_PAUSE: Duration = Duration::from_secs(1);
/// Log segments a purge leaves allocated: the one being written and the purged ones the log
/// recycles as spares (`LogConfig::recycled_segments`, 2 by default).
const KEPT_SEGMENTS: u64 = 3;
/// The longest the room of a snapshot asked for is held back while it is not seen built
/// (openraft ignores an ask while that group builds one, or a build may have failed).
const BUILD_HELD: Duration = Duration::from_secs(60);
/// Log segments of room kept beside the snapshots for puts to be taken: what the log may
/// take between the look that stops puts and the purge after the snapshot that follows
/// (its spare and recycled segments are already allocated, so not counted free).
const RESERVE_SEGMENTS: u64 = 3;
/// Log segments of room a snapshot needs beside the map it writes: what the log takes
/// while it is written. Below [`RESERVE_SEGMENTS`], so that a snapshot still fits once
/// puts stop.
const SNAPSHOT_SLACK_SEGMENTS: u64 = 1;
const _: () = assert!(SNAPSHOT_SLACK_SEGMENTS < RESERVE_SEGMENTS, "a snapshot fits once puts stop");

/// The header of every Raft answer that says which client writes the answering node's
/// volume takes, its free bytes and the puts' reserve: `all 1234 567` ([`Space::word`]).
pub const SPACE_HEADER: &str = "x-vellum-space";
/// How long a peer's word that its volume refuses client writes counts once it stops
/// saying it (a peer that stopped answering is not heard any more either).
pub const PEER_WORD: Duration = Duration::from_secs(2);

/// Why a client write is refused: the volume of `member` (this node's: `None`) has `free`
/// bytes, below the `reserve` puts need (or below a log segment, for deletes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoRoom {
    pub member: Option<u64>,
    pub free: u64,
    pub reserve: u64,
}

/// What the guard found last and what the peers said of their volumes; the write path and
/// the Raft port read it.
#[derive(Debug)]
pub struct Space {
    /// Puts are taken (free space at least the reserve). While they are refused, the guard
    /// compacts the log as if it had outgrown its share of the volume (while more than one
    /// segment is active).
    puts: AtomicBool,
    /// Deletes are taken (free space at least one segment).
    deletes: AtomicBool,
    /// A snapshot being built has seen the log make its slack's worth of new segments
    /// ([`slack_spent`]): this node's deletes wait for it. Not said to the peers: their
    /// appends to this node already wait for room beside the builds ([`Space::hold_append`]),
    /// and a word holds for [`PEER_WORD`], far longer than a build.
    slack_spent: AtomicBool,
    free: AtomicU64,
    /// The applied state of every group at the last look: what the next snapshots write.
    /// The puts' reserve ([`reserve`]) and the next snapshots' room ([`snapshots_room`])
    /// follow from it.
    state: AtomicU64,
    /// The log's segment size: the slack of a snapshot's room.
    segment: u64,
    /// Room held back for the snapshots the guard asked for and has not seen built.
    builds: AtomicU64,
    /// Room held back for the snapshot being installed (one at a time, `raft_api.rs`).
    install: AtomicU64,
    /// Bytes of a leader's appends being written, and of those written since the look that
    /// set `free` began ([`Space::hold_append`]): `free` does not count them yet.
    appending: AtomicU64,
    appended: AtomicU64,
    /// The guard has looked once: `free` is the volume's.
    looked: AtomicBool,
    /// An append was refused for its room since the guard last looked: it asks for
    /// snapshots and purges as if the log had outgrown its share of the volume.
    starved: AtomicBool,
    /// Until when (ms after `epoch`; 0: never) some peer's word refuses puts, or deletes.
    epoch: Instant,
    peer_puts_until: AtomicU64,
    peer_deletes_until: AtomicU64,
    /// The last peer that said its volume refuses a client write, and what it said.
    peer_word: Mutex<NoRoom>,
}

/// The room of the snapshot being installed, held back from the guard's asks until it is
/// dropped (the snapshot is written by then, and the volume's free space says so).
#[derive(Debug)]
pub struct InstallRoom(Arc<Space>);

impl Drop for InstallRoom {
    fn drop(&mut self) {
        self.0.install.store(0, Ordering::Release);
    }
}

/// Why a leader's append is not taken now ([`Space::hold_append`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppendRefused {
    /// The guard has not looked at the volume yet (the node has just started).
    NotLooked,
    /// `room` bytes are left for appends (the free space less the room held back), and it
    /// needs `need`.
    NoRoom { room: u64, need: u64 },
}

/// The room of a leader's append being written, counted against the volume's free space
/// until the guard's next look sees it written.
#[derive(Debug)]
pub struct AppendRoom {
    space: Arc<Space>,
    bytes: u64,
}

impl Drop for AppendRoom {
    fn drop(&mut self) {
        // Moved, not released: the look that set `free` may have begun before the write.
        self.space.appended.fetch_add(self.bytes, Ordering::AcqRel);
        self.space.appending.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

impl Space {
    /// The space state of a node whose log has segments of `segment` bytes.
    pub fn new(segment: u64) -> Space {
        Space {
            puts: AtomicBool::new(true),
            deletes: AtomicBool::new(true),
            slack_spent: AtomicBool::new(false),
            free: AtomicU64::new(0),
            state: AtomicU64::new(0),
            segment,
            builds: AtomicU64::new(0),
            install: AtomicU64::new(0),
            appending: AtomicU64::new(0),
            appended: AtomicU64::new(0),
            looked: AtomicBool::new(false),
            starved: AtomicBool::new(false),
            epoch: Instant::now(),
            peer_puts_until: AtomicU64::new(0),
            peer_deletes_until: AtomicU64::new(0),
            peer_word: Mutex::new(NoRoom { member: None, free: 0, reserve: 0 }),
        }
    }

    /// The free bytes puts need, by the last look ([`reserve`]; 0 before the first: nothing
    /// is known of the volume yet).
    fn reserve(&self) -> u64 {
        if !self.looked.load(Ordering::Acquire) {
            return 0;
        }
        reserve(self.state.load(Ordering::Relaxed), self.segment)
    }

    /// Milliseconds since `epoch`, from 1 (0 means never).
    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX).saturating_add(1)
    }

    /// `None` while a write (a put, or a delete when `put` is false) is taken by this node's
    /// volume and by every peer's that spoke within [`PEER_WORD`]; else whose volume refuses
    /// it, with its free bytes and the room puts need.
    pub fn refusal(&self, put: bool) -> Option<NoRoom> {
        let (taken, peer_until) = if put {
            (self.puts.load(Ordering::Acquire), &self.peer_puts_until)
        } else {
            let spent = self.slack_spent.load(Ordering::Acquire);
            (self.deletes.load(Ordering::Acquire) && !spent, &self.peer_deletes_until)
        };
        let refused = if !taken {
            NoRoom {
                member: None,
                free: self.free.load(Ordering::Relaxed),
                reserve: self.reserve(),
            }
        } else if self.now_ms() < peer_until.load(Ordering::Acquire) {
            *self.peer_word.lock().unwrap_or_else(PoisonError::into_inner)
        } else {
            return None;
        };
        metrics::counter!(WRITES_REFUSED_NO_SPACE).increment(1);
        Some(refused)
    }

    /// Whether client puts are refused now, by this node's volume or by a peer's word, without
    /// counting a refusal: a delete of a key that is not there then writes nothing
    /// (`http/kv.rs`).
    pub fn puts_refused(&self) -> bool {
        !self.puts.load(Ordering::Acquire)
            || self.now_ms() < self.peer_puts_until.load(Ordering::Acquire)
    }

    /// What this node's Raft answers say of its volume ([`SPACE_HEADER`]): which client
    /// writes it takes (`all`, `deletes` or `none`), its free bytes and the puts' reserve.
    pub fn word(&self) -> String {
        let takes = match (self.puts.load(Ordering::Acquire), self.deletes.load(Ordering::Acquire))
        {
            (true, _) => "all",
            (false, true) => "deletes",
            (false, false) => "none",
        };
        let (free, reserve) = (self.free.load(Ordering::Relaxed), self.reserve());
        format!("{takes} {free} {reserve}")
    }

    /// Takes `word`, what `peer` said of its volume ([`Space::word`]): while it refuses puts
    /// (or deletes), so does this node, for [`PEER_WORD`] after it last said so. A word that
    /// does not parse is ignored (an older peer says none).
    pub fn heard(&self, peer: u64, word: &str) {
        let mut parts = word.split_ascii_whitespace();
        let (Some(takes), Some(Ok(free)), Some(Ok(reserve)), None) = (
            parts.next(),
            parts.next().map(str::parse::<u64>),
            parts.next().map(str::parse::<u64>),
            parts.next(),
        ) else {
            return;
        };
        let deletes_too = match takes {
            "all" => return,
            "deletes" => false,
            "none" => true,
            _ => return,
        };
        let now = self.now_ms();
        let until = now.saturating_add(PEER_WORD.as_millis() as u64);
        *self.peer_word.lock().unwrap_or_else(PoisonError::into_inner) =
            NoRoom { member: Some(peer), free, reserve };
        if self.peer_puts_until.swap(until, Ordering::AcqRel) <= now {
            tracing::warn!(
                peer,
                free,
                reserve,
                "a peer's volume is nearly full: client puts are refused (507) here too until \
                 it has room again, so that no append finds it full"
            );
        }
        if deletes_too {
            self.peer_deletes_until.store(until, Ordering::Release);
        }
    }

    /// Holds back room for a snapshot of `bytes` that a leader sent, before it is installed:
    /// the snapshot and a segment of slack (the log goes on meanwhile), beside the snapshots
    /// the guard asked for. `Err` with the volume's free bytes and the room it needs when
    /// they do not fit: installing it would find the volume full, which stops the Raft core.
    pub async fn hold_install(
        self: &Arc<Self>,
        volume: &vellum_engine::Volume,
        bytes: u64,
    ) -> Result<InstallRoom, (u64, u64)> {
        let v = volume.clone();
        let free = tokio::task::spawn_blocking(move || {
            let info = v.info();
            info.free_blocks.saturating_mul(u64::from(info.layout.block_size))
        })
        .await
        .unwrap_or(0);
        let need = bytes.saturating_add(SNAPSHOT_SLACK_SEGMENTS * self.segment);
        // `free` was read now: appends written already are in it, not those being written.
        let room = free
            .saturating_sub(self.builds.load(Ordering::Acquire))
            .saturating_sub(self.appending.load(Ordering::Acquire));
        if room < need {
            return Err((free, need));
        }
        self.install.store(need, Ordering::Release);
        Ok(InstallRoom(Arc::clone(self)))
    }

    /// Holds back room for a leader's append of `bytes` (its RPC body: the entries' bytes,
    /// less than the whole blocks the log writes them in, which the segment of slack
    /// covers) before it goes to openraft: an append that finds the volume full stops the
    /// Raft core. Refused until the guard's first look, and when it does not fit:
    /// - every append needs its bytes and a segment of room (the log allocates whole
    ///   segments), the same floor below which client deletes are refused;
    /// - a `catch_up` append (all its entries already committed: no commit waits for this
    ///   node to take them, unless it is needed for the quorum because another member is
    ///   down) also needs room for the next snapshots after it (the applied state and a
    ///   segment): a node far behind takes the log in steps, each followed by a snapshot and
    ///   a purge, instead of filling its volume with a log it cannot compact.
    ///
    /// A refusal for room makes the guard ask for snapshots at its next look (as when the
    /// log outgrows its share of the volume: if there is room for them and none was asked
    /// for within [`SNAPSHOT_PAUSE`]) and purge up to them once built. The room counted is
    /// the guard's last look, less the snapshots' held room and the appends since that look
    /// (checked and counted in one step).
    pub fn hold_append(
        self: &Arc<Self>,
        bytes: u64,
        catch_up: bool,
    ) -> Result<AppendRoom, AppendRefused> {
        if !self.looked.load(Ordering::Acquire) {
            // The node has just started: nothing is known of its volume for a moment.
            return Err(AppendRefused::NotLooked);
        }
        let after = if catch_up {
            snapshots_room(self.state.load(Ordering::Relaxed), self.segment)
        } else {
            0
        };
        let need = bytes.saturating_add(self.segment).saturating_add(after);
        // Checked and counted in one step: appends of several groups (or a leader's retry)
        // at once never count on the same bytes.
        let mut appending = self.appending.load(Ordering::Acquire);
        loop {
            let held = [&self.builds, &self.install, &self.appended]
                .iter()
                .fold(appending, |sum, a| sum.saturating_add(a.load(Ordering::Acquire)));
            let room = self.free.load(Ordering::Relaxed).saturating_sub(held);
            if room < need {
                self.starved.store(true, Ordering::Release);
                return Err(AppendRefused::NoRoom { room, need });
            }
            match self.appending.compare_exchange_weak(
                appending,
                appending.saturating_add(bytes),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Ok(AppendRoom { space: Arc::clone(self), bytes }),
                Err(now) => appending = now,
            }
        }
    }

    /// Judges the last look: `free` bytes, the applied `state` of every group (what the next
    /// snapshots write; the puts' reserve is [`reserve`] of it), the bytes a purge about to
    /// run will free (`reclaimable`: log segments a new snapshot covers, beyond the ones the
    /// log keeps), and whether the log is `compacted` (no snapshot being built, and only the
    /// segment being written active or every group's applied entries in a snapshot and
    /// purged: no look to come frees more), and whether the log has spent the slack of a
    /// snapshot being built (`slack_spent`: [`slack_spent`]).
    fn set(&self, free: u64, state: u64, reclaimable: u64, compacted: bool, slack_spent: bool) {
        let segment = self.segment;
        let reserve = reserve(state, segment);
        self.free.store(free, Ordering::Relaxed);
        self.state.store(state, Ordering::Relaxed);
        // Once refused, puts wait for a segment more than the reserve while compacting can
        // still free some, so that a volume at the edge does not flip at every look. Once
        // the log is compacted, waiting for that segment would wait for ever (nothing frees
        // it but deletes), so the reserve is enough.
        let was = self.puts.load(Ordering::Acquire);
        let want = if was || compacted { reserve } else { reserve + segment };
        let puts = free.saturating_add(reclaimable) >= want;
        self.puts.store(puts, Ordering::Release);
        if was && !puts {
            tracing::warn!(
                free,
                reserve,
                "the volume is nearly full: client puts are refused (507) until there is room \
                 for the next snapshots; delete keys, or give the volume more space"
            );
        } else if !was && puts {
            tracing::info!(free, reserve, "the volume has room again: client puts are taken");
        }
        // Every write of the log takes whole blocks, deletes too: below one segment of room
        // they would fill what is left, and an append that finds no room stops the core.
        let deletes = free >= segment;
        if self.deletes.swap(deletes, Ordering::AcqRel) != deletes {
            tracing::warn!(free, deletes, "client deletes are taken: {deletes}");
        }
        // Nor may they take a build's room once its slack is spent: a snapshot write that
        // finds the volume full stops the core as surely ([`Space::refusal`] reads both).
        if self.slack_spent.swap(slack_spent, Ordering::AcqRel) != slack_spent {
            tracing::debug!(
                free,
                slack_spent,
                "a snapshot being built has its room and no more: client deletes wait for it"
            );
        }
        metrics::gauge!(VOLUME_FREE_BYTES).set(free as f64);
        metrics::gauge!(VOLUME_RESERVE_BYTES).set(reserve as f64);
        self.looked.store(true, Ordering::Release);
    }
}

/// Bytes of segments the log may take before the guard asks its groups for snapshots: an
/// eighth of the volume, and at least two segments.
pub fn log_budget(capacity: u64, segment: u64) -> u64 {
    (capacity / 8).max(2 * segment)
}

/// Free bytes the volume must keep for puts to be taken: the applied state of every group
/// (`state`, what the next snapshots write) and [`RESERVE_SEGMENTS`] log segments. A
/// snapshot is asked for down to [`SNAPSHOT_SLACK_SEGMENTS`] of them: once puts stop,
/// there is still room to snapshot and purge the log.
pub fn reserve(state: u64, segment: u64) -> u64 {
    state + RESERVE_SEGMENTS * segment
}

/// Free bytes the next snapshots of every group take: the applied state (`state`) and
/// [`SNAPSHOT_SLACK_SEGMENTS`] log segments, what the log takes while they are written.
fn snapshots_room(state: u64, segment: u64) -> u64 {
    state + SNAPSHOT_SLACK_SEGMENTS * segment
}

/// A snapshot the guard asked for and has not seen built yet.
#[derive(Debug, Clone, Copy)]
struct Build {
    /// The room it was given: the map's bytes and [`SNAPSHOT_SLACK_SEGMENTS`] segments.
    need: u64,
    /// The snapshot index it replaces: it is built once the group's is past it.
    replaces: u64,
    /// When it was asked for: its room is held for [`BUILD_HELD`] at most.
    at: Instant,
    /// The log's new segments when it was asked for (`SpareStatus::created`).
    made: u64,
}

/// Whether the log has made its slack's worth of new segments ([`SNAPSHOT_SLACK_SEGMENTS`])
/// since one of the snapshots being built was asked for, the log having made `made` new
/// segments so far: one more would take the room of the map that build writes. Counted in
/// the log's new segment files, not in the volume's free space, which the builds' own
/// writes lower too; a recycled segment takes no room, and a purge that frees some does
/// not give a build's slack back to the deletes until the build is seen.
fn slack_spent(building: &BTreeMap<u64, Build>, made: u64) -> bool {
    building.values().any(|b| made.saturating_sub(b.made) >= SNAPSHOT_SLACK_SEGMENTS)
}

/// Starts the guard over `groups` of `log` on `volume`, asking a group for a snapshot also
/// every `every` applied entries (`--snapshot-entries`: openraft's own policy is off, so
/// that no snapshot starts without room for it); it ends with `stop`.
pub fn spawn_guard(
    every: u64,
    space: Arc<Space>,
    groups: Arc<Table>,
    log: LogCore,
    volume: vellum_engine::Volume,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let layout = volume.info().layout;
    let (capacity, block) = (layout.capacity_bytes(), u64::from(layout.block_size));
    let segment = log.segment_bytes();
    let budget = log_budget(capacity, segment);
    tokio::spawn(async move {
        // Per group: when a snapshot was last asked for, and the purge last asked for.
        let mut asked: BTreeMap<u64, Instant> = BTreeMap::new();
        let mut purged: BTreeMap<u64, u64> = BTreeMap::new();
        // Snapshots asked for and not yet seen built, per group. Their bytes are not all
        // allocated yet, so the room they take is held back from the next asks.
        let mut building: BTreeMap<u64, Build> = BTreeMap::new();
        // The first look at once: the Raft port refuses appends until it is done.
        let mut first = true;
        loop {
            if !std::mem::take(&mut first) {
                tokio::select! {
                    () = tokio::time::sleep(SPACE_EVERY) => {}
                    _ = stop.changed() => return,
                }
            }
            if *stop.borrow() {
                return;
            }
            // Appends written before the free space is read are in it; the ones written
            // meanwhile count twice until the next look, never zero times.
            let seen = space.appended.load(Ordering::Acquire);
            // Read before the free space: a segment made in between is in the free space
            // and counts against the slack of the builds asked for below too (twice, never
            // zero times).
            let made = log.spare_status().created;
            let v = volume.clone();
            let Ok(free) = tokio::task::spawn_blocking(move || v.info().free_blocks).await else {
                return;
            };
            let free_bytes = free.saturating_mul(block);
            // A purge of entries a new snapshot covers is about to free log segments: the
            // free space is low only for the moment (the snapshot is written, the log not
            // yet purged), and what the purge frees counts for the puts' reserve.
            let mut purging = false;
            // The segments, not the entries' bytes: every durable write takes whole blocks,
            // so a run of small writes (deletes, one at a time) fills segments many times
            // faster than its entries' bytes grow.
            // An append refused for its room asks the same: compact what the node has.
            let used = log.space().0;
            let starved = space.starved.swap(false, Ordering::AcqRel);
            let grown = used > budget || starved;
            // So do refused puts, while more than the segment being written is active: the
            // room they wait for is what compacting frees (a purge frees or recycles only
            // the other segments, so with one active there is nothing to gain from a new
            // snapshot of the whole map).
            let refused = !space.puts.load(Ordering::Acquire);
            let over = grown || (refused && used > segment);
            let all = groups.all();
            building.retain(|id, b| {
                let now = all
                    .iter()
                    .find(|g| g.id == *id)
                    .and_then(|g| g.raft.metrics().borrow_watched().snapshot)
                    .map_or(0, |s| s.index);
                now <= b.replaces && b.at.elapsed() < BUILD_HELD
            });
            let held: u64 = building.values().map(|b| b.need).sum();
            // Compacting frees no more: none being built, and only the segment being written
            // active, or every group's applied entries in a snapshot and purged.
            let mut purged_all = true;
            let mut room = free_bytes
                .saturating_sub(held)
                .saturating_sub(space.install.load(Ordering::Acquire));
            for g in &all {
                let Ok(handle) = log.group(g.id) else { continue };
                let m = g.raft.metrics().borrow_watched().clone();
                let applied = m.last_applied.map_or(0, |a| a.index);
                let snapshot = m.snapshot.map_or(0, |s| s.index);
                let purged_to = m.purged.map_or(0, |p| p.index);
                let by_count = applied.saturating_sub(snapshot) >= every;
                let by_bytes = over && handle.live_bytes() > 0;
                // Counted for the reserve only when the log outgrew its share: refused puts
                // alone must not lift their own refusal before the purge has run.
                purging |= grown && by_bytes && snapshot > purged_to;
                purged_all &=
                    applied <= snapshot && (snapshot <= purged_to || handle.live_bytes() == 0);
                if by_bytes && snapshot > purged_to && purged.get(&g.id) != Some(&snapshot) {
                    purged.insert(g.id, snapshot);
                    tracing::info!(
                        group = g.id,
                        upto = snapshot,
                        "the log outgrew its share of the volume: purging up to the snapshot"
                    );
                    if let Err(e) = g.raft.trigger().purge_log(snapshot).await {
                        tracing::warn!(group = g.id, error = %e, "purge for the volume's space");
                    }
                    continue;
                }
                // Nothing applied past the snapshot: a new one would cover nothing more.
                if !(by_count || by_bytes)
                    || applied <= snapshot
                    || asked.get(&g.id).is_some_and(|t| t.elapsed() < SNAPSHOT_PAUSE)
                {
                    continue;
                }
                asked.insert(g.id, Instant::now());
                // A snapshot write that finds the volume full stops the Raft core: ask only
                // for one that fits (the map's bytes and a segment of slack).
                let need = g.kv.bytes() + SNAPSHOT_SLACK_SEGMENTS * segment;
                if room < need {
                    tracing::warn!(
                        group = g.id,
                        free = free_bytes,
                        room,
                        need,
                        "no room on the volume for this group's next snapshot: its log is not \
                         compacted until keys are deleted or the volume has more space"
                    );
                    continue;
                }
                tracing::info!(
                    group = g.id,
                    applied,
                    snapshot,
                    log_bytes = handle.live_bytes(),
                    segments_over_budget = over,
                    "snapshot"
                );
                room -= need;
                building.insert(g.id, Build { need, replaces: snapshot, at: Instant::now(), made });
                space.builds.fetch_add(need, Ordering::AcqRel);
                if let Err(e) = g.raft.trigger().snapshot().await {
                    tracing::warn!(group = g.id, error = %e, "snapshot for the volume's space");
                }
            }
            let held: u64 = building.values().map(|b| b.need).sum();
            space.builds.store(held, Ordering::Release);
            let state: u64 = all.iter().map(|g| g.kv.bytes()).sum();
            // A purge keeps the segment being written and turns up to `KEPT_SEGMENTS` of the
            // others into spares; it frees the rest.
            let reclaimable =
                if purging { log.space().0.saturating_sub(KEPT_SEGMENTS * segment) } else { 0 };
            let compacted = building.is_empty() && (used <= segment || purged_all);
            // A spent slack matters only while the free space is short of the builds' room
            // and a segment: past that, the next new segment cannot take a map's room.
            let spent = slack_spent(&building, made) && free_bytes < held.saturating_add(segment);
            space.set(free_bytes, state, reclaimable, compacted, spent);
            space.appended.fetch_sub(seen, Ordering::AcqRel);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_is_an_eighth_of_the_volume_and_at_least_two_segments() {
        assert_eq!(log_budget(64 << 20, 4 << 20), 8 << 20);
        assert_eq!(log_budget(64 << 20, 16 << 20), 32 << 20);
        assert_eq!(log_budget(4 << 30, 64 << 20), 512 << 20);
    }

    fn own(free: u64, reserve: u64) -> NoRoom {
        NoRoom { member: None, free, reserve }
    }

    #[test]
    fn puts_are_refused_below_the_reserve_and_deletes_below_a_segment() {
        let space = Space::new(2);
        assert_eq!(space.refusal(true), None);
        space.set(10, 5, 0, false, false);
        assert_eq!(space.refusal(true), Some(own(10, 11)), "puts stop below the reserve");
        assert_eq!(space.refusal(false), None, "deletes go on: they free space");
        space.set(1, 5, 0, false, false);
        assert_eq!(space.refusal(false), Some(own(1, 11)), "below a segment, deletes stop too");
        space.set(8, 5, 5, false, false);
        assert_eq!(space.refusal(true), None, "what a purge about to run frees counts");
        space.set(1, 5, 0, false, false);
        space.set(11, 5, 0, false, false);
        assert!(space.refusal(true).is_some(), "once refused, the reserve and a segment more");
        space.set(13, 5, 0, false, false);
        assert_eq!((space.refusal(true), space.refusal(false)), (None, None));
    }

    #[test]
    fn deletes_wait_for_a_build_once_the_log_made_its_slack_in_new_segments() {
        let build = |made| Build { need: 7, replaces: 0, at: Instant::now(), made };
        let mut building = BTreeMap::new();
        assert!(!slack_spent(&building, 9), "no build, no slack to spend");
        building.insert(1, build(4));
        assert!(!slack_spent(&building, 4), "asked for at 4 new segments, none made since");
        assert!(slack_spent(&building, 5), "one new segment is the build's slack");
        building.insert(2, build(5));
        assert!(slack_spent(&building, 5), "the oldest build's slack counts");
        building.remove(&1);
        assert!(!slack_spent(&building, 5), "seen built: the newer build has its slack");
        // The guard's judgement: a spent slack stops deletes at any free space, for a look.
        let space = Space::new(2);
        space.set(100, 5, 0, false, true);
        assert_eq!(space.refusal(false), Some(own(100, 11)), "the build keeps its room");
        assert_eq!(space.word(), "all 100 11", "not said: the peers' appends wait for room");
        space.set(100, 5, 0, false, false);
        assert_eq!(space.refusal(false), None, "the build is seen: deletes go on");
    }

    #[test]
    fn once_the_log_is_compacted_a_refused_volume_takes_puts_at_the_reserve() {
        let space = Space::new(2);
        space.set(10, 5, 0, false, false);
        space.set(12, 5, 0, false, false);
        assert!(space.refusal(true).is_some(), "a snapshot or a purge may still free room");
        space.set(12, 5, 0, true, false);
        assert_eq!(space.refusal(true), None, "nothing left to free: the reserve is enough");
        space.set(10, 5, 0, true, false);
        assert!(space.refusal(true).is_some(), "below the reserve, compacted or not");
    }

    #[test]
    fn a_node_refuses_what_a_peer_says_its_volume_refuses() {
        let (me, leader) = (Space::new(2), Space::new(2));
        assert_eq!(me.word(), "all 0 0");
        me.set(10, 5, 0, false, false);
        assert_eq!(me.word(), "deletes 10 11");
        leader.heard(3, &me.word());
        let peer = Some(NoRoom { member: Some(3), free: 10, reserve: 11 });
        assert_eq!(leader.refusal(true), peer, "the peer's refusal of puts holds here");
        assert_eq!(leader.refusal(false), None, "the peer takes deletes");
        me.set(1, 5, 0, false, false);
        assert_eq!(me.word(), "none 1 11");
        leader.heard(3, &me.word());
        assert_eq!(leader.refusal(false).and_then(|r| r.member), Some(3));
        // A peer that takes everything again does not lift another's word early, and words
        // that do not parse are ignored.
        for word in ["all 20 11", "", "none", "none x 1", "none 1 2 3", "full 1 2"] {
            leader.heard(2, word);
        }
        assert_eq!(leader.refusal(true).and_then(|r| r.member), Some(3));
        // The word counts for PEER_WORD after it was last said.
        leader.peer_puts_until.store(1, Ordering::Release);
        leader.peer_deletes_until.store(1, Ordering::Release);
        assert_eq!((leader.refusal(true), leader.refusal(false)), (None, None));
    }

    #[tokio::test]
    async fn a_sent_snapshot_is_installed_only_with_room_beside_the_builds() {
        let carrier = Box::new(vellum_engine::carrier::MemoryCarrier::new(16 << 20));
        let volume = vellum_engine::Volume::format(
            carrier,
            &vellum_engine::FormatOptions::default(),
            vellum_engine::VolumeOptions::default(),
        )
        .unwrap();
        let block = u64::from(volume.info().layout.block_size);
        let free = volume.info().free_blocks * block;
        let space = Arc::new(Space::new(1 << 20));
        let fits = free - (1 << 20);
        let held = space.hold_install(&volume, fits).await.expect("it fits");
        assert_eq!(space.install.load(Ordering::Acquire), free);
        drop(held);
        assert_eq!(space.install.load(Ordering::Acquire), 0, "dropped, it is no longer held");
        assert_eq!(space.hold_install(&volume, fits + 1).await.err(), Some((free, free + 1)));
        space.builds.store(block, Ordering::Release);
        assert!(space.hold_install(&volume, fits).await.is_err(), "a build's room is not shared");
    }

    #[test]
    fn an_append_needs_its_bytes_and_a_segment_and_catching_up_the_next_snapshots() {
        let space = Arc::new(Space::new(2));
        let no_room = |room, need| Some(AppendRefused::NoRoom { room, need });
        let refused = |r: Result<AppendRoom, AppendRefused>| r.err();
        assert_eq!(refused(space.hold_append(1, false)), Some(AppendRefused::NotLooked));
        // Free 20, a map of 5: the reserve is 5 + 3 segments, the next snapshots 5 + 1.
        space.set(20, 5, 0, false, false);
        assert_eq!(refused(space.hold_append(19, false)), no_room(20, 21), "a segment");
        assert_eq!(refused(space.hold_append(12, true)), no_room(20, 21), "snapshots");
        assert!(space.starved.swap(false, Ordering::AcqRel), "a refusal asks for a compaction");
        let held = space.hold_append(11, true).expect("it fits beside the snapshots");
        assert_eq!(refused(space.hold_append(8, false)), no_room(9, 10), "being written");
        drop(held);
        assert_eq!(refused(space.hold_append(8, false)), no_room(9, 10), "until a look");
        space.appended.fetch_sub(11, Ordering::AcqRel);
        space.set(9, 5, 0, false, false);
        assert!(space.hold_append(7, false).is_ok(), "the look counts it in the free space");
        space.builds.store(2, Ordering::Release);
        assert!(space.hold_append(6, false).is_err(), "a build's room is not an append's");
    }

    #[test]
    fn appends_at_once_never_count_on_the_same_room() {
        let space = Arc::new(Space::new(1 << 20));
        space.set(64 << 20, 0, 0, false, false);
        // Room for 63 appends of 1 MiB beside the segment of slack, taken by 8 threads.
        let held: Vec<AppendRoom> = std::thread::scope(|s| {
            let threads: Vec<_> = (0..8)
                .map(|_| {
                    s.spawn(|| {
                        (0..16)
                            .filter_map(|_| space.hold_append(1 << 20, false).ok())
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            threads.into_iter().flat_map(|t| t.join().unwrap()).collect()
        });
        assert_eq!(held.len(), 63);
        assert_eq!(space.appending.load(Ordering::Acquire), 63 << 20);
        drop(held);
        assert_eq!(space.appending.load(Ordering::Acquire), 0);
        assert_eq!(space.appended.load(Ordering::Acquire), 63 << 20, "counted until a look");
    }
}

//! The store's small records on arbitrary bytes: meta slots (and the recovery of a two-slot
//! file), the member record, the peer book. They decode or refuse, never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vellum_raft_store::log::internals::MetaState;
use vellum_raft_store::member::{Identity, decode_peers};

fuzz_target!(|data: &[u8]| {
    let _ = MetaState::decode(data);
    let mut file = data.to_vec();
    file.resize(8192, 0);
    let _ = MetaState::recover(&file, "fuzz");
    let _ = Identity::decode(data, b"member");
    let mut member = data.to_vec();
    member.resize(4096, 0);
    let _ = Identity::decode(&member, b"member");
    let _ = decode_peers(data, b"peers");
});

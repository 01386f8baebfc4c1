use super::*;

fn sample() -> Superblock {
    let layout = Layout::for_format(64 << 20, 4096, 0, None).unwrap();
    let uuid = Uuid([0xAB; 16]);
    Superblock {
        version: FORMAT_VERSION,
        state: VolumeState::Dirty,
        incompat: 0,
        ro_compat: 0,
        compat: 0,
        generation: 7,
        layout,
        layout_flags: 0,
        uuid,
        carrier_index: 0,
        carrier_count: 1,
        members: vec![Member { uuid: Uuid([0xCD; 16]), capacity_blocks: layout.total_blocks }],
        root: BlockRef { block: layout.image.start, checksum: 0x1234 },
        bitmap_checksum: 0,
        created_unix_ns: 42,
        journal: JournalFields::default(),
        member_paths: Vec::new(),
    }
}

/// Member 0's superblock of a volume of two members, and member 1's.
fn pair() -> (Superblock, Superblock) {
    let mut first = sample();
    first.carrier_count = 2;
    first.members.push(Member { uuid: Uuid([0xEF; 16]), capacity_blocks: 8192 });
    first.member_paths = vec![b"/srv/a.vlm".to_vec(), b"/dev/loop7".to_vec()];
    let mut second = first.clone();
    second.carrier_index = 1;
    second.state = VolumeState::Clean;
    second.layout = Layout::for_member(4096, 8192).unwrap();
    second.root = BlockRef::default();
    (first, second)
}

/// Patches `bytes` at `at` and recomputes the checksum, as a newer (or buggy) writer would.
fn patched(sb: &Superblock, slot: u8, at: usize, value: &[u8]) -> [u8; SUPERBLOCK_LEN] {
    let mut b = sb.encode(slot);
    b[at..at + value.len()].copy_from_slice(value);
    let crc = checksum::superblock(slot, &sb.uuid, &b[..CHECKSUM_AT]);
    b[CHECKSUM_AT..].copy_from_slice(&crc.to_le_bytes());
    b
}

#[test]
fn round_trip() {
    let sb = sample();
    for slot in 0..2 {
        assert_eq!(Superblock::decode(&sb.encode(slot), slot).unwrap(), sb);
    }
}

#[test]
fn bad_checksum_is_refused() {
    let mut b = sample().encode(0);
    b[GENERATION_AT] ^= 1;
    let e = Superblock::decode(&b, 0).unwrap_err();
    assert!(matches!(e, Error::Corrupt { reason: Corruption::Checksum { .. }, .. }), "{e:?}");
}

#[test]
fn superblock_in_the_wrong_slot_is_refused() {
    let b = sample().encode(0);
    let e = Superblock::decode(&b, 1).unwrap_err();
    assert!(matches!(e, Error::Corrupt { reason: Corruption::Checksum { .. }, .. }), "{e:?}");
}

#[test]
fn superblock_of_another_volume_does_not_verify_as_ours() {
    // Same bytes, other UUID: the checksum seed differs, so a forged UUID field fails.
    let sb = sample();
    let mut b = sb.encode(0);
    b[UUID_AT] ^= 0xFF;
    assert!(Superblock::decode(&b, 0).is_err());
}

#[test]
fn bad_magic_is_not_a_volume() {
    let mut b = sample().encode(0);
    b[0] = b'X';
    let e = Superblock::decode(&b, 0).unwrap_err();
    assert!(matches!(e, Error::Corrupt { reason: Corruption::BadMagic, .. }));
    let slots = [
        SlotRead { slot: 0, result: Superblock::decode(&[0; SUPERBLOCK_LEN], 0) },
        SlotRead { slot: 1, result: Superblock::decode(&[0; SUPERBLOCK_LEN], 1) },
    ];
    assert!(matches!(adoption_order(slots), Err(Error::NotAVolume)));
}

#[test]
fn version_above_supported_is_refused() {
    let b = patched(&sample(), 0, VERSION_AT, &2u32.to_le_bytes());
    let e = Superblock::decode(&b, 0).unwrap_err();
    assert!(
        matches!(e, Error::Unsupported(Unsupported::Version { found: 2, supported: 1 })),
        "{e:?}"
    );
}

#[test]
fn unknown_incompat_bit_is_refused() {
    let b = patched(&sample(), 1, INCOMPAT_AT, &(1u64 << 5).to_le_bytes());
    let e = Superblock::decode(&b, 1).unwrap_err();
    assert!(matches!(e, Error::Unsupported(Unsupported::IncompatFeatures(0x20))), "{e:?}");
}

#[test]
fn undefined_state_is_refused() {
    for state in [0u32, 3, u32::MAX] {
        let b = patched(&sample(), 0, STATE_AT, &state.to_le_bytes());
        let e = Superblock::decode(&b, 0).unwrap_err();
        assert!(
            matches!(e, Error::Unsupported(Unsupported::UndefinedState(s)) if s == state),
            "{e:?}"
        );
    }
}

#[test]
fn non_zero_reserved_is_refused() {
    for at in [RESERVED_AT, RESERVED_AT + 1000, CHECKSUM_AT - 1] {
        let b = patched(&sample(), 0, at, &[1]);
        let e = Superblock::decode(&b, 0).unwrap_err();
        assert!(
            matches!(e, Error::Unsupported(Unsupported::ReservedNonZero { field: "reserved" })),
            "{e:?}"
        );
    }
    let b = patched(&sample(), 0, MEMBERS_AT + MEMBER_LEN, &[1]);
    let e = Superblock::decode(&b, 0).unwrap_err();
    assert!(
        matches!(e, Error::Unsupported(Unsupported::ReservedNonZero { field: "member_table" })),
        "{e:?}"
    );
    let b = patched(&sample(), 0, LAYOUT_FLAGS_AT, &(1u32 << 9).to_le_bytes());
    let e = Superblock::decode(&b, 0).unwrap_err();
    assert!(
        matches!(e, Error::Unsupported(Unsupported::ReservedNonZero { field: "layout_flags" })),
        "{e:?}"
    );
}

#[test]
fn journal_fields_in_use_are_refused() {
    let b = patched(&sample(), 0, JOURNAL_FIELDS_AT + 8, &[1]);
    let e = Superblock::decode(&b, 0).unwrap_err();
    assert!(matches!(e, Error::Unsupported(Unsupported::JournalInUse)), "{e:?}");
}

#[test]
fn unknown_ro_compat_bit_requires_read_only() {
    let b = patched(&sample(), 0, RO_COMPAT_AT, &1u64.to_le_bytes());
    let sb = Superblock::decode(&b, 0).unwrap();
    assert!(sb.requires_read_only());
    // Unknown compat bits are simply ignored.
    let b = patched(&sample(), 0, COMPAT_AT, &1u64.to_le_bytes());
    assert!(!Superblock::decode(&b, 0).unwrap().requires_read_only());
}

#[test]
fn two_members_round_trip_with_their_paths() {
    let (first, second) = pair();
    for slot in 0..2 {
        assert_eq!(Superblock::decode(&first.encode(slot), slot).unwrap(), first);
        assert_eq!(Superblock::decode(&second.encode(slot), slot).unwrap(), second);
    }
    let g = first.geometry();
    assert_eq!(g.spans[1].base, first.layout.max_blocks);
    assert_eq!(g.layout().total_blocks, first.layout.total_blocks + 8192);
}

#[test]
fn a_member_table_that_places_no_member_is_refused() {
    let (first, _) = pair();
    // Entry 1 zero while carrier_count says 2.
    let b = patched(&first, 0, MEMBERS_AT + MEMBER_LEN, &[0; MEMBER_LEN]);
    assert!(matches!(
        Superblock::decode(&b, 0),
        Err(Error::Corrupt { reason: Corruption::BadValue { field: "member_capacity_blocks", .. }, .. })
    ));
    // A capacity that is not a multiple of 64 blocks.
    let b = patched(&first, 0, MEMBERS_AT + MEMBER_LEN + 16, &100u64.to_le_bytes());
    assert!(Superblock::decode(&b, 0).is_err());
    // carrier_count 1 with a second entry: the table past the count must be zero.
    let b = patched(&first, 0, CARRIER_COUNT_AT, &1u32.to_le_bytes());
    assert!(Superblock::decode(&b, 0).is_err());
}

#[test]
fn a_path_table_that_runs_past_its_area_or_leaves_bytes_is_refused() {
    let (first, _) = pair();
    let b = patched(&first, 0, PATHS_AT, &u16::MAX.to_le_bytes());
    assert!(matches!(
        Superblock::decode(&b, 0),
        Err(Error::Corrupt { reason: Corruption::BadValue { field: "member_paths", .. }, .. })
    ));
    let end = PATHS_AT + encode_paths(&first.member_paths, 2).len();
    let b = patched(&first, 0, end, &[1]);
    assert!(Superblock::decode(&b, 0).is_err());
    // One member: the area is reserved, zero.
    let b = patched(&sample(), 0, PATHS_AT, &[1]);
    assert!(matches!(
        Superblock::decode(&b, 0),
        Err(Error::Unsupported(Unsupported::ReservedNonZero { .. }))
    ));
}

#[test]
fn a_later_member_holds_identity_and_geometry_only() {
    let (_, second) = pair();
    let b = patched(&second, 0, ROOT_BLOCK_AT, &5u64.to_le_bytes());
    assert!(Superblock::decode(&b, 0).is_err(), "a root on a later member");
    let b = patched(&second, 0, STATE_AT, &2u32.to_le_bytes());
    assert!(Superblock::decode(&b, 0).is_err(), "a dirty later member");
    let mut other = second.clone();
    other.layout = Layout::for_format(8192 * 4096, 4096, 1 << 20, None).unwrap();
    let b = patched(&other, 0, 0, &MAGIC);
    assert!(Superblock::decode(&b, 0).is_err(), "a journal on a later member");
}

#[test]
fn several_members_with_member_zero_below_its_cap_are_refused() {
    let (mut first, _) = pair();
    first.incompat |= INCOMPAT_GROW;
    first.layout = Layout::for_growing_format(64 << 20, Some(128 << 20), 4096, 0, None).unwrap();
    first.members[0].capacity_blocks = first.layout.total_blocks;
    let b = first.encode(0);
    assert!(Superblock::decode(&b, 0).is_err());
}

#[test]
fn inconsistent_geometry_is_refused() {
    let sb = sample();
    let b = patched(&sb, 0, DATA_AT, &(sb.layout.data.start + 1).to_le_bytes());
    assert!(matches!(Superblock::decode(&b, 0), Err(Error::Corrupt { .. })));
}

#[test]
fn unsupported_slot_refuses_even_beside_a_good_one() {
    let sb = sample();
    let good = sb.encode(0);
    let newer = patched(&sb, 1, VERSION_AT, &9u32.to_le_bytes());
    let slots = [
        SlotRead { slot: 0, result: Superblock::decode(&good, 0) },
        SlotRead { slot: 1, result: Superblock::decode(&newer, 1) },
    ];
    assert!(matches!(adoption_order(slots), Err(Error::Unsupported(Unsupported::Version { .. }))));
}

#[test]
fn adoption_prefers_the_highest_generation() {
    let mut a = sample();
    let mut b = sample();
    a.generation = 10;
    b.generation = 11;
    let slots = [SlotRead { slot: 0, result: Ok(a) }, SlotRead { slot: 1, result: Ok(b) }];
    let order = adoption_order(slots).unwrap();
    assert_eq!((order[0].0, order[0].1.generation), (1, 11));
    assert_eq!((order[1].0, order[1].1.generation), (0, 10));
}

#[test]
fn offsets_match_format_md() {
    // FORMAT.md's superblock table lists these offsets; a change here is a format change.
    assert_eq!(
        [VERSION_AT, STATE_AT, INCOMPAT_AT, RO_COMPAT_AT, COMPAT_AT, GENERATION_AT, BLOCK_SIZE_AT],
        [8, 12, 16, 24, 32, 40, 48]
    );
    assert_eq!([LAYOUT_FLAGS_AT, UUID_AT, CARRIER_INDEX_AT, CARRIER_COUNT_AT], [52, 56, 72, 76]);
    assert_eq!(
        [TOTAL_BLOCKS_AT, BITMAP_AT, JOURNAL_AT, IMAGE_AT, DATA_AT],
        [80, 88, 104, 120, 136]
    );
    assert_eq!([ROOT_BLOCK_AT, ROOT_CHECKSUM_AT, BITMAP_CHECKSUM_AT], [152, 160, 164]);
    assert_eq!(
        [JOURNAL_FIELDS_AT, CREATED_AT, MEMBERS_AT, GROW_MAX_AT, RESERVED_AT, CHECKSUM_AT],
        [168, 200, 208, 592, 600, 4092]
    );
    assert_eq!(
        [JOURNAL_TAIL_AT, JOURNAL_SEQUENCE_AT, JOURNAL_LOST_FROM_AT, JOURNAL_FLAGS_AT],
        [168, 176, 184, 192]
    );
}

fn journaled() -> Superblock {
    let mut sb = sample();
    sb.layout = Layout::for_format(64 << 20, 4096, 1 << 20, None).unwrap();
    sb.members[0].capacity_blocks = sb.layout.total_blocks;
    sb.root.block = sb.layout.image.start;
    sb.incompat = INCOMPAT_JOURNAL;
    sb.journal = JournalFields { tail: 3, sequence: 9, lost_from: 0, flags: 0 };
    sb
}

#[test]
fn journal_fields_round_trip_and_their_rules_refuse() {
    let sb = journaled();
    assert_eq!(Superblock::decode(&sb.encode(0), 0).unwrap(), sb);
    let lost = Superblock {
        journal: JournalFields { lost_from: 4, flags: JOURNAL_LOSS, ..sb.journal },
        ..sb.clone()
    };
    assert_eq!(Superblock::decode(&lost.encode(1), 1).unwrap(), lost);
    let refuse = |at: usize, value: &[u8]| Superblock::decode(&patched(&sb, 0, at, value), 0);
    assert!(matches!(refuse(JOURNAL_FLAGS_AT, &[2]), Err(Error::Unsupported(_))));
    assert!(matches!(refuse(JOURNAL_LOST_FROM_AT, &[1]), Err(Error::Unsupported(_))));
    assert!(matches!(refuse(JOURNAL_FLAGS_AT + 4, &[1]), Err(Error::Unsupported(_))));
    assert!(matches!(refuse(JOURNAL_SEQUENCE_AT, &[0; 8]), Err(Error::Corrupt { .. })));
    assert!(matches!(refuse(JOURNAL_TAIL_AT, &256u64.to_le_bytes()), Err(Error::Corrupt { .. })));
    assert!(matches!(
        refuse(INCOMPAT_AT, &5u64.to_le_bytes()),
        Err(Error::Unsupported(Unsupported::IncompatFeatures(4)))
    ));
}

#[test]
fn a_growing_volume_keeps_its_cap_and_refuses_one_without_the_bit() {
    let mut sb = sample();
    sb.layout = Layout::for_growing_format(64 << 20, Some(1 << 30), 4096, 0, None).unwrap();
    sb.members[0].capacity_blocks = sb.layout.total_blocks;
    sb.root.block = sb.layout.image.start;
    sb.incompat = INCOMPAT_GROW;
    let back = Superblock::decode(&sb.encode(0), 0).unwrap();
    assert_eq!(back.layout.max_blocks, (1 << 30) / 4096);
    assert_eq!(back, sb);
    let e = Superblock::decode(&patched(&sb, 0, INCOMPAT_AT, &0u64.to_le_bytes()), 0).unwrap_err();
    assert!(matches!(e, Error::Unsupported(Unsupported::ReservedNonZero { .. })), "{e:?}");
    let small = (sb.layout.total_blocks - 64).to_le_bytes();
    assert!(matches!(
        Superblock::decode(&patched(&sb, 0, GROW_MAX_AT, &small), 0),
        Err(Error::Corrupt { .. })
    ));
}

#[test]
fn an_image_root_on_a_later_member_is_accepted_and_one_past_the_volume_refused() {
    let (mut first, _) = pair();
    let end = first.geometry().layout().total_blocks;
    // The image allocates across members: its root may lie on member 1.
    first.root.block = end - 1;
    assert_eq!(Superblock::decode(&first.encode(0), 0).unwrap(), first);
    first.root.block = end;
    assert!(matches!(
        Superblock::decode(&first.encode(0), 0),
        Err(Error::Corrupt { reason: Corruption::OutOfRange { .. }, .. })
    ));
}

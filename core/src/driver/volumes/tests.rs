use super::Publication;
use super::*;

fn record(name: &str, id: &str) -> VolumeRecord {
    let mut parameters = crate::model::attributes::Attributes::new();
    parameters.insert("kind".into(), "dir".into());
    VolumeRecord {
        name: name.to_string(),
        volume: Volume {
            volume_id: id.to_string(),
            capacity_bytes: 1 << 30,
            volume_context: parameters.clone(),
            accessible_topology: Vec::new(),
            content_source: None,
        },
        capabilities: vec![Capability::mount(AccessMode::SingleNodeWriter)],
        parameters,
        mutable_parameters: Default::default(),
        accessibility: None,
        capacity: CapacityRange::default(),
        node_expansion_required: false,
        published: Default::default(),
    }
}

fn published_to(mut r: VolumeRecord, nodes: &[&str]) -> VolumeRecord {
    for n in nodes {
        r.published.insert(
            n.to_string(),
            Publication {
                capability: Capability::mount(AccessMode::MultiNodeMultiWriter),
                readonly: false,
                publish_context: Default::default(),
                certain: true,
            },
        );
    }
    r
}

#[test]
fn a_record_reads_back_as_it_was_written_and_its_block_is_small() {
    let mut v = Volumes::default();
    let a = record("pvc-1", "vol-1");
    assert_eq!(v.insert(&a), None);
    assert_eq!(v.unpacked("vol-1"), Some(a.clone()));
    assert_eq!(v.unpacked("vol-2"), None);
    assert!(v.contains_key("vol-1") && !v.contains_key("vol-"));
    let block = Block::pack(&a);
    assert!(block.0.len() < 100, "{} bytes packed", block.0.len());
    assert_eq!(block.name(), "pvc-1");
    assert_eq!(block.id(), "vol-1");
    assert_eq!(format!("{v:?}"), format!("{{\"vol-1\": {a:?}}}"));
}

#[test]
fn a_name_finds_its_one_id_whatever_its_neighbours_are() {
    let mut v = Volumes::default();
    for (name, id) in [
        ("pvc-1", "vol-b"),
        ("pvc-10", "vol-a"),
        ("pvc", "vol-c"),
        ("pvc-1vol", "vol-d"),
        ("", "vol-e"),
    ] {
        v.insert(&record(name, id));
    }
    assert_eq!(v.named("pvc-1"), Some("vol-b"));
    assert_eq!(v.named("pvc"), Some("vol-c"));
    assert_eq!(v.named("pvc-1vol"), Some("vol-d"));
    assert_eq!(v.named("pvc-"), None, "a prefix of names is not a name");
    assert_eq!(v.named("pvc-1v"), None);
    assert_eq!(
        v.named(""),
        None,
        "a volume without a name is not found by one"
    );
    let names: Vec<_> = v.names().collect();
    assert_eq!(
        names,
        [
            ("pvc", "vol-c"),
            ("pvc-1", "vol-b"),
            ("pvc-10", "vol-a"),
            ("pvc-1vol", "vol-d")
        ]
    );
    assert_eq!(v.remove("vol-b").map(|r| r.name), Some("pvc-1".into()));
    assert_eq!(v.named("pvc-1"), None, "the name goes with its volume");
    assert_eq!(v.len(), 4);
    v.check_indexes().unwrap();
}

#[test]
fn names_and_ids_with_any_bytes_stay_apart() {
    let mut v = Volumes::default();
    v.insert(&record("a\0", "x"));
    v.insert(&record("a", "\0x"));
    v.insert(&record("\u{e9}", "y"));
    assert_eq!(v.named("a\0"), Some("x"));
    assert_eq!(v.named("a"), Some("\0x"));
    assert_eq!(v.named("\u{e9}"), Some("y"));
    assert_eq!(v.keys().collect::<Vec<_>>(), ["\0x", "x", "y"]);
}

#[test]
fn an_update_renames_and_republishes_through_every_index() {
    let mut v = Volumes::default();
    v.insert(&published_to(record("pvc-1", "vol-1"), &["n1", "n2"]));
    v.insert(&published_to(record("pvc-2", "vol-2"), &["n1"]));
    assert_eq!((v.published_to("n1"), v.published_to("n2")), (2, 1));
    let old = v.update("vol-1", |r| {
        r.published.remove("n2");
        r.name = "pvc-one".into();
        r.volume.volume_id = "stolen".into();
        7
    });
    assert_eq!(old, Some(7));
    assert_eq!(v.update("vol-9", |_| ()), None);
    assert_eq!((v.published_to("n1"), v.published_to("n2")), (2, 0));
    assert_eq!(v.named("pvc-one"), Some("vol-1"), "the id stays");
    assert_eq!(v.named("pvc-1"), None);
    v.update_all(|r| r.published.clear());
    assert_eq!(v.published_to("n1"), 0);
    v.check_indexes().unwrap();
    v.clear();
    assert!(v.is_empty() && v.names().next().is_none());
}

#[test]
fn changes_are_the_touched_ids_records_in_the_journals_encoding() {
    let mut v = Volumes::default();
    let a = record("pvc-1", "vol-1");
    v.insert(&a);
    v.insert(&record("pvc-2", "vol-2"));
    v.remove("vol-2");
    v.remove("vol-3");
    let changes = v.changes();
    assert_eq!(
        changes,
        vec![
            ("vol-1".to_string(), Some(encode(&a))),
            ("vol-2".to_string(), None),
        ]
    );
    assert!(v.changes().is_empty(), "taken once");
    let mut back = Volumes::default();
    back.load("vol-1", &encode(&a)).unwrap();
    assert_eq!(back, v, "equal by content");
    assert!(back.changes().is_empty(), "a loaded record is not a change");
    assert_eq!(
        back.load("vol-9", &encode(&a)),
        Err(RecordError::KeyMismatch("vol-1".into()))
    );
    assert_eq!(back.len(), 1, "a refused record is not kept");
    back.touch_all();
    assert_eq!(back.take_dirty().len(), 1);
    back.retouch(["vol-1".to_string()]);
    assert_eq!(back.changes().len(), 1);
}

#[test]
fn the_table_is_written_as_a_map_of_ids_to_records_as_it_always_was() {
    let mut v = Volumes::default();
    let (a, b) = (record("pvc-1", "vol-1"), record("", "vol-2"));
    v.insert(&a);
    v.insert(&b);
    let mut plain = BTreeMap::new();
    plain.insert("vol-1".to_string(), a.clone());
    plain.insert("vol-2".to_string(), b);
    let json = serde_json::to_string(&v).unwrap();
    assert_eq!(json, serde_json::to_string(&plain).unwrap());
    let back: Volumes = serde_json::from_str(&json).unwrap();
    assert_eq!(back, v);
    assert_eq!(back.named("pvc-1"), Some("vol-1"));
    assert_eq!(
        postcard::to_allocvec(&v).unwrap(),
        postcard::to_allocvec(&plain).unwrap()
    );
    let mut wrong = BTreeMap::new();
    wrong.insert("vol-9".to_string(), a);
    let e = serde_json::from_str::<Volumes>(&serde_json::to_string(&wrong).unwrap())
        .unwrap_err()
        .to_string();
    assert!(e.contains("\"vol-9\"") && e.contains("\"vol-1\""), "{e}");
}

#[test]
fn equal_tables_hash_alike_whatever_order_they_were_filled_in() {
    use std::hash::{BuildHasher, RandomState};
    let s = RandomState::new();
    let (mut x, mut y) = (Volumes::default(), Volumes::default());
    x.insert(&record("a", "1"));
    x.insert(&record("b", "2"));
    y.insert(&record("b", "2"));
    y.insert(&record("a", "1"));
    assert_eq!(x, y);
    assert_eq!(s.hash_one(&x), s.hash_one(&y));
    y.update("1", |r| r.node_expansion_required = true);
    assert_ne!(x, y);
}

#[test]
fn indexes_that_disagree_with_the_records_are_found() {
    let mut v = Volumes::default();
    v.insert(&published_to(record("pvc-1", "vol-1"), &["n1"]));
    v.on_node.insert("n1".into(), 2);
    assert!(v.check_indexes().unwrap_err().contains("per node"));
    v.on_node.insert("n1".into(), 1);
    v.by_name.clear();
    assert!(
        v.check_indexes()
            .unwrap_err()
            .contains("missing from the name index")
    );
}

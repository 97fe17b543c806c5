//! Arbitrary bytes as /proc/self/mountinfo: parsing never panics, and what
//! parses keeps its mount points.
#![no_main]
use libfuzzer_sys::fuzz_target;
use volplane_core::mountinfo;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(entries) = mountinfo::parse(&text) {
        for e in &entries {
            assert!(mountinfo::find_mount(&entries, &e.mount_point).is_some());
        }
    }
});

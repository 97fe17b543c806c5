//! Arbitrary text as manifests: loading never panics, and what loads
//! round-trips through JSON.
#![no_main]
use libfuzzer_sys::fuzz_target;
use volplane_core::model::parse_manifests;

fuzz_target!(|s: &str| {
    if let Ok((objects, _)) = parse_manifests(s) {
        for o in objects {
            let json = o.to_json().to_string();
            let (again, _) = parse_manifests(&json).expect("a loaded object's JSON loads");
            assert_eq!(again.first(), Some(&o));
        }
    }
});

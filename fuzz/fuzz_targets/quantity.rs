//! Arbitrary strings as quantities: parsing never panics, and a parsed
//! quantity prints to a string that parses back to the same value.
#![no_main]
use libfuzzer_sys::fuzz_target;
use volplane_core::model::Quantity;

fuzz_target!(|s: &str| {
    if let Ok(q) = Quantity::parse(s) {
        let printed = q.to_string();
        let again = Quantity::parse(&printed).unwrap_or_else(|e| panic!("{s:?} printed as {printed:?}, which does not parse: {e}"));
        assert_eq!(q, again, "{s:?} -> {printed:?}");
        let _ = q.bytes();
    }
});

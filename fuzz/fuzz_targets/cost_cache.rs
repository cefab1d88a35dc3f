//! Text as a cost-cache file: `CostCache::parse` (what `CostCache::load` runs on the file's text),
//! then, for a cache that parses, the target check, and a write-out that must parse back to the
//! same cache.
#![no_main]
use std::path::Path;

use collage_build::tune::{CostCache, TargetFingerprint};
use libfuzzer_sys::fuzz_target;

fuzz_target!(init: collage_fuzz::init(), |data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let path = Path::new("fuzz-cache.toml");
    let Ok(cache) = CostCache::parse(text, path) else {
        return;
    };
    let _ = cache.check_target(&TargetFingerprint::current("fuzz"), path);
    for t in cache.targets() {
        assert!(cache.entries_for_target(t).next().is_some());
    }
    let written = cache.to_toml();
    let back = CostCache::parse(&written, path)
        .unwrap_or_else(|e| panic!("a written cache does not parse back: {e}\n{written}"));
    assert_eq!(
        back, cache,
        "a written cache parses back to another cache:\n{written}"
    );
    assert_eq!(
        back.to_toml(),
        written,
        "writing is not a pure function of the entries"
    );
});

//! Compiled regular expressions, kept across evaluations.
//!
//! Patch for capw (see PATCHES.md): cel's `matches` and kube-cel's `find` and `findAll` compiled
//! their pattern on every call. A CRD's rules use a handful of literal patterns, evaluated on
//! every write, and compiling them was about two fifths of capw's CEL time. No crate caches
//! `regex::Regex` by pattern string in a way that fits a `fn` pointer overload, hence this map.

use regex::Regex;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

/// Patterns can come from data (`self.matches(self.pattern)`), so the map is bounded: when it
/// is full it starts again, which costs one compile per pattern in use.
const MAX_PATTERNS: usize = 512;

static COMPILED: LazyLock<Mutex<HashMap<String, Arc<Regex>>>> = LazyLock::new(Mutex::default);

/// The compiled form of `pattern`, shared: a `Regex` keeps its search caches in a pool that
/// every holder of the same `Arc` reuses.
pub(crate) fn compiled(pattern: &str) -> Result<Arc<Regex>, regex::Error> {
    if let Some(re) = COMPILED.lock().ok().and_then(|m| m.get(pattern).cloned()) {
        return Ok(re);
    }
    let re = Arc::new(Regex::new(pattern)?);
    if let Ok(mut m) = COMPILED.lock() {
        if m.len() >= MAX_PATTERNS {
            m.clear();
        }
        m.insert(pattern.to_owned(), re.clone());
    }
    Ok(re)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pattern_compiles_once_and_is_shared() {
        let a = compiled("^ab+c$").unwrap();
        let b = compiled("^ab+c$").unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert!(a.is_match("abbc"));
    }

    #[test]
    fn an_invalid_pattern_is_an_error_and_is_not_kept() {
        assert!(compiled("(foo").is_err());
        assert!(COMPILED.lock().unwrap().get("(foo").is_none());
    }

    #[test]
    fn the_map_is_bounded() {
        for i in 0..MAX_PATTERNS + 10 {
            compiled(&format!("^x{i}$")).unwrap();
        }
        assert!(COMPILED.lock().unwrap().len() <= MAX_PATTERNS);
    }
}

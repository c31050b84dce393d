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

/// Compiled patterns by their source.
#[derive(Default)]
struct Patterns(Mutex<HashMap<String, Arc<Regex>>>);

impl Patterns {
    fn compiled(&self, pattern: &str) -> Result<Arc<Regex>, regex::Error> {
        if let Some(re) = self.0.lock().ok().and_then(|m| m.get(pattern).cloned()) {
            return Ok(re);
        }
        let re = Arc::new(Regex::new(pattern)?);
        if let Ok(mut m) = self.0.lock() {
            if m.len() >= MAX_PATTERNS {
                m.clear();
            }
            m.insert(pattern.to_owned(), re.clone());
        }
        Ok(re)
    }
}

static COMPILED: LazyLock<Patterns> = LazyLock::new(Patterns::default);

/// The compiled form of `pattern`, shared: a `Regex` keeps its search caches in a pool that
/// every holder of the same `Arc` reuses.
pub(crate) fn compiled(pattern: &str) -> Result<Arc<Regex>, regex::Error> {
    COMPILED.compiled(pattern)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Each test has a map of its own: tests run in parallel, and one filling the shared map
    // would clear it under another.

    #[test]
    fn a_pattern_compiles_once_and_is_shared() {
        let p = Patterns::default();
        let a = p.compiled("^ab+c$").unwrap();
        let b = p.compiled("^ab+c$").unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert!(a.is_match("abbc"));
    }

    #[test]
    fn an_invalid_pattern_is_an_error_and_is_not_kept() {
        let p = Patterns::default();
        assert!(p.compiled("(foo").is_err());
        assert!(p.0.lock().unwrap().is_empty());
    }

    #[test]
    fn the_map_is_bounded() {
        let p = Patterns::default();
        for i in 0..MAX_PATTERNS + 10 {
            p.compiled(&format!("^x{i}$")).unwrap();
        }
        assert!(p.0.lock().unwrap().len() <= MAX_PATTERNS);
    }

    #[test]
    fn the_shared_map_answers_too() {
        assert!(compiled("^[a-z]+$").unwrap().is_match("abc"));
    }
}

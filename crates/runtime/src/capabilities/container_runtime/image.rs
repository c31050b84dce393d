//! The `containerRuntime.images` allow-list, matched against parsed image references.
//!
//! Text prefixes are not image references: `capw-node:*` as a prefix admits
//! `capw-node:5000/anything:tag`, which the engine reads as the repository `anything` on the
//! registry `capw-node:5000`. Both the pattern and the image are parsed as the distribution
//! spec and the engine parse them (`oci-spec`'s `Reference`: registry, repository, tag, digest,
//! with Docker Hub's `docker.io/library/` normalization), and compared part by part:
//!
//! - `REPOSITORY:*` admits that repository, on that registry, with any tag or digest;
//! - any other pattern is one exact reference: the same registry, repository, tag and digest
//!   (an image with no tag is `:latest`, as the engine reads it).

use oci_spec::distribution::Reference;

/// One entry of the allow-list, parsed.
#[derive(Debug, Clone, PartialEq)]
enum Pattern {
    /// `REPOSITORY:*`: the repository with any tag or digest.
    AnyTag {
        registry: String,
        repository: String,
    },
    Exact(Reference),
}

/// Why an allow-list entry cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "containerRuntime.images entry {pattern:?} is not an image reference ({why}): write an exact reference such as capw-node:0.1.0, or REPOSITORY:* for any tag of a repository"
)]
pub struct PatternError {
    pub pattern: String,
    why: String,
}

fn parse(pattern: &str) -> Result<Pattern, PatternError> {
    let bad = |why: String| PatternError {
        pattern: pattern.to_string(),
        why,
    };
    if let Some(name) = pattern.strip_suffix(":*") {
        // A repository alone, which parses with the default tag; the tag is then ignored.
        let r: Reference = name.parse().map_err(|e| bad(format!("{e}")))?;
        if name.contains('@') || r.tag() != Some("latest") || name.ends_with(":latest") {
            return Err(bad("only a repository may precede :*".into()));
        }
        return Ok(Pattern::AnyTag {
            registry: r.registry().to_string(),
            repository: r.repository().to_string(),
        });
    }
    if pattern.contains('*') {
        return Err(bad(
            "`*` stands only for the whole tag, as in REPOSITORY:*".into()
        ));
    }
    pattern
        .parse::<Reference>()
        .map(Pattern::Exact)
        .map_err(|e| bad(format!("{e}")))
}

/// The parsed allow-list of a grant.
#[derive(Debug, Clone, PartialEq)]
pub struct AllowList {
    patterns: Vec<Pattern>,
    /// Entries that do not parse: they admit nothing, and validation reports them.
    errors: Vec<PatternError>,
}

impl AllowList {
    pub fn new(entries: &[String]) -> AllowList {
        let (mut patterns, mut errors) = (vec![], vec![]);
        for e in entries {
            match parse(e) {
                Ok(p) => patterns.push(p),
                Err(err) => errors.push(err),
            }
        }
        AllowList { patterns, errors }
    }

    pub fn errors(&self) -> &[PatternError] {
        &self.errors
    }

    /// Whether `image` is admitted; an image that is not a reference never is.
    pub fn allows(&self, image: &str) -> bool {
        let Ok(r) = image.parse::<Reference>() else {
            return false;
        };
        self.patterns.iter().any(|p| match p {
            Pattern::AnyTag {
                registry,
                repository,
            } => r.registry() == registry && r.repository() == repository,
            Pattern::Exact(want) => {
                want.registry() == r.registry()
                    && want.repository() == r.repository()
                    && want.tag() == r.tag()
                    && want.digest() == r.digest()
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: &str = "sha256:86e0e091d0da6bde2456dbb48306f3956bbeb2eae1b5b9a43045843f69fe4aaa";

    #[test]
    fn patterns_match_parsed_references_not_text() {
        let list =
            |p: &[&str]| AllowList::new(&p.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        let default = list(&["capw-node:*"]);
        let cases: Vec<(&AllowList, String, bool)> = vec![
            (&default, "capw-node:0.1.0".into(), true),
            (&default, "capw-node".into(), true),
            (&default, "docker.io/library/capw-node:0.1.0".into(), true),
            (&default, format!("capw-node@{DIGEST}"), true),
            // A registry host and port followed by any repository: the hole this closes.
            (&default, "capw-node:5000/anything:tag".into(), false),
            (&default, "capw-node:5000/capw-node:0.1.0".into(), false),
            (&default, "capw-node-evil:0.1.0".into(), false),
            (&default, "evil/capw-node:0.1.0".into(), false),
            (&default, "CAPW-NODE:0.1.0".into(), false),
            (&default, "".into(), false),
        ];
        for (l, image, want) in cases {
            assert_eq!(l.allows(&image), want, "{image}");
        }
        let exact = list(&["registry.local:5000/team/node:1.2"]);
        assert!(exact.allows("registry.local:5000/team/node:1.2"));
        assert!(!exact.allows("registry.local:5000/team/node:1.3"));
        assert!(!exact.allows("registry.local/team/node:1.2"));
        assert!(!exact.allows(&format!("registry.local:5000/team/node:1.2@{DIGEST}")));
    }

    #[test]
    fn patterns_that_are_not_references_admit_nothing_and_say_why() {
        let l = AllowList::new(&[
            "capw-*".to_string(),
            "capw-node:0.1.0@*".to_string(),
            "Bad Name:*".to_string(),
        ]);
        assert_eq!(l.errors().len(), 3, "{:?}", l.errors());
        assert!(!l.allows("capw-node:0.1.0"));
        assert!(
            l.errors()[0].to_string().contains("REPOSITORY:*"),
            "{}",
            l.errors()[0]
        );
    }
}

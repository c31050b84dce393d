//! kube-apiserver's `--token-auth-file`: a CSV of `token,user,uid,"group1,group2"`, one user
//! per line (the groups column is optional).

use std::collections::HashMap;
use std::path::Path;

#[derive(Debug, thiserror::Error)]
/// Why the token file was refused.
pub enum TokenFileError {
    /// It could not be read.
    #[error("reading the token file {path}: {message}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        message: String,
    },
    /// A line is not `token,user,uid[,groups]`.
    #[error(
        "the token file {path}, line {line}: {message} (each line is token,user,uid[,\"group1,group2\"])"
    )]
    Line {
        /// The file.
        path: String,
        /// The line, from 1.
        line: u64,
        /// What is wrong with it.
        message: String,
    },
}

/// A user a static token names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaticUser {
    /// The user's name.
    pub name: String,
    /// Its groups, with `system:authenticated`.
    pub groups: Vec<String>,
}

/// The users of the file at `path`, by token.
pub fn read(path: &Path) -> Result<HashMap<String, StaticUser>, TokenFileError> {
    let text = std::fs::read_to_string(path).map_err(|e| TokenFileError::Read {
        path: path.display().to_string(),
        message: e.to_string(),
    })?;
    parse(&path.display().to_string(), &text)
}

fn parse(path: &str, text: &str) -> Result<HashMap<String, StaticUser>, TokenFileError> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .trim(csv::Trim::All)
        .comment(Some(b'#'))
        .from_reader(text.as_bytes());
    let mut users = HashMap::new();
    for record in reader.records() {
        let record = record.map_err(|e| TokenFileError::Line {
            path: path.into(),
            line: e.position().map(|p| p.line()).unwrap_or_default(),
            message: e.to_string(),
        })?;
        let line = record.position().map(|p| p.line()).unwrap_or_default();
        let field = |i: usize| record.get(i).unwrap_or_default().to_string();
        let (token, name) = (field(0), field(1));
        if record.len() < 3 || token.is_empty() || name.is_empty() {
            return Err(TokenFileError::Line {
                path: path.into(),
                line,
                message: "a line needs a token, a user name and a uid".into(),
            });
        }
        let mut groups: Vec<String> = field(3)
            .split(',')
            .map(str::trim)
            .filter(|g| !g.is_empty())
            .map(String::from)
            .collect();
        groups.push("system:authenticated".into());
        if users.insert(token, StaticUser { name, groups }).is_some() {
            return Err(TokenFileError::Line {
                path: path.into(),
                line,
                message: "this token is already given to another user".into(),
            });
        }
    }
    Ok(users)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubes_format_with_and_without_groups() {
        let users = parse(
            "t.csv",
            "# comment\nsecret1,alice,1001,\"team-a,viewers\"\nsecret2, bob ,1002\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            users.get("secret1"),
            Some(&StaticUser {
                name: "alice".into(),
                groups: vec![
                    "team-a".into(),
                    "viewers".into(),
                    "system:authenticated".into()
                ],
            })
        );
        assert_eq!(users.get("secret2").map(|u| u.name.as_str()), Some("bob"));
    }

    #[test]
    fn a_bad_line_is_named() {
        let e = parse("t.csv", "ok,alice,1\nonly-a-token\n")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            e.contains("t.csv, line 2") && e.contains("a token, a user name and a uid"),
            "{e}"
        );
        let e = parse("t.csv", "same,alice,1\nsame,bob,2\n")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("already given"), "{e}");
    }
}

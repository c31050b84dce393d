//! The subset of cloud-config that Cluster API bootstrap providers write and infrastructure
//! providers execute, as CAPD does: `write_files` (with `encoding`, `permissions`, `owner` and
//! `append`) then `runcmd`.
//!
//! One crate for every side: the bootstrap provider renders with it, and the Docker provider and
//! the host's simulated cloud parse with it, so what one writes the others read the same way.
//! Rendering goes through the YAML library, so any file content (leading whitespace, a `#`,
//! quotes, no trailing newline) comes back byte for byte.

#![warn(missing_docs)]

use base64::Engine;
use serde::{Deserialize, Serialize};

/// The first line of cloud-config user data.
pub const HEADER: &str = "#cloud-config";

/// cloud-init's marker for user data to render as a Jinja template, allowed before [`HEADER`].
pub const JINJA: &str = "## template: jinja";

/// Why user data is not cloud-config this crate can run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CloudConfigError {
    /// The data does not start with `#cloud-config`.
    #[error("the bootstrap data is not cloud-config (it must start with #cloud-config)")]
    NotCloudConfig,
    /// The data is not YAML of the cloud-config shape.
    #[error("the bootstrap data is not valid cloud-config YAML: {0}")]
    Yaml(String),
    /// A `write_files` path is relative.
    #[error("bootstrap data write_files[{index}].path {path:?} must be absolute")]
    RelativePath {
        /// The entry's index.
        index: usize,
        /// The path given.
        path: String,
    },
    /// A `write_files` entry has an encoding this crate does not decode.
    #[error(
        "bootstrap data write_files[{index}] ({path}) has encoding {encoding:?}; use plain text or b64"
    )]
    Encoding {
        /// The entry's index.
        index: usize,
        /// The file's path.
        path: String,
        /// The encoding given.
        encoding: String,
    },
    /// A `write_files` entry's content does not decode as its encoding says.
    #[error("bootstrap data write_files[{index}] ({path}) is not valid base64: {reason}")]
    Base64 {
        /// The entry's index.
        index: usize,
        /// The file's path.
        path: String,
        /// What the decoder said.
        reason: String,
    },
    /// A `runcmd` entry has no command.
    #[error("bootstrap data runcmd[{0}] is empty")]
    EmptyCommand(usize),
}

/// One `write_files` entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteFile {
    /// Where the file goes; absolute.
    pub path: String,
    /// The content, encoded as `encoding` says.
    #[serde(default)]
    pub content: String,
    /// Octal mode, such as `0600`; an unquoted YAML number is taken as written.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "permissions"
    )]
    pub permissions: Option<String>,
    /// `user:group`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// `b64` (or `base64`) for base64 content; plain text when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encoding: Option<String>,
    /// Append to the file instead of replacing it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub append: bool,
}

fn permissions<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(match Option::<serde_yaml::Value>::deserialize(d)? {
        Some(serde_yaml::Value::String(s)) => Some(s),
        Some(serde_yaml::Value::Number(n)) => Some(n.to_string()),
        _ => None,
    })
}

impl WriteFile {
    /// A plain-text file with a mode.
    pub fn new(path: impl Into<String>, content: impl Into<String>, permissions: &str) -> Self {
        WriteFile {
            path: path.into(),
            content: content.into(),
            permissions: Some(permissions.into()),
            ..WriteFile::default()
        }
    }

    /// The mode to write the file with: `permissions`, or `0644`.
    pub fn mode(&self) -> &str {
        self.permissions.as_deref().unwrap_or("0644")
    }

    fn is_base64(&self) -> bool {
        matches!(self.encoding.as_deref(), Some("b64" | "base64"))
    }

    /// The bytes to write, decoded.
    pub fn bytes(&self) -> Vec<u8> {
        if self.is_base64() {
            // `parse` checked the content, so this decodes.
            base64::engine::general_purpose::STANDARD
                .decode(self.content.trim())
                .unwrap_or_default()
        } else {
            self.content.as_bytes().to_vec()
        }
    }
}

/// A `runcmd` entry: a shell line, or an argv run without a shell.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Command {
    /// Run with `sh -c`.
    Shell(String),
    /// Run as is.
    Argv(Vec<String>),
}

/// cloud-config user data: files first, then commands.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CloudConfig {
    /// Files written before any command runs, in order.
    #[serde(default)]
    pub write_files: Vec<WriteFile>,
    /// Commands run one after the other; each must return.
    #[serde(default)]
    pub runcmd: Vec<Command>,
}

impl CloudConfig {
    /// Parses and checks user data: the header, the YAML, absolute paths, known encodings
    /// whose content decodes, and non-empty commands.
    pub fn parse(data: &str) -> Result<CloudConfig, CloudConfigError> {
        // Kubeadm's bootstrap provider starts its data with cloud-init's Jinja marker. As with
        // CAPD, the marker is accepted and the data is not rendered as a template.
        let body = data.trim_start();
        let body = body.strip_prefix(JINJA).map_or(body, str::trim_start);
        if !body.starts_with(HEADER) {
            return Err(CloudConfigError::NotCloudConfig);
        }
        let cc: CloudConfig =
            serde_yaml::from_str(data).map_err(|e| CloudConfigError::Yaml(e.to_string()))?;
        for (index, f) in cc.write_files.iter().enumerate() {
            if !f.path.starts_with('/') {
                return Err(CloudConfigError::RelativePath {
                    index,
                    path: f.path.clone(),
                });
            }
            match f.encoding.as_deref() {
                None | Some("" | "text/plain") => {}
                Some("b64" | "base64") => {
                    if let Err(e) =
                        base64::engine::general_purpose::STANDARD.decode(f.content.trim())
                    {
                        return Err(CloudConfigError::Base64 {
                            index,
                            path: f.path.clone(),
                            reason: e.to_string(),
                        });
                    }
                }
                Some(other) => {
                    return Err(CloudConfigError::Encoding {
                        index,
                        path: f.path.clone(),
                        encoding: other.into(),
                    });
                }
            }
        }
        let empty = cc.runcmd.iter().position(|c| match c {
            Command::Shell(s) => s.trim().is_empty(),
            Command::Argv(v) => v.is_empty(),
        });
        if let Some(i) = empty {
            return Err(CloudConfigError::EmptyCommand(i));
        }
        Ok(cc)
    }

    /// The user data: the header, then the YAML document.
    pub fn render(&self) -> String {
        // Serializing these types cannot fail: every field is a string, a bool or a list.
        let yaml = serde_yaml::to_string(self).unwrap_or_default();
        format!("{HEADER}\n{yaml}")
    }

    /// What `path` holds once every file is written: the last full write, followed by the
    /// appends after it.
    pub fn file(&self, path: &str) -> Option<Vec<u8>> {
        let mut content: Option<Vec<u8>> = None;
        for f in self.write_files.iter().filter(|f| f.path == path) {
            let bytes = f.bytes();
            match (&mut content, f.append) {
                (Some(c), true) => c.extend(bytes),
                _ => content = Some(bytes),
            }
        }
        content
    }

    /// Every `runcmd` entry as an argv. Shell lines are split on whitespace, which is all the
    /// commands capw's bootstrap provider writes need; a backgrounded service
    /// (`nohup CMD >LOG 2>&1 &`) is its command alone, for a runner that supervises it itself.
    pub fn argvs(&self) -> Vec<Vec<String>> {
        self.runcmd
            .iter()
            .map(|c| match c {
                Command::Argv(v) => v.clone(),
                Command::Shell(s) => {
                    let mut words = s.split_whitespace().peekable();
                    words.next_if_eq(&"nohup");
                    words
                        .take_while(|w| !w.starts_with('>') && !w.starts_with("2>") && *w != "&")
                        .map(str::to_string)
                        .collect()
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_content_survives_a_render_and_parse() {
        let contents = [
            "  starts with spaces\nthen not",
            "\tstarts with a tab",
            "# looks like a comment\n",
            "",
            "no trailing newline",
            "quotes ' and \" and : colons",
            "trailing spaces   \n\n\n",
            "|\n>\n- a list?",
        ];
        let cc = CloudConfig {
            write_files: contents
                .iter()
                .enumerate()
                .map(|(i, c)| WriteFile::new(format!("/etc/f{i}"), *c, "0600"))
                .collect(),
            runcmd: vec![
                Command::Shell("echo 'hi' > /tmp/x".into()),
                Command::Argv(vec!["touch".into(), "/run/done".into()]),
            ],
        };
        let text = cc.render();
        assert!(text.starts_with("#cloud-config\n"), "{text}");
        let back = CloudConfig::parse(&text).unwrap();
        assert_eq!(back, cc, "{text}");
        for (i, c) in contents.iter().enumerate() {
            assert_eq!(
                back.file(&format!("/etc/f{i}")),
                Some(c.as_bytes().to_vec())
            );
        }
    }

    #[test]
    fn encodings_appends_and_both_command_forms() {
        let cc = CloudConfig::parse(
            "#cloud-config\nwrite_files:\n- path: /etc/a\n  content: hi\n- path: /etc/a\n  content: ' there'\n  append: true\n- path: /etc/b\n  encoding: b64\n  content: aGVsbG8=\n  permissions: 0600\nruncmd:\n- nohup capw node-agent --node-name n1 >/var/log/a.log 2>&1 &\n- [touch, /x]\n",
        )
        .unwrap();
        assert_eq!(cc.file("/etc/a"), Some(b"hi there".to_vec()));
        assert_eq!(cc.file("/etc/b"), Some(b"hello".to_vec()));
        assert_eq!(cc.write_files[2].mode(), "0600");
        assert_eq!(cc.write_files[0].mode(), "0644");
        let argvs = cc.argvs();
        assert_eq!(argvs[0], vec!["capw", "node-agent", "--node-name", "n1"]);
        assert_eq!(argvs[1], vec!["touch", "/x"]);
    }

    #[test]
    fn the_jinja_marker_kubeadm_data_starts_with_is_accepted() {
        let cc = CloudConfig::parse(
            "## template: jinja\n#cloud-config\n\nwrite_files:\n-   path: /a\n    content: |\n      hi\nruncmd:\n  - echo ok\n",
        )
        .unwrap();
        assert_eq!(cc.file("/a"), Some(b"hi\n".to_vec()));
        assert_eq!(cc.argvs(), vec![vec!["echo", "ok"]]);
    }

    #[test]
    fn what_cannot_run_is_refused_by_name() {
        let cases = [
            ("#!/bin/sh\necho", CloudConfigError::NotCloudConfig),
            (
                "## template: jinja\n#!/bin/sh\necho",
                CloudConfigError::NotCloudConfig,
            ),
            (
                "#cloud-config\nwrite_files:\n- path: etc/a\n",
                CloudConfigError::RelativePath {
                    index: 0,
                    path: "etc/a".into(),
                },
            ),
            (
                "#cloud-config\nwrite_files:\n- path: /a\n  encoding: gz+b64\n",
                CloudConfigError::Encoding {
                    index: 0,
                    path: "/a".into(),
                    encoding: "gz+b64".into(),
                },
            ),
            (
                "#cloud-config\nruncmd:\n- []\n",
                CloudConfigError::EmptyCommand(0),
            ),
        ];
        for (data, want) in cases {
            assert_eq!(CloudConfig::parse(data), Err(want), "{data}");
        }
        assert!(matches!(
            CloudConfig::parse("#cloud-config\nruncmd: {a: 1}"),
            Err(CloudConfigError::Yaml(_))
        ));
        assert!(matches!(
            CloudConfig::parse(
                "#cloud-config\nwrite_files:\n- path: /a\n  encoding: b64\n  content: '!!'\n"
            ),
            Err(CloudConfigError::Base64 { .. })
        ));
    }
}

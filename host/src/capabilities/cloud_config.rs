//! The subset of cloud-config that Cluster API infrastructure providers execute, as CAPD does:
//! `write_files` then `runcmd`.

use serde::Deserialize;

/// Why bootstrap data could not be run.
#[derive(Debug, thiserror::Error)]
pub enum CloudConfigError {
    #[error("bootstrap data is not cloud-config (it must start with #cloud-config)")]
    NotCloudConfig,
    #[error("bootstrap data is not valid cloud-config YAML: {0}")]
    Yaml(String),
    #[error("runcmd[{0}] is empty")]
    EmptyCommand(usize),
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct WriteFile {
    pub path: String,
    #[serde(default)]
    pub content: String,
    #[serde(default)]
    pub permissions: Option<String>,
    #[serde(default)]
    pub owner: Option<String>,
}

/// A `runcmd` entry: either a shell line or an argv list.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum Command {
    Shell(String),
    Argv(Vec<String>),
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
pub struct CloudConfig {
    #[serde(default)]
    pub write_files: Vec<WriteFile>,
    #[serde(default)]
    pub runcmd: Vec<Command>,
}

impl CloudConfig {
    pub fn parse(data: &str) -> Result<CloudConfig, CloudConfigError> {
        if !data.trim_start().starts_with("#cloud-config") {
            return Err(CloudConfigError::NotCloudConfig);
        }
        let cc: CloudConfig =
            serde_yaml::from_str(data).map_err(|e| CloudConfigError::Yaml(e.to_string()))?;
        if let Some(i) = cc.argvs().iter().position(Vec::is_empty) {
            return Err(CloudConfigError::EmptyCommand(i));
        }
        Ok(cc)
    }

    /// Every `runcmd` entry as an argv. Shell lines are split on whitespace, which is all the
    /// commands capw's bootstrap provider writes need; a backgrounded service
    /// (`nohup CMD >LOG 2>&1 &`) is its command alone, since the simulated cloud runs it in
    /// the host anyway.
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

    pub fn file(&self, path: &str) -> Option<&str> {
        self.write_files
            .iter()
            .rev()
            .find(|f| f.path == path)
            .map(|f| f.content.as_str())
    }
}

/// The value of `--flag VALUE` or `--flag=VALUE` in an argv.
pub fn flag<'a>(argv: &'a [String], name: &str) -> Option<&'a str> {
    let long = format!("--{name}");
    let eq = format!("--{name}=");
    argv.iter().enumerate().find_map(|(i, a)| {
        if a == &long {
            argv.get(i + 1).map(String::as_str)
        } else {
            a.strip_prefix(&eq)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_files_and_both_command_forms() {
        let cc = CloudConfig::parse(
            "#cloud-config\nwrite_files:\n- path: /etc/a\n  content: hi\nruncmd:\n- nohup capw node-agent --node-name n1 >/var/log/a.log 2>&1 &\n- [touch, /x]\n",
        )
        .unwrap();
        assert_eq!(cc.file("/etc/a"), Some("hi"));
        let argvs = cc.argvs();
        assert_eq!(argvs[0], vec!["capw", "node-agent", "--node-name", "n1"]);
        assert_eq!(argvs[1], vec!["touch", "/x"]);
    }

    #[test]
    fn rejects_what_is_not_cloud_config() {
        assert!(matches!(
            CloudConfig::parse("#!/bin/sh\necho"),
            Err(CloudConfigError::NotCloudConfig)
        ));
        assert!(matches!(
            CloudConfig::parse("#cloud-config\nruncmd: {a: 1}"),
            Err(CloudConfigError::Yaml(_))
        ));
    }
}

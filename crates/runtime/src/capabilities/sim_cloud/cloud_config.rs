//! Cloud-config as the simulated cloud runs it: the shared `capw-cloud-config` crate (what the
//! bootstrap provider renders and the Docker provider parses), plus reading a flag out of a
//! `runcmd` argv.

pub use capw_cloud_config::{CloudConfig, CloudConfigError};

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
    fn flags_in_both_forms() {
        let argv: Vec<String> = ["capw", "apiserver", "--ca-cert", "/a", "--token-file=/t"]
            .map(String::from)
            .to_vec();
        assert_eq!(flag(&argv, "ca-cert"), Some("/a"));
        assert_eq!(flag(&argv, "token-file"), Some("/t"));
        assert_eq!(flag(&argv, "ca-key"), None);
    }
}

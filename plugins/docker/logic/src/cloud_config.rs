//! The bootstrap data as one shell script, run through exec. Only cloud-config's `write_files`
//! and `runcmd` are executed, as in CAPD; other modules are ignored.

use capw_cloud_config::{CloudConfig, Command, WriteFile};
use capw_sdk::ProviderError;

pub const SENTINEL: &str = "/run/cluster-api/bootstrap-success.complete";
const STARTED: &str = "/run/capw/bootstrap.started";
const FAILED: &str = "/run/capw/bootstrap.failed";
const LOG: &str = "/var/log/capw-bootstrap.log";

/// Where a machine's bootstrap stands, as the state files inside the container say.
#[derive(Debug, PartialEq)]
pub enum Progress {
    /// It was started by this call.
    Started,
    Running,
    Done,
    /// A command failed; the tail of its log.
    Failed(String),
}

/// Bootstrap data that is parsed and ready to run.
pub struct Bootstrap {
    files: Vec<WriteFile>,
    commands: Vec<String>,
}

fn quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

impl Bootstrap {
    /// Parses cloud-config; any other format, or a file it cannot write, is an `invalid-spec`
    /// error naming the field.
    pub fn parse(data: &str) -> Result<Bootstrap, ProviderError> {
        let cc = CloudConfig::parse(data).map_err(|e| {
            ProviderError::InvalidSpec(format!(
                "{e} (the docker provider runs cloud-config's write_files and runcmd)"
            ))
        })?;
        let commands = cc
            .runcmd
            .into_iter()
            .map(|c| match c {
                Command::Shell(line) => line,
                Command::Argv(argv) => argv.iter().map(|w| quote(w)).collect::<Vec<_>>().join(" "),
            })
            .collect();
        Ok(Bootstrap {
            files: cc.write_files,
            commands,
        })
    }

    /// One exec's script and arguments. It reports the progress; when bootstrap never started
    /// in this container it writes the provider ID and the files, then starts `prelude` and the
    /// commands in the background (they may take longer than an exec may) and waits up to 2 s
    /// for them before it answers. A marker file makes sure it never starts twice in one
    /// container.
    pub fn script(&self, provider_id: &str, prelude: &str) -> (String, Vec<String>) {
        let mut commands = String::new();
        for c in std::iter::once(prelude).chain(self.commands.iter().map(String::as_str)) {
            commands.push_str(c);
            commands.push('\n');
        }
        let script = format!(
            r#"set -e
if [ -e {SENTINEL} ]; then echo done; exit 0; fi
if [ -e {FAILED} ]; then echo failed; tail -n 20 {LOG}; exit 0; fi
if [ -e {STARTED} ]; then echo running; exit 0; fi
mkdir -p /run/capw /var/log
touch {STARTED}
printf '%s\n' "$1" > /run/capw/provider-id
shift
while [ $# -gt 0 ]; do
  mkdir -p "$(dirname "$1")"
  if [ "$5" = b64 ]; then dec="base64 -d"; else dec=cat; fi
  if [ "$4" = append ]; then printf '%s' "$2" | $dec >> "$1"; else printf '%s' "$2" | $dec > "$1"; fi
  chmod "$3" "$1"
  shift 5
done
{{ ( set -e
{commands}) >{LOG} 2>&1 </dev/null || touch {FAILED}; }} >/dev/null 2>&1 </dev/null &
# Most bootstrap data only starts services: wait briefly so the answer is usually final.
i=0
while [ $i -lt 40 ] && [ ! -e {SENTINEL} ] && [ ! -e {FAILED} ]; do sleep 0.05; i=$((i+1)); done
if [ -e {SENTINEL} ]; then echo done; elif [ -e {FAILED} ]; then echo failed; tail -n 20 {LOG}; else echo started; fi
"#
        );
        let mut args = vec![provider_id.to_string()];
        for f in &self.files {
            args.push(f.path.clone());
            args.push(f.content.clone());
            args.push(f.mode().into());
            args.push(if f.append { "append" } else { "write" }.into());
            args.push(if is_b64(f) { "b64" } else { "plain" }.into());
        }
        (script, args)
    }
}

/// Base64 content goes to the container as written and is decoded there, so any bytes arrive.
fn is_b64(f: &WriteFile) -> bool {
    matches!(f.encoding.as_deref(), Some("b64" | "base64"))
}

/// Reads the first line the script printed.
pub fn progress(stdout: &str) -> Option<Progress> {
    let (first, rest) = stdout.split_once('\n').unwrap_or((stdout, ""));
    match first.trim() {
        "started" => Some(Progress::Started),
        "running" => Some(Progress::Running),
        "done" => Some(Progress::Done),
        "failed" => Some(Progress::Failed(rest.trim().to_string())),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_table() {
        for (stdout, want) in [
            ("started\n", Some(Progress::Started)),
            ("running", Some(Progress::Running)),
            ("done\n", Some(Progress::Done)),
            (
                "failed\nline 1\nline 2\n",
                Some(Progress::Failed("line 1\nline 2".into())),
            ),
            ("", None),
            ("sh: syntax error\n", None),
        ] {
            assert_eq!(progress(stdout), want, "{stdout:?}");
        }
    }

    #[test]
    fn files_become_five_arguments_each_and_argv_commands_are_quoted() {
        let data = r#"#cloud-config
write_files:
- path: /etc/a
  content: "  starts with spaces"
  permissions: "0600"
- path: /etc/b
  content: aGk=
  encoding: b64
  append: true
runcmd:
- echo shell line
- [sh, -c, "echo 'quoted'"]
"#;
        let b = Bootstrap::parse(data).unwrap_or_else(|e| panic!("{e:?}"));
        let (script, args) = b.script("docker:////c-m", "prelude");
        assert_eq!(
            args,
            [
                "docker:////c-m",
                "/etc/a",
                "  starts with spaces",
                "0600",
                "write",
                "plain",
                "/etc/b",
                "aGk=",
                "0644",
                "append",
                "b64",
            ]
        );
        assert!(
            script.contains("prelude\necho shell line\n'sh' '-c' 'echo '\\''quoted'\\'''\n"),
            "{script}"
        );
    }

    #[test]
    fn what_it_cannot_run_is_an_invalid_spec() {
        for data in [
            "{\"ignition\": {}}",
            "#cloud-config\nwrite_files:\n- path: relative\n",
        ] {
            assert!(
                matches!(Bootstrap::parse(data), Err(ProviderError::InvalidSpec(_))),
                "{data}"
            );
        }
    }
}

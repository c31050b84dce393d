//! The cloud-init user data, byte for byte as CABPK's templates write it
//! (`bootstrap/kubeadm/pkg/cloudinit`): for the first control-plane Machine (`kubeadm init`), a
//! control-plane join and a worker join.
//!
//! Hand-written text rather than a YAML library, on purpose: upstream fills Go text templates
//! with raw values (file content indented six spaces, commands quoted as Go's `%q`), and the
//! point is to write the same bytes, quirks included: the init command is single-quoted and
//! the join command is not, an empty verbosity leaves two spaces before `&&`, and content
//! ending in a newline leaves a line of six spaces after it.

use crate::spec::{DiskSetup, File, KubeadmConfigSpec, Ntp, User};
use std::fmt::Write;

/// The header every document starts with. The Jinja line makes cloud-init render the whole
/// document as a template, as upstream's does.
const HEADER: &str = "## template: jinja\n#cloud-config\n";
/// Written only when the bootstrap command succeeded; infrastructure providers look for it.
pub const SENTINEL: &str = "/run/cluster-api/bootstrap-success.complete";
/// The kubeadm configuration files the user data writes.
pub const INIT_CONFIG: &str = "/run/kubeadm/kubeadm.yaml";
/// See [`INIT_CONFIG`].
pub const JOIN_CONFIG: &str = "/run/kubeadm/kubeadm-join-config.yaml";
const PLACEHOLDER: &str = "-   path: /run/cluster-api/placeholder\n    owner: root:root\n    permissions: '0640'\n    content: \"This placeholder file is used to create the /run/cluster-api sub directory in a way that is compatible with both Linux and Windows (mkdir -p /run/cluster-api does not work with Windows)\"";

/// Which Machine the user data is for, with its kubeadm documents (from
/// [`crate::documents`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// The first control-plane Machine: `kubeadm init`.
    Init {
        /// The ClusterConfiguration document.
        cluster_configuration: String,
        /// The InitConfiguration document.
        init_configuration: String,
    },
    /// Another control-plane Machine: `kubeadm join` with `controlPlane` set.
    ControlPlaneJoin {
        /// The JoinConfiguration document.
        join_configuration: String,
    },
    /// A worker: `kubeadm join`.
    WorkerJoin {
        /// The JoinConfiguration document.
        join_configuration: String,
    },
}

/// Upstream's `Indent`: every line of `s` prefixed with `n` spaces, so text ending in a newline
/// leaves a last line of `n` spaces.
pub fn indent(n: usize, s: &str) -> String {
    let pad = " ".repeat(n);
    format!(
        "{pad}{}",
        s.split('\n').collect::<Vec<_>>().join(&format!("\n{pad}"))
    )
}

/// Go's `%q` (`strconv.Quote`): double quotes, with `"` and `\` escaped, control characters as
/// Go escapes, and other non-printable characters as `\u`/`\U`.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            // Go's IsPrint: graphic characters and the ASCII space; other spaces and format
            // characters are escaped.
            c if c.is_control() || (c.is_whitespace() && c != ' ') || is_format(c) => {
                if (c as u32) < 0x10000 {
                    let _ = write!(out, "\\u{:04x}", c as u32);
                } else {
                    let _ = write!(out, "\\U{:08x}", c as u32);
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The Unicode format characters people meet in text (zero-width spaces and joiners, the
/// direction marks, the byte-order mark), which Go's `%q` escapes.
fn is_format(c: char) -> bool {
    matches!(c as u32, 0xad | 0x200b..=0x200f | 0x202a..=0x202e | 0x2060..=0x2064 | 0xfeff)
}

/// The `files` template: one `write_files` entry per file.
fn files<'a>(out: &mut String, files: impl IntoIterator<Item = &'a File>) {
    out.push_str("write_files:");
    for f in files {
        let _ = write!(out, "\n-   path: {}\n    ", f.path);
        if !f.encoding.is_empty() {
            let _ = write!(out, "encoding: \"{}\"\n    ", f.encoding);
        }
        if !f.owner.is_empty() {
            let _ = write!(out, "owner: {}\n    ", f.owner);
        }
        if !f.permissions.is_empty() {
            let _ = write!(out, "permissions: '{}'\n    ", f.permissions);
        }
        // A *bool: set at all, even to false, is written.
        if let Some(append) = f.append {
            let _ = write!(out, "append: {append}\n    ");
        }
        out.push_str("content: |\n");
        out.push_str(&indent(6, &f.content));
    }
}

fn commands(out: &mut String, commands: &[String]) {
    for c in commands {
        out.push_str("\n  - ");
        out.push_str(&go_quote(c));
    }
}

fn ntp(out: &mut String, ntp: &Ntp) {
    if !ntp.is_defined() {
        return;
    }
    out.push_str("\nntp:\n  ");
    if let Some(enabled) = ntp.enabled {
        let _ = write!(out, "enabled: {enabled}\n  ");
    }
    out.push_str("servers:");
    for s in &ntp.servers {
        let _ = write!(out, "\n    - {s}");
    }
}

fn users(out: &mut String, users: &[User]) {
    if users.is_empty() {
        return;
    }
    out.push_str("\nusers:");
    for u in users {
        let _ = write!(out, "\n  - name: {}", u.name);
        for (key, v) in [
            ("passwd", &u.passwd),
            ("gecos", &u.gecos),
            ("groups", &u.groups),
            ("homedir", &u.home_dir),
        ] {
            if !v.is_empty() {
                let _ = write!(out, "\n    {key}: {v}");
            }
        }
        if let Some(i) = u.inactive {
            let _ = write!(out, "\n    inactive: {i}");
        }
        if let Some(l) = u.lock_password {
            let _ = write!(out, "\n    lock_passwd: {l}");
        }
        for (key, v) in [
            ("shell", &u.shell),
            ("primary_group", &u.primary_group),
            ("sudo", &u.sudo),
        ] {
            if !v.is_empty() {
                let _ = write!(out, "\n    {key}: {v}");
            }
        }
        if !u.ssh_authorized_keys.is_empty() {
            out.push_str("\n    ssh_authorized_keys:");
            for k in &u.ssh_authorized_keys {
                let _ = write!(out, "\n      - {k}");
            }
        }
    }
}

/// cloud-init's partition type codes for upstream's names; anything else (a GPT GUID) passes
/// through.
fn partition_type(t: &str) -> &str {
    match t {
        "Linux" => "83",
        "LinuxSwap" => "82",
        "LinuxRAID" => "fd",
        "LVM" => "8e",
        "Fat32" => "0c",
        "NTFS" => "07",
        "LinuxExtended" => "85",
        other => other,
    }
}

fn disk_setup(out: &mut String, d: &DiskSetup) {
    if !d.is_defined() {
        return;
    }
    out.push_str("\ndisk_setup:");
    for p in &d.partitions {
        let _ = write!(out, "\n  {}:", p.device);
        if !p.table_type.is_empty() {
            let _ = write!(out, "\n    table_type: {}", p.table_type);
        }
        if p.disk_layout.is_empty() {
            // `{{ .Layout }}` of a nil *bool prints Go's "<nil>".
            let layout = p.layout.map_or("<nil>".to_string(), |l| l.to_string());
            let _ = write!(out, "\n    layout: {layout}");
        } else {
            out.push_str("\n    layout:");
            for l in &p.disk_layout {
                if l.partition_type.is_empty() {
                    let _ = write!(out, "\n      - {}", l.percentage);
                } else {
                    let _ = write!(
                        out,
                        "\n      - [{}, {}]",
                        l.percentage,
                        partition_type(&l.partition_type)
                    );
                }
            }
        }
        if let Some(o) = p.overwrite {
            let _ = write!(out, "\n    overwrite: {o}");
        }
    }
    out.push_str("\nfs_setup:");
    for f in &d.filesystems {
        let _ = write!(
            out,
            "\n  - label: {}\n    filesystem: {}\n    device: {}",
            f.label, f.filesystem, f.device
        );
        if !f.partition.is_empty() {
            let _ = write!(out, "\n    partition: {}", f.partition);
        }
        if let Some(o) = f.overwrite {
            let _ = write!(out, "\n    overwrite: {o}");
        }
        if !f.replace_fs.is_empty() {
            let _ = write!(out, "\n    replace_fs: {}", f.replace_fs);
        }
        if !f.extra_opts.is_empty() {
            out.push_str("\n    extra_opts:");
            for o in &f.extra_opts {
                let _ = write!(out, "\n      - {o}");
            }
        }
    }
}

fn mounts(out: &mut String, mounts: &[Vec<String>]) {
    if mounts.is_empty() {
        return;
    }
    out.push_str("\nmounts:");
    for m in mounts {
        out.push_str("\n  - ");
        for item in m {
            let _ = write!(out, "- {item}\n    ");
        }
    }
}

/// The user data for `role`. `certificates` come first (see [`crate::pki`]), then `files`: the
/// spec's files with `contentFrom` resolved, then any the join adds (the discovery
/// kubeconfig). Everything else comes from `spec`.
pub fn user_data(
    role: &Role,
    certificates: &[File],
    extra_files: &[File],
    spec: &KubeadmConfigSpec,
) -> String {
    let mut out = String::with_capacity(4096);
    out.push_str(HEADER);
    out.push('\n');
    files(&mut out, certificates.iter().chain(extra_files));
    let verbosity = spec.verbosity.map_or(String::new(), |v| format!("--v {v}"));
    let kubeadm_line = match role {
        Role::Init {
            cluster_configuration,
            init_configuration,
        } => {
            let _ = write!(
                out,
                "\n-   path: {INIT_CONFIG}\n    owner: root:root\n    permissions: '0640'\n    content: |\n      ---\n{}\n      ---\n{}\n",
                indent(6, cluster_configuration),
                indent(6, init_configuration)
            );
            format!(
                "'kubeadm init --config {INIT_CONFIG} {verbosity} && echo success > {SENTINEL}'"
            )
        }
        Role::ControlPlaneJoin { join_configuration } | Role::WorkerJoin { join_configuration } => {
            let separator = if matches!(role, Role::WorkerJoin { .. }) {
                "      ---\n"
            } else {
                ""
            };
            let _ = write!(
                out,
                "\n-   path: {JOIN_CONFIG}\n    owner: root:root\n    permissions: '0640'\n    content: |\n{separator}{}\n",
                indent(6, join_configuration)
            );
            format!("kubeadm join --config {JOIN_CONFIG} {verbosity} && echo success > {SENTINEL}")
        }
    };
    out.push_str(PLACEHOLDER);
    if !spec.boot_commands.is_empty() {
        out.push_str("\nbootcmd:");
        commands(&mut out, &spec.boot_commands);
    }
    out.push_str("\nruncmd:");
    commands(&mut out, &spec.pre_kubeadm_commands);
    out.push_str("\n  - ");
    out.push_str(&kubeadm_line);
    commands(&mut out, &spec.post_kubeadm_commands);
    ntp(&mut out, &spec.ntp);
    users(&mut out, &spec.users);
    disk_setup(&mut out, &spec.disk_setup);
    mounts(&mut out, &spec.mounts);
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{Filesystem, Partition, PartitionSpec};

    /// Upstream's `TestTemplateYAMLIndent`.
    #[test]
    fn indent_as_upstream() {
        assert_eq!(
            indent(4, "  some extra:\n    indenting\n"),
            "      some extra:\n        indenting\n    "
        );
    }

    #[test]
    fn go_quote_as_strconv_quote() {
        assert_eq!(
            go_quote("\"echo $(date) ': hello'\""),
            "\"\\\"echo $(date) ': hello'\\\"\""
        );
        assert_eq!(go_quote("a\tb\\c\u{1}"), "\"a\\tb\\\\c\\x01\"");
        assert_eq!(go_quote("héllo \u{200b}"), "\"héllo \\u200b\"");
    }

    fn spec() -> KubeadmConfigSpec {
        KubeadmConfigSpec {
            pre_kubeadm_commands: vec!["\"echo $(date) ': hello world!'\"".into()],
            post_kubeadm_commands: vec!["echo $(date) ': hello world!'".into()],
            ..Default::default()
        }
    }

    fn init() -> Role {
        Role::Init {
            cluster_configuration: "kind: ClusterConfiguration\n".into(),
            init_configuration: "kind: InitConfiguration\n".into(),
        }
    }

    /// Upstream's `TestNewInitControlPlaneCommands`.
    #[test]
    fn init_commands_as_upstream() {
        let mut s = spec();
        s.boot_commands = vec!["echo $(date)".into(), "echo 'hello BootCommands!'".into()];
        let out = user_data(&init(), &[], &[], &s);
        assert!(
            out.contains("bootcmd:\n  - \"echo $(date)\"\n  - \"echo 'hello BootCommands!'\""),
            "{out}"
        );
        assert!(out.contains(
            "runcmd:\n  - \"\\\"echo $(date) ': hello world!'\\\"\"\n  - 'kubeadm init --config /run/kubeadm/kubeadm.yaml  && echo success > /run/cluster-api/bootstrap-success.complete'\n  - \"echo $(date) ': hello world!'\""
        ), "{out}");
    }

    /// Upstream's `TestNewJoinControlPlaneCommands` and `TestNewJoinNodeCommands`.
    #[test]
    fn join_commands_as_upstream() {
        for role in [
            Role::ControlPlaneJoin {
                join_configuration: "kind: JoinConfiguration\n".into(),
            },
            Role::WorkerJoin {
                join_configuration: "kind: JoinConfiguration\n".into(),
            },
        ] {
            let out = user_data(&role, &[], &[], &spec());
            assert!(out.contains(
                "runcmd:\n  - \"\\\"echo $(date) ': hello world!'\\\"\"\n  - kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml  && echo success > /run/cluster-api/bootstrap-success.complete\n  - \"echo $(date) ': hello world!'\""
            ), "{out}");
        }
    }

    /// Upstream's `TestNewInitControlPlaneAdditionalFileEncodings`.
    #[test]
    fn file_encodings_as_upstream() {
        let files = [
            File {
                path: "/tmp/my-path".into(),
                encoding: "base64".into(),
                content: "aGk=".into(),
                ..Default::default()
            },
            File {
                path: "/tmp/my-other-path".into(),
                content: "hi".into(),
                ..Default::default()
            },
            File {
                path: "/tmp/existing-path".into(),
                append: Some(true),
                content: "hi".into(),
                ..Default::default()
            },
        ];
        let out = user_data(&init(), &[], &files, &KubeadmConfigSpec::default());
        for want in [
            "-   path: /tmp/my-path\n    encoding: \"base64\"\n    content: |\n      aGk=",
            "-   path: /tmp/my-other-path\n    content: |\n      hi",
            "-   path: /tmp/existing-path\n    append: true\n    content: |\n      hi",
        ] {
            assert!(out.contains(want), "{want}\n---\n{out}");
        }
    }

    /// Upstream's `TestNewInitControlPlaneDiskSetup`: tables, filesystems and mounts.
    #[test]
    fn disk_setup_as_upstream() {
        let s = KubeadmConfigSpec {
            disk_setup: DiskSetup {
                partitions: vec![Partition {
                    device: "test-device".into(),
                    layout: Some(true),
                    overwrite: Some(false),
                    table_type: "gpt".into(),
                    disk_layout: vec![],
                }],
                filesystems: vec![Filesystem {
                    device: "test-device".into(),
                    filesystem: "ext4".into(),
                    label: "test_disk".into(),
                    extra_opts: vec![
                        "-F".into(),
                        "-E".into(),
                        "lazy_itable_init=1,lazy_journal_init=1".into(),
                    ],
                    ..Default::default()
                }],
            },
            mounts: vec![vec!["test_disk".into(), "/var/lib/testdir".into()]],
            ..Default::default()
        };
        let out = user_data(&init(), &[], &[], &s);
        assert!(out.contains(
            "disk_setup:\n  test-device:\n    table_type: gpt\n    layout: true\n    overwrite: false"
        ), "{out}");
        assert!(out.contains(
            "fs_setup:\n  - label: test_disk\n    filesystem: ext4\n    device: test-device\n    extra_opts:\n      - -F\n      - -E\n      - lazy_itable_init=1,lazy_journal_init=1"
        ), "{out}");
        assert!(
            out.contains("mounts:\n  - - test_disk\n    - /var/lib/testdir"),
            "{out}"
        );

        let layouts = KubeadmConfigSpec {
            disk_setup: DiskSetup {
                partitions: vec![Partition {
                    device: "test-device".into(),
                    table_type: "gpt".into(),
                    disk_layout: vec![
                        PartitionSpec {
                            percentage: 30,
                            partition_type: "Linux".into(),
                        },
                        PartitionSpec {
                            percentage: 20,
                            partition_type: String::new(),
                        },
                        PartitionSpec {
                            percentage: 50,
                            partition_type: "LinuxRAID".into(),
                        },
                        PartitionSpec {
                            percentage: 100,
                            partition_type: "0FC63DAF-8483-4772-8E79-3D69D8477DE4".into(),
                        },
                    ],
                    ..Default::default()
                }],
                filesystems: vec![],
            },
            ..Default::default()
        };
        let out = user_data(&init(), &[], &[], &layouts);
        assert!(out.contains(
            "    layout:\n      - [30, 83]\n      - 20\n      - [50, fd]\n      - [100, 0FC63DAF-8483-4772-8E79-3D69D8477DE4]"
        ), "{out}");
    }

    /// Upstream's `TestOmittableFields`: unset and empty lists write the same bytes.
    #[test]
    fn unset_and_empty_render_the_same() {
        let empty = KubeadmConfigSpec {
            ntp: Ntp::default(),
            users: vec![],
            mounts: vec![],
            ..Default::default()
        };
        assert_eq!(
            user_data(&init(), &[], &[], &empty),
            user_data(&init(), &[], &[], &KubeadmConfigSpec::default())
        );
    }
}

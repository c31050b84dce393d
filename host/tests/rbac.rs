//! Authorization in the embedded API server, through kubectl as a user meets it: `capw
//! apiserver --authorization-mode RBAC` with a static user from `--token-auth-file` bound to
//! one namespace, `kubectl auth can-i`, and ServiceAccount tokens from `kubectl create token`
//! (TokenRequest) that work until they expire or their ServiceAccount is deleted.

// Test code: a failed step fails the test where it happened (workspace lints deny these elsewhere).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use support::ApiServer;

struct Env {
    server: ApiServer,
    home: PathBuf,
    dir: tempfile::TempDir,
}

impl Env {
    fn admin(&self, args: &[&str], stdin: Option<&str>) -> String {
        let (ok, out) = support::kubectl(&self.server.kubeconfig, &self.home, args, stdin);
        assert!(ok, "kubectl {args:?}: {out}");
        out
    }

    /// A kubeconfig for the same server that authenticates with `token`.
    fn kubeconfig_with(&self, name: &str, token: &str) -> PathBuf {
        let admin_token =
            std::fs::read_to_string(self.dir.path().join("api/token")).expect("token");
        let text = std::fs::read_to_string(&self.server.kubeconfig).expect("kubeconfig");
        assert!(text.contains(admin_token.trim()));
        let path = self.dir.path().join(format!("{name}.kubeconfig"));
        std::fs::write(&path, text.replace(admin_token.trim(), token)).expect("write");
        path
    }

    fn as_user(&self, kubeconfig: &Path, args: &[&str]) -> (bool, String) {
        support::kubectl(kubeconfig, &self.home, args, None)
    }

    /// `kubectl create token robot -n team-a --duration D` as the admin.
    fn robot_token(&self, duration: &str) -> (bool, String) {
        let args = [
            "create",
            "token",
            "robot",
            "-n",
            "team-a",
            "--duration",
            duration,
        ];
        support::kubectl(&self.server.kubeconfig, &self.home, &args, None)
    }
}

fn start() -> Env {
    let dir = tempfile::tempdir().expect("tempdir");
    let users = dir.path().join("users.csv");
    std::fs::write(&users, "alice-secret-token,alice,1001,\"team-a-people\"\n").expect("users");
    let server = ApiServer::start_with(
        &dir.path().join("api"),
        &[
            "--authorization-mode",
            "RBAC",
            "--token-auth-file",
            users.to_str().unwrap(),
            "--service-account-min-token-expiration",
            "5s",
        ],
    );
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).expect("home");
    let env = Env { server, home, dir };
    let crds = std::process::Command::new(env!("CARGO_BIN_EXE_capw"))
        .arg("crds")
        .output()
        .expect("capw crds");
    assert!(crds.status.success());
    env.admin(
        &["apply", "-f", "-"],
        Some(&String::from_utf8(crds.stdout).expect("utf8")),
    );
    env.admin(
        &[
            "wait",
            "--for=condition=Established",
            "crd/clusters.cluster.x-k8s.io",
        ],
        None,
    );
    env.admin(
        &["apply", "-f", "-"],
        Some(
            r#"
apiVersion: v1
kind: Namespace
metadata: {name: team-a}
---
apiVersion: v1
kind: Namespace
metadata: {name: team-b}
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata: {name: one, namespace: team-a}
spec: {}
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata: {name: two, namespace: team-b}
spec: {}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: cluster-reader, namespace: team-a}
rules:
- apiGroups: [cluster.x-k8s.io]
  resources: [clusters]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: people-read-clusters, namespace: team-a}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: cluster-reader}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: Group, name: team-a-people}
- {kind: ServiceAccount, name: robot}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: robot, namespace: team-a}
"#,
        ),
    );
    env
}

#[test]
fn a_user_bound_to_one_namespace_reads_it_is_refused_elsewhere_and_can_i_agrees() {
    let env = start();
    let alice = env.kubeconfig_with("alice", "alice-secret-token");
    let (ok, out) = env.as_user(&alice, &["get", "clusters", "-n", "team-a", "-o", "name"]);
    assert!(ok, "{out}");
    assert_eq!(out.trim(), "cluster.cluster.x-k8s.io/one");

    let (ok, out) = env.as_user(&alice, &["get", "clusters", "-n", "team-b"]);
    assert!(!ok, "{out}");
    assert!(
        out.contains(
            "Error from server (Forbidden): clusters.cluster.x-k8s.io is forbidden: User \"alice\" cannot list resource \"clusters\" in API group \"cluster.x-k8s.io\" in the namespace \"team-b\""
        ),
        "{out}"
    );
    let (ok, out) = env.as_user(&alice, &["delete", "cluster", "one", "-n", "team-a"]);
    assert!(!ok, "{out}");
    assert!(
        out.contains(
            "clusters.cluster.x-k8s.io \"one\" is forbidden: User \"alice\" cannot delete resource \"clusters\" in API group \"cluster.x-k8s.io\" in the namespace \"team-a\""
        ),
        "{out}"
    );
    env.admin(&["get", "cluster", "one", "-n", "team-a"], None);
    let (ok, out) = env.as_user(&alice, &["get", "namespaces"]);
    assert!(!ok && out.contains("at the cluster scope"), "{out}");

    // kubectl auth can-i sends a SelfSubjectAccessReview: its answers are the same rules'.
    for (args, want) in [
        (
            vec!["list", "clusters.cluster.x-k8s.io", "-n", "team-a"],
            "yes",
        ),
        (
            vec!["get", "clusters.cluster.x-k8s.io/one", "-n", "team-a"],
            "yes",
        ),
        (
            vec!["list", "clusters.cluster.x-k8s.io", "-n", "team-b"],
            "no",
        ),
        (
            vec!["delete", "clusters.cluster.x-k8s.io", "-n", "team-a"],
            "no",
        ),
        (vec!["create", "namespaces"], "no"),
    ] {
        let mut full = vec!["auth", "can-i"];
        full.extend(&args);
        let (ok, out) = env.as_user(&alice, &full);
        // kubectl warns on stderr (after stdout here) about a namespace flag it ignores.
        assert_eq!(out.lines().next(), Some(want), "can-i {args:?}: {out}");
        assert_eq!(ok, want == "yes", "can-i exits 0 only for yes: {args:?}");
    }
    // Impersonation: the admin (system:masters) may act as the ServiceAccount, and is then
    // held to its rules; alice may not impersonate it at all.
    let (ok, out) = support::kubectl(
        &env.server.kubeconfig,
        &env.home,
        &[
            "get",
            "clusters",
            "-n",
            "team-b",
            "--as=system:serviceaccount:team-a:robot",
        ],
        None,
    );
    assert!(
        !ok && out.contains(
            "User \"system:serviceaccount:team-a:robot\" cannot list resource \"clusters\""
        ),
        "{out}"
    );
    let (ok, out) = env.as_user(
        &alice,
        &[
            "get",
            "clusters",
            "-n",
            "team-a",
            "--as=system:serviceaccount:team-a:robot",
        ],
    );
    assert!(
        !ok && out.contains(
            "serviceaccounts \"robot\" is forbidden: User \"alice\" cannot impersonate resource \"serviceaccounts\" in API group \"\" in the namespace \"team-a\""
        ),
        "{out}"
    );
    // The admin token is system:masters.
    let out = env.admin(&["auth", "can-i", "delete", "namespaces"], None);
    assert_eq!(out.lines().next(), Some("yes"), "{out}");
    let out = env.admin(
        &["auth", "whoami", "-o", "jsonpath={.status.userInfo.groups}"],
        None,
    );
    assert!(out.contains("system:masters"), "{out}");
}

#[test]
fn a_service_account_token_works_until_it_expires_or_its_account_is_gone() {
    let env = start();
    let (ok, out) = env.robot_token("2s");
    assert!(!ok, "{out}");
    assert!(
        out.contains("spec.expirationSeconds: Invalid value: 2: may not specify a duration less than 5 seconds"),
        "{out}"
    );
    let (ok, token) = env.robot_token("6s");
    assert!(ok, "{token}");
    let token = token.trim();
    let issued = Instant::now();
    let robot = env.kubeconfig_with("robot", token);
    let (ok, out) = env.as_user(&robot, &["get", "clusters", "-n", "team-a", "-o", "name"]);
    assert!(ok, "{out}");
    assert_eq!(out.trim(), "cluster.cluster.x-k8s.io/one");
    let (ok, out) = env.as_user(&robot, &["get", "clusters", "-n", "team-b"]);
    assert!(
        !ok && out.contains(
            "User \"system:serviceaccount:team-a:robot\" cannot list resource \"clusters\""
        ),
        "{out}"
    );
    // Past its expiry the same token is refused as unauthenticated.
    std::thread::sleep(Duration::from_secs(7).saturating_sub(issued.elapsed()));
    let (ok, out) = env.as_user(&robot, &["get", "clusters", "-n", "team-a"]);
    assert!(!ok && out.contains("Unauthorized"), "{out}");

    // Deleting the ServiceAccount revokes a token that has not expired.
    let (ok, token) = env.robot_token("1h");
    assert!(ok, "{token}");
    let robot = env.kubeconfig_with("robot", token.trim());
    let (ok, out) = env.as_user(&robot, &["get", "clusters", "-n", "team-a"]);
    assert!(ok, "{out}");
    env.admin(&["delete", "serviceaccount", "robot", "-n", "team-a"], None);
    let (ok, out) = env.as_user(&robot, &["get", "clusters", "-n", "team-a"]);
    assert!(!ok && out.contains("Unauthorized"), "{out}");
}

//! How the provider names and labels what it creates, so every call can find it again.

/// The node image `capw image build` makes by default.
pub const DEFAULT_IMAGE: &str = "capw-node:0.1.0";
/// Where the workload API listens inside control-plane machines and the load balancer.
pub const API_PORT: u16 = 6443;
pub const LB_BACKENDS: &str = "/etc/capw/lb-backends";

pub const CLUSTER_LABEL: &str = "capw.dev/cluster";
pub const ROLE_LABEL: &str = "capw.dev/role";
pub const MACHINE_LABEL: &str = "capw.dev/machine";

/// A cluster's identity on the engine: names are global there, so the namespace is in it.
pub fn cluster_id(namespace: &str, cluster: &str) -> String {
    format!("{namespace}.{cluster}")
}

pub fn network(cluster: &str) -> String {
    format!("capw-{cluster}")
}

pub fn load_balancer(cluster: &str) -> String {
    format!("{cluster}-lb")
}

/// `<cluster>-<machine>`, which is also what the provider ID names; a Machine whose name
/// already starts with the cluster's (as the generated ones do) keeps its name, as CAPD's
/// `machineContainerName` does, so nodes read `quickstart-control-plane-…`, not
/// `quickstart-quickstart-control-plane-…`.
pub fn machine_container(cluster: &str, machine: &str) -> String {
    if machine.starts_with(cluster) {
        machine.to_string()
    } else {
        format!("{cluster}-{machine}")
    }
}

pub fn provider_id(container: &str) -> String {
    format!("docker:////{container}")
}

/// The image and the Kubernetes version a node runs. `customImage` names an image on the
/// engine, which the grant's `containerRuntime.images` must admit; a `kindest/node:<version>`
/// image (what CAPD's quick-start class patches in, with `+` written `_`) is the node image
/// `capw image build` makes, presenting `<version>`, since no registry serves kind's images here.
pub fn node_image<'a>(custom: &'a str, version: &str) -> (&'a str, String) {
    match custom {
        "" => (DEFAULT_IMAGE, version.to_string()),
        c => match c.strip_prefix("kindest/node:") {
            Some(tag) if !tag.is_empty() => (DEFAULT_IMAGE, tag.replace('_', "+")),
            _ => (c, version.to_string()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kindest_node_image_is_the_node_image_at_its_version() {
        assert_eq!(
            node_image("kindest/node:v1.29.10", "v1.28.13"),
            (DEFAULT_IMAGE, "v1.29.10".to_string())
        );
        assert_eq!(
            node_image("kindest/node:v1.29.10_build.1", ""),
            (DEFAULT_IMAGE, "v1.29.10+build.1".to_string())
        );
        assert_eq!(
            node_image("", "v1.28.13"),
            (DEFAULT_IMAGE, "v1.28.13".to_string())
        );
        assert_eq!(
            node_image("registry.local/node:x", "v1.28.13"),
            ("registry.local/node:x", "v1.28.13".to_string())
        );
    }

    #[test]
    fn the_cluster_prefix_is_not_doubled() {
        assert_eq!(machine_container("c1", "c1-md-0-abcde"), "c1-md-0-abcde");
        assert_eq!(machine_container("c1", "worker-1"), "c1-worker-1");
    }
}

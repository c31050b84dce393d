//! `crds/` holds the CRDs generated from the host's Rust types; this fails when they drift.
//! Regenerate with `cargo run -p capw-cli -- crds --write crds`.

// Test code: a failed step fails the test where it happened (workspace lints deny these elsewhere).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

#[test]
fn generated_crds_match_the_checked_in_files() {
    let dir = support::repo_root().join("crds");
    let mut expected: Vec<String> = vec![];
    for (file, crd) in capw_api::crds() {
        expected.push(file.to_string());
        let want = capw_api::crd_yaml(&crd).expect("render");
        let have = std::fs::read_to_string(dir.join(file)).unwrap_or_default();
        assert!(
            have == want,
            "crds/{file} is out of date with crates/api: run `cargo run -p capw-cli -- crds --write crds`"
        );
    }
    let mut present: Vec<String> = std::fs::read_dir(&dir)
        .expect("crds/")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    present.sort();
    expected.sort();
    assert_eq!(present, expected, "crds/ holds files no type generates");
}

#[test]
fn cluster_api_crds_carry_upstream_names_and_columns() {
    let crds = capw_api::crds();
    let (_, cluster) = &crds[0];
    assert_eq!(
        cluster.metadata.name.as_deref(),
        Some("clusters.cluster.x-k8s.io")
    );
    let v = &cluster.spec.versions[0];
    assert_eq!(v.name, "v1beta2");
    let cols: Vec<&str> = v
        .additional_printer_columns
        .as_ref()
        .expect("columns")
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    for want in ["Available", "CP Desired", "W Desired", "Phase", "Age"] {
        assert!(cols.contains(&want), "{cols:?}");
    }
    let schema = serde_json::to_value(&v.schema).expect("schema");
    for path in [
        "/openAPIV3Schema/properties/spec/properties/infrastructureRef/properties/apiGroup",
        "/openAPIV3Schema/properties/spec/properties/controlPlaneEndpoint/properties/host",
        "/openAPIV3Schema/properties/status/properties/initialization/properties/infrastructureProvisioned",
        "/openAPIV3Schema/properties/status/properties/failureDomains",
    ] {
        assert!(
            schema.pointer(path).is_some(),
            "Cluster schema lacks {path}"
        );
    }
    let (_, machine) = &crds[1];
    let schema = serde_json::to_value(&machine.spec.versions[0].schema).expect("schema");
    for path in [
        "/openAPIV3Schema/properties/spec/properties/providerID",
        "/openAPIV3Schema/properties/spec/properties/bootstrap/properties/dataSecretName",
        "/openAPIV3Schema/properties/status/properties/nodeRef/properties/name",
        "/openAPIV3Schema/properties/status/properties/initialization/properties/bootstrapDataSecretCreated",
    ] {
        assert!(
            schema.pointer(path).is_some(),
            "Machine schema lacks {path}"
        );
    }
}

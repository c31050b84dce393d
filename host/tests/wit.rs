//! The WIT packages in `wit/` parse and resolve, and the worlds export what the contract says.

// Test code: a failed step fails the test where it happened (workspace lints deny these elsewhere).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

#[test]
fn every_wit_package_parses_and_resolves() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../wit");
    let mut resolve = wit_parser::Resolve::default();
    // The host package first: the provider package's worlds include its imports world.
    resolve
        .push_dir(root.join("host"))
        .expect("wit/host parses");
    let (main, _) = resolve
        .push_dir(root.join("provider"))
        .expect("wit/provider parses and resolves against wit/host");
    let names: Vec<String> = resolve
        .packages
        .iter()
        .map(|(_, p)| p.name.to_string())
        .collect();
    assert!(
        names.contains(&"capw:provider@0.2.0".to_string()),
        "{names:?}"
    );
    assert!(names.contains(&"capw:host@0.2.0".to_string()), "{names:?}");
    for (world, exports) in [
        (
            "infrastructure-provider",
            vec![
                "plugin-info",
                "infrastructure-cluster",
                "infrastructure-machine",
            ],
        ),
        (
            "bootstrap-provider",
            vec!["plugin-info", "bootstrap-config"],
        ),
        (
            "control-plane-provider",
            vec!["plugin-info", "control-plane"],
        ),
    ] {
        let id = resolve
            .select_world(&[main], Some(world))
            .unwrap_or_else(|e| panic!("{world}: {e}"));
        let w = &resolve.worlds[id];
        let exported: Vec<String> = w
            .exports
            .keys()
            .map(|k| resolve.name_world_key(k))
            .collect();
        for e in exports {
            assert!(
                exported.iter().any(|x| x.contains(&format!("/{e}@"))),
                "{world} must export {e}: {exported:?}"
            );
        }
    }
}

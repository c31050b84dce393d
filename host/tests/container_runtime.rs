//! `capw:host/container-runtime` against the real Docker engine: create, start, exec with
//! output and exit code, inspect, list by label, stop and remove, networks, and the ownership
//! rule: a plugin never sees or touches a container it did not create, including one made with
//! the `docker` CLI. Needs a running dockerd (`.ci/run` starts one); it fails, never skips,
//! when there is none.

// Test code: a failed step fails the test where it happened (workspace lints deny these elsewhere).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use capw_runtime::capabilities::container_runtime::{
    ContainerGrant, ContainerRuntime, ContainerSpec, PortMapping, RuntimeError,
};
use std::process::Command;
use std::time::Duration;

/// A busybox image built locally with `docker import`: nothing is pulled.
fn image() -> String {
    let tag = "capw-test-busybox:1";
    let have = Command::new("docker")
        .args(["image", "inspect", tag])
        .output()
        .expect("the docker CLI runs (install docker.io; .ci/run does)");
    if have.status.success() {
        return tag.into();
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(&bin).expect("bin");
    std::fs::copy("/usr/bin/busybox", bin.join("busybox"))
        .expect("/usr/bin/busybox (install busybox-static; .ci/run does)");
    for applet in ["sh", "sleep", "echo", "cat", "touch", "mkdir", "ls"] {
        std::os::unix::fs::symlink("busybox", bin.join(applet)).expect("symlink");
    }
    let tar = Command::new("tar")
        .arg("-C")
        .arg(dir.path())
        .args(["-cf", "-", "."])
        .output()
        .expect("tar");
    let mut import = Command::new("docker")
        .args(["import", "-", tag])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("docker import");
    use std::io::Write;
    import
        .stdin
        .take()
        .expect("stdin")
        .write_all(&tar.stdout)
        .expect("image bytes");
    assert!(
        import.wait().expect("import").success(),
        "docker import failed"
    );
    tag.into()
}

/// The default grant, with the test image allowed.
fn grant(image: &str) -> ContainerGrant {
    ContainerGrant {
        images: vec![image.to_string()],
        ..ContainerGrant::default()
    }
}

fn spec(name: &str, image: &str) -> ContainerSpec {
    ContainerSpec {
        name: name.into(),
        image: image.into(),
        command: vec!["/bin/sleep".into(), "300".into()],
        env: vec![("GREETING".into(), "hello".into())],
        labels: vec![("capw.dev/cluster".into(), "c1".into())],
        network: None,
        ports: vec![PortMapping {
            container_port: 6443,
            host_port: 0,
        }],
        privileged: false,
    }
}

#[tokio::test]
async fn containers_are_made_run_and_removed_only_for_their_plugin() {
    let image = image();
    let rt = ContainerRuntime::connect(Duration::from_secs(30)).expect("engine");
    let name = format!("capw-test-{}", std::process::id());
    let _ = Command::new("docker")
        .args(["rm", "-f", &format!("docker.{name}")])
        .output();

    let net = format!("capw-test-net-{}", std::process::id());
    rt.create_network("docker", &net).await.expect("network");
    rt.create(
        "docker",
        &grant(&image),
        ContainerSpec {
            network: Some(net.clone()),
            ..spec(&name, &image)
        },
    )
    .await
    .expect("create");
    rt.start("docker", &name).await.expect("start");
    let info = rt.inspect("docker", &name).await.expect("inspect");
    assert!(info.running);
    assert_eq!(info.name, name);
    assert!(!info.addresses.is_empty(), "no address from inspect");
    assert!(
        info.ports
            .iter()
            .any(|p| p.container_port == 6443 && p.host_port > 0),
        "port 6443 is not published on a free host port"
    );
    assert!(
        info.labels
            .contains(&("capw.dev/plugin".to_string(), "docker".to_string()))
    );

    let out = rt
        .exec(
            "docker",
            &name,
            vec![
                "/bin/sh".into(),
                "-c".into(),
                "echo $GREETING; echo oops >&2; exit 3".into(),
            ],
        )
        .await
        .expect("exec");
    assert_eq!(out.exit_code, 3);
    assert_eq!(out.stdout.trim(), "hello");
    assert_eq!(out.stderr.trim(), "oops");

    let listed = rt
        .list("docker", vec![("capw.dev/cluster".into(), "c1".into())])
        .await
        .expect("list");
    assert!(listed.iter().any(|c| c.name == name));
    let none = rt
        .list("docker", vec![("capw.dev/cluster".into(), "other".into())])
        .await
        .expect("list");
    assert!(none.iter().all(|c| c.name != name));

    // Another plugin sees nothing of it.
    assert!(matches!(
        rt.inspect("other-plugin", &name).await,
        Err(RuntimeError::NotFound(_))
    ));
    assert!(matches!(
        rt.remove("other-plugin", &name).await,
        Err(RuntimeError::NotFound(_))
    ));
    assert!(
        rt.list("other-plugin", vec![])
            .await
            .expect("list")
            .is_empty()
    );

    rt.stop("docker", &name).await.expect("stop");
    assert!(!rt.inspect("docker", &name).await.expect("inspect").running);
    rt.remove("docker", &name).await.expect("remove");
    assert!(matches!(
        rt.inspect("docker", &name).await,
        Err(RuntimeError::NotFound(_))
    ));
    rt.remove_network("docker", &net)
        .await
        .expect("remove network");
}

fn engine_has(name: &str) -> bool {
    Command::new("docker")
        .args(["inspect", name])
        .output()
        .expect("docker inspect")
        .status
        .success()
}

/// SECURITY.md, container-runtime: what the grant does not allow never reaches the engine, and
/// the refusal names the option that would allow it.
#[tokio::test]
async fn the_grant_bounds_every_container_a_plugin_asks_for() {
    let image = image();
    let rt = ContainerRuntime::connect(Duration::from_secs(30)).expect("engine");
    let pid = std::process::id();
    let name = format!("capw-bounded-{pid}");
    let foreign = format!("capw-bounded-foreign-{pid}");
    let theirs = format!("capw-bounded-net-{pid}");
    for n in [format!("docker.{name}"), foreign.clone()] {
        let _ = Command::new("docker").args(["rm", "-f", &n]).output();
    }
    let _ = Command::new("docker")
        .args(["network", "rm", &format!("other-plugin.{theirs}")])
        .output();
    rt.create_network("other-plugin", &theirs)
        .await
        .expect("other plugin's network");
    let run = Command::new("docker")
        .args(["run", "-d", "--name", &foreign, &image, "/bin/sleep", "300"])
        .output()
        .expect("docker run");
    assert!(run.status.success());
    let g = grant(&image);
    let cases: Vec<(&str, ContainerSpec, &str)> = vec![
        (
            "privileged",
            ContainerSpec {
                privileged: true,
                ..spec(&name, &image)
            },
            "privileged: true",
        ),
        (
            "host network",
            ContainerSpec {
                network: Some("host".into()),
                ..spec(&name, &image)
            },
            "hostNamespaces: true",
        ),
        (
            "a foreign container's namespace",
            ContainerSpec {
                network: Some(format!("container:{foreign}")),
                ..spec(&name, &image)
            },
            "hostNamespaces: true",
        ),
        (
            "another plugin's network",
            ContainerSpec {
                network: Some(theirs.clone()),
                ..spec(&name, &image)
            },
            "was not created for plugin docker",
        ),
        (
            "the default bridge",
            ContainerSpec {
                network: Some("bridge".into()),
                ..spec(&name, &image)
            },
            "was not created for plugin docker",
        ),
        (
            "an image off the list",
            spec(&name, "capw-some-other-image:1"),
            "containerRuntime.images",
        ),
    ];
    for (what, s, rule) in cases {
        match rt.create("docker", &g, s).await {
            Err(RuntimeError::Invalid(m)) => assert!(m.contains(rule), "{what}: {m}"),
            other => panic!(
                "{what} was not refused: {:?}",
                other.map_err(|e| e.to_string())
            ),
        }
        assert!(
            !engine_has(&format!("docker.{name}")),
            "{what}: a container reached the engine"
        );
    }
    // What is granted is created, and with the grant's limits.
    rt.create("docker", &g, spec(&name, &image))
        .await
        .expect("an allowed container");
    let limits = Command::new("docker")
        .args([
            "inspect",
            "-f",
            "{{.HostConfig.Memory}} {{.HostConfig.NanoCpus}} {{.HostConfig.PidsLimit}} {{.HostConfig.NetworkMode}} {{.HostConfig.Privileged}}",
            &format!("docker.{name}"),
        ])
        .output()
        .expect("docker inspect");
    assert_eq!(
        String::from_utf8_lossy(&limits.stdout).trim(),
        format!("{} {} {} none false", g.memory_bytes, g.nano_cpus, g.pids)
    );
    rt.remove("docker", &name).await.expect("remove");
    rt.remove_network("other-plugin", &theirs)
        .await
        .expect("remove network");
    let _ = Command::new("docker").args(["rm", "-f", &foreign]).output();
}

#[tokio::test]
async fn a_foreign_container_cannot_be_inspected_or_removed() {
    let image = image();
    let rt = ContainerRuntime::connect(Duration::from_secs(30)).expect("engine");
    let name = format!("capw-foreign-{}", std::process::id());
    // One by the plain name, and one squatting the name the host gives the plugin's container.
    let squat = format!("docker.{name}");
    for n in [&name, &squat] {
        let _ = Command::new("docker").args(["rm", "-f", n]).output();
        let run = Command::new("docker")
            .args(["run", "-d", "--name", n, &image, "/bin/sleep", "300"])
            .output()
            .expect("docker run");
        assert!(
            run.status.success(),
            "{}",
            String::from_utf8_lossy(&run.stderr)
        );
    }
    let refused = [
        rt.inspect("docker", &name).await.err(),
        rt.exec("docker", &name, vec!["/bin/ls".into()]).await.err(),
        rt.stop("docker", &name).await.err(),
        rt.remove("docker", &name).await.err(),
    ];
    for r in refused {
        assert!(matches!(r, Some(RuntimeError::NotFound(_))), "{r:?}");
    }
    // Still there and running: nothing touched them.
    for n in [&name, &squat] {
        let state = Command::new("docker")
            .args(["inspect", "-f", "{{.State.Running}}", n])
            .output()
            .expect("docker inspect");
        assert_eq!(String::from_utf8_lossy(&state.stdout).trim(), "true", "{n}");
        let _ = Command::new("docker").args(["rm", "-f", n]).output();
    }
}

#[tokio::test]
async fn networks_carry_the_ownership_labels() {
    let rt = ContainerRuntime::connect(Duration::from_secs(30)).expect("engine");
    let name = format!("capw-net-{}", std::process::id());
    let id = rt.create_network("docker", &name).await.expect("network");
    assert!(!id.is_empty());
    // Idempotent for its plugin; another plugin's network of the same name is its own, in its
    // own namespace, so neither can take the other's name.
    assert_eq!(rt.create_network("docker", &name).await.expect("again"), id);
    let theirs = rt
        .create_network("other-plugin", &name)
        .await
        .expect("the other plugin's network");
    assert_ne!(theirs, id);
    rt.remove_network("other-plugin", &name)
        .await
        .expect("remove theirs");
    let labels = Command::new("docker")
        .args([
            "network",
            "inspect",
            "-f",
            "{{json .Labels}}",
            &format!("docker.{name}"),
        ])
        .output()
        .expect("docker network inspect");
    let text = String::from_utf8_lossy(&labels.stdout);
    assert!(text.contains("\"capw.dev/managed-by\":\"capw\""), "{text}");
    rt.remove_network("docker", &name).await.expect("remove");
}

/// The same through a real component: `container-probe.wasm` granted `container-runtime`
/// drives its own container and is refused the foreign one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_reaches_docker_only_through_its_grant_and_only_its_own_containers() {
    use capw_runtime::{Capability, Context, Limits, Plugin, Runtime};
    let image = image();
    let pid = std::process::id();
    let (mine, foreign) = (
        format!("capw-probe-{pid}"),
        format!("capw-probe-foreign-{pid}"),
    );
    for n in [&mine, &foreign] {
        let _ = Command::new("docker").args(["rm", "-f", n]).output();
    }
    let run = Command::new("docker")
        .args(["run", "-d", "--name", &foreign, &image, "/bin/sleep", "300"])
        .output()
        .expect("docker run");
    assert!(run.status.success());

    let dir = tempfile::tempdir().expect("tempdir");
    let rt = Runtime::new(dir.path()).expect("runtime");
    let wasm = std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../target/plugins/container-probe.wasm"),
    )
    .expect("target/plugins/container-probe.wasm: run scripts/build-plugins");
    let ungranted = Plugin::load(
        &rt.engine,
        &rt.cache,
        &wasm,
        None,
        [Capability::LOG].into(),
        Limits::default(),
    )
    .await;
    assert!(
        ungranted.is_err(),
        "a component importing container-runtime loaded without the grant"
    );
    // The probe, granted the container runtime with `images` as its allow-list.
    let load = |images: String| {
        Plugin::load(
            &rt.engine,
            &rt.cache,
            &wasm,
            None,
            [Capability::LOG, Capability::CONTAINER_RUNTIME].into(),
            Limits {
                grants: capw_runtime::capabilities::Grants::default()
                    .with(grant(&images))
                    .into(),
                ..Limits::default()
            },
        )
    };
    let probe = load(image.clone()).await.expect("container-probe loads");
    let ctx = Context::of(
        serde_json::json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
            "kind": "ProbeMachine", "metadata": {"name": "m", "namespace": "default"},
            "spec": {"image": image, "container": mine, "foreign": foreign}})
        .to_string(),
    );
    let st = probe.reconcile_machine(&ctx).await.expect("reconcile");
    let report: serde_json::Value =
        serde_json::from_str(&st.common.status_patch.expect("report")).expect("json");
    assert_eq!(report["create"], "ok", "{report}");
    assert_eq!(report["start"], "ok", "{report}");
    assert_eq!(report["exec"]["exitCode"], 4, "{report}");
    assert_eq!(report["exec"]["stdout"].as_str().map(str::trim), Some("hi"));
    assert_eq!(report["inspect"]["running"], true, "{report}");
    assert_eq!(report["list"], serde_json::json!([mine]), "{report}");
    assert!(report["inspectForeign"]["notFound"].is_string(), "{report}");
    assert!(report["removeForeign"]["notFound"].is_string(), "{report}");
    assert_eq!(report["remove"], "ok", "{report}");
    let state = Command::new("docker")
        .args(["inspect", "-f", "{{.State.Running}}", &foreign])
        .output()
        .expect("docker inspect");
    assert_eq!(String::from_utf8_lossy(&state.stdout).trim(), "true");
    // The hostile variants, through the same component: each refused by the grant, with the
    // option that would allow it named, and nothing left on the engine.
    for (extra, rule) in [
        (serde_json::json!({"privileged": true}), "privileged: true"),
        (
            serde_json::json!({"network": "host"}),
            "hostNamespaces: true",
        ),
        (
            serde_json::json!({"network": format!("container:{foreign}")}),
            "hostNamespaces: true",
        ),
        (
            serde_json::json!({"network": "bridge"}),
            "was not created for plugin",
        ),
    ] {
        let mut obj: serde_json::Value = serde_json::from_str(&ctx.object).expect("object");
        for (k, v) in extra.as_object().expect("object") {
            obj["spec"][k] = v.clone();
        }
        let hostile = Context {
            object: obj.to_string(),
            ..ctx.clone()
        };
        let st = probe.reconcile_machine(&hostile).await.expect("reconcile");
        let report: serde_json::Value =
            serde_json::from_str(&st.common.status_patch.expect("report")).expect("json");
        let msg = report["create"]["invalid"].as_str().unwrap_or_default();
        assert!(msg.contains(rule), "{extra}: {report}");
        assert!(
            !engine_has(&format!("container-probe.{mine}")),
            "{extra}: a container reached the engine"
        );
    }
    // A repository pattern admits its repository only: an image that starts with the same
    // text but names another repository on a registry host (`<repo>:5000/anything`), tagged on
    // the engine so a text match would run it, is refused before the engine sees it.
    let repo = image.split(':').next().expect("repository");
    let sneaky = format!("{repo}:5000/anything:1");
    let tag = Command::new("docker")
        .args(["tag", &image, &sneaky])
        .output()
        .expect("docker tag");
    assert!(tag.status.success(), "docker tag {sneaky}");
    let by_repository = load(format!("{repo}:*"))
        .await
        .expect("container-probe loads");
    for (img, admitted) in [(sneaky.as_str(), false), (image.as_str(), true)] {
        let mut obj: serde_json::Value = serde_json::from_str(&ctx.object).expect("object");
        obj["spec"]["image"] = serde_json::json!(img);
        let c = Context {
            object: obj.to_string(),
            ..ctx.clone()
        };
        let st = by_repository
            .reconcile_machine(&c)
            .await
            .expect("reconcile");
        let report: serde_json::Value =
            serde_json::from_str(&st.common.status_patch.expect("report")).expect("json");
        if admitted {
            assert_eq!(report["create"], "ok", "{img}: {report}");
        } else {
            let msg = report["create"]["invalid"].as_str().unwrap_or_default();
            assert!(
                msg.contains("is not in the grant's images"),
                "{img}: {report}"
            );
            assert!(
                !engine_has(&format!("container-probe.{mine}")),
                "{img}: a container reached the engine"
            );
        }
    }
    let _ = Command::new("docker").args(["rmi", &sneaky]).output();
    let _ = Command::new("docker").args(["rm", "-f", &foreign]).output();
}

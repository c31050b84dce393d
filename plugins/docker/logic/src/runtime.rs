//! The container-runtime capability with its errors turned into provider errors that say what
//! to do.

use capw_sdk::container_runtime as cr;
use capw_sdk::{ProviderError, wait};

pub use cr::{ContainerInfo, ContainerSpec, ExecOutput, PortMapping, RuntimeError};

/// A failed engine call as a provider error: an engine that does not answer is retried, a
/// request the engine refuses names what to fix.
pub fn fail(what: &str, e: RuntimeError) -> ProviderError {
    match e {
        RuntimeError::Unavailable(m) => wait(
            format!("{what}: the Docker engine did not answer ({m}); is dockerd running? retrying"),
            5,
        ),
        RuntimeError::Invalid(m) if m.contains("No such image") => wait(
            format!(
                "{what}: {m}; build the node image with `capw image build`, or set spec.customImage to an image on this engine"
            ),
            15,
        ),
        RuntimeError::Invalid(m) => wait(format!("{what}: the Docker engine refused it: {m}"), 15),
        RuntimeError::NotFound(m) | RuntimeError::Other(m) => wait(format!("{what}: {m}"), 5),
    }
}

/// The container, or `None` when there is none of ours by that name.
pub fn find(name: &str) -> Result<Option<ContainerInfo>, ProviderError> {
    match cr::inspect(name) {
        Ok(info) => Ok(Some(info)),
        Err(RuntimeError::NotFound(_)) => Ok(None),
        Err(e) => Err(fail(&format!("inspecting container {name}"), e)),
    }
}

/// Creates and starts the container unless it exists; starts it when it stopped (a restarted
/// engine stops containers). Returns it inspected, and whether this call created it.
pub fn ensure_running(spec: &ContainerSpec) -> Result<(ContainerInfo, bool), ProviderError> {
    let name = spec.name.as_str();
    let existing = find(name)?;
    if let Some(info) = existing.as_ref().filter(|i| i.running) {
        return Ok((info.clone(), false));
    }
    let created = existing.is_none();
    if created {
        cr::create(spec).map_err(|e| fail(&format!("creating container {name}"), e))?;
    }
    cr::start(name).map_err(|e| fail(&format!("starting container {name}"), e))?;
    let info =
        find(name)?.ok_or_else(|| wait(format!("container {name} vanished while starting"), 2))?;
    Ok((info, created))
}

/// Removes the container; true once there is none.
pub fn remove(name: &str) -> Result<bool, ProviderError> {
    match cr::remove(name) {
        Ok(()) | Err(RuntimeError::NotFound(_)) => Ok(find(name)?.is_none()),
        Err(e) => Err(fail(&format!("removing container {name}"), e)),
    }
}

/// Runs a shell script with positional arguments in the container.
pub fn sh(container: &str, script: &str, args: &[String]) -> Result<ExecOutput, ProviderError> {
    sh_if_exists(container, script, args)?.ok_or_else(|| {
        wait(
            format!("container {container} is gone; it will be made again"),
            2,
        )
    })
}

/// As [`sh`], or `None` when there is no such container of ours.
pub fn sh_if_exists(
    container: &str,
    script: &str,
    args: &[String],
) -> Result<Option<ExecOutput>, ProviderError> {
    let mut argv = vec![
        "/bin/sh".to_string(),
        "-c".into(),
        script.into(),
        "sh".into(),
    ];
    argv.extend(args.iter().cloned());
    match cr::exec(container, &argv) {
        Ok(out) => Ok(Some(out)),
        Err(RuntimeError::NotFound(_)) => Ok(None),
        Err(e) => Err(fail(
            &format!("running a command in container {container}"),
            e,
        )),
    }
}

pub fn list(labels: &[(&str, &str)]) -> Result<Vec<ContainerInfo>, ProviderError> {
    let labels: Vec<(String, String)> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    cr::list(&labels).map_err(|e| fail("listing containers", e))
}

pub fn ensure_network(name: &str) -> Result<(), ProviderError> {
    cr::create_network(name)
        .map(|_| ())
        .map_err(|e| fail(&format!("creating network {name}"), e))
}

/// Removes the network; true once it is gone. Containers still attached make it wait.
pub fn remove_network(name: &str) -> Result<bool, ProviderError> {
    match cr::remove_network(name) {
        Ok(()) | Err(RuntimeError::NotFound(_)) => Ok(true),
        Err(e) => Err(fail(&format!("removing network {name}"), e)),
    }
}

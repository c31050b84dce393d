//! Instance metadata, and the Jinja rendering cloud-init applies with it to user data that
//! starts with `## template: jinja` (CAPA's node names are `{{ ds.meta_data.local_hostname }}`).
//! `minijinja` renders it, as cloud-init's Jinja would: the variables cloud-init documents under
//! `ds.meta_data` and `v1`, and nothing else.

use capw_cloud_config::JINJA;
use std::borrow::Cow;

/// What a VM's metadata service answers.
#[derive(Debug, Clone, Default)]
pub struct Metadata {
    pub instance_id: String,
    pub local_hostname: String,
    pub local_ipv4: String,
    pub availability_zone: String,
    pub region: String,
}

#[derive(Debug, thiserror::Error)]
#[error("the user data's Jinja template does not render: {0}")]
pub struct RenderError(String);

/// `data` rendered as cloud-init would: only when it opens with the Jinja marker.
pub fn render<'a>(data: &'a str, m: &Metadata) -> Result<Cow<'a, str>, RenderError> {
    let Some(rest) = data.strip_prefix(JINJA) else {
        return Ok(Cow::Borrowed(data));
    };
    let meta = minijinja::context! {
        instance_id => m.instance_id,
        local_hostname => m.local_hostname,
        local_ipv4 => m.local_ipv4,
        availability_zone => m.availability_zone,
        region => m.region,
    };
    let v1 = minijinja::context! {
        instance_id => m.instance_id,
        local_hostname => m.local_hostname,
        availability_zone => m.availability_zone,
        region => m.region,
    };
    let mut env = minijinja::Environment::new();
    // cloud-init keeps the file's final newline; so does the rendered data.
    env.set_keep_trailing_newline(true);
    let body = env
        .render_str(
            rest,
            minijinja::context! { ds => minijinja::context! { meta_data => meta }, v1 => v1 },
        )
        .map_err(|e| RenderError(e.to_string()))?;
    // cloud-init drops the marker line before it parses the rest.
    Ok(Cow::Owned(body.trim_start_matches('\n').to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hostname_is_rendered_only_under_the_marker() {
        let m = Metadata {
            local_hostname: "ip-10-0-1-5.ec2.internal".into(),
            ..Default::default()
        };
        let jinja = "## template: jinja\n#cloud-config\nname: '{{ ds.meta_data.local_hostname }}'\nv1: {{ v1.local_hostname }}\n";
        assert_eq!(
            render(jinja, &m).unwrap(),
            "#cloud-config\nname: 'ip-10-0-1-5.ec2.internal'\nv1: ip-10-0-1-5.ec2.internal\n"
        );
        let plain = "#cloud-config\nname: '{{ ds.meta_data.local_hostname }}'\n";
        assert_eq!(render(plain, &m).unwrap(), plain);
        assert!(render("## template: jinja\n{{ ds.", &m).is_err());
    }
}

//! The CEL environment every kube-cel program is compiled and evaluated with.
//!
//! Patch for cel 0.15 (see PATCHES.md): cel 0.15 declares its standard functions as typed
//! overloads in an [`Env`], and `Context::add_function` refuses a name the environment already
//! declares. `string()` is one, so the IP and CIDR overloads of `string` are declared here, on
//! the environment, instead of replacing the builtin in the context. The environment also enables
//! CEL's optional syntax (`a.?b`, `optional.of`), which Kubernetes has on since 1.29.

use std::sync::{Arc, LazyLock};

use cel::{Env, ParseErrors, Program};

static ENV: LazyLock<Arc<Env>> = LazyLock::new(|| Arc::new(build()));

/// The shared environment: cel's standard library with optionals, plus kube-cel's overloads of
/// builtin names.
pub fn env() -> Arc<Env> {
    ENV.clone()
}

/// Compiles `source` with [`env`]'s parser, so optional syntax parses.
pub fn compile(source: &str) -> Result<Program, ParseErrors> {
    ENV.compile(source)
}

fn build() -> Env {
    #[allow(unused_mut)]
    let mut env = Env::stdlib().with_optional_support(true);
    matches_overloads(&mut env);
    #[cfg(feature = "ip")]
    ip_overloads(&mut env);
    env
}

/// `matches`, as cel's own (its `regex` feature is off, so the name is free), with the pattern
/// compiled once (`crate::regex_cache`) instead of on every call.
fn matches_overloads(env: &mut Env) {
    use cel::common::types::{CelBool, CelString};
    fn matches(this: &CelString<'_>, re: &CelString<'_>) -> Result<CelBool, cel::ExecutionError> {
        crate::regex_cache::compiled(re.inner())
            .map(|compiled| CelBool::from(compiled.is_match(this.inner())))
            .map_err(|err| {
                cel::ExecutionError::function_error(
                    "matches",
                    format!("'{}' not a valid regex:\n{err}", re.inner()),
                )
            })
    }
    // The names are free in this environment, so these cannot conflict.
    let _ = cel::add_overload!(env, fn matches: (CelString, CelString) -> Result<CelBool>, id = "matches");
    let _ = cel::add_member_overload!(env, fn matches: (CelString, CelString) -> Result<CelBool>);
}

#[cfg(feature = "ip")]
fn ip_overloads(env: &mut Env) {
    use cel::common::{functions::Function, types::Type};
    let ip: Function = |args| opaque_to_string(args, crate::functions::ip::ip_string);
    let cidr: Function = |args| opaque_to_string(args, crate::functions::ip::cidr_string);
    // The ids are new to the environment, so these cannot conflict. Kubernetes documents the
    // global form, `string(ip(x))`; kube-cel 0.8 also answered the member form, `ip(x).string()`.
    for (kind, id, op) in [("net.IP", "string_net_ip", ip), ("net.CIDR", "string_net_cidr", cidr)] {
        let _ = env.add_overload("string", id, vec![Type::new_opaque_type(kind)], op);
        let _ = env.add_member_overload("string", &format!("{id}_member"), Type::new_opaque_type(kind), vec![], op);
    }
}

#[cfg(feature = "ip")]
fn opaque_to_string<'b, 'v>(
    args: Vec<cel::common::value::CowVal<'b, 'v>>,
    f: fn(cel::extractors::This<cel::Value>) -> cel::ResolveResult,
) -> Result<cel::common::value::CowVal<'b, 'v>, cel::ExecutionError> {
    let arg = args.first().ok_or_else(|| cel::ExecutionError::invalid_argument_count(1, 0))?;
    let value = cel::Value::try_from(arg.as_ref())?;
    let boxed: Box<dyn cel::common::value::Val> = f(cel::extractors::This(value))?.try_into()?;
    Ok(boxed.into())
}

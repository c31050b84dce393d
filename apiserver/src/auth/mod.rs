//! Authentication beyond the admin token and certificates, and authorization of users.
//!
//! - [`token_file`]: more static users, with groups (kube's `--token-auth-file`).
//! - [`service_account`]: ServiceAccount tokens from TokenRequest.
//! - [`rbac`]: with `--authorization-mode RBAC`, a user's request is allowed only when
//!   `system:masters` or an RBAC rule allows it. Without it, every authenticated user may do
//!   everything, as before RBAC existed here. Bootstrap tokens and node certificates keep their
//!   fixed, narrower rights either way (kube's bootstrap roles and node authorizer).

pub mod rbac;
pub mod service_account;
pub mod token_file;

use std::collections::HashMap;
use std::time::Duration;

/// How a user's requests are authorized (kube's `--authorization-mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Every authenticated user may do everything.
    #[default]
    AlwaysAllow,
    /// Roles, ClusterRoles and their bindings decide.
    Rbac,
}

/// The server's authentication and authorization settings.
#[derive(Debug)]
pub struct Auth {
    /// Who decides what a user may do.
    pub mode: Mode,
    /// Static users by token.
    pub users: HashMap<String, token_file::StaticUser>,
    /// Issues and verifies ServiceAccount tokens.
    pub signer: service_account::Signer,
    /// The shortest `expirationSeconds` a TokenRequest may ask for (kube: 10 minutes).
    pub min_token_expiration: Duration,
}

/// kube's default `expirationSeconds` of a TokenRequest.
pub const DEFAULT_TOKEN_EXPIRATION: i64 = 3600;

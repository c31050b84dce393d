//! The four PATCH flavours kube-apiserver accepts, applied to plain JSON.

pub mod apply;
pub mod json;
pub mod merge;
pub mod strategic;

/// Why a patch could not be applied.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PatchError {
    /// The patch body itself is not a patch of this type (answered with 400).
    #[error("{0}")]
    Malformed(String),
    /// A JSON-patch operation or `test` failed against the object (answered with 422).
    #[error("{0}")]
    Failed(String),
    /// More operations than the server accepts (answered with 413).
    #[error("the JSON patch has {0} operations, more than the limit of 10000")]
    TooManyOperations(usize),
}

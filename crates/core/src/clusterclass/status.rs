//! The class's conditions, as upstream's `updateStatus` sets them, and `observedGeneration`
//! when the reconcile got through.

use super::Scope;
use capw_api::contract::conditions::set;

pub const REF_VERSIONS_UP_TO_DATE: &str = "RefVersionsUpToDate";
pub const REF_VERSIONS_NOT_UP_TO_DATE: &str = "RefVersionsNotUpToDate";
pub const INTERNAL_ERROR: &str = "InternalError";
pub const VARIABLES_READY: &str = "VariablesReady";
pub const VARIABLE_DISCOVERY_FAILED: &str = "VariableDiscoveryFailed";

pub(super) fn update(scope: &mut Scope, generation: Option<i64>) {
    let list = &mut scope.status.conditions;
    match (&scope.references_error, scope.outdated.is_empty()) {
        // Upstream points at its logs; the reason is the message here, where the user looks.
        (Some(e), _) => set(
            list,
            REF_VERSIONS_UP_TO_DATE,
            "Unknown",
            INTERNAL_ERROR,
            e,
            generation,
        ),
        (None, false) => {
            let lines: Vec<String> = scope
                .outdated
                .iter()
                .map(|o| {
                    format!(
                        "* {} {}: current: {}, latest: {}",
                        o.kind, o.name, o.current, o.latest
                    )
                })
                .collect();
            set(
                list,
                REF_VERSIONS_UP_TO_DATE,
                "False",
                REF_VERSIONS_NOT_UP_TO_DATE,
                &format!(
                    "The following templateRefs are not using the latest apiVersion: {}",
                    lines.join("; ")
                ),
                generation,
            );
        }
        (None, true) => set(
            list,
            REF_VERSIONS_UP_TO_DATE,
            "True",
            REF_VERSIONS_UP_TO_DATE,
            "",
            generation,
        ),
    }
    match &scope.variables_error {
        Some(e) => set(
            list,
            VARIABLES_READY,
            "False",
            VARIABLE_DISCOVERY_FAILED,
            e,
            generation,
        ),
        None => set(
            list,
            VARIABLES_READY,
            "True",
            VARIABLES_READY,
            "",
            generation,
        ),
    }
    if scope.references_error.is_none() && scope.variables_error.is_none() {
        scope.status.observed_generation = generation;
    }
}

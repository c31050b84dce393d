//! CRD-time checks of CEL rules (`x-kubernetes-validations`), as kube-apiserver makes them
//! before it accepts a CRD: the rule compiles, names only `self` and `oldSelf`, selects only
//! declared fields, calls only functions kube 1.33 has, returns a bool where that can be told
//! from the schema, and stays inside the static cost budget.
//!
//! Hand-written: kube-cel compiles and evaluates rules but has no type checker, so the
//! declared-field and bool checks walk the parsed expression against the schema here.

use crate::status::Cause;
use kube_cel::cel::common::ast::{Expr, IdedExpr, LiteralValue, operators::OPT_SELECT};
use serde_json::Value;

/// The functions and macros of kube 1.33's CEL environment for CRD rules: the CEL standard
/// library, optionals, `cel.bind`, and Kubernetes' libraries (strings, lists, sets, regex,
/// URLs, IP/CIDR, quantity, semver, format, math, base64, jsonpatch).
const KUBE_FUNCTIONS: &[&str] = &[
    // CEL standard library and macros.
    "size",
    "contains",
    "startsWith",
    "endsWith",
    "matches",
    "int",
    "uint",
    "double",
    "string",
    "bytes",
    "bool",
    "duration",
    "timestamp",
    "type",
    "dyn",
    "has",
    "all",
    "exists",
    "exists_one",
    "map",
    "filter",
    "getDate",
    "getDayOfMonth",
    "getDayOfWeek",
    "getDayOfYear",
    "getFullYear",
    "getHours",
    "getMilliseconds",
    "getMinutes",
    "getMonth",
    "getSeconds",
    // Optionals and bind.
    "optional.of",
    "optional.none",
    "optional.ofNonZeroValue",
    "hasValue",
    "value",
    "orValue",
    "or",
    "cel.bind",
    // Kubernetes libraries.
    "add",
    "asApproximateFloat",
    "asInteger",
    "base64.decode",
    "base64.encode",
    "charAt",
    "cidr",
    "compareTo",
    "containsCIDR",
    "containsIP",
    "distinct",
    "family",
    "find",
    "findAll",
    "first",
    "flatten",
    "format",
    "format.byte",
    "format.date",
    "format.datetime",
    "format.dns1035Label",
    "format.dns1035LabelPrefix",
    "format.dns1123Label",
    "format.dns1123LabelPrefix",
    "format.dns1123Subdomain",
    "format.dns1123SubdomainPrefix",
    "format.labelValue",
    "format.named",
    "format.qualifiedName",
    "format.uri",
    "format.uuid",
    "getEscapedPath",
    "getHost",
    "getHostname",
    "getPort",
    "getQuery",
    "getScheme",
    "indexOf",
    "ip",
    "ip.isCanonical",
    "isCIDR",
    "isGlobalUnicast",
    "isGreaterThan",
    "isIP",
    "isInteger",
    "isLessThan",
    "isLinkLocalMulticast",
    "isLinkLocalUnicast",
    "isLoopback",
    "isQuantity",
    "isSemver",
    "isSorted",
    "isURL",
    "isUnspecified",
    "join",
    "jsonpatch.escapeKey",
    "last",
    "lastIndexOf",
    "lists.range",
    "lowerAscii",
    "major",
    "masked",
    "math.abs",
    "math.bitAnd",
    "math.bitNot",
    "math.bitOr",
    "math.bitShiftLeft",
    "math.bitShiftRight",
    "math.bitXor",
    "math.ceil",
    "math.floor",
    "math.greatest",
    "math.isFinite",
    "math.isInf",
    "math.isNaN",
    "math.least",
    "math.round",
    "math.sign",
    "math.sqrt",
    "math.trunc",
    "max",
    "min",
    "minor",
    "patch",
    "prefixLength",
    "quantity",
    "replace",
    "reverse",
    "semver",
    "sets.contains",
    "sets.equivalent",
    "sets.intersects",
    "sign",
    "slice",
    "sort",
    "split",
    "strings.quote",
    "sub",
    "substring",
    "sum",
    "trim",
    "upperAscii",
    "url",
    "validate",
    "quote",
];

/// kube's `StaticEstimatedCostLimit`.
const COST_LIMIT: f64 = 10_000_000.0;

/// How kube prints the rule it refuses: the Go value of `apiextensions.ValidationRule`.
fn go_rule(r: &Value) -> String {
    let s = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or_default();
    let ptr = |k: &str, t: &str| match r.get(k) {
        Some(v) if !v.is_null() => format!("(*{t})({v})"),
        _ => format!("(*{t})(nil)"),
    };
    format!(
        "apiextensions.ValidationRule{{Rule:{:?}, Message:{:?}, MessageExpression:{:?}, Reason:{}, FieldPath:{:?}, OptionalOldSelf:{}}}",
        s("rule"),
        s("message"),
        s("messageExpression"),
        ptr("reason", "apiextensions.FieldValueErrorReason"),
        s("fieldPath"),
        ptr("optionalOldSelf", "bool"),
    )
}

fn schema_type(s: &Value) -> &str {
    s.get("type").and_then(Value::as_str).unwrap_or_default()
}

/// The schema of a selected field, `Ok(None)` when the schema cannot say (preserved unknown
/// fields, maps), `Err(field)` when the field is not declared.
fn select<'a>(s: &'a Value, field: &str) -> Result<Option<&'a Value>, String> {
    if s.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true))
        || s.get("x-kubernetes-int-or-string").is_some()
    {
        return Ok(None);
    }
    if let Some(p) = s.get("properties").and_then(|p| p.get(field)) {
        return Ok(Some(p));
    }
    match s.get("additionalProperties") {
        Some(ap) if ap.is_object() => Ok(Some(ap)),
        Some(Value::Bool(true)) => Ok(None),
        _ if s.get("properties").is_some() || schema_type(s) != "object" => Err(field.to_string()),
        _ => Ok(None),
    }
}

/// The schema node an expression resolves to, when it is a field path from `self`/`oldSelf`.
fn resolve<'a>(e: &IdedExpr, node: &'a Value, errs: &mut Vec<String>) -> Option<&'a Value> {
    match &e.expr {
        Expr::Ident(name) if name == "self" || name == "oldSelf" => Some(node),
        Expr::Select(sel) => select_checked(resolve(&sel.operand, node, errs)?, &sel.field, errs),
        // `a.?b`: the same field, as an optional; selecting through an optional keeps the path.
        Expr::Call(call) if call.func_name == OPT_SELECT => match call.args.as_slice() {
            [operand, field] => match &field.expr {
                Expr::Literal(LiteralValue::String(f)) => {
                    select_checked(resolve(operand, node, errs)?, f, errs)
                }
                _ => None,
            },
            _ => None,
        },
        _ => None,
    }
}

fn select_checked<'a>(parent: &'a Value, field: &str, errs: &mut Vec<String>) -> Option<&'a Value> {
    match select(parent, field) {
        Ok(child) => child,
        Err(f) => {
            errs.push(format!("undefined field '{f}'"));
            None
        }
    }
}

const NAMESPACES: &[&str] = &[
    "math",
    "base64",
    "sets",
    "lists",
    "strings",
    "format",
    "ip",
    "optional",
    "cel",
    "jsonpatch",
];

/// Walks the expression: undeclared fields, unknown functions, unknown variables.
fn walk(e: &IdedExpr, node: &Value, bound: &mut Vec<String>, errs: &mut Vec<String>) {
    match &e.expr {
        Expr::Ident(name) if !(name == "self" || name == "oldSelf" || bound.contains(name)) => {
            errs.push(format!(
                "undeclared reference to '{name}' (in container '')"
            ));
        }
        Expr::Select(sel) if resolve(e, node, errs).is_none() => {
            walk(&sel.operand, node, bound, errs);
        }
        Expr::Call(call) if call.func_name == OPT_SELECT && resolve(e, node, errs).is_some() => {}
        Expr::Call(call) => {
            let op = call.func_name.starts_with(['_', '@', '!', '-']);
            let namespace = call.target.as_deref().and_then(|t| match &t.expr {
                Expr::Ident(ns) if NAMESPACES.contains(&ns.as_str()) => Some(ns.clone()),
                _ => None,
            });
            let name = match &namespace {
                Some(ns) => format!("{ns}.{}", call.func_name),
                None => call.func_name.clone(),
            };
            if !op && !KUBE_FUNCTIONS.contains(&name.as_str()) {
                errs.push(format!(
                    "undeclared reference to '{name}' (in container '')"
                ));
            }
            if namespace.is_none()
                && let Some(t) = &call.target
            {
                walk(t, node, bound, errs);
            }
            for a in &call.args {
                walk(a, node, bound, errs);
            }
        }
        Expr::Comprehension(c) => {
            walk(&c.iter_range, node, bound, errs);
            let before = bound.len();
            bound.push(c.iter_var.clone());
            bound.extend(c.iter_var2.clone());
            bound.push(c.accu_var.clone());
            for part in [&c.accu_init, &c.loop_cond, &c.loop_step, &c.result] {
                walk(part, node, bound, errs);
            }
            bound.truncate(before);
        }
        Expr::List(l) => {
            for x in &l.elements {
                walk(x, node, bound, errs);
            }
        }
        _ => {}
    }
}

/// Whether the expression certainly does not produce a bool.
fn not_bool(e: &IdedExpr, node: &Value) -> bool {
    match &e.expr {
        Expr::Literal(LiteralValue::Boolean(_)) => false,
        Expr::Literal(_) | Expr::List(_) | Expr::Map(_) => true,
        Expr::Call(c) => matches!(
            c.func_name.as_str(),
            "_+_" | "_-_" | "_*_" | "_/_" | "_%_" | "-_" | "size" | "string" | "int" | "double"
        ),
        Expr::Select(s) if !s.test => {
            resolve(e, node, &mut vec![]).is_some_and(|n| !matches!(schema_type(n), "boolean" | ""))
        }
        _ => false,
    }
}

/// Checks every rule of one schema node; `path` is the node's CRD field path.
fn check_node(node: &Value, path: &str, out: &mut Vec<Cause>) {
    let Some(rules) = node
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
    else {
        return;
    };
    let compiled = kube_cel::compile_schema(node);
    for (i, r) in rules.iter().enumerate() {
        let field = format!("{path}.x-kubernetes-validations[{i}].rule");
        let Some(text) = r
            .get("rule")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
        else {
            out.push(Cause::new(
                "FieldValueRequired",
                field,
                "Required value: rule is not specified",
            ));
            continue;
        };
        let invalid = |detail: String| {
            Cause::new(
                "FieldValueInvalid",
                field.clone(),
                format!("Invalid value: {}: {detail}", go_rule(r)),
            )
        };
        let program = match kube_cel::compile(text) {
            Ok(p) => p,
            Err(e) => {
                out.push(invalid(format!(
                    "compilation failed: {}",
                    parse_error(&e.to_string())
                )));
                continue;
            }
        };
        if let Some(optional) = r.get("optionalOldSelf")
            && !program.references().has_variable("oldSelf")
        {
            out.push(Cause::new(
                "FieldValueInvalid",
                format!("{path}.x-kubernetes-validations[{i}].optionalOldSelf"),
                format!("Invalid value: {optional}: may not be set if oldSelf is not used in rule"),
            ));
            continue;
        }
        let mut errs = vec![];
        walk(program.expression(), node, &mut vec![], &mut errs);
        errs.dedup();
        if let Some(first) = errs.first() {
            out.push(invalid(format!(
                "compilation failed: ERROR: <input>: {first}"
            )));
            continue;
        }
        if not_bool(program.expression(), node) {
            out.push(invalid("cel expression must evaluate to a bool".into()));
            continue;
        }
        if let Some(me) = r.get("messageExpression").and_then(Value::as_str)
            && let Err(e) = kube_cel::compile(me)
        {
            out.push(Cause::new(
                "FieldValueInvalid",
                format!("{path}.x-kubernetes-validations[{i}].messageExpression"),
                format!(
                    "Invalid value: {}: messageExpression compilation failed: {}",
                    go_rule(r),
                    parse_error(&e.to_string())
                ),
            ));
        }
        for w in kube_cel::estimate_rule_cost(text, &compiled) {
            if w.kind != kube_cel::WarningKind::CostExceeded {
                continue;
            }
            let cost: f64 = w
                .message
                .split_whitespace()
                .find_map(|t| t.parse().ok())
                .unwrap_or(COST_LIMIT);
            if cost > COST_LIMIT {
                let factor = cost / COST_LIMIT;
                let by = if factor > 100.0 {
                    "by more than 100x".to_string()
                } else {
                    format!("by factor of {}x", trim(factor))
                };
                out.push(Cause::new(
                    "FieldValueForbidden",
                    field.clone(),
                    format!("Forbidden: estimated rule cost exceeds budget {by} (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"),
                ));
            }
        }
    }
}

/// The first line of a parse error in cel-go's `ERROR: <input>:line:col: …` form.
fn parse_error(e: &str) -> String {
    let first = e.lines().next().unwrap_or_default().trim();
    if first.starts_with("ERROR:") {
        first.to_string()
    } else {
        format!("ERROR: <input>: {first}")
    }
}

fn trim(x: f64) -> String {
    let s = format!("{x:.4}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// Checks the CEL rules of a CRD version schema and of every node below it.
pub fn check(schema: &Value, path: &str, out: &mut Vec<Cause>) {
    check_node(schema, path, out);
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (k, p) in props {
            check(p, &format!("{path}.properties[{k}]"), out);
        }
    }
    if let Some(items) = schema.get("items") {
        check(items, &format!("{path}.items"), out);
    }
    if let Some(ap) = schema.get("additionalProperties").filter(|a| a.is_object()) {
        check(ap, &format!("{path}.additionalProperties"), out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn causes(rule: &str) -> Vec<Cause> {
        let s = json!({"type": "object", "properties": {
            "name": {"type": "string"}, "on": {"type": "boolean"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}}},
            "x-kubernetes-validations": [{"rule": rule}]});
        let mut out = vec![];
        check(&s, "s", &mut out);
        out
    }

    #[test]
    fn kube_rules_pass() {
        for ok in [
            "self.name.startsWith('a')",
            "self.on",
            "self.tags.all(t, t.size() < 10)",
            "!has(self.name) || isURL(self.name)",
            "math.greatest(1, 2) == 2",
            "self.labels.exists(k, k == 'a')",
            "has(self.labels.foo)",
            "ip(self.name).family() == 4",
        ] {
            assert!(causes(ok).is_empty(), "{ok}: {:?}", causes(ok));
        }
    }

    #[test]
    fn bad_rules_are_refused_with_kube_messages() {
        let c = causes("self.nope == 1");
        assert_eq!(c[0].field, "s.x-kubernetes-validations[0].rule");
        assert!(c[0].message.contains("undefined field 'nope'"), "{:?}", c);
        assert!(
            causes("frobnicate(self.name)")[0]
                .message
                .contains("undeclared reference to 'frobnicate'")
        );
        assert!(
            causes("self.name")[0]
                .message
                .ends_with("cel expression must evaluate to a bool")
        );
        assert!(
            causes("self.name ==")[0]
                .message
                .contains("compilation failed")
        );
        assert!(
            causes("other.name == 'a'")[0]
                .message
                .contains("undeclared reference to 'other'")
        );
    }

    #[test]
    fn rules_over_the_cost_budget_are_refused_unless_bounded() {
        let rule = "self.tags.all(a, self.tags.all(b, self.tags.all(c, a != b || b != c)))";
        let schema = |bound: Option<u64>| {
            let mut tags = json!({"type": "array", "items": {"type": "string", "maxLength": 10}});
            if let Some(n) = bound {
                tags["maxItems"] = json!(n);
            }
            json!({"type": "object", "properties": {"tags": tags},
                   "x-kubernetes-validations": [{"rule": rule}]})
        };
        let mut out = vec![];
        check(&schema(None), "s", &mut out);
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out[0].reason, "FieldValueForbidden");
        assert!(
            out[0]
                .message
                .starts_with("Forbidden: estimated rule cost exceeds budget by more than 100x")
        );
        let mut out = vec![];
        check(&schema(Some(10)), "s", &mut out);
        assert!(out.is_empty(), "{out:?}");
    }
}
